//! A pool of IPv6 pods, as dual-stack and IPv6-only clusters have: pool entries, the
//! destination header and the per-pod stats write them `[ip]:port`; the singleton scrapes
//! them through the ORIGINAL_DST metrics cluster and the filter's pick reaches them through
//! the override_host cluster, whose endpoints Envoy holds as `::1` (no brackets).

use std::time::Duration;

use e2e::Cluster;
use launcher::pods::Pod;

const SIM_ARGS: [&str; 2] = ["--time-scale", "0"];

#[test]
fn an_ipv6_pool_is_scraped_routed_and_counted_per_pod() {
    let dir = launcher::paths::run_dir("ipv6").unwrap();
    let pods: Vec<Pod> =
        (0..2).map(|_| Pod::start_on("::1", launcher::free_port().unwrap(), &SIM_ARGS, &dir).unwrap()).collect();
    let cluster = Cluster::in_front_of(pods, dir, |_| {});
    let pool = cluster.pool();
    assert!(pool.iter().all(|address| address.starts_with("[::1]:")), "{pool:?}");
    assert!(
        cluster.envoy.wait_for_healthy_pods(2, Duration::from_secs(15)),
        "the singleton never scraped both IPv6 pods:\n{}",
        cluster.envoy.log_tail(30)
    );

    for i in 0..12 {
        let reply = cluster.complete(&format!("an IPv6 pool, request {i}"));
        assert_eq!(reply.status, 200, "{}", reply.body);
        let pod = cluster.served_by_pool(&reply);
        // Envoy's own record of where it sent the request names the same pod.
        assert_eq!(reply.header("x-gateway-destination-endpoint-served"), Some(pod.as_str()));
    }
    // A client naming another IPv6 address is not obeyed (the header is the filter's).
    let forged = cluster.post(
        "/v1/completions",
        &[("x-gateway-destination-endpoint", "[::1]:9")],
        r#"{"model":"sim-model","prompt":"go elsewhere","max_tokens":4}"#,
    );
    assert_eq!(forged.status, 200, "{}", forged.body);
    cluster.served_by_pool(&forged);

    let picks: f64 =
        pool.iter().map(|pod| cluster.envoy.stat(&format!("wasm_epp_picks{{pod=\"{pod}\"}}")).unwrap_or(0.0)).sum();
    assert_eq!(picks, 13.0, "every pick counted under its pod's bracketed address");
    cluster.assert_plugin_healthy();
}
