//! Answers the filter gives itself, in OpenAI's error shape so clients parse them.

use wasm_epp_host::Host;

/// Sends `{"error": {...}}` with `status`; the caller then pauses the stream.
pub fn send_error(host: &dyn Host, status: u32, kind: &str, message: &str) {
    let body = error_body(status, kind, message);
    let headers = [("content-type", "application/json"), ("x-wasm-epp", "local-reply")];
    if let Err(error) = host.send_reply(status, &headers, body.as_bytes()) {
        log::warn!("wasm-epp: could not send local reply {status}: {error}");
    }
}

/// 404 for a `model` no pod serves: vLLM's own answer for a model it does not serve, given
/// without touching a pod.
pub fn send_model_not_found(host: &dyn Host, model: &str) {
    send_error(host, 404, "NotFoundError", &format!("The model `{model}` does not exist."));
}

/// Header naming why a request was refused, as llm-d's gateways set it on 429 and 503.
pub const DROPPED_REASON_HEADER: &str = "x-llm-d-request-dropped-reason";

/// Why the gateway refused a request (the value of [`DROPPED_REASON_HEADER`]). The values
/// are llm-d's (llm-d-router's `pkg/common/error/error.go`, chosen as its
/// `translateFlowControlOutcome` does) but for one llm-d has none for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DroppedReason {
    /// Every pod is saturated and the request is sheddable, or the wait queue is full (429).
    RejectedSaturated,
    /// No pod to send it to: none in the pool (also after waiting its TTL), none in the
    /// subset hint, data expired (503).
    RejectedNoEndpoints,
    /// Waited its TTL in the queue while every pod was saturated (429).
    RejectedTtlExpired,
    /// Its client went away while it waited (never seen: there is no one to answer).
    RejectedContextCancelled,
    /// Ours: a waiting sheddable request sent away for a higher priority (429). llm-d's
    /// `evicted-*` values name requests a pod was already serving, which this never is.
    EvictedForHigherPriority,
}

impl DroppedReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RejectedSaturated => "rejected-saturated",
            Self::RejectedNoEndpoints => "rejected-no-endpoints",
            Self::RejectedTtlExpired => "rejected-ttl-expired",
            Self::RejectedContextCancelled => "rejected-context-cancelled",
            Self::EvictedForHigherPriority => "evicted-for-higher-priority",
        }
    }
}

/// Sends an OpenAI-shaped error carrying [`DROPPED_REASON_HEADER`].
pub fn send_dropped(host: &dyn Host, status: u32, reason: DroppedReason, kind: &str, message: &str) {
    let body = error_body(status, kind, message);
    let headers =
        [("content-type", "application/json"), ("x-wasm-epp", "local-reply"), (DROPPED_REASON_HEADER, reason.as_str())];
    if let Err(error) = host.send_reply(status, &headers, body.as_bytes()) {
        log::warn!("wasm-epp: could not send local reply {status}: {error}");
    }
}

/// Sends a small JSON document with 200 (the health probe).
pub fn send_json(host: &dyn Host, body: &serde_json::Value) {
    send_json_bytes(host, body.to_string().as_bytes());
}

/// Sends JSON already serialized with 200 (the model list).
pub fn send_json_bytes(host: &dyn Host, body: &[u8]) {
    let headers = [("content-type", "application/json"), ("x-wasm-epp", "local-reply"), ("cache-control", "no-store")];
    if let Err(error) = host.send_reply(200, &headers, body) {
        log::warn!("wasm-epp: could not send local reply 200: {error}");
    }
}

fn error_body(status: u32, kind: &str, message: &str) -> String {
    serde_json::json!({"error": {"message": message, "type": kind, "param": null, "code": status}}).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_body_is_openai_shaped_json() {
        let body: serde_json::Value =
            serde_json::from_str(&error_body(400, "invalid_request_error", "bad \"json\"")).unwrap();
        assert_eq!(body["error"]["message"], "bad \"json\"");
        assert_eq!(body["error"]["code"], 400);
    }
}
