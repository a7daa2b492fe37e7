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

/// Fail open is bounded in time: once the pool service has not run for
/// `fail_open_max_age_ms`, the last table's pods are no longer trusted. A singleton that
/// ticks only every 4 s against a 1 s bound shows both sides of the bound on a real Envoy.
#[test]
fn fail_open_ends_when_the_pool_service_is_silent_too_long() {
    let cluster = Cluster::start("fail-open-expiry", 2, &["--time-scale", "0"], |options| {
        options.filter_config = serde_json::json!({"fail_open_max_age_ms": 1000, "fallback_destinations": 0});
        if let Some(poller) = options.poller_config.as_mut() {
            poller["poll_interval_ms"] = 4000.into();
        }
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let (mut routed, mut expired) = (0, 0);
    while std::time::Instant::now() < deadline && (routed == 0 || expired == 0) {
        let reply = cluster.complete("bounded fail open");
        match reply.status {
            200 => {
                cluster.served_by_pool(&reply);
                routed += 1;
            }
            // Before the first table (no static pool here) there is no pod at all yet.
            503 if routed == 0 && reply.body.contains("no pod in the pool") => {}
            503 => {
                assert!(reply.body.contains("pod data expired"), "{}", reply.body);
                assert_eq!(reply.served_by(), None, "no pod saw it");
                expired += 1;
            }
            other => panic!("unexpected {other}: {}", reply.body),
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(routed > 0 && expired > 0, "routed {routed}, expired {expired}");
    assert!(cluster.envoy.stat("wasm_epp_fail_open_expired").unwrap_or(0.0) >= 1.0);
}
