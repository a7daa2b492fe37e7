//! Several gateway replicas routing as one (docs/design.md, "Several gateway replicas"):
//! real Envoys sharing decisions over their peer listeners. A prefix learned through one
//! replica is followed through another; a replica started late catches up from a snapshot;
//! a restarted pod's epoch is respected across replicas; without peering, rendezvous
//! placement still makes replicas agree on new prefixes.

use std::time::Duration;

use e2e::replicas::{least_recent, prompt, ReplicaCluster};

#[test]
fn a_prefix_routed_through_one_replica_is_followed_through_another() {
    // least_recent: without the peer messages, replica 1 would place these on its own.
    let cluster = ReplicaCluster::start("replicas-follow", 4, 2, 2, true, least_recent);
    let groups = 8;
    let homes: Vec<String> = (0..groups).map(|g| cluster.served_via(0, &prompt(g, 0))).collect();
    cluster.wait_stat(0, "wasm_epp_peer_events_sent", groups as f64);
    let received = cluster.wait_stat(1, "wasm_epp_peer_events_received", groups as f64);
    let affinity_before = cluster.stat(1, "wasm_epp_affinity_picks");
    for (group, home) in homes.iter().enumerate() {
        for suffix in 1..4 {
            let pod = cluster.served_via(1, &prompt(group, suffix));
            assert_eq!(&pod, home, "group {group}: replica 1 sent it to {pod}, replica 0 had put it on {home}");
        }
    }
    let affinity = cluster.stat(1, "wasm_epp_affinity_picks") - affinity_before;
    assert!(affinity >= (groups * 3) as f64, "replica 1 made {affinity} affinity picks");
    assert!(cluster.stat(0, "wasm_epp_peer_messages_sent") > 0.0 && cluster.stat(1, "wasm_epp_peers_live") >= 1.0);
    // Each replica lists itself among its peers (as a label selector would); the first
    // answer from its own listener names it, and it sends there no more.
    for replica in 0..2 {
        assert_eq!(cluster.wait_stat(replica, "wasm_epp_peer_self_listed", 1.0), 1.0, "replica {replica}");
    }
    let spread = e2e::tally(homes.iter().map(String::as_str));
    eprintln!(
        "MEASURED replica 1 received {received} decisions; homes {spread:?}; lag {} ms",
        cluster.stat(1, "wasm_epp_peer_lag_ms")
    );
    cluster.assert_plugins_healthy();
}

#[test]
fn a_replica_started_later_catches_up_from_a_snapshot() {
    let mut cluster = ReplicaCluster::start("replicas-catch-up", 4, 3, 2, true, least_recent);
    let groups = 6;
    let homes: Vec<String> = (0..groups).map(|g| cluster.served_via(0, &prompt(g, 0))).collect();
    cluster.wait_stat(1, "wasm_epp_peer_events_received", groups as f64);
    // Replica 2 was listed but down: its peers skipped or failed their sends to it.
    cluster.wait_stat(0, "wasm_epp_peer_messages_sent", 1.0);
    cluster.start_replica(2);
    let learned = cluster.wait_stat(2, "wasm_epp_peer_snapshot_events", 1.0);
    for (group, home) in homes.iter().enumerate() {
        let pod = cluster.served_via(2, &prompt(group, 1));
        assert_eq!(&pod, home, "group {group}: the late replica sent it to {pod}, not {home}");
    }
    eprintln!("MEASURED the late replica learned {learned} decisions from a snapshot");
    cluster.assert_plugins_healthy();
}

#[test]
fn a_restarted_pod_loses_what_peers_taught_about_it() {
    let cluster = ReplicaCluster::start("replicas-epoch", 3, 2, 2, true, least_recent);
    let home = cluster.served_via(0, &prompt(40, 0));
    cluster.wait_stat(1, "wasm_epp_peer_events_received", 1.0);
    let before = cluster.stat(1, "wasm_epp_affinity_picks");
    assert_eq!(cluster.served_via(1, &prompt(40, 1)), home);
    assert_eq!(cluster.stat(1, "wasm_epp_affinity_picks"), before + 1.0, "warm on replica 1 before the restart");
    let pod = cluster.pods.iter().find(|p| p.address() == home).unwrap();
    let dropped_before = cluster.stat(1, "wasm_epp_pod_caches_dropped");
    let reply = launcher::http::post(&pod.url("/sim/restart"), &[], "{}", Duration::from_secs(5)).unwrap();
    assert_eq!(reply.status, 200, "{}", reply.body);
    // Replica 1's pool service sees the counters go back on a next scrape (every 100 ms).
    cluster.wait_stat(1, "wasm_epp_pod_caches_dropped", dropped_before + 1.0);
    std::thread::sleep(e2e::TABLE_REACHES_WORKERS);
    let before = cluster.stat(1, "wasm_epp_affinity_picks");
    cluster.served_via(1, &prompt(40, 2));
    assert_eq!(cluster.stat(1, "wasm_epp_affinity_picks"), before, "replica 1 kept a peer's decision past the restart");
}

#[test]
fn without_peering_rendezvous_places_new_prefixes_alike_on_both_replicas() {
    let cluster = ReplicaCluster::start("replicas-rendezvous", 4, 2, 2, false, |_| {});
    let groups = 16;
    let agreeing = (0..groups)
        .filter(|&g| {
            let first = cluster.served_via(0, &prompt(100 + g, 0));
            first == cluster.served_via(1, &prompt(100 + g, 1))
        })
        .count();
    eprintln!(
        "MEASURED without peering, {agreeing} of {groups} new prefixes went to the same pod through both replicas"
    );
    // Requests are one at a time, so load never skips a pod; a clear majority, not all.
    assert!(agreeing * 4 >= groups * 3, "only {agreeing} of {groups} agreed");
    assert_eq!(cluster.stat(0, "wasm_epp_peer_messages_sent"), 0.0, "no peering configured");
}
