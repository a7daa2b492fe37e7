//! Scale from zero with flow control: the pool (found through a fake Kubernetes API) has no
//! pod at all; requests wait in Envoy instead of failing, are released when a pod turns
//! Ready, and get 503 if none appears within their TTL. Uses 127.0.31.0/24.

use std::time::{Duration, Instant};

use launcher::envoy::EnvoyOptions;
use launcher::fake_kube::envoy::{kubernetes_overlay, start_kube_envoy, write_token_sds, TokenDir};
use launcher::fake_kube::{FakeKube, FakePod};
use launcher::http;
use launcher::pods::Pod;
use serde_json::json;

#[test]
fn requests_wait_for_the_first_pod_and_get_503_if_none_comes() {
    let dir = launcher::paths::run_dir("flow-scale-from-zero").unwrap();
    let port = launcher::free_port().unwrap();
    let pod = Pod::start_on("127.0.31.1", port, &["--time-scale", "0"], &dir).unwrap();
    let kube = FakeKube::start("llm").unwrap();
    // Listed but not Ready: the pool has no pod yet.
    kube.update(|state| {
        let mut fake = FakePod::ready("vllm-1", &pod.host, &[("app", "vllm")]);
        fake.ready = false;
        state.put_pod(fake);
    });
    let tokens = TokenDir::create(&dir.join("serviceaccount"), "token-1").unwrap();
    let sds = dir.join("kubernetes-token-sds.yaml");
    write_token_sds(&sds, &tokens.token_path()).unwrap();
    let kubernetes = json!({"namespace": "llm", "label_selector": "app=vllm", "target_port": port,
        "relist_interval_ms": 200, "timeout_ms": 500});
    let mut options =
        EnvoyOptions::for_pool(&[], launcher::free_port().unwrap(), launcher::free_port().unwrap()).with_original_dst();
    options.filter_config["flow_control"] = json!({"enabled": true, "ttl_ms": 4000});
    options.poller_config = Some(json!({"kubernetes": kubernetes, "poll_interval_ms": 100}));
    let overlay = kubernetes_overlay(kube.port(), &sds, tokens.dir());
    let envoy = start_kube_envoy(&options, &overlay, &dir).unwrap_or_else(|e| panic!("envoy: {e}"));
    // The first list (the pod not Ready) has been taken, so the request meets an empty pool.
    let listed =
        launcher::wait_until(Duration::from_secs(15), || envoy.stat("wasm_epp_discovery_success") >= Some(1.0));
    assert!(listed, "no Kubernetes list succeeded:\n{}", envoy.log_tail(20));
    std::thread::sleep(e2e::TABLE_REACHES_WORKERS);

    let body = json!({"model": "sim-model", "prompt": "first", "max_tokens": 4}).to_string();
    let post = || http::post(&envoy.url("/v1/completions"), &[], &body, Duration::from_secs(30)).unwrap();
    std::thread::scope(|scope| {
        let waiting = scope.spawn(|| {
            let start = Instant::now();
            (post(), start.elapsed())
        });
        std::thread::sleep(Duration::from_millis(1000));
        kube.update(|state| state.update_pod("vllm-1", |p| p.ready = true));
        let (reply, took) = waiting.join().unwrap();
        println!("scale from zero: answered {} after {} ms", reply.status, took.as_millis());
        assert_eq!(reply.status, 200, "released to the pod that appeared: {}", reply.body);
        assert_eq!(reply.served_by(), Some(format!("127.0.31.1:{port}").as_str()));
        assert!(took >= Duration::from_millis(900), "it waited for the pod: {took:?}");
    });

    kube.update(|state| state.update_pod("vllm-1", |p| p.ready = false));
    assert!(
        launcher::wait_until(Duration::from_secs(10), || envoy.stat("wasm_epp_pods_total") == Some(0.0)),
        "the pod never left the pool"
    );
    let start = Instant::now();
    let reply = post();
    println!("no pod: answered {} after {} ms", reply.status, start.elapsed().as_millis());
    assert_eq!(reply.status, 503, "{}", reply.body);
    assert!(start.elapsed() >= Duration::from_millis(4000), "it waited its TTL first");
    assert_eq!(envoy.stat("wasm_epp_flow_dropped{reason=\"no_pods\"}"), Some(1.0));
}
