//! Flow control in a real Envoy, in a pool of two models: a request waits for room on its
//! model's pods, so one model's full pod holds its own requests in the gateway while the other
//! model's requests go to their pod at once.

use std::time::Duration;

use e2e::Cluster;
use launcher::http::{self, Reply};
use serde_json::json;

fn send(cluster: &Cluster, model: &str, prompt: &str) -> Reply {
    let body = json!({"model": model, "prompt": prompt, "max_tokens": 4}).to_string();
    http::post(&cluster.envoy.url("/v1/completions"), &[], &body, Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("request failed: {e}\n{}", cluster.envoy.log_tail(20)))
}

#[test]
fn a_full_models_requests_wait_for_its_pod_while_the_other_models_go_at_once() {
    // Pod 0 serves `sim-model`, pod 1 `qwen`; one place per pod, one worker (one queue).
    let sim = vec!["--time-scale", "0"];
    let qwen = vec!["--time-scale", "0", "--model", "qwen"];
    let cluster = Cluster::start_mixed("flow-models", &[sim, qwen], |options| {
        options.concurrency = 1;
        options.filter_config["flow_control"] = json!({"enabled": true, "max_inflight_per_pod": 1, "ttl_ms": 10000});
        options.filter_config["fallback_destinations"] = json!(0);
    });
    cluster.pods[0].set_faults(&json!({"hang": true})).unwrap();
    std::thread::scope(|scope| {
        let blocker = scope.spawn(|| send(&cluster, "sim-model", "blocker"));
        cluster.wait_for_stat("wasm_epp_flow_dispatched_directly", 1.0);
        let waiting: Vec<_> = (0..2)
            .map(|i| {
                let cluster = &cluster;
                scope.spawn(move || send(cluster, "sim-model", &format!("waiting {i}")))
            })
            .collect();
        cluster.wait_for_stat("wasm_epp_flow_queued", 2.0);

        // qwen's pod has room: its requests go at once, past sim-model's waiting ones, and
        // take nothing of sim-model's pod.
        for i in 0..3 {
            let reply = send(&cluster, "qwen", &format!("qwen {i}"));
            assert_eq!(reply.status, 200, "{}", reply.body);
            assert_eq!(reply.header("x-llm-d-flow-queue-duration-ms"), Some("0"), "admitted at once");
        }
        assert_eq!(cluster.stat("wasm_epp_flow_dispatched_directly"), 4.0);
        assert_eq!(
            cluster.stat("wasm_epp_flow_released"),
            0.0,
            "no sim-model request was released onto its full pod because qwen's had room"
        );

        cluster.pods[0].set_faults(&json!({"hang": false})).unwrap();
        assert_eq!(blocker.join().unwrap().status, 200);
        for handle in waiting {
            let reply = handle.join().unwrap();
            assert_eq!(reply.status, 200, "{}", reply.body);
            let waited: u64 = reply.header("x-llm-d-flow-queue-duration-ms").and_then(|v| v.parse().ok()).unwrap();
            assert!(waited > 0, "it waited in the gateway for its model's pod");
        }
    });
    assert_eq!(cluster.stat("wasm_epp_flow_released"), 2.0);
    assert_eq!(cluster.pods_stat("model_not_found"), 0, "every request reached a pod of its model");
    cluster.assert_plugin_healthy();
}

/// The `q` quantile of `values` (sorted here), in ms.
fn quantile_ms(values: &mut [Duration], q: f64) -> u128 {
    values.sort_unstable();
    let index = ((values.len() as f64 - 1.0) * q).round() as usize;
    values.get(index).map_or(0, Duration::as_millis)
}

#[test]
fn under_one_models_overload_its_backlog_waits_in_the_gateway_and_the_other_model_is_not_held() {
    overload_beside_another_model("flow-models-load", 1, &[]);
}

#[test]
fn on_two_workers_a_critical_overload_of_one_model_holds_no_request_of_the_other() {
    // Each worker with the overloaded model's critical requests waiting tells the other: a
    // standard request of the other model, on pods of its own, is not held for them.
    overload_beside_another_model("flow-models-priority", 2, &[("x-gateway-inference-priority", "5")]);
}

/// Eight closed-loop clients of `sim-model` (with `flooded_headers`) on its pod of two places,
/// two of `qwen` on its own, for 4 s behind an Envoy of `workers` workers; prints both
/// models' figures and checks that qwen's requests never waited.
fn overload_beside_another_model(name: &str, workers: u32, flooded_headers: &[(&str, &str)]) {
    // Two places per pod and two sequences per engine batch: what flow control lets through
    // to a pod, its engine runs at once; anything more would queue in the engine.
    let timing = ["--time-scale", "0.3", "--max-num-seqs", "2"];
    let sim = timing.to_vec();
    let qwen = [&timing[..], &["--model", "qwen"]].concat();
    let cluster = Cluster::start_mixed(name, &[sim, qwen], |options| {
        options.concurrency = workers;
        options.filter_config["flow_control"] = json!({"enabled": true, "max_inflight_per_pod": 2, "ttl_ms": 30000});
        options.filter_config["fallback_destinations"] = json!(0);
    });
    let run_for = Duration::from_secs(4);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (flooded, other) = (std::sync::Mutex::new(Vec::new()), std::sync::Mutex::new(Vec::new()));
    // sim-model's engine queue, sampled every 10 ms: (samples, sum, max).
    let mut engine_waiting = (0u64, 0u64, 0u64);
    std::thread::scope(|scope| {
        // Eight clients on sim-model's pod of two places, two on qwen's.
        let plain: &[(&str, &str)] = &[];
        for (model, clients, out, headers) in [("sim-model", 8, &flooded, flooded_headers), ("qwen", 2, &other, plain)]
        {
            for client in 0..clients {
                let (cluster, stop) = (&cluster, &stop);
                scope.spawn(move || {
                    let mut i = 0;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let body = json!({"model": model, "prompt": format!("{model} {client} {i}"), "max_tokens": 16});
                        let sent = std::time::Instant::now();
                        let reply = http::post(
                            &cluster.envoy.url("/v1/completions"),
                            headers,
                            &body.to_string(),
                            Duration::from_secs(60),
                        )
                        .unwrap_or_else(|e| panic!("request failed: {e}"));
                        assert_eq!(reply.status, 200, "{}", reply.body);
                        let waited: u64 =
                            reply.header("x-llm-d-flow-queue-duration-ms").and_then(|v| v.parse().ok()).unwrap_or(0);
                        out.lock().unwrap().push((sent.elapsed(), waited));
                        i += 1;
                    }
                });
            }
        }
        let started = std::time::Instant::now();
        while started.elapsed() < run_for {
            let waiting = cluster.pods[0].stats().ok().and_then(|s| s["waiting"].as_u64()).unwrap_or(0);
            engine_waiting = (engine_waiting.0 + 1, engine_waiting.1 + waiting, engine_waiting.2.max(waiting));
            std::thread::sleep(Duration::from_millis(10));
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    let (flooded, other) = (flooded.into_inner().unwrap(), other.into_inner().unwrap());
    let mut other_latency: Vec<Duration> = other.iter().map(|(took, _)| *took).collect();
    let other_waited = other.iter().filter(|(_, waited)| *waited > 0).count();
    let mut other_waits: Vec<u64> = other.iter().map(|(_, waited)| *waited).filter(|w| *w > 0).collect();
    other_waits.sort_unstable();
    println!("qwen waits (ms): {other_waits:?}");
    let flooded_waited = flooded.iter().filter(|(_, waited)| *waited > 0).count();
    let (samples, sum, max) = engine_waiting;
    println!(
        "{workers} worker(s), {flooded_headers:?}: sim-model (8 clients, 2 places): {} answered, {flooded_waited} waited in the gateway, its engine's queue {:.2} on average, at most {max} \
         (a request arriving waits for the engine's next step); qwen (2 clients, 2 places): {} answered, {other_waited} waited, latency p50 {} ms, p99 {} ms",
        flooded.len(),
        sum as f64 / samples.max(1) as f64,
        other.len(),
        quantile_ms(&mut other_latency, 0.5),
        quantile_ms(&mut other_latency, 0.99),
    );
    assert!(flooded_waited > 0, "the overloaded model's requests waited in the gateway");
    assert_eq!(other_waited, 0, "the other model's requests never waited behind the overloaded model's");
    cluster.assert_plugin_healthy();
}
