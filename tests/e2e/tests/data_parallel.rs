//! Data-parallel ranks end to end: each pod serves on two ports (one engine per rank), the
//! singleton discovers both from `kubernetes.target_ports`, and each rank is its own endpoint
//! with its own scrape, queue and cache.

use std::time::Duration;

use e2e::tally;
use launcher::envoy::EnvoyOptions;
use launcher::fake_kube::envoy::{kubernetes_overlay, start_kube_envoy, write_token_sds, TokenDir};
use launcher::fake_kube::{FakeKube, FakePod};
use launcher::http;
use launcher::pods::Pod;
use serde_json::json;

/// The test's own loopback block (discovery tests use 21..=27, replica discovery 41).
const BLOCK: u8 = 51;
const PODS: usize = 2;

#[test]
fn every_rank_of_every_pod_is_an_endpoint_and_a_busy_rank_is_avoided_alone() {
    let dir = launcher::paths::run_dir("data-parallel").unwrap();
    let ports = [launcher::free_port().unwrap(), launcher::free_port().unwrap()];
    let ranks: Vec<Pod> = (1..=PODS)
        .flat_map(|pod| ports.map(|port| (pod, port)))
        .map(|(pod, port)| Pod::start_on(&format!("127.0.{BLOCK}.{pod}"), port, &["--time-scale", "0"], &dir).unwrap())
        .collect();
    let kube = FakeKube::start("llm").unwrap();
    kube.update(|state| {
        for pod in 1..=PODS {
            state.put_pod(FakePod::ready(&format!("vllm-{pod}"), &format!("127.0.{BLOCK}.{pod}"), &[("app", "vllm")]));
        }
    });
    let tokens = TokenDir::create(&dir.join("serviceaccount"), "token-1").unwrap();
    let sds = dir.join("kubernetes-token-sds.yaml");
    write_token_sds(&sds, &tokens.token_path()).unwrap();
    let kubernetes = json!({"namespace": "llm", "label_selector": "app=vllm", "target_ports": ports,
        "relist_interval_ms": 200, "timeout_ms": 500});
    let mut options =
        EnvoyOptions::for_pool(&[], launcher::free_port().unwrap(), launcher::free_port().unwrap()).with_original_dst();
    options.poller_config = Some(json!({ "kubernetes": kubernetes, "poll_interval_ms": 100 }));
    let overlay = kubernetes_overlay(kube.port(), &sds, tokens.dir());
    let envoy = start_kube_envoy(&options, &overlay, &dir).unwrap_or_else(|e| panic!("envoy: {e}"));
    assert!(envoy.wait_for_healthy_pods(4, Duration::from_secs(15)), "4 ranks:\n{}", envoy.log_tail(30));

    let complete = |prompt: String| {
        let body = json!({"model": "sim-model", "prompt": prompt, "max_tokens": 4}).to_string();
        let reply = http::post(&envoy.url("/v1/completions"), &[], &body, Duration::from_secs(10)).unwrap();
        assert_eq!(reply.status, 200, "{}", reply.body);
        reply.served_by().unwrap_or_default().to_owned()
    };
    let served: Vec<String> = (0..40).map(|i| complete(format!("spread {i}"))).collect();
    let counts = tally(served.iter().map(String::as_str));
    assert_eq!(counts.len(), 4, "every rank of every pod serves: {counts:?}");

    // One rank reports a long queue: its sibling on the same pod keeps serving.
    let busy = &ranks[0];
    busy.set_faults(&json!({"report": {"waiting": 50}})).unwrap();
    e2e::wait_for_pod_gauge(&envoy, "waiting", &busy.address(), 50.0);
    let served: Vec<String> = (0..40).map(|i| complete(format!("avoid {i}"))).collect();
    let counts = tally(served.iter().map(String::as_str));
    assert_eq!(counts.get(&busy.address()), None, "the busy rank got requests: {counts:?}");
    assert!(counts.contains_key(&ranks[1].address()), "its sibling rank still serves: {counts:?}");
}
