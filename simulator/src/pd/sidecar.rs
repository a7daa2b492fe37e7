//! The routing sidecar of a decode pod, as llm-d's `llm-d-routing-sidecar` does it: before the
//! request reaches the engine, POST the same request to the prefill pod named by
//! `x-prefiller-host-port` with `max_tokens` 1, `stream` off and `kv_transfer_params.
//! do_remote_decode` (so the prefill pod prefills and caches the prompt), wait for the KV
//! transfer (`--kv-transfer-per-token-ms` per token this pod lacks), then store the blocks here
//! as cached so the local admission counts them as a prefix hit and only decodes.
//!
//! A prefill pod that fails (refused, error status, timeout) is not the client's problem: the
//! decode pod prefills locally, and the fallback is counted.

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::{json, Value};

use crate::client::{Method, SimClient};
use crate::pod::Pod;

/// Longest wait for the prefill pod's answer: a stuck prefill pod costs at most this, then the
/// decode pod prefills itself (an 8k-token prefill behind a long queue takes seconds, not minutes).
pub const PREFILL_TIMEOUT: Duration = Duration::from_secs(30);

/// Prefills `prompts` on `prefiller` and imports their KV; on failure counts a fallback.
pub async fn prefill_remotely(
    pod: &Pod,
    prefiller: &str,
    path: &str,
    body: &Bytes,
    prompts: &[Vec<u32>],
    extra_key: &str,
) {
    let asked_at = Instant::now();
    let prefilled = match (prefiller.parse::<SocketAddr>(), prefill_body(body)) {
        (Ok(address), Some(prefill_body)) => ask_prefill_pod(&address, path, prefill_body).await,
        _ => false,
    };
    if !prefilled {
        pod.lock().pd.prefill_fallbacks += 1;
        return;
    }
    let missing: usize = {
        let state = pod.lock();
        prompts.iter().map(|prompt| state.engine.uncached_block_tokens(prompt, extra_key)).sum()
    };
    let answered_at = Instant::now();
    let per_token_ms = pod.config().kv_transfer_per_token_ms;
    tokio::time::sleep(pod.config().latency.to_delay(per_token_ms * missing as f64)).await;
    let mut state = pod.lock();
    let transferred: usize = prompts.iter().map(|prompt| state.engine.import_prompt(prompt, extra_key)).sum();
    let counters = &mut state.pd;
    counters.remote_prefills += 1;
    counters.transferred_tokens += transferred as u64;
    counters.prefill_wait_us += micros(answered_at.duration_since(asked_at));
    counters.transfer_us += micros(answered_at.elapsed());
}

fn micros(elapsed: Duration) -> u64 {
    u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX)
}

/// The request as the sidecar sends it to the prefill pod; `None` if the body is not an object.
fn prefill_body(body: &Bytes) -> Option<Bytes> {
    let mut request: Value = serde_json::from_slice(body).ok()?;
    let object = request.as_object_mut()?;
    object.insert("max_tokens".to_owned(), json!(1));
    if object.contains_key("max_completion_tokens") {
        object.insert("max_completion_tokens".to_owned(), json!(1));
    }
    object.insert("stream".to_owned(), json!(false));
    object.remove("stream_options");
    object.insert(
        "kv_transfer_params".to_owned(),
        json!({"do_remote_decode": true, "do_remote_prefill": false, "remote_engine_id": null}),
    );
    Some(Bytes::from(request.to_string()))
}

async fn ask_prefill_pod(address: &SocketAddr, path: &str, body: Bytes) -> bool {
    static SHARED: OnceLock<SimClient> = OnceLock::new();
    let client = SHARED.get_or_init(SimClient::new);
    let url = format!("http://{address}{path}");
    match tokio::time::timeout(PREFILL_TIMEOUT, client.request(Method::POST, &url, body)).await {
        Ok(Ok(response)) => (200..300).contains(&response.status),
        Ok(Err(_)) | Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prefill_request_asks_for_one_token_without_streaming() {
        let body =
            Bytes::from(r#"{"prompt":"hi","max_tokens":512,"stream":true,"stream_options":{"include_usage":true}}"#);
        let sent: Value = serde_json::from_slice(&prefill_body(&body).unwrap_or_default()).unwrap();
        assert_eq!(sent["max_tokens"], 1);
        assert_eq!(sent["stream"], false);
        assert!(sent.get("stream_options").is_none());
        assert_eq!(sent["kv_transfer_params"]["do_remote_decode"], true);
        assert_eq!(sent["prompt"], "hi");
    }

    #[test]
    fn a_body_that_is_not_an_object_has_no_prefill_request() {
        assert_eq!(prefill_body(&Bytes::from("[1,2]")), None);
    }
}
