//! An HTTP/2 client that stops reading its answer (its stream's flow-control window shut, its
//! connection open), as a paused consumer or a slow link does. Envoy holds the answer's end
//! until the client reads on or resets (the stream idle timeout: 660 s on the pool route), so
//! the stream ends long after the pod is done. The pod's place must not wait for it: with one
//! place per pod, another request is served meanwhile (it waited its TTL for a 429 when the
//! place was given back at the stream's end), and the client still gets its whole answer when
//! it reads on.

use std::time::Duration;

use e2e::Cluster;
use launcher::http;
use serde_json::json;

/// The client's initial stream window: far smaller than the answer, so Envoy holds the rest.
const WINDOW: u32 = 1024;

#[test]
fn a_client_that_stops_reading_does_not_hold_its_pod_s_place() {
    let cluster = Cluster::start_ready_with("slow-readers", 1, &["--time-scale", "0"], |options| {
        options.concurrency = 1;
        options.filter_config["flow_control"] = json!({"enabled": true, "max_inflight_per_pod": 1, "ttl_ms": 3000});
        options.filter_config["fallback_destinations"] = json!(0);
    });
    let port = cluster.envoy.listen_port;
    let pod = cluster.pool()[0].clone();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let body = json!({"model": "sim-model", "prompt": "unread", "max_tokens": 300, "stream": true}).to_string();
        // The first chunk, not given back to the window: the client reads no more for now.
        let (mut received, first) = e2e::h2::open_unread(port, "/v1/completions", WINDOW, body).await;
        let done = launcher::wait_until(Duration::from_secs(5), || {
            cluster.pods[0].stats().is_ok_and(|stats| {
                let finished = &stats["requests_finished"];
                let ended = finished["length"].as_u64().unwrap_or(0) + finished["stop"].as_u64().unwrap_or(0);
                stats["running"] == 0 && ended >= 1
            })
        });
        assert!(done, "the pod never finished the answer: {:?}", cluster.pods[0].stats());
        let released = launcher::wait_until(Duration::from_secs(2), || {
            cluster.envoy.stat(&format!("wasm_epp_pod_inflight{{pod=\"{pod}\"}}")) == Some(0.0)
        });
        assert!(released, "the pod's count waits for a client that does not read");
        let other = tokio::task::spawn_blocking(move || {
            let body = json!({"model": "sim-model", "prompt": "meanwhile", "max_tokens": 4}).to_string();
            http::post(&format!("http://127.0.0.1:{port}/v1/completions"), &[], &body, Duration::from_secs(10))
        });
        let reply = other.await.unwrap().unwrap();
        assert_eq!(reply.status, 200, "another request meanwhile: {}", reply.body);

        // The client reads on: its whole answer is still there.
        let _ = received.flow_control().release_capacity(first.len());
        let mut answer = first.to_vec();
        while let Some(chunk) = received.data().await {
            let chunk = chunk.unwrap();
            let _ = received.flow_control().release_capacity(chunk.len());
            answer.extend_from_slice(&chunk);
        }
        let answer = String::from_utf8(answer).unwrap();
        assert!(answer.len() > WINDOW as usize * 4, "an answer Envoy had to hold: {} bytes", answer.len());
        assert!(answer.trim_end().ends_with("data: [DONE]"), "the answer ends whole: {answer:.200}");
    });
    assert_eq!(cluster.envoy.stat(&format!("wasm_epp_pod_inflight{{pod=\"{pod}\"}}")), Some(0.0));
    cluster.assert_plugin_healthy();
}
