//! The Kubernetes liveness probe goes through the filter (`GET /wasm-epp/healthz` on the
//! inference listener, answered by the plugin itself), so it notices a gateway that can no
//! longer route, which Envoy's own `/ready` does not. The crash tests use the TEST-ONLY
//! crash filter (tests/crash-filter), which answers the health path as wasm-epp does.

use std::time::Duration;

use e2e::hostile::{completion_request, raw_exchange};
use e2e::Cluster;

const TIMEOUT: Duration = Duration::from_secs(20);
/// Probes sent at each step; with two workers, both are probed with near certainty.
const PROBES: usize = 10;

fn probe(cluster: &Cluster) -> u16 {
    let request = b"GET /wasm-epp/healthz HTTP/1.1\r\nhost: 10.0.0.1:8080\r\nuser-agent: kube-probe/1.33\r\nconnection: close\r\n\r\n";
    raw_exchange(cluster.envoy.listen_port, request, TIMEOUT).unwrap().status
}

fn ready(cluster: &Cluster) -> u16 {
    launcher::http::get(&cluster.envoy.admin_url("/ready"), TIMEOUT).unwrap().status
}

fn crash_cluster(name: &str, policy: &str) -> Cluster {
    Cluster::start(name, 2, &["--time-scale", "0"], |options| {
        *options = options.clone().with_original_dst();
        options.poller_config = None;
        options.filter_wasm = launcher::paths::crash_filter_wasm();
        options.failure_policy = policy.into();
    })
}

fn crash(cluster: &Cluster) {
    for _ in 0..12 {
        raw_exchange(cluster.envoy.listen_port, &completion_request(b"x-test-crash: 1\r\n", "boom"), TIMEOUT).unwrap();
    }
}

#[test]
fn a_vm_that_cannot_route_fails_liveness_while_ready_stays_200() {
    let cluster = crash_cluster("liveness-closed", "FAIL_CLOSED");
    let before: Vec<u16> = (0..PROBES).map(|_| probe(&cluster)).collect();
    assert!(before.iter().all(|s| *s == 200), "probes before the crash: {before:?}");
    crash(&cluster);
    let after: Vec<u16> = (0..PROBES).map(|_| probe(&cluster)).collect();
    println!("liveness probes after the crash: {after:?}; /ready: {}", ready(&cluster));
    assert!(after.iter().all(|s| *s == 503), "a crashed, fail-closed VM must fail the probe: {after:?}");
    assert_eq!(ready(&cluster), 200, "Envoy's /ready does not notice (why it is not the liveness probe)");
}

#[test]
fn a_reloaded_vm_passes_liveness_again() {
    let cluster = crash_cluster("liveness-reload", "FAIL_RELOAD");
    crash(&cluster);
    // The kubelet probes every 10 s and restarts after 3 failures; the reload takes 0.5 s.
    let recovered = launcher::wait_until(Duration::from_secs(10), || (0..PROBES).all(|_| probe(&cluster) == 200));
    assert!(recovered, "the probe never passed again after the VM was reloaded:\n{}", cluster.envoy.log_tail(20));
}
