//! What the fake API server knows (pods, InferencePools, failure modes) and how it answers
//! a LIST, in the JSON shapes a real API server sends.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value};

/// Requests remembered for assertions; older ones are dropped.
pub const MAX_RECORDED: usize = 4096;

/// One pod as a test sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct FakePod {
    pub name: String,
    pub ip: String,
    pub labels: BTreeMap<String, String>,
    pub ready: bool,
    pub terminating: bool,
    pub phase: &'static str,
}

impl FakePod {
    /// A Running, Ready pod with the given labels.
    pub fn ready(name: &str, ip: &str, labels: &[(&str, &str)]) -> Self {
        Self {
            name: name.into(),
            ip: ip.into(),
            labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            ready: true,
            terminating: false,
            phase: "Running",
        }
    }

    fn to_json(&self, namespace: &str, resource_version: u64) -> Value {
        let ready = if self.ready { "True" } else { "False" };
        let Value::Object(mut metadata) = json!({
            "name": self.name, "generateName": "vllm-", "namespace": namespace,
            "uid": format!("00000000-0000-4000-8000-{:012}", self.name.len()),
            "resourceVersion": resource_version.to_string(),
            "creationTimestamp": "2025-06-02T10:14:07Z",
            "labels": self.labels,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "vllm-6b9f7c8d4",
                "uid": "0b7d", "controller": true, "blockOwnerDeletion": true}],
        }) else {
            return Value::Null;
        };
        if self.terminating {
            metadata.insert("deletionTimestamp".into(), json!("2025-06-02T11:00:00Z"));
            metadata.insert("deletionGracePeriodSeconds".into(), json!(30));
        }
        json!({
            "metadata": metadata,
            "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.9.1",
                "ports": [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]}],
                "restartPolicy": "Always", "nodeName": "node-1"},
            "status": {
                "phase": self.phase,
                "conditions": [
                    {"type": "PodReadyToStartContainers", "status": "True", "lastProbeTime": null,
                     "lastTransitionTime": "2025-06-02T10:14:09Z"},
                    {"type": "Initialized", "status": "True", "lastProbeTime": null,
                     "lastTransitionTime": "2025-06-02T10:14:07Z"},
                    {"type": "Ready", "status": ready, "lastProbeTime": null,
                     "lastTransitionTime": "2025-06-02T10:16:40Z"},
                    {"type": "ContainersReady", "status": ready, "lastProbeTime": null,
                     "lastTransitionTime": "2025-06-02T10:16:40Z"},
                    {"type": "PodScheduled", "status": "True", "lastProbeTime": null,
                     "lastTransitionTime": "2025-06-02T10:14:07Z"}
                ],
                "hostIP": "10.0.1.5", "hostIPs": [{"ip": "10.0.1.5"}],
                "podIP": self.ip, "podIPs": [{"ip": self.ip}],
                "startTime": "2025-06-02T10:14:07Z", "qosClass": "Burstable"
            }
        })
    }
}

/// How the server misbehaves, until cleared.
#[derive(Debug, Clone, PartialEq)]
pub enum Outage {
    /// Answer every request with this status (a Kubernetes `Status` body).
    Status(u16),
    /// Answer 200 with a body that is not JSON (a proxy's error page).
    Garbage,
    /// Read the request, then answer nothing for this long (a hung API server).
    Hang(Duration),
    /// Close the connection without answering.
    Close,
}

/// One request, as received.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRequest {
    pub path: String,
    pub authorization: Option<String>,
    pub status: u16,
}

/// An answer to send.
pub struct Answer {
    pub status: u16,
    pub body: String,
}

/// The fake cluster's state; every change bumps the resource version, as etcd's does.
pub struct KubeState {
    pub namespace: String,
    pods: Vec<FakePod>,
    pools: BTreeMap<String, Value>,
    resource_version: u64,
    /// Pages hold at most this many items, whatever `limit` asks (a server may return fewer).
    pub page_size_cap: Option<usize>,
    /// When set, requests without `Authorization: Bearer <token>` get 401.
    pub required_token: Option<String>,
    pub outage: Option<Outage>,
    /// The next request with a `continue` token gets `410 Gone`.
    pub expire_next_continue: bool,
    pub requests: Vec<RecordedRequest>,
}

impl KubeState {
    pub fn new(namespace: &str) -> Self {
        Self {
            namespace: namespace.into(),
            pods: Vec::new(),
            pools: BTreeMap::new(),
            resource_version: 1000,
            page_size_cap: None,
            required_token: None,
            outage: None,
            expire_next_continue: false,
            requests: Vec::new(),
        }
    }

    pub fn resource_version(&self) -> u64 {
        self.resource_version
    }

    pub fn pods(&self) -> &[FakePod] {
        &self.pods
    }

    /// Adds or replaces a pod by name.
    pub fn put_pod(&mut self, pod: FakePod) {
        self.pods.retain(|p| p.name != pod.name);
        self.pods.push(pod);
        self.resource_version += 1;
    }

    /// Changes one pod; does nothing if it does not exist.
    pub fn update_pod(&mut self, name: &str, change: impl FnOnce(&mut FakePod)) {
        if let Some(pod) = self.pods.iter_mut().find(|p| p.name == name) {
            change(pod);
            self.resource_version += 1;
        }
    }

    pub fn delete_pod(&mut self, name: &str) {
        self.pods.retain(|p| p.name != name);
        self.resource_version += 1;
    }

    /// Stores an InferencePool object under its API group/version and name.
    pub fn put_inference_pool(&mut self, group_version: &str, name: &str, object: Value) {
        self.pools.insert(format!("{group_version}/{name}"), object);
        self.resource_version += 1;
    }

    pub fn record(&mut self, request: RecordedRequest) {
        if self.requests.len() >= MAX_RECORDED {
            self.requests.remove(0);
        }
        self.requests.push(request);
    }

    /// Answers a GET (after auth and outages were handled by the caller).
    pub fn answer(&mut self, path: &str) -> Answer {
        let (route, query) = path.split_once('?').unwrap_or((path, ""));
        let pods_route = format!("/api/v1/namespaces/{}/pods", self.namespace);
        if route == pods_route {
            return self.list_pods(&parse_query(query));
        }
        let pool_prefix = "/apis/";
        if let Some(rest) = route.strip_prefix(pool_prefix) {
            // {group}/{version}/namespaces/{ns}/inferencepools/{name}
            let parts: Vec<&str> = rest.split('/').collect();
            if let [group, version, "namespaces", namespace, "inferencepools", name] = parts.as_slice() {
                if *namespace == self.namespace {
                    if let Some(object) = self.pools.get(&format!("{group}/{version}/{name}")) {
                        return Answer { status: 200, body: object.to_string() };
                    }
                }
                return status_answer(404, "NotFound", &format!("inferencepools.{group} \"{name}\" not found"));
            }
        }
        status_answer(404, "NotFound", "the server could not find the requested resource")
    }

    fn list_pods(&mut self, query: &BTreeMap<String, String>) -> Answer {
        let selector = query.get("labelSelector").cloned().unwrap_or_default();
        let running_only = query.get("fieldSelector").is_some_and(|f| f == "status.phase=Running");
        let limit = query.get("limit").and_then(|l| l.parse::<usize>().ok()).unwrap_or(usize::MAX);
        let page_size = limit.min(self.page_size_cap.unwrap_or(usize::MAX)).max(1);
        let offset = match query.get("continue") {
            None => 0,
            Some(token) => match decode_continue(token) {
                Some((version, offset)) if version == self.resource_version && !self.expire_next_continue => offset,
                _ => {
                    self.expire_next_continue = false;
                    return status_answer(
                        410,
                        "Expired",
                        "The provided continue parameter is too old to display a consistent list result. \
                         You can start a new list without the continue parameter.",
                    );
                }
            },
        };
        let matching: Vec<&FakePod> = self
            .pods
            .iter()
            .filter(|pod| matches_selector(&pod.labels, &selector) && (!running_only || pod.phase == "Running"))
            .collect();
        let items: Vec<Value> = matching
            .iter()
            .skip(offset)
            .take(page_size)
            .map(|pod| pod.to_json(&self.namespace, self.resource_version))
            .collect();
        let next = offset + items.len();
        let mut metadata = serde_json::Map::new();
        metadata.insert("resourceVersion".into(), json!(self.resource_version.to_string()));
        if next < matching.len() {
            metadata.insert("continue".into(), json!(encode_continue(self.resource_version, next)));
            metadata.insert("remainingItemCount".into(), json!(matching.len() - next));
        }
        let list = json!({"kind": "PodList", "apiVersion": "v1", "metadata": metadata, "items": items});
        Answer { status: 200, body: list.to_string() }
    }
}

/// A Kubernetes `Status` object, as the API server sends with every error.
pub fn status_answer(code: u16, reason: &str, message: &str) -> Answer {
    let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code});
    Answer { status: code, body: body.to_string() }
}

/// Equality-based selectors (`a=b`, `a==b`, `a!=b`, comma-separated), what the plugin sends.
fn matches_selector(labels: &BTreeMap<String, String>, selector: &str) -> bool {
    selector.split(',').map(str::trim).filter(|term| !term.is_empty()).all(|term| {
        if let Some((key, value)) = term.split_once("!=") {
            labels.get(key.trim()).map(String::as_str) != Some(value.trim())
        } else if let Some((key, value)) = term.split_once("==").or_else(|| term.split_once('=')) {
            labels.get(key.trim()).map(String::as_str) == Some(value.trim())
        } else {
            labels.contains_key(term)
        }
    })
}

fn parse_query(query: &str) -> BTreeMap<String, String> {
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(key, value)| (percent_decode(key), percent_decode(value)))
        .collect()
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match (bytes.get(i), bytes.get(i + 1..i + 3)) {
            (Some(b'%'), Some(hex)) => match std::str::from_utf8(hex).ok().and_then(|h| u8::from_str_radix(h, 16).ok())
            {
                Some(byte) => {
                    out.push(byte);
                    i += 3;
                    continue;
                }
                None => out.push(b'%'),
            },
            (Some(b'+'), _) => out.push(b' '),
            (Some(byte), _) => out.push(*byte),
            (None, _) => break,
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Continue tokens look opaque (like the real, base64 ones) but carry version and offset.
fn encode_continue(version: u64, offset: usize) -> String {
    format!("{version}:{offset}").bytes().map(|b| format!("{b:02x}")).collect()
}

fn decode_continue(token: &str) -> Option<(u64, usize)> {
    let bytes: Option<Vec<u8>> =
        (0..token.len()).step_by(2).map(|i| token.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok())).collect();
    let text = String::from_utf8(bytes?).ok()?;
    let (version, offset) = text.split_once(':')?;
    Some((version.parse().ok()?, offset.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> KubeState {
        let mut state = KubeState::new("llm");
        for i in 1..=3 {
            state.put_pod(FakePod::ready(&format!("vllm-{i}"), &format!("10.0.0.{i}"), &[("app", "vllm")]));
        }
        state.put_pod(FakePod::ready("other", "10.0.0.9", &[("app", "other")]));
        state
    }

    #[test]
    fn lists_by_selector_in_pages() {
        let mut state = state();
        state.page_size_cap = Some(2);
        let first = state.answer("/api/v1/namespaces/llm/pods?labelSelector=app%3Dvllm&limit=500");
        let list: Value = serde_json::from_str(&first.body).unwrap();
        assert_eq!(list["items"].as_array().unwrap().len(), 2);
        let token = list["metadata"]["continue"].as_str().unwrap().to_string();
        let second = state.answer(&format!("/api/v1/namespaces/llm/pods?labelSelector=app%3Dvllm&continue={token}"));
        let list: Value = serde_json::from_str(&second.body).unwrap();
        assert_eq!(list["items"][0]["status"]["podIP"], "10.0.0.3");
        assert!(list["metadata"].get("continue").is_none());
        state.put_pod(FakePod::ready("vllm-4", "10.0.0.4", &[("app", "vllm")]));
        let expired = state.answer(&format!("/api/v1/namespaces/llm/pods?continue={token}"));
        assert_eq!(expired.status, 410);
    }

    #[test]
    fn serves_inference_pools_and_404s() {
        let mut state = state();
        state.put_inference_pool("inference.networking.k8s.io/v1", "p", json!({"kind": "InferencePool"}));
        assert_eq!(state.answer("/apis/inference.networking.k8s.io/v1/namespaces/llm/inferencepools/p").status, 200);
        assert_eq!(state.answer("/apis/inference.networking.k8s.io/v1/namespaces/llm/inferencepools/q").status, 404);
        assert_eq!(state.answer("/api/v1/namespaces/other/pods").status, 404);
    }
}
