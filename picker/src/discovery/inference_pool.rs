//! An `InferencePool` (Gateway API Inference Extension), read for its selector and port.
//!
//! Two shapes exist in clusters today: `inference.networking.k8s.io/v1` keeps the labels
//! in `spec.selector.matchLabels` and the ports in `spec.targetPorts[].number` (up to 8, one per
//! data-parallel rank, each rank its own endpoint with its own queue and cache); the older
//! `inference.networking.x-k8s.io/v1alpha2` has `spec.selector` as a plain label map and
//! `spec.targetPortNumber`. Both are accepted whichever API was asked, so a cluster that
//! serves the pool under either version works.

use std::collections::BTreeMap;

use serde::Deserialize;

/// Labels a pool may select on at most (the v1 CRD allows 64).
pub const MAX_SELECTOR_LABELS: usize = 64;
/// Ports per pod at most: the v1 CRD allows 8 `targetPorts` (data-parallel ranks).
pub const MAX_TARGET_PORTS: usize = 8;

#[derive(Deserialize)]
struct InferencePool {
    spec: Option<Spec>,
}

#[derive(Deserialize)]
struct Spec {
    #[serde(default)]
    selector: Option<serde_json::Value>,
    #[serde(default, rename = "targetPorts")]
    target_ports: Option<Vec<TargetPort>>,
    #[serde(default, rename = "targetPortNumber")]
    target_port_number: Option<i64>,
}

#[derive(Deserialize)]
struct TargetPort {
    number: Option<i64>,
}

/// The pool as the pod list needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolSpec {
    /// `key=value,...` sorted by key: a label selector for the pod LIST.
    pub selector: String,
    /// Every serving port of a pod (one per data-parallel rank; each is its own endpoint).
    pub target_ports: Vec<u16>,
}

/// Parses an InferencePool object of either API version.
pub fn parse_inference_pool(body: &[u8]) -> Result<PoolSpec, String> {
    let pool: InferencePool = serde_json::from_slice(body).map_err(|e| format!("InferencePool does not parse: {e}"))?;
    let spec = pool.spec.ok_or("InferencePool has no spec")?;
    let selector = spec.selector.ok_or("InferencePool has no spec.selector")?;
    // v1: {"matchLabels": {...}}; v1alpha2: the label map itself.
    let labels = match selector.get("matchLabels") {
        Some(match_labels) => match_labels,
        None => &selector,
    };
    let labels: BTreeMap<String, String> =
        serde_json::from_value(labels.clone()).map_err(|_| "InferencePool selector is not a map of labels")?;
    if labels.is_empty() {
        // An empty selector would select every pod of the namespace.
        return Err("InferencePool selects on no label".into());
    }
    if labels.len() > MAX_SELECTOR_LABELS {
        return Err(format!("InferencePool selects on more than {MAX_SELECTOR_LABELS} labels"));
    }
    let mut pairs = Vec::with_capacity(labels.len());
    for (key, value) in &labels {
        if !is_label_key(key) || !is_label_value(value) {
            return Err(format!("InferencePool selector label '{key}={value}' is not a valid label"));
        }
        pairs.push(format!("{key}={value}"));
    }
    let numbers: Vec<i64> = match spec.target_ports {
        Some(ports) if !ports.is_empty() => ports.iter().map(|port| port.number.unwrap_or(0)).collect(),
        _ => spec.target_port_number.into_iter().collect(),
    };
    if numbers.is_empty() {
        return Err("InferencePool has no target port".into());
    }
    if numbers.len() > MAX_TARGET_PORTS {
        return Err(format!("InferencePool has more than {MAX_TARGET_PORTS} target ports"));
    }
    let mut target_ports = Vec::with_capacity(numbers.len());
    for port in numbers {
        let port =
            u16::try_from(port).ok().filter(|p| *p != 0).ok_or(format!("InferencePool port {port} is out of range"))?;
        if !target_ports.contains(&port) {
            target_ports.push(port);
        }
    }
    Ok(PoolSpec { selector: pairs.join(","), target_ports })
}

// Label syntax is checked so a value cannot smuggle selector operators (`,`, `!`, `in`).
fn is_label_key(key: &str) -> bool {
    let (prefix_ok, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (super::config::is_dns_subdomain(prefix), name),
        None => (true, key),
    };
    prefix_ok && is_label_value(name) && !name.is_empty()
}

fn is_label_value(value: &str) -> bool {
    value.len() <= 63
        && value.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && (value.is_empty()
            || (value.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
                && value.bytes().last().is_some_and(|b| b.is_ascii_alphanumeric())))
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1: &str = r#"{
      "apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
      "metadata": {"name": "qwen-pool", "namespace": "llm", "resourceVersion": "90122", "generation": 1},
      "spec": {
        "selector": {"matchLabels": {"app": "vllm-qwen", "app.kubernetes.io/part-of": "llm"}},
        "targetPorts": [{"number": 8000}],
        "endpointPickerRef": {"group": "", "kind": "Service", "name": "qwen-epp", "portNumber": 9002, "failureMode": "FailClose"}
      },
      "status": {"parents": [{"parentRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "inference"},
        "conditions": [{"type": "Accepted", "status": "True", "reason": "SupportedByParent",
          "lastTransitionTime": "2025-06-02T10:00:00Z", "observedGeneration": 1, "message": ""}]}]}
    }"#;

    const V1ALPHA2: &str = r#"{
      "apiVersion": "inference.networking.x-k8s.io/v1alpha2", "kind": "InferencePool",
      "metadata": {"name": "qwen-pool", "namespace": "llm"},
      "spec": {"selector": {"app": "vllm-qwen"}, "targetPortNumber": 8001,
        "extensionRef": {"name": "qwen-epp", "portNumber": 9002, "failureMode": "FailClose"}},
      "status": {"parent": [{"parentRef": {"kind": "Gateway", "name": "inference"},
        "conditions": [{"type": "Accepted", "status": "Unknown", "reason": "Pending", "message": "Waiting for controller",
          "lastTransitionTime": "1970-01-01T00:00:00Z"}]}]}
    }"#;

    #[test]
    fn reads_both_api_versions() {
        assert_eq!(
            parse_inference_pool(V1.as_bytes()).unwrap(),
            PoolSpec { selector: "app=vllm-qwen,app.kubernetes.io/part-of=llm".into(), target_ports: vec![8000] }
        );
        assert_eq!(
            parse_inference_pool(V1ALPHA2.as_bytes()).unwrap(),
            PoolSpec { selector: "app=vllm-qwen".into(), target_ports: vec![8001] }
        );
        let ranks = V1.replace(r#"[{"number": 8000}]"#, r#"[{"number": 8000}, {"number": 8001}, {"number": 8000}]"#);
        assert_eq!(parse_inference_pool(ranks.as_bytes()).unwrap().target_ports, [8000, 8001], "one per rank");
        let nine: Vec<String> = (0..9).map(|i| format!(r#"{{"number": {}}}"#, 8000 + i)).collect();
        let too_many = V1.replace(r#"[{"number": 8000}]"#, &format!("[{}]", nine.join(",")));
        assert!(parse_inference_pool(too_many.as_bytes()).unwrap_err().contains("8 target ports"));
    }

    #[test]
    fn refuses_pools_that_would_select_too_much_or_inject() {
        let empty = V1.replace(r#""app": "vllm-qwen", "app.kubernetes.io/part-of": "llm""#, "");
        assert!(parse_inference_pool(empty.as_bytes()).unwrap_err().contains("no label"));
        let injected = V1ALPHA2.replace(r#""app": "vllm-qwen""#, r#""app": "x,env!=prod""#);
        assert!(parse_inference_pool(injected.as_bytes()).is_err());
        let no_port = V1ALPHA2.replace(r#""targetPortNumber": 8001,"#, "");
        assert!(parse_inference_pool(no_port.as_bytes()).unwrap_err().contains("port"));
        let big_port = V1.replace("8000", "70000");
        assert!(parse_inference_pool(big_port.as_bytes()).is_err());
        assert!(parse_inference_pool(b"not json").is_err());
    }
}
