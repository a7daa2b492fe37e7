//! Requests spread over the pool, avoid a pod with a long queue, and a burst spreads.

use e2e::{tally, wait_for_pod_gauge, Cluster};

#[test]
fn sequential_requests_spread_over_every_pod() {
    let cluster = Cluster::start_ready_with("spread", 4, &["--time-scale", "0"], |options| {
        options.filter_config["debug_decision_header"] = serde_json::json!(true);
    });
    let replies: Vec<_> = (0..60).map(|i| cluster.complete(&format!("hello {i}"))).collect();
    let served: Vec<String> = replies.iter().map(|reply| cluster.served_by_pool(reply)).collect();
    let counts = tally(served.iter().map(String::as_str));
    // What each pod says of itself and why each pick went where it did, should this fail.
    let explain = || {
        let pods: Vec<String> = cluster
            .pods
            .iter()
            .map(|pod| format!("{}: faults {:?} stats {:?}", pod.address(), pod.faults(), pod.stats()))
            .collect();
        let decisions: Vec<&str> = replies.iter().filter_map(|r| r.header("x-wasm-epp-decision")).collect();
        format!("{counts:?}\n{}\n{}", pods.join("\n"), decisions.join("\n"))
    };
    assert_eq!(counts.len(), 4, "every pod serves some: {}", explain());
    assert!(counts.values().all(|&n| n >= 5), "ties break at random, not by order: {}", explain());
}

#[test]
fn a_pod_reporting_a_long_queue_is_avoided() {
    let cluster = Cluster::start_ready("long-queue", 4, &["--time-scale", "0"]);
    let busy = &cluster.pods[0];
    busy.set_faults(&serde_json::json!({"report": {"waiting": 50}})).unwrap();
    wait_for_pod_gauge(&cluster.envoy, "waiting", &busy.address(), 50.0);
    let served: Vec<String> = (0..40).map(|i| cluster.served_by_pool(&cluster.complete(&format!("q {i}")))).collect();
    let counts = tally(served.iter().map(String::as_str));
    assert_eq!(counts.get(&busy.address()), None, "the pod with 50 waiting got requests: {counts:?}");
    busy.clear_faults().unwrap();
    wait_for_pod_gauge(&cluster.envoy, "waiting", &busy.address(), 0.0);
    let served: Vec<String> = (0..40).map(|i| cluster.served_by_pool(&cluster.complete(&format!("r {i}")))).collect();
    assert!(served.contains(&busy.address()), "the pod is used again once its queue clears");
}

#[test]
fn a_concurrent_burst_does_not_pile_onto_one_pod() {
    // Each request takes ~1 s at the pod, so all 16 are in flight at once and the polled
    // metrics cannot help: only the shared in-flight counts spread them.
    let cluster = Cluster::start_ready("burst", 4, &["--time-scale", "0"]);
    for pod in &cluster.pods {
        pod.set_faults(&serde_json::json!({"extra_latency_ms": 1000})).unwrap();
    }
    let served: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..16)
            .map(|i| {
                let cluster = &cluster;
                scope.spawn(move || cluster.served_by_pool(&cluster.complete(&format!("burst {i}"))))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let counts = tally(served.iter().map(String::as_str));
    assert_eq!(counts.len(), 4, "{counts:?}");
    assert!(counts.values().all(|&n| n <= 6), "a burst of 16 over 4 pods stays near 4 each: {counts:?}");
}
