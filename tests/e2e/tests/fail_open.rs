//! Without pod data the filter still routes to pool members, and counts it.

use e2e::Cluster;

#[test]
fn unreachable_metrics_fail_open() {
    let cluster = Cluster::start("fail-open-metrics", 2, &["--time-scale", "0"], |options| {
        if let Some(poller) = options.poller_config.as_mut() {
            poller["metrics_path"] = "/no-metrics-here".into();
        }
    });
    std::thread::sleep(std::time::Duration::from_millis(500));
    for i in 0..10 {
        let reply = cluster.complete(&format!("no metrics {i}"));
        assert_eq!(reply.status, 200, "{}", reply.body);
        cluster.served_by_pool(&reply);
    }
    assert!(cluster.envoy.stat("wasm_epp_poll_failure").unwrap_or(0.0) > 0.0);
    assert!(cluster.envoy.stat("wasm_epp_fail_open").unwrap_or(0.0) >= 10.0);
}

#[test]
fn no_singleton_at_all_fails_open_to_the_configured_pool() {
    let cluster = Cluster::start("fail-open-no-singleton", 2, &["--time-scale", "0"], |options| {
        options.poller_config = None;
    });
    let served: Vec<String> =
        (0..20).map(|i| cluster.served_by_pool(&cluster.complete(&format!("alone {i}")))).collect();
    assert_eq!(e2e::tally(served.iter().map(String::as_str)).len(), 2, "both pods used");
    assert!(cluster.envoy.stat("wasm_epp_fail_open").unwrap_or(0.0) >= 20.0);
}
