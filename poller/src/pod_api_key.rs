//! The key the pods' API wants, sent with the pool service's own calls to the pods.
//!
//! A vLLM pod started with `--api-key` (or `VLLM_API_KEY`) answers 401 on every `/v1` path
//! without `Authorization: Bearer <key>`, `/v1/models` included, while `/metrics` stays open.
//! The key comes from an environment variable of the VM (`pods_api_key_env`), which Envoy
//! fills from its own environment when `vm_config.environment_variables.host_env_keys` names
//! it: so it can come from a Kubernetes Secret, and it never sits in the plugin's JSON,
//! which Envoy's config_dump shows. Read once, when the service starts: a key rotated in the
//! Secret reaches the VM when Envoy restarts.

use picker::config::PollerConfig;
use wasm_epp_host::Host;

/// Longest key accepted: a header value, well under Envoy's default header limits.
const MAX_KEY_BYTES: usize = 4096;

/// The `Authorization` value for the pods, and where it came from.
pub struct PodApiKey {
    authorization: String,
    variable: String,
    on_metrics: bool,
}

/// Never prints the key: configurations and states are logged with `{:?}` here and there.
impl std::fmt::Debug for PodApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodApiKey").field("variable", &self.variable).field("on_metrics", &self.on_metrics).finish()
    }
}

impl PodApiKey {
    /// The key `config.pods_api_key_env` names, read from the VM's environment; none when
    /// no variable is named. A variable named but unset or unusable is an error: the pods
    /// would refuse every model-list fetch, the very failure the setting is there to avoid.
    pub fn from_config(host: &dyn Host, config: &PollerConfig) -> Result<Option<Self>, String> {
        let variable = config.pods_api_key_env.as_str();
        if variable.is_empty() {
            return Ok(None);
        }
        let value = host.env_var(variable).ok_or_else(|| {
            format!(
                "pods_api_key_env: the VM has no environment variable {variable}: Envoy gives a Wasm VM only \
                 the variables its vm_config.environment_variables names (host_env_keys: [{variable}], \
                 set in Envoy's own environment)"
            )
        })?;
        let authorization = bearer(&value).map_err(|reason| format!("pods_api_key_env: {variable} {reason}"))?;
        Ok(Some(Self { authorization, variable: variable.to_owned(), on_metrics: config.pods_api_key_on_metrics }))
    }

    /// The `Authorization` header's value.
    pub fn authorization(&self) -> &str {
        &self.authorization
    }

    /// The environment variable the key came from (for logs).
    pub fn variable(&self) -> &str {
        &self.variable
    }

    /// Whether scrapes carry it too (`pods_api_key_on_metrics`).
    pub fn on_metrics(&self) -> bool {
        self.on_metrics
    }
}

/// `Bearer <key>`, the key trimmed of surrounding whitespace (a Secret made from a file
/// often ends in a newline, which no client could send in a header).
fn bearer(value: &str) -> Result<String, String> {
    let key = value.trim_matches(|c: char| c.is_ascii_whitespace());
    if key.is_empty() {
        return Err("is empty".into());
    }
    if key.len() > MAX_KEY_BYTES {
        return Err(format!("is over {MAX_KEY_BYTES} bytes"));
    }
    // Visible ASCII and spaces: what a header value carries as it is.
    if !key.bytes().all(|b| b == b' ' || b.is_ascii_graphic()) {
        return Err("holds characters a header cannot carry (control or non-ASCII)".into());
    }
    Ok(format!("Bearer {key}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use picker::config::parse_json;
    use wasm_epp_host::MockHost;

    fn config(json: &str) -> PollerConfig {
        parse_json(json.as_bytes()).unwrap()
    }

    #[test]
    fn the_key_comes_from_the_named_variable() {
        let host = MockHost::new();
        let named = config(r#"{"pods_api_key_env": "VLLM_API_KEY"}"#);
        let missing = PodApiKey::from_config(&host, &named).unwrap_err();
        assert!(missing.contains("VLLM_API_KEY") && missing.contains("host_env_keys"), "{missing}");
        host.env.borrow_mut().insert("VLLM_API_KEY".into(), "sk-test-123\n".into());
        let key = PodApiKey::from_config(&host, &named).unwrap().unwrap();
        assert_eq!(key.authorization(), "Bearer sk-test-123", "the Secret file's newline trimmed");
        assert!(!key.on_metrics());
        assert!(!format!("{key:?}").contains("sk-test"), "Debug keeps the key out of logs");
        assert!(PodApiKey::from_config(&host, &config("{}")).unwrap().is_none(), "no variable, no key");
    }

    #[test]
    fn a_key_a_header_cannot_carry_is_refused() {
        assert!(bearer("  \n").unwrap_err().contains("empty"));
        assert!(bearer("sk-a\r\nx-injected: 1").unwrap_err().contains("cannot carry"));
        assert!(bearer("clé").unwrap_err().contains("cannot carry"));
        assert!(bearer(&"k".repeat(MAX_KEY_BYTES + 1)).unwrap_err().contains("over"));
        assert_eq!(bearer("two words").unwrap(), "Bearer two words");
    }
}
