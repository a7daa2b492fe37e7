//! The live comparison with a baseline (`comparison`) through a real Envoy: each arm routes
//! on its own pods, and Envoy exports each arm's requests and time histograms labelled by the
//! bootstrap's `arm` and `le` rules, as Prometheus and the dashboard read them.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use e2e::Cluster;

#[test]
fn each_arm_routes_on_its_own_pods_and_its_answers_are_counted_and_timed() {
    let cluster = Cluster::start_ready_with("comparison", 4, &["--time-scale", "0.2"], |options| {
        options.filter_config["comparison"] = serde_json::json!({"baseline_share": 0.5});
        options.filter_config["debug_decision_header"] = serde_json::json!(true);
    });
    let mut pods_of: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut streamed: BTreeMap<String, f64> = BTreeMap::new();
    for i in 0..40 {
        // A few shared documents, streamed and whole answers alternating.
        let stream = i % 2 == 0;
        let prompt =
            format!("{} question {i}", "shared document number {} ".repeat(30).replace("{}", &(i % 3).to_string()));
        let body = serde_json::json!({"model": "sim-model", "prompt": prompt, "max_tokens": 8, "stream": stream});
        let reply = cluster.post("/v1/completions", &[], &body.to_string());
        assert_eq!(reply.status, 200, "{}", reply.body);
        let decision = reply.header("x-wasm-epp-decision").unwrap_or_default().to_owned();
        let arm = decision.split("; arm=").nth(1).unwrap_or_else(|| panic!("no arm: {decision}")).to_owned();
        pods_of.entry(arm.clone()).or_default().insert(cluster.served_by_pool(&reply));
        if stream {
            assert!(reply.body.contains("data: [DONE]"), "{}", reply.body);
            *streamed.entry(arm).or_default() += 1.0;
        }
    }
    let (picker, baseline) = (&pods_of["picker"], &pods_of["baseline"]);
    assert!(picker.len() <= 2 && baseline.len() <= 2 && picker.is_disjoint(baseline), "{pods_of:?}");
    // Stats reach Envoy on the worker's tick, and a stream's end (its duration) may come
    // after the client has its last byte: wait for every answer to be counted.
    let ended = |arm: &str| cluster.envoy.stat(&format!("wasm_epp_comparison_duration_ms_count{{arm=\"{arm}\"}}"));
    launcher::wait_until(Duration::from_secs(5), || {
        ended("picker").unwrap_or(0.0) + ended("baseline").unwrap_or(0.0) == 40.0
    });
    let routed: f64 = ["picker", "baseline"]
        .iter()
        .map(|arm| {
            let series = format!("wasm_epp_comparison_requests{{arm=\"{arm}\"}}");
            let count = cluster.envoy.stat(&series).unwrap_or_else(|| panic!("{series} not exported"));
            // Each stream's first byte, in the histogram's buckets as Prometheus reads them.
            let streams = streamed.get(*arm).copied().unwrap_or(0.0);
            // Envoy puts the tags in its rules' order: le, then arm.
            let first_bytes = format!("wasm_epp_comparison_first_byte_ms_bucket{{le=\"+Inf\",arm=\"{arm}\"}}");
            assert_eq!(cluster.envoy.stat(&first_bytes), Some(streams), "{first_bytes}");
            assert_eq!(ended(arm), Some(count), "{arm}: every answer ended");
            count
        })
        .sum();
    assert_eq!(routed, 40.0);
    let errors = cluster.envoy.stat("wasm_epp_comparison_errors{arm=\"baseline\"}");
    assert_eq!(errors, Some(0.0), "exported at 0");
    cluster.assert_plugin_healthy();
}

/// Two replicas, no peering: each splits the pool alike and draws a conversation's arm alike,
/// so its turns stay in one arm and on that arm's pods whichever replica they pass through.
#[test]
fn replicas_split_the_pool_and_draw_each_conversation_alike() {
    let cluster = e2e::replicas::ReplicaCluster::start("comparison-replicas", 4, 2, 2, false, |options| {
        options.filter_config["comparison"] = serde_json::json!({"baseline_share": 0.5});
        options.filter_config["debug_decision_header"] = serde_json::json!(true);
    });
    let mut arm_of_pod: BTreeMap<String, String> = BTreeMap::new();
    let mut arms_seen = BTreeSet::new();
    for conversation in 0..12 {
        let mut messages = vec![
            serde_json::json!({"role": "system", "content": "You are brief."}),
            serde_json::json!({"role": "user", "content": format!("Conversation {conversation}: plan a trip")}),
        ];
        let mut arms = BTreeSet::new();
        for turn in 0..4 {
            // Turns alternate between the replicas, as a client behind a round-robin front would.
            let envoy = cluster.replica(turn % 2);
            let body = serde_json::json!({"model": "sim-model", "messages": messages, "max_tokens": 4});
            let reply =
                launcher::http::post(&envoy.url("/v1/chat/completions"), &[], &body.to_string(), e2e::REQUEST_TIMEOUT)
                    .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(reply.status, 200, "{}", reply.body);
            let decision = reply.header("x-wasm-epp-decision").unwrap_or_default();
            let arm = decision.split("; arm=").nth(1).unwrap_or_else(|| panic!("no arm: {decision}")).to_owned();
            let pod = reply.served_by().unwrap_or_default().to_owned();
            // A pod is in one arm, as both replicas see it.
            let known = arm_of_pod.entry(pod.clone()).or_insert_with(|| arm.clone());
            assert_eq!(*known, arm, "pod {pod} in two arms");
            arms.insert(arm);
            messages.push(serde_json::json!({"role": "assistant", "content": format!("answer {turn}")}));
            messages.push(serde_json::json!({"role": "user", "content": format!("and then {turn}?")}));
        }
        assert_eq!(arms.len(), 1, "conversation {conversation} changed arms: {arms:?}");
        arms_seen.extend(arms);
    }
    assert_eq!(arms_seen.len(), 2, "12 conversations use both arms");
    cluster.assert_plugins_healthy();
}
