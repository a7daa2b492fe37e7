//! Flow control across gateway replicas (docs/design.md, "Flow control", "Across gateway
//! replicas"): under a sustained overload, a replica started after the overload began gets a
//! share of the pool's places through the peer messages (each says how many of its workers
//! have requests waiting), instead of its clients waiting out their TTL for 429 while the
//! first replica refills every place it frees. And priority holds across them: a replica
//! whose clients' requests are sheddable leaves the pool to a peer's critical ones.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use e2e::replicas::ReplicaCluster;
use launcher::envoy::EnvoyOptions;
use serde_json::json;

/// Clients per replica, each sending its next request when the last is answered.
const CLIENTS: usize = 8;
/// The pod's places (one pod): the clients of both replicas want four times as many.
const PLACES: u32 = 4;
/// How long the pod takes per request.
const LATENCY_MS: u64 = 200;
/// How long both replicas' clients are measured.
const WINDOW: Duration = Duration::from_secs(6);

fn flow_control(options: &mut EnvoyOptions) {
    // One worker each: the share measured is the replicas', not their workers'.
    options.concurrency = 1;
    options.filter_config["flow_control"] =
        json!({"enabled": true, "max_inflight_per_pod": PLACES, "ttl_ms": 2000, "sheddable_ttl_ms": 2000});
    options.filter_config["fallback_destinations"] = json!(0);
}

#[derive(Default, Debug, Clone, Copy)]
struct Tally {
    ok: usize,
    refused: usize,
}

#[test]
fn a_replica_started_during_an_overload_gets_a_share_of_the_pool() {
    let mut cluster = ReplicaCluster::start("flow-replicas", 1, 2, 1, true, flow_control);
    cluster.pods[0].set_faults(&json!({"extra_latency_ms": LATENCY_MS})).unwrap();
    let ports: Vec<u16> = cluster.plan.ports.iter().map(|p| p.listen).collect();
    let stop = AtomicBool::new(false);
    // Per replica; counted only while `counting`.
    let counting = AtomicBool::new(false);
    let tallies = Mutex::new([Tally::default(); 2]);
    std::thread::scope(|scope| {
        let clients_of = |replica: usize| {
            for client in 0..CLIENTS {
                let (stop, counting, tallies, port) = (&stop, &counting, &tallies, ports[replica]);
                scope.spawn(move || closed_loop_client(port, replica, client, &[], stop, counting, tallies));
            }
        };
        // The overload begins on replica 0, alone: its requests wait.
        clients_of(0);
        cluster.wait_stat(0, "wasm_epp_flow_queued", 20.0);
        // Replica 1 starts (a scale-out, a rolling update's new pod) and peers.
        cluster.start_replica(1);
        cluster.wait_stat(1, "wasm_epp_peers_live", 1.0);
        cluster.wait_stat(0, "wasm_epp_peers_live", 1.0);
        clients_of(1);
        // Its first requests wait: measured once the share has had a few heartbeats to settle.
        std::thread::sleep(Duration::from_secs(2));
        counting.store(true, Ordering::Relaxed);
        let start = Instant::now();
        // Each replica's pool service hears the other's waiting worker.
        for replica in 0..2 {
            let heard =
                launcher::wait_until(WINDOW / 2, || cluster.stat(replica, "wasm_epp_peer_waiting_workers") >= 1.0);
            assert!(heard, "replica {replica} never heard of its peer's waiting worker");
        }
        std::thread::sleep(WINDOW.saturating_sub(start.elapsed()));
        counting.store(false, Ordering::Relaxed);
        stop.store(true, Ordering::Relaxed);
        println!("measured for {} ms", start.elapsed().as_millis());
    });
    let [first, late] = *tallies.lock().unwrap();
    let stat = |replica: usize, name: &str| cluster.stat(replica, name);
    println!(
        "replicas: first {first:?}, late {late:?}; released {} / {}",
        stat(0, "wasm_epp_flow_released"),
        stat(1, "wasm_epp_flow_released"),
    );
    let served = first.ok + late.ok;
    assert!(served >= 40, "the pod served too little to mean anything: {served}");
    // Without the share the late replica's clients got 429 after their TTL for the whole
    // overload (a handful of answers at most); a fair split is half. Peer counts a heartbeat
    // old leave places idle for a while at each change, so the bound sits well below half.
    assert!(
        late.ok as f64 >= 0.25 * served as f64,
        "the late replica got {} of {served} answers ({late:?}; first {first:?})",
        late.ok
    );
    assert!(first.ok as f64 >= 0.25 * served as f64, "the first replica kept a share too: {first:?}");
    cluster.assert_plugins_healthy();
}

#[test]
fn priority_holds_across_replicas_sheddable_requests_on_one_leave_the_pool_to_critical_ones_on_the_other() {
    // Replica 0's clients send critical requests, replica 1's sheddable ones, both more than
    // the pod's places. Held per replica, each kept its half of the pool (the share counts
    // waiting workers, whatever their band); held across replicas, replica 1 leaves the
    // places that free to replica 0's critical requests while they wait.
    let cluster = ReplicaCluster::start("flow-replicas-priority", 1, 2, 2, true, flow_control);
    cluster.pods[0].set_faults(&json!({"extra_latency_ms": LATENCY_MS})).unwrap();
    cluster.wait_stat(0, "wasm_epp_peers_live", 1.0);
    cluster.wait_stat(1, "wasm_epp_peers_live", 1.0);
    let ports: Vec<u16> = cluster.plan.ports.iter().map(|p| p.listen).collect();
    let priorities = ["2", "-1"];
    let stop = AtomicBool::new(false);
    let counting = AtomicBool::new(false);
    let tallies = Mutex::new([Tally::default(); 2]);
    std::thread::scope(|scope| {
        for replica in 0..2 {
            for client in 0..CLIENTS {
                let (stop, counting, tallies, port) = (&stop, &counting, &tallies, ports[replica]);
                let headers = [("x-gateway-inference-priority", priorities[replica])];
                scope.spawn(move || closed_loop_client(port, replica, client, &headers, stop, counting, tallies));
            }
        }
        // Measured once the peers have told each other their bands for a few heartbeats.
        cluster.wait_stat(0, "wasm_epp_flow_queued", 20.0);
        cluster.wait_stat(1, "wasm_epp_flow_queued", 20.0);
        std::thread::sleep(Duration::from_secs(2));
        counting.store(true, Ordering::Relaxed);
        std::thread::sleep(WINDOW);
        counting.store(false, Ordering::Relaxed);
        stop.store(true, Ordering::Relaxed);
    });
    let [critical, sheddable] = *tallies.lock().unwrap();
    println!(
        "priority across replicas: critical {critical:?}, sheddable {sheddable:?}; released {} / {}",
        cluster.stat(0, "wasm_epp_flow_released"),
        cluster.stat(1, "wasm_epp_flow_released"),
    );
    let served = critical.ok + sheddable.ok;
    assert!(served >= 40, "the pod served too little to mean anything: {served}");
    assert_eq!(critical.refused, 0, "no critical request refused: {critical:?}");
    // Held per replica, the sheddable clients got about half the answers. Held across
    // replicas, a few: the places replica 1 held when the critical band began waiting there,
    // and what it releases on a peer message up to a heartbeat old.
    assert!(
        (sheddable.ok as f64) <= 0.2 * served as f64,
        "the sheddable replica got {} of {served} answers ({sheddable:?}; critical {critical:?})",
        sheddable.ok
    );
    cluster.assert_plugins_healthy();
}

/// One client of `replica` (listening on `port`): sends its next request when the last is
/// answered, until `stop`; while `counting`, tallies its 200s and 429s (anything else fails
/// the test).
fn closed_loop_client(
    port: u16,
    replica: usize,
    client: usize,
    headers: &[(&str, &str)],
    stop: &AtomicBool,
    counting: &AtomicBool,
    tallies: &Mutex<[Tally; 2]>,
) {
    let mut sent = 0;
    while !stop.load(Ordering::Relaxed) {
        sent += 1;
        let body = json!({"model": "sim-model", "prompt": format!("r{replica} c{client} {sent}"), "max_tokens": 4});
        let url = format!("http://127.0.0.1:{port}/v1/completions");
        let reply = launcher::http::post(&url, headers, &body.to_string(), e2e::REQUEST_TIMEOUT);
        if !counting.load(Ordering::Relaxed) {
            continue;
        }
        let mut tallies = tallies.lock().unwrap();
        match reply {
            Ok(reply) if reply.status == 200 => tallies[replica].ok += 1,
            Ok(reply) => {
                assert_eq!(reply.status, 429, "replica {replica}: {}", reply.body);
                tallies[replica].refused += 1;
            }
            Err(error) => panic!("replica {replica}: {error}"),
        }
    }
}
