//! A pod that answers its headers and a first chunk, then says nothing more (a hung engine
//! whose API server still answers `/metrics`), to an HTTP/2 client that has stopped reading
//! too. Nothing ends the answer but the pool route's stream idle timeout (`idle_timeout`,
//! shortened here): Envoy resets the stream (flags `SI`) and the filter gives back what the
//! request held of the pod at the stream's end (`on_log`), once: its in-flight count and its
//! flow-control place, so a request queued behind it is served then. A silence the idle
//! timeout ends mid-answer is the pod's failure, as a pod's reset is (docs/design.md,
//! "Pods that fail requests").

use std::io::{Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use e2e::Cluster;
use serde_json::json;

/// The route's idle timeout in this test (660 s shipped).
const IDLE_TIMEOUT: Duration = Duration::from_secs(4);
/// The client's initial stream window: smaller than the first chunk, so Envoy holds part of it.
const WINDOW: u32 = 1024;

const COMPLETION: &str = r#"{"id":"cmpl-1","object":"text_completion","model":"sim-model","choices":[{"index":0,"text":" ok","finish_reason":"stop"}],"usage":{"prompt_tokens":2,"completion_tokens":1,"total_tokens":3}}"#;

/// The fake pod: a prompt naming `stall` gets its headers and first chunk, then silence
/// until Envoy closes the connection (`closed` counts those); any other is answered whole.
struct StallingPod {
    address: String,
    stalled: Arc<AtomicU64>,
    closed: Arc<AtomicU64>,
}

impl StallingPod {
    fn start() -> Self {
        let (stalled, closed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let counters = (stalled.clone(), closed.clone());
        let address = e2e::fake_pod::start(move |request, connection| {
            if !request.asks_for("stall") {
                return Some(e2e::fake_pod::whole("application/json", COMPLETION));
            }
            counters.0.fetch_add(1, Ordering::SeqCst);
            // A first event past the client's window, then nothing: the engine hung.
            let event = format!("data: {{\"choices\":[{{\"index\":0,\"text\":\"{}\"}}]}}\n\n", "a".repeat(4096));
            let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
            let _ = connection.writer.write_all(format!("{head}{:x}\r\n{event}\r\n", event.len()).as_bytes());
            let _ = connection.writer.flush();
            // Until Envoy gives up on the answer and closes the connection.
            while connection.reader.read(&mut [0; 64]).is_ok_and(|n| n > 0) {}
            counters.1.fetch_add(1, Ordering::SeqCst);
            None
        });
        Self { address, stalled, closed }
    }
}

fn access_log(path: &std::path::Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines().filter_map(|line| serde_json::from_str(line).ok()).collect()
}

#[test]
fn the_stream_idle_timeout_ends_a_stalled_answer_and_frees_its_pod_once() {
    let fake = StallingPod::start();
    let log = launcher::paths::run_dir("stalled-answers").unwrap().join("access.log");
    let _ = std::fs::remove_file(&log);
    let log_path = log.clone();
    let cluster = Cluster::start("stalled-answers", 0, &[], |options| {
        e2e::add_to_pool(options, &fake.address);
        options.concurrency = 1;
        options.route_idle_timeout = format!("{}s", IDLE_TIMEOUT.as_secs());
        options.access_log = Some(log_path);
        options.filter_config["flow_control"] = json!({"enabled": true, "max_inflight_per_pod": 1, "ttl_ms": 20_000});
        options.filter_config["fallback_destinations"] = json!(0);
        options.filter_config["outlier_detection"] = json!({"consecutive_failures": 1});
        options.filter_config["learning"] = json!({"enabled": true});
    });
    assert!(cluster.envoy.wait_for_healthy_pods(1, Duration::from_secs(15)), "{}", cluster.envoy.log_tail(20));
    let inflight_stat = format!("wasm_epp_pod_inflight{{pod=\"{}\"}}", fake.address);
    let inflight = || cluster.envoy.stat(&inflight_stat);
    let port = cluster.envoy.listen_port;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let body = json!({"model": "sim-model", "prompt": "stall", "max_tokens": 300, "stream": true}).to_string();
        // Part of the first chunk, not given back to the window: the client reads no more.
        let (mut received, first) = e2e::h2::open_unread(port, "/v1/completions", WINDOW, body).await;
        let stalled_at = Instant::now();
        assert!(!first.is_empty());
        // (The gauge is set at each table the pool service publishes: every 100 ms.)
        let held = launcher::wait_until(Duration::from_secs(1), || inflight() == Some(1.0));
        assert!(held, "the stalled answer holds the pod's one place: {:?}", inflight());

        // Sent well after the stall began, so its own idle timer (it is held by the filter,
        // silent both ways) runs out after the stalled stream's; and well before it ends.
        tokio::time::sleep_until(tokio::time::Instant::from_std(stalled_at + IDLE_TIMEOUT / 2)).await;
        let url = cluster.envoy.url("/v1/completions");
        let queued = tokio::task::spawn_blocking(move || {
            let body = json!({"model": "sim-model", "prompt": "queued", "max_tokens": 4}).to_string();
            launcher::http::post(&url, &[], &body, Duration::from_secs(20))
        });
        let queued_up =
            launcher::wait_until(Duration::from_secs(1), || cluster.envoy.stat("wasm_epp_flow_queued") == Some(1.0));
        assert!(queued_up, "it waits for the stalled answer's place: {:?}", cluster.envoy.stat("wasm_epp_flow_queued"));

        // The stream idle timeout resets the stalled stream.
        let ended = tokio::time::timeout(IDLE_TIMEOUT * 3, received.data()).await;
        let ended_after = stalled_at.elapsed();
        assert!(matches!(ended, Ok(Some(Err(_)))), "the stalled answer was not reset: {ended:?}");
        assert!(ended_after >= IDLE_TIMEOUT - Duration::from_millis(100), "ended early: {ended_after:?}");
        let reply = queued.await.unwrap().unwrap();
        assert_eq!(reply.status, 200, "the queued request is served once the place is free: {}", reply.body);
        // (Held to its TTL, 20 s, it would have got 429.)
        assert!(stalled_at.elapsed() < IDLE_TIMEOUT * 3, "served late: {:?}", stalled_at.elapsed());
    });
    assert!(
        launcher::wait_until(Duration::from_secs(5), || fake.closed.load(Ordering::SeqCst) == 1),
        "Envoy left the pod's connection open"
    );
    assert_eq!(fake.stalled.load(Ordering::SeqCst), 1);
    let released = launcher::wait_until(Duration::from_secs(1), || inflight() == Some(0.0));
    assert!(released, "released once: back to zero, not below: {:?}", inflight());
    assert_eq!(cluster.envoy.stat("wasm_epp_flow_queued"), Some(1.0));
    assert_eq!(cluster.envoy.stat("wasm_epp_flow_released"), Some(1.0));
    assert_eq!(cluster.envoy.stat("wasm_epp_inflight_update_failed").unwrap_or(0.0), 0.0);

    assert!(launcher::wait_until(Duration::from_secs(15), || access_log(&log).len() >= 2), "{}", log.display());
    let entries = access_log(&log);
    let stalled = entries.iter().find(|e| e["status"] == 200 && e["flags"].as_str().is_some_and(|f| f.contains("SI")));
    assert!(stalled.is_some(), "the stalled answer's entry has no SI flag: {entries:?}");
    // The pod's silence mid-answer is its failure (its length no duration sample).
    assert_eq!(cluster.envoy.stat("wasm_epp_answers_cut"), Some(1.0));
    assert_eq!(cluster.envoy.stat("wasm_epp_pod_attempts_failed"), Some(1.0));
    // (Not `assert_plugin_healthy`: the fake pod is no simulator, which that request wants.)
    let log = cluster.envoy.log();
    assert!(!log.contains("panicked") && !log.contains("wasm trap"), "{}", cluster.envoy.log_tail(40));
}
