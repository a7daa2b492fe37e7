//! One page of a Kubernetes `PodList`, read into the few fields the pool needs.
//!
//! A pod object is large (spec, managedFields, container statuses); serde skips all of it
//! and borrows the strings it keeps from the body. A pod belongs to the pool only when it
//! is Ready (`status.conditions[type=Ready].status == "True"`), has a `status.podIP` and
//! is not terminating (no `metadata.deletionTimestamp`): a terminating pod can stay Ready
//! for its whole grace period while it drains, and must get no new requests.

use std::borrow::Cow;
use std::net::{IpAddr, SocketAddr};

use serde::Deserialize;

use crate::address::PodAddress;
use crate::role::PodRole;

#[derive(Deserialize)]
struct PodList<'a> {
    #[serde(borrow, default)]
    metadata: ListMeta<'a>,
    #[serde(borrow, default)]
    items: Option<Vec<Pod<'a>>>,
}

#[derive(Deserialize, Default)]
struct ListMeta<'a> {
    #[serde(borrow, default, rename = "resourceVersion")]
    resource_version: Option<Cow<'a, str>>,
    #[serde(borrow, default, rename = "continue")]
    continue_token: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Pod<'a> {
    #[serde(borrow, default)]
    metadata: PodMeta<'a>,
    #[serde(borrow, default)]
    status: PodStatus<'a>,
}

#[derive(Deserialize, Default)]
struct PodMeta<'a> {
    #[serde(borrow, default, rename = "deletionTimestamp")]
    deletion_timestamp: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    labels: Labels<'a>,
}

/// The one label read; serde skips the others.
#[derive(Deserialize, Default)]
struct Labels<'a> {
    #[serde(borrow, default, rename = "llm-d.ai/role")]
    role: Option<Cow<'a, str>>,
}

#[derive(Deserialize, Default)]
struct PodStatus<'a> {
    #[serde(borrow, default, rename = "podIP")]
    pod_ip: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    conditions: Option<Vec<Condition<'a>>>,
}

#[derive(Deserialize)]
struct Condition<'a> {
    #[serde(borrow, rename = "type")]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    status: Cow<'a, str>,
}

/// What one page says about the pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodPage {
    /// The list's `metadata.resourceVersion` (the snapshot every page of it belongs to).
    pub resource_version: String,
    /// `metadata.continue`: more pages follow when set.
    pub continue_token: Option<String>,
    /// Ready pods of this page as `podIP:port`, in list order.
    pub ready: Vec<PodAddress>,
    /// Items on the page, ready or not (for logs).
    pub items: usize,
    /// Ready pods with a known `llm-d.ai/role` label, and that role.
    pub roles: Vec<(PodAddress, PodRole)>,
}

/// Parses one `PodList` page; `ports` are the pool's serving ports (one endpoint per ready pod
/// and port: data-parallel ranks).
pub fn parse_pod_page(body: &[u8], ports: &[u16]) -> Result<PodPage, String> {
    let list: PodList<'_> = serde_json::from_slice(body).map_err(|e| format!("pod list does not parse: {e}"))?;
    let items = list.items.ok_or("pod list has no items array")?;
    let mut ready = Vec::with_capacity(items.len());
    let mut roles = Vec::new();
    for pod in &items {
        let role = pod.metadata.labels.role.as_deref().and_then(PodRole::from_label);
        // One endpoint per data-parallel rank (target port), each with the pod's role.
        for address in ports.iter().filter_map(|&port| ready_address(pod, port)) {
            if let Some(role) = role {
                roles.push((address.clone(), role));
            }
            ready.push(address);
        }
    }
    Ok(PodPage {
        roles,
        resource_version: list.metadata.resource_version.map(Cow::into_owned).unwrap_or_default(),
        continue_token: list.metadata.continue_token.filter(|t| !t.is_empty()).map(Cow::into_owned),
        ready,
        items: items.len(),
    })
}

fn ready_address(pod: &Pod<'_>, port: u16) -> Option<PodAddress> {
    if pod.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let ready = pod.status.conditions.iter().flatten().any(|c| c.kind == "Ready" && c.status == "True");
    if !ready {
        return None;
    }
    let ip: IpAddr = pod.status.pod_ip.as_deref()?.parse().ok()?;
    PodAddress::parse(&SocketAddr::new(ip, port).to_string()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pod as `kubectl get pods -o json` shows it (trimmed of nothing the parser skips).
    const RUNNING_READY_POD: &str = r#"{
      "metadata": {
        "name": "vllm-qwen-6b9f7c8d4-x2x7q", "generateName": "vllm-qwen-6b9f7c8d4-", "namespace": "llm",
        "uid": "6f1c3c7e-2b0e-4a55-9c47-4a8f1f0f9d11", "resourceVersion": "884211",
        "creationTimestamp": "2025-06-02T10:14:07Z",
        "labels": {"app": "vllm-qwen", "pod-template-hash": "6b9f7c8d4"},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "vllm-qwen-6b9f7c8d4",
          "uid": "0b7d", "controller": true, "blockOwnerDeletion": true}],
        "managedFields": [{"manager": "kubelet", "operation": "Update", "apiVersion": "v1",
          "time": "2025-06-02T10:16:40Z", "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {}}, "subresource": "status"}]
      },
      "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.9.1",
        "args": ["--model", "Qwen/Qwen3-8B", "--enable-prefix-caching"],
        "ports": [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]}],
        "restartPolicy": "Always", "nodeName": "gpu-node-3", "serviceAccountName": "default"},
      "status": {
        "phase": "Running",
        "conditions": [
          {"type": "PodReadyToStartContainers", "status": "True", "lastProbeTime": null, "lastTransitionTime": "2025-06-02T10:14:09Z"},
          {"type": "Initialized", "status": "True", "lastProbeTime": null, "lastTransitionTime": "2025-06-02T10:14:07Z"},
          {"type": "Ready", "status": "True", "lastProbeTime": null, "lastTransitionTime": "2025-06-02T10:16:40Z"},
          {"type": "ContainersReady", "status": "True", "lastProbeTime": null, "lastTransitionTime": "2025-06-02T10:16:40Z"},
          {"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": "2025-06-02T10:14:07Z"}
        ],
        "hostIP": "10.0.1.5", "hostIPs": [{"ip": "10.0.1.5"}],
        "podIP": "10.244.3.17", "podIPs": [{"ip": "10.244.3.17"}],
        "startTime": "2025-06-02T10:14:07Z",
        "containerStatuses": [{"name": "vllm", "ready": true, "restartCount": 0, "started": true,
          "state": {"running": {"startedAt": "2025-06-02T10:14:09Z"}}, "image": "vllm/vllm-openai:v0.9.1",
          "imageID": "docker.io/vllm/vllm-openai@sha256:1f0e", "containerID": "containerd://9a1b"}],
        "qosClass": "Burstable"
      }
    }"#;

    fn list(items: &[String], resource_version: &str, continue_token: Option<&str>) -> Vec<u8> {
        let continue_field = continue_token.map(|t| format!(r#", "continue": "{t}", "remainingItemCount": 2"#));
        format!(
            r#"{{"kind": "PodList", "apiVersion": "v1", "metadata": {{"resourceVersion": "{resource_version}"{}}}, "items": [{}]}}"#,
            continue_field.unwrap_or_default(),
            items.join(",")
        )
        .into_bytes()
    }

    fn variant(ip: &str, ready: &str, deleting: bool) -> String {
        let mut pod = RUNNING_READY_POD
            .replace("10.244.3.17", ip)
            .replace(r#""type": "Ready", "status": "True""#, &format!(r#""type": "Ready", "status": "{ready}""#));
        if deleting {
            pod = pod.replace(
                r#""creationTimestamp""#,
                r#""deletionTimestamp": "2025-06-02T11:00:00Z", "deletionGracePeriodSeconds": 30, "creationTimestamp""#,
            );
        }
        pod
    }

    #[test]
    fn keeps_ready_pods_with_an_ip_and_skips_the_rest() {
        let pending = r#"{"metadata": {"name": "p"}, "status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}}"#;
        let body = list(
            &[
                variant("10.244.3.17", "True", false),
                variant("10.244.3.18", "False", false),
                variant("10.244.3.19", "True", true),
                pending.to_string(),
                variant("fd00::7", "True", false),
            ],
            "884300",
            None,
        );
        let page = parse_pod_page(&body, &[8000]).unwrap();
        let ready: Vec<&str> = page.ready.iter().map(PodAddress::as_str).collect();
        assert_eq!(ready, ["10.244.3.17:8000", "[fd00::7]:8000"]);
        assert_eq!((page.items, page.resource_version.as_str(), page.continue_token), (5, "884300", None));
        let ranks = parse_pod_page(&body, &[8000, 8001]).unwrap();
        let ready: Vec<&str> = ranks.ready.iter().map(PodAddress::as_str).collect();
        assert_eq!(ready, ["10.244.3.17:8000", "10.244.3.17:8001", "[fd00::7]:8000", "[fd00::7]:8001"]);
    }

    #[test]
    fn reads_the_role_label_of_ready_pods() {
        let labelled = |ip: &str, role: &str| {
            variant(ip, "True", false)
                .replace(r#""pod-template-hash": "6b9f7c8d4""#, &format!(r#""llm-d.ai/role": "{role}""#))
        };
        let body = list(
            &[labelled("10.0.0.1", "prefill"), labelled("10.0.0.2", "decode"), labelled("10.0.0.3", "sidecar")],
            "7",
            None,
        );
        let page = parse_pod_page(&body, &[80]).unwrap();
        assert_eq!(page.ready.len(), 3, "an unknown role is still a pod");
        let roles: Vec<(&str, PodRole)> = page.roles.iter().map(|(a, r)| (a.as_str(), *r)).collect();
        assert_eq!(roles, [("10.0.0.1:80", PodRole::Prefill), ("10.0.0.2:80", PodRole::Decode)]);
    }

    #[test]
    fn reads_the_continue_token() {
        let body = list(&[variant("10.0.0.1", "True", false)], "12", Some("eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ"));
        let page = parse_pod_page(&body, &[80]).unwrap();
        assert_eq!(page.continue_token.as_deref(), Some("eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ"));
        let empty_continue = br#"{"metadata": {"resourceVersion": "1", "continue": ""}, "items": []}"#;
        assert_eq!(parse_pod_page(empty_continue, &[80]).unwrap().continue_token, None);
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(parse_pod_page(b"<html>502 Bad Gateway</html>", &[80]).is_err());
        assert!(parse_pod_page(br#"{"kind": "Status", "status": "Failure", "code": 500}"#, &[80]).is_err());
        assert!(parse_pod_page(br#"{"items": [{"status": {"podIP": 7}}]}"#, &[80]).is_err());
    }

    #[test]
    fn strange_ips_never_become_addresses() {
        let pod = variant("evil.example.com", "True", false);
        assert!(parse_pod_page(&list(&[pod], "1", None), &[80]).unwrap().ready.is_empty());
    }
}
