//! Requests of `n` choices through a real Envoy to simulated pods, which serve them as vLLM
//! does (one child request per choice, each holding a seat of the batch): the picker counts
//! such a request as `n` in flight, for routing and for flow control.

use std::time::Duration;

use e2e::Cluster;
use launcher::http::{self, Reply};
use serde_json::{json, Value};

const SIM: [&str; 2] = ["--time-scale", "0"];

/// `pods` pods answering each request after `latency_ms`, one Envoy worker (its counts are
/// exact at once), `filter` merged into the filter's configuration.
fn start(name: &str, pods: usize, latency_ms: u64, filter: Value) -> Cluster {
    let cluster = Cluster::start_ready_with(name, pods, &SIM, |options| {
        options.concurrency = 1;
        if let (Some(base), Value::Object(extra)) = (options.filter_config.as_object_mut(), filter) {
            base.extend(extra);
        }
    });
    for pod in &cluster.pods {
        pod.set_faults(&json!({"extra_latency_ms": latency_ms})).unwrap();
    }
    cluster
}

fn send(cluster: &Cluster, prompt: &str, n: u32) -> Reply {
    let body = json!({"model": "sim-model", "prompt": prompt, "max_tokens": 4, "n": n}).to_string();
    http::post(&cluster.envoy.url("/v1/completions"), &[], &body, Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("request failed: {e}\n{}", cluster.envoy.log_tail(20)))
}

#[test]
fn requests_sent_while_a_pod_runs_eight_samples_go_to_the_other_pod() {
    let cluster = start("n-burst", 2, 1_500, json!({"fallback_destinations": 0}));
    let cluster = &cluster;
    std::thread::scope(|scope| {
        let rollout = scope.spawn(|| {
            let reply = send(cluster, "a rollout of eight samples", 8);
            assert_eq!(reply.status, 200, "{}", reply.body);
            let choices = serde_json::from_str::<Value>(&reply.body).unwrap()["choices"].as_array().unwrap().len();
            assert_eq!(choices, 8, "the pod served 8 choices");
            cluster.served_by_pool(&reply)
        });
        cluster.wait_for_stat("wasm_epp_requests_routed", 1.0);
        let mut singles = Vec::new();
        for i in 0..4 {
            let before = cluster.stat("wasm_epp_requests_routed");
            singles.push(scope.spawn(move || {
                let reply = send(cluster, &format!("single request {i}"), 1);
                assert_eq!(reply.status, 200, "{}", reply.body);
                cluster.served_by_pool(&reply)
            }));
            // Each is counted before the next is sent (all of them still in flight).
            cluster.wait_for_stat("wasm_epp_requests_routed", before + 1.0);
        }
        let busy = rollout.join().unwrap();
        let served: Vec<String> = singles.into_iter().map(|s| s.join().unwrap()).collect();
        assert!(
            served.iter().all(|pod| *pod != busy),
            "the pod running 8 samples counts 8 in flight, the other at most 3: {served:?} (busy {busy})"
        );
    });
    for pod in cluster.pool() {
        let gauge = format!("wasm_epp_pod_inflight{{pod=\"{pod}\"}}");
        let released = launcher::wait_until(Duration::from_secs(5), || cluster.envoy.stat(&gauge) == Some(0.0));
        assert!(released, "{gauge} = {:?} after every answer", cluster.envoy.stat(&gauge));
    }
    cluster.assert_plugin_healthy();
}

#[test]
fn with_flow_control_eight_samples_fill_a_pod_of_eight_places_and_the_next_request_waits() {
    let flow = json!({"enabled": true, "max_inflight_per_pod": 8, "ttl_ms": 10_000});
    let cluster = start("n-flow", 1, 1_000, json!({"fallback_destinations": 0, "flow_control": flow}));
    std::thread::scope(|scope| {
        let rollout = scope.spawn(|| {
            let reply = send(&cluster, "a rollout of eight samples", 8);
            assert_eq!(reply.status, 200, "{}", reply.body);
            reply
        });
        cluster.wait_for_stat("wasm_epp_flow_dispatched_directly", 1.0);
        let single = scope.spawn(|| send(&cluster, "one more", 1));
        cluster.wait_for_stat("wasm_epp_flow_queued", 1.0);
        assert_eq!(cluster.stat("wasm_epp_flow_dispatched_directly"), 1.0, "the 8 places are taken");
        let rollout = rollout.join().unwrap();
        let single = single.join().unwrap();
        assert_eq!(single.status, 200, "{}", single.body);
        let waited: u64 = single.header("x-llm-d-flow-queue-duration-ms").and_then(|v| v.parse().ok()).unwrap_or(0);
        assert!(waited >= 500, "it waited for the 8 samples to end: {waited} ms");
        assert!(rollout.status == 200);
    });
    assert_eq!(cluster.stat("wasm_epp_flow_released"), 1.0);
    cluster.assert_plugin_healthy();
}

#[test]
fn with_flow_control_samples_wait_for_one_pod_with_places_for_them_not_for_as_many_across_the_pool() {
    let flow = json!({"enabled": true, "max_inflight_per_pod": 8, "ttl_ms": 20_000});
    // Long enough for the ten to be sent, each counted before the next, while all run.
    let cluster = start("n-fit", 2, 5_000, json!({"fallback_destinations": 0, "flow_control": flow}));
    let cluster = &cluster;
    std::thread::scope(|scope| {
        // Ten singles, five on each pod: 3 places free on each, 6 in the pool.
        let singles: Vec<_> = (0..10)
            .map(|i| {
                let single = scope.spawn(move || send(cluster, &format!("single request {i}"), 1));
                cluster.wait_for_stat("wasm_epp_flow_dispatched_directly", f64::from(i + 1));
                single
            })
            .collect();
        for pod in cluster.pool() {
            let gauge = format!("wasm_epp_pod_inflight{{pod=\"{pod}\"}}");
            let five = launcher::wait_until(Duration::from_secs(2), || cluster.envoy.stat(&gauge) == Some(5.0));
            assert!(five, "{gauge} = {:?}: the singles are spread", cluster.envoy.stat(&gauge));
        }
        let four = scope.spawn(|| send(cluster, "a rollout of four samples", 4));
        cluster.wait_for_stat("wasm_epp_flow_queued", 1.0);
        assert_eq!(cluster.stat("wasm_epp_flow_dispatched_directly"), 10.0, "4 samples fit on neither pod");
        for single in singles {
            assert_eq!(single.join().unwrap().status, 200);
        }
        let four = four.join().unwrap();
        assert_eq!(four.status, 200, "{}", four.body);
        let waited: u64 = four.header("x-llm-d-flow-queue-duration-ms").and_then(|v| v.parse().ok()).unwrap_or(0);
        assert!(waited >= 1_000, "it waited for a pod's singles to end: {waited} ms");
    });
    assert_eq!(cluster.stat("wasm_epp_flow_released"), 1.0);
    cluster.assert_plugin_healthy();
}
