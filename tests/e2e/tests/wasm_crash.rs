//! After a Wasm VM crash: the shipped failure policy (FAIL_RELOAD) routes again through a
//! fresh VM, and under any policy a client's destination headers stay harmless because
//! Envoy's header_mutation filter removes them before the plugin runs.
//!
//! wasm-epp must never crash, so a TEST-ONLY filter (tests/crash-filter) that panics on
//! `x-test-crash: 1` takes its place in the same filter-chain position.

use std::time::{Duration, Instant};

use e2e::hostile::{completion_request, raw_exchange, wasm_stats, Canary};
use e2e::Cluster;
use launcher::envoy::EnvoyOptions;

const TIMEOUT: Duration = Duration::from_secs(20);
/// Crash requests sent, each on its own connection: with two workers and the kernel
/// spreading connections, this crashes both VMs with near certainty.
const CRASHES: usize = 12;
/// Requests in a row that must route once the VM has been replaced.
const IN_A_ROW: usize = 20;

fn crash_cluster(name: &str, policy: &str, original_dst: bool) -> Cluster {
    Cluster::start(name, 2, &["--time-scale", "0"], |options: &mut EnvoyOptions| {
        if original_dst {
            *options = options.clone().with_original_dst();
        }
        options.poller_config = None;
        options.filter_wasm = launcher::paths::crash_filter_wasm();
        options.failure_policy = policy.into();
    })
}

/// Crashes the VMs. Under fail-open a request reaching an already dead VM skips the
/// filter (and is served), so only the other policies must answer every one with 503.
fn crash_all_workers(cluster: &Cluster, fail_open: bool) {
    for _ in 0..CRASHES {
        let reply =
            raw_exchange(cluster.envoy.listen_port, &completion_request(b"x-test-crash: 1\r\n", "boom"), TIMEOUT)
                .unwrap_or_else(|e| panic!("crash request got no answer: {e}"));
        assert!(fail_open || reply.status == 503, "a crashed request was served: {reply:?}");
    }
    assert!(
        cluster.envoy.log().contains("crash-filter: crashed"),
        "the VM did not crash:\n{}",
        cluster.envoy.log_tail(30)
    );
}

/// `IN_A_ROW` requests in a row from pool pods, waiting up to `limit` for the first.
fn routes_again_within(cluster: &Cluster, limit: Duration) -> Option<Duration> {
    let started = Instant::now();
    let mut in_a_row = 0;
    while started.elapsed() < limit {
        let reply = raw_exchange(cluster.envoy.listen_port, &completion_request(b"", "again?"), TIMEOUT).unwrap();
        let served = reply.header("x-served-by").map(str::to_string);
        if reply.status == 200 && served.is_some_and(|pod| cluster.pool().contains(&pod)) {
            in_a_row += 1;
            if in_a_row == IN_A_ROW {
                return Some(started.elapsed());
            }
        } else {
            // Fail closed while the VM waits for its reload: 503, never another destination.
            assert_eq!(reply.status, 503, "{reply:?}");
            in_a_row = 0;
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    None
}

#[test]
fn fail_reload_replaces_a_crashed_vm_and_routes_again() {
    let cluster = crash_cluster("crash-reload", "FAIL_RELOAD", true);
    assert!(routes_again_within(&cluster, Duration::from_secs(5)).is_some(), "routing before the crash");
    crash_all_workers(&cluster, false);
    let recovered = routes_again_within(&cluster, Duration::from_secs(15));
    println!("wasm stats after the crash:\n{}", wasm_stats(&cluster.envoy));
    let recovered = recovered.unwrap_or_else(|| panic!("no recovery:\n{}", cluster.envoy.log_tail(30)));
    println!("{IN_A_ROW} requests in a row routed {recovered:?} after the last crash");
    let reloads = e2e::hostile::admin_stat(&cluster.envoy, "wasm.wasm-epp.vm_reload_success").unwrap_or(0.0);
    assert!(reloads >= 1.0, "no VM reload counted:\n{}", wasm_stats(&cluster.envoy));
}

#[test]
fn fail_closed_stays_down_after_a_crash() {
    // The contrast: without reload, a crashed worker answers 503 until Envoy restarts.
    let cluster = crash_cluster("crash-closed", "FAIL_CLOSED", true);
    crash_all_workers(&cluster, false);
    std::thread::sleep(Duration::from_secs(2));
    let statuses: Vec<u16> = (0..10)
        .map(|_| raw_exchange(cluster.envoy.listen_port, &completion_request(b"", "down?"), TIMEOUT).unwrap().status)
        .collect();
    assert!(statuses.contains(&503), "FAIL_CLOSED recovered by itself? {statuses:?}");
}

/// Every header naming a destination, pointed at the canary.
fn forged_headers(canary: &str, configured: &str) -> Vec<u8> {
    let mut headers = String::new();
    for name in [configured, "x-gateway-destination-endpoint", "x-envoy-original-dst-host", "x-prefiller-host-port"] {
        headers.push_str(&format!("{name}: {canary}\r\n"));
    }
    headers.into_bytes()
}

#[test]
fn fail_open_with_a_crashed_vm_never_follows_a_client_header() {
    for original_dst in [false, true] {
        let cluster = crash_cluster(&format!("crash-open-{original_dst}"), "FAIL_OPEN", original_dst);
        let canary = Canary::start();
        crash_all_workers(&cluster, true);
        let mut statuses = Vec::new();
        for _ in 0..20 {
            let forged = forged_headers(&canary.address, "x-gateway-destination-endpoint");
            let reply = raw_exchange(cluster.envoy.listen_port, &completion_request(&forged, "take me there"), TIMEOUT)
                .unwrap();
            statuses.push(reply.status);
        }
        std::thread::sleep(Duration::from_millis(300));
        println!("original_dst={original_dst}: statuses with the VM down and forged headers: {statuses:?}");
        assert_eq!(canary.hits(), 0, "original_dst={original_dst}: the canary was reached");
    }
}
