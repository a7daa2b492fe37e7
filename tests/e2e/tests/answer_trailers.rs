//! A pod whose answers end in trailers (gRPC's `grpc-status`, any HTTP/2 or chunked answer
//! with them), to an HTTP/2 client that has stopped reading. The answer's last body chunk
//! does not end the stream; its trailers do, and the pod is done there: its place goes to
//! the next request then, not when the client reads on or the stream idle timeout ends the
//! stream. The shipped pool cluster speaks HTTP/1.1 without trailers (Envoy drops a pod's);
//! this test's cluster passes them (`enable_trailers`), as an HTTP/2 or gRPC pool would.

use std::time::{Duration, Instant};

use launcher::envoy::{Envoy, EnvoyOptions};
use serde_json::json;

/// The client's initial stream window: smaller than the answer, so Envoy holds its end.
const WINDOW: u32 = 1024;
/// Long past the test: without the release at the trailers, the place waits for it.
const IDLE_TIMEOUT: &str = "60s";

const COMPLETION: &str = r#"{"id":"cmpl-1","object":"text_completion","model":"sim-model","choices":[{"index":0,"text":" ok","finish_reason":"stop"}]}"#;

/// The fake pod: a prompt naming `trailers` gets a chunked answer of 8 KiB ending in
/// trailers; any other is answered whole.
fn start_pod() -> String {
    e2e::fake_pod::start(|request, _| {
        if !request.asks_for("trailers") {
            return Some(e2e::fake_pod::whole("application/json", COMPLETION));
        }
        let event = format!("data: {{\"choices\":[{{\"index\":0,\"text\":\"{}\"}}]}}\n\n", "a".repeat(8192));
        let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\
                    trailer: grpc-status\r\n\r\n";
        Some(format!("{head}{:x}\r\n{event}\r\n0\r\ngrpc-status: 0\r\n\r\n", event.len()))
    })
}

/// The rendered configuration, with the pool cluster passing its pods' HTTP/1.1 trailers.
fn with_upstream_trailers(config: &str) -> String {
    let cluster = "    - name: pool\n      type: STATIC\n      connect_timeout: 1s\n";
    assert!(config.contains(cluster), "the template's pool cluster moved");
    let options = "      typed_extension_protocol_options:\n        \
        envoy.extensions.upstreams.http.v3.HttpProtocolOptions:\n          \
        \"@type\": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions\n          \
        explicit_http_config:\n            http_protocol_options: { enable_trailers: true }\n";
    config.replacen(cluster, &format!("{cluster}{options}"), 1)
}

#[test]
fn an_answer_s_trailers_give_its_pod_s_place_to_the_next_request() {
    let pod = start_pod();
    let dir = launcher::paths::run_dir("answer-trailers").unwrap();
    let (listen, admin) = (launcher::free_port().unwrap(), launcher::free_port().unwrap());
    let mut options = EnvoyOptions::for_pool(std::slice::from_ref(&pod), listen, admin);
    options.concurrency = 1;
    options.route_idle_timeout = IDLE_TIMEOUT.into();
    options.filter_config["flow_control"] = json!({"enabled": true, "max_inflight_per_pod": 1, "ttl_ms": 20_000});
    options.filter_config["fallback_destinations"] = json!(0);
    let template = std::fs::read_to_string(launcher::paths::envoy_template()).unwrap();
    let config = with_upstream_trailers(&launcher::envoy::render(&template, &options));
    let envoy = Envoy::start_rendered(&config, &options, &[], &dir).unwrap();
    assert!(envoy.wait_for_healthy_pods(1, Duration::from_secs(15)), "{}", envoy.log_tail(20));
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let body = json!({"model": "sim-model", "prompt": "trailers", "stream": true}).to_string();
        // Part of the answer, not given back to the window: the client reads no more for now.
        let (mut received, first) = e2e::h2::open_unread(listen, "/v1/completions", WINDOW, body).await;

        // The pod is done (its trailers passed Envoy's filters); the client still reads nothing.
        let url = envoy.url("/v1/completions");
        let started = Instant::now();
        let other = tokio::task::spawn_blocking(move || {
            let body = json!({"model": "sim-model", "prompt": "meanwhile", "max_tokens": 4}).to_string();
            launcher::http::post(&url, &[], &body, Duration::from_secs(10))
        });
        let reply =
            other.await.unwrap().unwrap_or_else(|e| panic!("another request waited for the unread answer: {e}"));
        assert_eq!(reply.status, 200, "another request meanwhile: {}", reply.body);
        assert!(started.elapsed() < Duration::from_secs(5), "it waited {:?} for the place", started.elapsed());

        // The client reads on: the whole answer, then its trailers.
        let _ = received.flow_control().release_capacity(first.len());
        let mut answer = first.len();
        while let Some(chunk) = received.data().await {
            let chunk = chunk.unwrap();
            let _ = received.flow_control().release_capacity(chunk.len());
            answer += chunk.len();
        }
        assert!(answer > 8192, "the whole answer: {answer} bytes");
        let trailers = received.trailers().await.unwrap().expect("the pod's trailers");
        assert_eq!(trailers.get("grpc-status").map(|v| v.as_bytes()), Some(&b"0"[..]));
    });
    let inflight = format!("wasm_epp_pod_inflight{{pod=\"{pod}\"}}");
    let released = launcher::wait_until(Duration::from_secs(2), || envoy.stat(&inflight) == Some(0.0));
    assert!(released, "released once: back to zero, not below: {:?}", envoy.stat(&inflight));
    // Both went on at once: the first's place was free again by the second's arrival.
    assert_eq!(envoy.stat("wasm_epp_flow_dispatched_directly"), Some(2.0));
    let log = envoy.log();
    assert!(!log.contains("panicked") && !log.contains("wasm trap"), "{}", envoy.log_tail(40));
}
