//! The `kubernetes` section of the singleton's configuration: where the pool's pods are
//! listed from, and how often.
//!
//! The bearer token is not configured here on purpose: Proxy-Wasm cannot read files, so
//! Envoy injects it on the `cluster` (see docs/deployment.md). The plugin only names the
//! cluster, the namespace and what selects the pods.

use serde::Deserialize;

/// Which InferencePool API the pool named in `inference_pool` is read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
pub enum InferencePoolApi {
    /// Gateway API Inference Extension v1: `spec.selector.matchLabels`, `spec.targetPorts[0].number`.
    #[default]
    #[serde(rename = "inference.networking.k8s.io/v1")]
    V1,
    /// The earlier alpha: `spec.selector` (a plain map), `spec.targetPortNumber`.
    #[serde(rename = "inference.networking.x-k8s.io/v1alpha2")]
    V1Alpha2,
}

impl InferencePoolApi {
    /// The API group and version, as they appear in the resource's URL path.
    pub fn group_version(self) -> &'static str {
        match self {
            Self::V1 => "inference.networking.k8s.io/v1",
            Self::V1Alpha2 => "inference.networking.x-k8s.io/v1alpha2",
        }
    }
}

/// Kubernetes discovery; exactly one of `label_selector` and `inference_pool` is set.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KubernetesConfig {
    /// Envoy cluster that reaches the API server (it injects the service-account token).
    pub cluster: String,
    /// `:authority` of every API call (the API server's name; TLS SNI is set on the cluster).
    pub authority: String,
    /// Namespace of the pods (and of the InferencePool).
    pub namespace: String,
    /// A Kubernetes label selector (`app=vllm,tier in (gpu)`), sent as `labelSelector`.
    pub label_selector: Option<String>,
    /// Name of an InferencePool whose selector and target port define the pool.
    pub inference_pool: Option<String>,
    pub inference_pool_api_version: InferencePoolApi,
    /// The pods' serving port (metrics are scraped on it too). Required with
    /// `label_selector`; with `inference_pool` it overrides the pool's target port.
    pub target_port: Option<u16>,
    /// Several serving ports per pod (data-parallel ranks, at most 8), instead of
    /// `target_port`: each `podIP:port` is its own endpoint with its own queue and cache.
    pub target_ports: Vec<u16>,
    /// One full LIST of the pool per interval.
    pub relist_interval_ms: u64,
    /// Timeout of each API call.
    pub timeout_ms: u64,
    /// `limit` of each LIST page; larger pools are read with `continue`.
    pub page_size: u32,
    /// Larger API answers count as failures (a pod object is ~5-20 KB with managedFields).
    pub max_response_bytes: u64,
}

impl Default for KubernetesConfig {
    fn default() -> Self {
        Self {
            cluster: "kubernetes_api".into(),
            authority: "kubernetes.default.svc".into(),
            namespace: String::new(),
            label_selector: None,
            inference_pool: None,
            inference_pool_api_version: InferencePoolApi::V1,
            target_port: None,
            target_ports: Vec::new(),
            relist_interval_ms: 5_000,
            timeout_ms: 5_000,
            page_size: 500,
            max_response_bytes: 16 * 1024 * 1024,
        }
    }
}

/// Longest label selector accepted from configuration (the API server's own limit is
/// far higher; a selector this long is a mistake).
pub const MAX_SELECTOR_LEN: usize = 1024;

/// Where the pool's pods come from, once validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PoolSource {
    Selector { selector: String, ports: Vec<u16> },
    InferencePool { name: String, api: InferencePoolApi, port_override: Option<Vec<u16>> },
}

impl KubernetesConfig {
    /// Checks every field and returns where the pods come from.
    pub fn validate(&self) -> Result<PoolSource, String> {
        if self.cluster.is_empty() {
            return Err("kubernetes.cluster must name an Envoy cluster".into());
        }
        if self.authority.is_empty() || self.authority.bytes().any(|b| b.is_ascii_whitespace() || b.is_ascii_control())
        {
            return Err(format!("kubernetes.authority '{}' is not a host name", self.authority));
        }
        if !is_dns_label(&self.namespace) {
            return Err(format!(
                "kubernetes.namespace '{}' must be a DNS label (lower-case, digits, '-')",
                self.namespace
            ));
        }
        check_range("kubernetes.relist_interval_ms", self.relist_interval_ms, 100, 3_600_000)?;
        check_range("kubernetes.timeout_ms", self.timeout_ms, 100, 60_000)?;
        check_range("kubernetes.page_size", u64::from(self.page_size), 1, 500)?;
        check_range("kubernetes.max_response_bytes", self.max_response_bytes, 64 * 1024, 64 * 1024 * 1024)?;
        if self.target_port == Some(0) || self.target_ports.contains(&0) {
            return Err("kubernetes.target_port must not be 0".into());
        }
        let max_ports = super::inference_pool::MAX_TARGET_PORTS;
        if self.target_ports.len() > max_ports || (self.target_port.is_some() && !self.target_ports.is_empty()) {
            return Err(format!("kubernetes: set target_port or up to {max_ports} target_ports, not both"));
        }
        let ports: Option<Vec<u16>> = match (self.target_port, self.target_ports.is_empty()) {
            (Some(port), _) => Some(vec![port]),
            (None, false) => Some(self.target_ports.clone()),
            (None, true) => None,
        };
        match (&self.label_selector, &self.inference_pool) {
            (Some(selector), None) => {
                check_selector(selector)?;
                let ports = ports.ok_or("kubernetes.target_port is required with label_selector")?;
                Ok(PoolSource::Selector { selector: selector.trim().to_string(), ports })
            }
            (None, Some(name)) => {
                if !is_dns_subdomain(name) {
                    return Err(format!("kubernetes.inference_pool '{name}' is not a resource name"));
                }
                Ok(PoolSource::InferencePool {
                    name: name.clone(),
                    api: self.inference_pool_api_version,
                    port_override: ports,
                })
            }
            _ => Err("kubernetes: set exactly one of label_selector and inference_pool".into()),
        }
    }
}

fn check_selector(selector: &str) -> Result<(), String> {
    let trimmed = selector.trim();
    if trimmed.is_empty() {
        // An empty selector selects every pod of the namespace: never what a pool means.
        return Err("kubernetes.label_selector must not be empty".into());
    }
    if trimmed.len() > MAX_SELECTOR_LEN {
        return Err(format!("kubernetes.label_selector is longer than {MAX_SELECTOR_LEN} bytes"));
    }
    if !trimmed.bytes().all(|b| b.is_ascii_graphic() || b == b' ') {
        return Err("kubernetes.label_selector must be printable ASCII".into());
    }
    Ok(())
}

// Same rule and message as the rest of the configuration (`config::check_range` is
// private to that module).
fn check_range(name: &str, value: u64, min: u64, max: u64) -> Result<(), String> {
    if value < min || value > max {
        return Err(format!("{name} = {value}, must be within {min}..={max}"));
    }
    Ok(())
}

/// RFC 1123 label: what a namespace name is.
pub fn is_dns_label(text: &str) -> bool {
    let bytes = text.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes.iter().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
}

/// RFC 1123 subdomain: what most resource names are.
pub fn is_dns_subdomain(text: &str) -> bool {
    text.len() <= 253 && text.split('.').all(is_dns_label)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_json;

    fn parse(json: &str) -> Result<PoolSource, String> {
        parse_json::<KubernetesConfig>(json.as_bytes())?.validate()
    }

    #[test]
    fn selector_mode_needs_a_port() {
        let source = parse(r#"{"namespace": "llm", "label_selector": "app=vllm", "target_port": 8000}"#).unwrap();
        assert_eq!(source, PoolSource::Selector { selector: "app=vllm".into(), ports: vec![8000] });
        let error = parse(r#"{"namespace": "llm", "label_selector": "app=vllm"}"#).unwrap_err();
        assert!(error.contains("target_port"), "{error}");
    }

    #[test]
    fn inference_pool_mode_reads_the_api_version() {
        let source = parse(
            r#"{"namespace": "llm", "inference_pool": "qwen-pool",
                "inference_pool_api_version": "inference.networking.x-k8s.io/v1alpha2"}"#,
        )
        .unwrap();
        assert_eq!(
            source,
            PoolSource::InferencePool {
                name: "qwen-pool".into(),
                api: InferencePoolApi::V1Alpha2,
                port_override: None
            }
        );
        assert!(parse(r#"{"namespace": "llm", "inference_pool": "p", "inference_pool_api_version": "v9"}"#).is_err());
    }

    #[test]
    fn exactly_one_source_and_sane_names() {
        for bad in [
            r#"{"namespace": "llm"}"#,
            r#"{"namespace": "llm", "label_selector": "a=b", "inference_pool": "p", "target_port": 1}"#,
            r#"{"namespace": "LLM", "label_selector": "a=b", "target_port": 1}"#,
            r#"{"label_selector": "a=b", "target_port": 1}"#,
            r#"{"namespace": "llm", "label_selector": "  ", "target_port": 1}"#,
            r#"{"namespace": "llm", "label_selector": "a=b", "target_port": 0}"#,
            r#"{"namespace": "llm", "inference_pool": "Bad_Name"}"#,
            r#"{"namespace": "llm", "label_selector": "a=b", "target_port": 1, "relist_interval_ms": 1}"#,
            r#"{"namespace": "llm", "label_selector": "a=b", "target_port": 1, "page_size": 5000}"#,
            r#"{"namespace": "llm", "label_selector": "a=b", "target_port": 1, "token": "x"}"#,
        ] {
            assert!(parse(bad).is_err(), "{bad} accepted");
        }
    }
}
