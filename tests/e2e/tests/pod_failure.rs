//! A stopped pod leaves the rotation within a few poll periods and returns when it does.

use std::time::{Duration, Instant};

use e2e::Cluster;

#[test]
fn a_stopped_pod_leaves_the_rotation_and_comes_back() {
    // Five failed scrapes (~0.5 s) before a dead pod leaves: room for the requests sent right
    // after the kill to meet it first, on a loaded machine too. The pool service's view is
    // tested here: outlier detection (tests/faults.rs) would eject the pod those requests fail
    // on for 10 s, past its restart.
    let mut owned = Cluster::start_ready_with("pod-failure", 3, &["--time-scale", "0"], |options| {
        if let Some(poller) = options.poller_config.as_mut() {
            poller["unhealthy_after_failures"] = 5.into();
        }
        options.filter_config["outlier_detection"] = serde_json::json!({"enabled": false});
    });
    let cluster = &mut owned;
    let poll_start = cluster.envoy.stat("wasm_epp_poll_success").unwrap_or(0.0);
    let started = Instant::now();
    std::thread::sleep(Duration::from_secs(2));
    let polls = cluster.envoy.stat("wasm_epp_poll_success").unwrap_or(0.0) - poll_start;
    let poll_period_ms = started.elapsed().as_millis() as f64 * 3.0 / polls.max(1.0);
    eprintln!("MEASURED poll period per pod: {poll_period_ms:.0} ms ({polls} scrapes of 3 pods in 2 s)");

    let victim = cluster.pods[0].address();
    // The others report a short queue, so the victim is every pick's first choice until it
    // leaves: idle pods tie, and 10 random picks missed it in a few runs in a hundred, which
    // then tested no retry at all.
    for pod in &cluster.pods[1..] {
        pod.set_faults(&serde_json::json!({"report": {"waiting": 2}})).unwrap();
        e2e::wait_for_pod_gauge(&cluster.envoy, "waiting", &pod.address(), 2.0);
    }
    let pool_stat = |cluster: &Cluster, name: &str| {
        cluster.envoy.stat(&format!("envoy_cluster_{name}{{envoy_cluster_name=\"pool\"}}")).unwrap_or(0.0)
    };
    let (refused_before, retried_before) =
        (pool_stat(cluster, "upstream_cx_connect_fail"), pool_stat(cluster, "upstream_rq_retry"));
    cluster.pods[0].kill();
    let killed = Instant::now();
    let shared = &*cluster;
    let (left, removal_ms) = std::thread::scope(|scope| {
        // Before the singleton notices, Envoy retries connection failures on the filter's
        // fallback choices (override_host): no request is lost to the dead pod.
        let requests = scope.spawn(|| {
            for i in 0..10 {
                let reply = shared.complete(&format!("right after kill {i}"));
                assert_eq!(reply.status, 200, "request {i} right after the kill failed: {}", reply.body);
                assert_ne!(shared.served_by_pool(&reply), victim);
            }
        });
        let left =
            launcher::wait_until(Duration::from_secs(5), || shared.envoy.stat("wasm_epp_pods_healthy") == Some(2.0));
        let removal_ms = killed.elapsed().as_millis();
        requests.join().unwrap();
        (left, removal_ms)
    });
    assert!(left, "the dead pod is still counted healthy after 5 s");
    eprintln!("MEASURED time for a killed pod to leave the rotation: {removal_ms} ms");
    let refused = pool_stat(cluster, "upstream_cx_connect_fail") - refused_before;
    let retried = pool_stat(cluster, "upstream_rq_retry") - retried_before;
    assert!(refused >= 1.0 && retried >= 1.0, "the dead pod was tried ({refused} refused) and retried ({retried})");

    for i in 0..30 {
        let reply = cluster.complete(&format!("after kill {i}"));
        assert_eq!(reply.status, 200, "request {i} failed after the pod left: {}", reply.body);
        assert_ne!(cluster.served_by_pool(&reply), victim);
    }

    let back = Instant::now();
    cluster.pods[0].restart().unwrap();
    assert!(cluster.envoy.wait_for_healthy_pods(3, Duration::from_secs(5)), "the pod did not come back");
    eprintln!("MEASURED time for a restarted pod to rejoin: {} ms", back.elapsed().as_millis());
    let served: Vec<String> =
        (0..40).map(|i| cluster.served_by_pool(&cluster.complete(&format!("back {i}")))).collect();
    assert!(served.contains(&victim), "the restarted pod is used again");
}
