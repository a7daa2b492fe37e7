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
