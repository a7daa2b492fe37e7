//! Envoy without wasm-epp: a STATIC cluster of the pool with one of Envoy's own load-balancing
//! policies (`ROUND_ROBIN`, `LEAST_REQUEST`, ...). Benchmarks compare wasm-epp against it.
//!
//! The listener, route and cluster limits mirror `envoy/envoy.yaml.template` (buffer limit,
//! route timeout, circuit breakers, connect timeout, worker threads), so the only difference
//! measured is who picks the pod. A unit test keeps the shared settings in step.

use std::path::Path;

use crate::process::ManagedProcess;

/// Envoy's built-in policies a baseline can use (the `lb_policy` enum of the cluster).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LbPolicy {
    RoundRobin,
    LeastRequest,
    Random,
}

impl LbPolicy {
    /// The value of the cluster's `lb_policy` field.
    pub fn envoy_name(self) -> &'static str {
        match self {
            LbPolicy::RoundRobin => "ROUND_ROBIN",
            LbPolicy::LeastRequest => "LEAST_REQUEST",
            LbPolicy::Random => "RANDOM",
        }
    }
}

/// Everything one baseline Envoy needs.
#[derive(Debug, Clone)]
pub struct BaselineOptions {
    /// `ip:port` of every pod (literal IPs: the cluster is STATIC).
    pub pool: Vec<String>,
    pub lb_policy: LbPolicy,
    pub listen_port: u16,
    pub admin_port: u16,
    /// Worker threads; the same as the wasm-epp Envoy it is compared with.
    pub concurrency: u32,
}

impl BaselineOptions {
    pub fn new(pool: &[String], lb_policy: LbPolicy, listen_port: u16, admin_port: u16) -> Self {
        Self { pool: pool.to_vec(), lb_policy, listen_port, admin_port, concurrency: 2 }
    }
}

/// The Envoy configuration of a baseline.
pub fn render_baseline(options: &BaselineOptions) -> String {
    let endpoints: String = options
        .pool
        .iter()
        .map(|address| {
            let (ip, port) = address.rsplit_once(':').unwrap_or((address.as_str(), "0"));
            format!(
                "                - endpoint: {{ address: {{ socket_address: {{ address: {ip}, port_value: {port} }} }} }}\n"
            )
        })
        .collect();
    format!(
        r#"# Baseline: plain Envoy load balancing over a STATIC pool, no Wasm. Rendered by launcher::baseline.
admin:
  address:
    socket_address: {{ address: 127.0.0.1, port_value: {admin_port} }}

static_resources:
  listeners:
    - name: inference
      address:
        socket_address: {{ address: 127.0.0.1, port_value: {listen_port} }}
      per_connection_buffer_limit_bytes: 16777216
      filter_chains:
        - filters:
            - name: envoy.filters.network.http_connection_manager
              typed_config:
                "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
                stat_prefix: inference
                codec_type: AUTO
                route_config:
                  name: inference
                  virtual_hosts:
                    - name: pool
                      domains: ["*"]
                      routes:
                        - match: {{ prefix: "/" }}
                          route:
                            cluster: pool
                            timeout: 600s
                http_filters:
                  - name: envoy.filters.http.router
                    typed_config:
                      "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router

  clusters:
    - name: pool
      type: STATIC
      lb_policy: {lb_policy}
      connect_timeout: 1s
      circuit_breakers:
        thresholds:
          - {{ max_connections: 100000, max_pending_requests: 100000, max_requests: 100000, max_retries: 1000 }}
      load_assignment:
        cluster_name: pool
        endpoints:
          - lb_endpoints:
{endpoints}"#,
        admin_port = options.admin_port,
        listen_port = options.listen_port,
        lb_policy = options.lb_policy.envoy_name(),
    )
}

/// A running baseline Envoy; stopped when dropped.
pub struct BaselineEnvoy {
    process: ManagedProcess,
    pub listen_port: u16,
    pub admin_port: u16,
}

impl BaselineEnvoy {
    /// Writes the configuration into `dir` (`envoy-<policy>.yaml`), starts Envoy and waits
    /// until its admin endpoint says it is ready.
    pub fn start(options: &BaselineOptions, dir: &Path) -> Result<Self, String> {
        let name = options.lb_policy.envoy_name().to_ascii_lowercase();
        let config_path = dir.join(format!("envoy-{name}.yaml"));
        std::fs::write(&config_path, render_baseline(options)).map_err(|e| format!("write config: {e}"))?;
        let log = dir.join(format!("envoy-{name}.log"));
        let process = crate::envoy::launch(
            &config_path,
            &[],
            options.concurrency,
            &format!("envoy {name}"),
            &log,
            options.admin_port,
        )?;
        let envoy = Self { process, listen_port: options.listen_port, admin_port: options.admin_port };
        Ok(envoy)
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.listen_port)
    }

    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// The process has exited (crashed or stopped).
    pub fn has_exited(&mut self) -> bool {
        self.process.has_exited()
    }

    pub fn stop(&mut self) {
        self.process.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> BaselineOptions {
        let pool = vec!["127.0.0.1:8001".to_string(), "127.0.0.1:8002".to_string()];
        BaselineOptions::new(&pool, LbPolicy::LeastRequest, 10000, 9901)
    }

    #[test]
    fn lists_every_pod_with_the_policy_and_no_wasm() {
        let rendered = render_baseline(&options());
        assert!(rendered.contains("lb_policy: LEAST_REQUEST"));
        assert!(rendered.contains("address: 127.0.0.1, port_value: 8001"));
        assert!(rendered.contains("address: 127.0.0.1, port_value: 8002"));
        assert!(!rendered.contains("wasm"));
        assert!(!rendered.contains("{{"));
    }

    #[test]
    fn shares_the_listener_and_cluster_limits_of_the_wasm_epp_template() {
        let template = std::fs::read_to_string(crate::paths::envoy_template()).unwrap();
        let rendered = render_baseline(&options());
        for setting in [
            "per_connection_buffer_limit_bytes: 16777216",
            "codec_type: AUTO",
            "timeout: 600s",
            "connect_timeout: 1s",
            "max_connections: 100000, max_pending_requests: 100000, max_requests: 100000, max_retries: 1000",
        ] {
            assert!(template.contains(setting), "template lost `{setting}`: update launcher/src/baseline.rs");
            assert!(rendered.contains(setting), "baseline lacks `{setting}`");
        }
    }
}
