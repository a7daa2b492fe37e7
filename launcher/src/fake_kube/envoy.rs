//! Envoy in Kubernetes mode against the fake API server, with the bearer token delivered
//! the way `k8s/` delivers it: Envoy's credential injector, as an upstream HTTP filter of
//! the API server's cluster, reads a generic SDS secret whose value is a file in a
//! directory Envoy watches. The directory is laid out as the kubelet lays out a projected
//! service-account token, and [`TokenDir::rotate`] swaps it as the kubelet does.

use std::io;
use std::path::{Path, PathBuf};

use crate::envoy::{Envoy, EnvoyOptions};

/// A service-account token directory: `token -> ..data/token`, `..data -> ..<generation>`.
pub struct TokenDir {
    dir: PathBuf,
    generation: u32,
}

impl TokenDir {
    pub fn create(dir: &Path, token: &str) -> io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let mut tokens = Self { dir: dir.to_path_buf(), generation: 0 };
        tokens.rotate(token)?;
        std::os::unix::fs::symlink("..data/token", dir.join("token"))?;
        Ok(tokens)
    }

    /// Writes `token` into a fresh timestamped folder and renames the `..data` link onto
    /// it: one atomic move in the watched directory, which is what Envoy reacts to.
    pub fn rotate(&mut self, token: &str) -> io::Result<()> {
        self.generation += 1;
        let folder = format!("..2025_06_02_10_14_{:02}.{}", self.generation % 60, self.generation);
        std::fs::create_dir_all(self.dir.join(&folder))?;
        std::fs::write(self.dir.join(&folder).join("token"), token)?;
        let staged = self.dir.join("..data_tmp");
        let _ = std::fs::remove_file(&staged);
        std::os::unix::fs::symlink(&folder, &staged)?;
        std::fs::rename(&staged, self.dir.join("..data"))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn token_path(&self) -> PathBuf {
        self.dir.join("token")
    }
}

/// Writes the SDS file naming the token file as a generic secret.
pub fn write_token_sds(sds_path: &Path, token_path: &Path) -> io::Result<()> {
    let sds = format!(
        "resources:\n\
         - \"@type\": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret\n  \
           name: kubernetes-token\n  \
           generic_secret:\n    \
             secret: {{ filename: \"{}\" }}\n",
        token_path.display()
    );
    std::fs::write(sds_path, sds)
}

/// The bootstrap fragment merged over the rendered template (`--config-yaml`): the node
/// identity SDS requires and the `kubernetes_api` cluster, plain HTTP to the fake server,
/// with the manifests' token injection (Envoy 1.37 and newer: `header_value_prefix`).
pub fn kubernetes_overlay(api_port: u16, sds_path: &Path, watched_dir: &Path) -> String {
    format!(
        r#"{cluster}
      typed_extension_protocol_options:
        envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
          "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
          explicit_http_config: {{ http_protocol_options: {{}} }}
          http_filters:
            - name: envoy.filters.http.credential_injector
              typed_config:
                "@type": type.googleapis.com/envoy.extensions.filters.http.credential_injector.v3.CredentialInjector
                overwrite: true
                credential:
                  name: envoy.http.injected_credentials.generic
                  typed_config:
                    "@type": type.googleapis.com/envoy.extensions.http.injected_credentials.generic.v3.Generic
                    header: Authorization
                    header_value_prefix: "Bearer "
                    credential:
                      name: kubernetes-token
                      sds_config:
                        path_config_source:
                          path: "{sds}"
                          watched_directory: {{ path: "{watched}" }}
            - name: envoy.filters.http.upstream_codec
              typed_config:
                "@type": type.googleapis.com/envoy.extensions.filters.http.upstream_codec.v3.UpstreamCodec
"#,
        cluster = api_cluster(api_port),
        sds = sds_path.display(),
        watched = watched_dir.display(),
    )
}

/// The fragment of docs/deployment.md's kubectl proxy fallback: `kubernetes_api` a plain
/// cluster with no upstream filters, the proxy (here the fake server, which then needs no
/// token) adding the credentials. Any Envoy the filter runs on accepts it.
pub fn kubernetes_plain_overlay(api_port: u16) -> String {
    api_cluster(api_port) + "\n"
}

/// The node identity and the `kubernetes_api` cluster to 127.0.0.1:`api_port`.
fn api_cluster(api_port: u16) -> String {
    format!(
        r#"node: {{ id: wasm-epp-test, cluster: wasm-epp }}
static_resources:
  clusters:
    - name: kubernetes_api
      type: STATIC
      connect_timeout: 1s
      load_assignment:
        cluster_name: kubernetes_api
        endpoints: [{{ lb_endpoints: [{{ endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {api_port} }} }} }} }}] }}]"#
    )
}

/// Envoy started with the template's configuration plus the Kubernetes overlay.
pub fn start_kube_envoy(options: &EnvoyOptions, overlay: &str, dir: &Path) -> Result<Envoy, String> {
    std::fs::write(dir.join("envoy-overlay.yaml"), overlay).map_err(|e| format!("write overlay: {e}"))?;
    Envoy::start_with(options, &["--config-yaml".to_string(), overlay.to_string()], dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotation_swaps_the_data_link_atomically() {
        let dir = crate::paths::run_dir("token-dir-unit").unwrap().join("sa");
        let mut tokens = TokenDir::create(&dir, "one").unwrap();
        assert_eq!(std::fs::read_to_string(tokens.token_path()).unwrap(), "one");
        tokens.rotate("two").unwrap();
        assert_eq!(std::fs::read_to_string(tokens.token_path()).unwrap(), "two");
        assert!(std::fs::symlink_metadata(dir.join("..data")).unwrap().file_type().is_symlink());
    }
}
