//! Several pools behind one Envoy (docs/deployment.md, "Several pools behind one Envoy"): each
//! pool has its own singleton and filter (`vm_id` `wasm-epp-<name>`), cluster and route, and
//! the route runs its own pool's filter only. Both pools here serve the same model, so only
//! the route keeps them apart: a request is picked among its route's pods, a forged
//! destination naming the other pool's pod changes nothing, each pool's stats carry its
//! `pool` label (its gauges are not overwritten by the other's), and a pool that loses every
//! pod leaves the other serving. With two replicas peering, each pool shares its decisions
//! with the same pool of the other replica (its own path on the peer listener) and with it
//! only.

use std::time::Duration;

use e2e::replicas::prompt;
use e2e::REQUEST_TIMEOUT;
use launcher::envoy::{Envoy, EnvoyOptions, ServedPool};
use launcher::http::{self, Reply};
use launcher::pods::{start_pool, Pod};
use launcher::replicas::ReplicaPlan;

/// The request header the two routes match on (any route match works; this one is simple).
const POOL_HEADER: &str = "x-pool";

fn addresses(pods: &[Pod]) -> Vec<String> {
    pods.iter().map(Pod::address).collect()
}

fn complete(envoy: &Envoy, pool: Option<&str>, extra: &[(&str, &str)], prompt: &str) -> Reply {
    let body = serde_json::json!({"model": "sim-model", "prompt": prompt, "max_tokens": 2});
    let mut headers: Vec<(&str, &str)> = extra.to_vec();
    if let Some(pool) = pool {
        headers.push((POOL_HEADER, pool));
    }
    http::post(&envoy.url("/v1/completions"), &headers, &body.to_string(), REQUEST_TIMEOUT)
        .unwrap_or_else(|e| panic!("POST failed: {e}\n{}", envoy.log_tail(20)))
}

/// A run folder and two pools of two simulated pods each.
fn two_pools_of_pods(name: &str) -> (std::path::PathBuf, [Vec<Pod>; 2]) {
    let dir = launcher::paths::run_dir(name).unwrap_or_else(|e| panic!("run dir: {e}"));
    let pods = || start_pool(2, &["--time-scale", "0"], &dir).unwrap_or_else(|e| panic!("pods: {e}"));
    let pools = [pods(), pods()];
    (dir, pools)
}

fn pool_stat(envoy: &Envoy, name: &str, pool: &str) -> Option<f64> {
    envoy.stat(&format!("{name}{{pool=\"{pool}\"}}"))
}

#[test]
fn each_route_picks_among_its_own_pool_and_keeps_its_own_stats() {
    let (dir, [alpha_pods, beta_pods]) = two_pools_of_pods("several_pools");
    let (alpha, beta) = (addresses(&alpha_pods), addresses(&beta_pods));
    let listen = launcher::free_port().unwrap_or_else(|e| panic!("port: {e}"));
    let admin = launcher::free_port().unwrap_or_else(|e| panic!("port: {e}"));
    let mut pools =
        vec![ServedPool::by_header("alpha", &alpha, POOL_HEADER), ServedPool::by_header("beta", &beta, POOL_HEADER)];
    // Flow control's and learning's stats defined in one pool too, so the check below sees
    // them with a pool in front (k8s/tools/validate.py checks each rule on sample names).
    for feature in ["flow_control", "learning"] {
        pools[0].filter_config[feature] = serde_json::json!({ "enabled": true });
    }
    let envoy =
        Envoy::start(&EnvoyOptions::for_pools(pools, listen, admin), &dir).unwrap_or_else(|e| panic!("envoy: {e}"));
    let both_ready = launcher::wait_until(Duration::from_secs(15), || {
        pool_stat(&envoy, "wasm_epp_pods_healthy", "alpha") == Some(2.0)
            && pool_stat(&envoy, "wasm_epp_pods_healthy", "beta") == Some(2.0)
    });
    assert!(both_ready, "each singleton should see its own 2 pods:\n{}", envoy.log_tail(30));

    for i in 0..20 {
        for (name, members) in [("alpha", &alpha), ("beta", &beta)] {
            let reply = complete(&envoy, Some(name), &[], &format!("{name} request {i}"));
            assert_eq!(reply.status, 200, "{}", reply.body);
            let pod = reply.served_by().unwrap_or_default();
            assert!(members.iter().any(|m| m == pod), "{name} request served by {pod}, not one of {members:?}");
        }
    }
    // A client naming the other pool's pod is served by alpha all the same (alpha's cluster
    // holds alpha's pods only; the header's removal itself is tests/e2e/tests/no_bypass.rs's).
    let forged = complete(&envoy, Some("alpha"), &[("x-gateway-destination-endpoint", &beta[0])], "forged");
    assert_eq!(forged.status, 200, "{}", forged.body);
    assert!(alpha.iter().any(|m| Some(m.as_str()) == forged.served_by()), "forged: {:?}", forged.served_by());
    // No route matches: Envoy answers 404 and neither pool's filter runs.
    let unrouted = complete(&envoy, None, &[], "no pool");
    assert_eq!(unrouted.status, 404, "{}", unrouted.body);
    assert_eq!(unrouted.served_by(), None);

    assert_eq!(wait_pool_stat(&envoy, "wasm_epp_requests_routed", "alpha", 21.0), 21.0);
    assert_eq!(wait_pool_stat(&envoy, "wasm_epp_requests_routed", "beta", 20.0), 20.0);
    assert_eq!(envoy.stat("wasm_epp_requests_routed"), None, "no stat without its pool label");
    let families =
        ["wasm_epp_picks{", "wasm_epp_picks_by_reason{", "wasm_epp_decision_time_us_bucket{", "wasm_epp_flow_queued{"];
    assert_every_series_labelled(&envoy, &families);
    for (name, members) in [("alpha", &alpha), ("beta", &beta)] {
        let picks: f64 = members
            .iter()
            .filter_map(|pod| envoy.stat(&format!("wasm_epp_picks{{pool=\"{name}\",pod=\"{pod}\"}}")))
            .sum();
        assert_eq!(picks, if name == "alpha" { 21.0 } else { 20.0 }, "{name}'s picks by pod");
    }

    // Alpha loses every pod: its requests fail, beta's go on within beta.
    alpha_pods.iter().for_each(Pod::kill);
    let alpha_down = launcher::wait_until(Duration::from_secs(10), || {
        pool_stat(&envoy, "wasm_epp_pods_healthy", "alpha") == Some(0.0)
    });
    assert!(alpha_down, "alpha's singleton should see its pods gone:\n{}", envoy.log_tail(30));
    assert_eq!(wait_pool_stat(&envoy, "wasm_epp_pods_healthy", "beta", 2.0), 2.0);
    let failed = complete(&envoy, Some("alpha"), &[], "alpha without pods");
    assert!(failed.status >= 500, "alpha answered {} with no pod up: {}", failed.status, failed.body);
    assert!(!beta.iter().any(|m| Some(m.as_str()) == failed.served_by()), "alpha's request reached beta");
    for i in 0..10 {
        let reply = complete(&envoy, Some("beta"), &[], &format!("beta after {i}"));
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert!(beta.iter().any(|m| Some(m.as_str()) == reply.served_by()), "{:?}", reply.served_by());
    }
}

/// Two pools by header, cold prompts placed by each worker's own history: a replica follows
/// the other's placement of a prefix only if it was told.
fn two_pools(alpha: &[String], beta: &[String]) -> Vec<ServedPool> {
    let mut pools =
        vec![ServedPool::by_header("alpha", alpha, POOL_HEADER), ServedPool::by_header("beta", beta, POOL_HEADER)];
    for pool in &mut pools {
        if let Some(filter) = pool.filter_config.as_object_mut() {
            filter.insert("prefix".into(), serde_json::json!({ "cold_placement": "least_recent" }));
        }
    }
    pools
}

/// Every exported `wasm_epp_*` series carries its `pool` label (a `stats_tags` rule that
/// missed it would leave it in the name, `wasm_epp_pool_alpha_...`), and `families` exist.
fn assert_every_series_labelled(envoy: &Envoy, families: &[&str]) {
    let exported =
        http::get(&envoy.admin_url("/stats/prometheus"), REQUEST_TIMEOUT).map(|r| r.body).unwrap_or_default();
    let series: Vec<&str> = exported.lines().filter(|line| line.starts_with("wasm_epp_")).collect();
    for family in families {
        assert!(series.iter().any(|line| line.starts_with(family)), "no {family} series exported");
    }
    for line in &series {
        assert!(!line.starts_with("wasm_epp_pool_") && line.contains("pool=\""), "pool not a label: {line}");
    }
}

fn wait_pool_stat(envoy: &Envoy, name: &str, pool: &str, at_least: f64) -> f64 {
    launcher::wait_until(Duration::from_secs(20), || pool_stat(envoy, name, pool).unwrap_or(0.0) >= at_least);
    pool_stat(envoy, name, pool).unwrap_or(0.0)
}

#[test]
fn each_pool_shares_its_decisions_with_the_same_pool_of_the_other_replica() {
    let (dir, [alpha_pods, beta_pods]) = two_pools_of_pods("several_pools_peers");
    let (alpha, beta) = (addresses(&alpha_pods), addresses(&beta_pods));
    let plan = ReplicaPlan::new(&[alpha.clone(), beta.clone()].concat(), 2, true).unwrap_or_else(|e| panic!("{e}"));
    let replicas: Vec<Envoy> = (0..2)
        .map(|index| {
            plan.start_replica_with(index, &dir, |options| {
                let peering = options.peering.clone().unwrap_or_else(|| panic!("the plan peers"));
                *options = EnvoyOptions::for_pools(two_pools(&alpha, &beta), options.listen_port, options.admin_port)
                    .with_peering(peering);
            })
            .unwrap_or_else(|e| panic!("{e}"))
        })
        .collect();
    for envoy in &replicas {
        for pool in ["alpha", "beta"] {
            assert_eq!(wait_pool_stat(envoy, "wasm_epp_pods_healthy", pool, 2.0), 2.0, "{}", envoy.log_tail(20));
        }
    }

    // Alpha's prefixes placed through replica 0 reach replica 1's alpha, not its beta.
    let groups = 4;
    let homes: Vec<String> = (0..groups)
        .map(|group| {
            let reply = complete(&replicas[0], Some("alpha"), &[], &prompt(group, 0));
            assert_eq!(reply.status, 200, "{}", reply.body);
            reply.served_by().unwrap_or_default().to_string()
        })
        .collect();
    let received = wait_pool_stat(&replicas[1], "wasm_epp_peer_events_received", "alpha", groups as f64);
    assert!(received >= groups as f64, "replica 1's alpha learned {received} of {groups} decisions");
    for (group, home) in homes.iter().enumerate() {
        let reply = complete(&replicas[1], Some("alpha"), &[], &prompt(group, 1));
        assert_eq!(reply.served_by(), Some(home.as_str()), "group {group}: replica 1 did not follow replica 0");
    }
    let beta_heard = pool_stat(&replicas[1], "wasm_epp_peer_events_received", "beta").unwrap_or(0.0);
    assert_eq!(beta_heard, 0.0, "replica 1's beta learned alpha's decisions");

    // And the other way round for beta, whose pods alpha's decisions never named.
    let beta_home = complete(&replicas[1], Some("beta"), &[], &prompt(9, 0));
    assert!(beta.iter().any(|m| Some(m.as_str()) == beta_home.served_by()), "{:?}", beta_home.served_by());
    assert!(wait_pool_stat(&replicas[0], "wasm_epp_peer_events_received", "beta", 1.0) >= 1.0);
    let followed = complete(&replicas[0], Some("beta"), &[], &prompt(9, 1));
    assert_eq!(followed.served_by(), beta_home.served_by(), "replica 0's beta did not follow replica 1");
    for envoy in &replicas {
        for pool in ["alpha", "beta"] {
            assert_eq!(pool_stat(envoy, "wasm_epp_peer_messages_rejected", pool).unwrap_or(0.0), 0.0, "{pool}");
            // The receiver's own counters, labelled by its pool.
            assert_eq!(pool_stat(envoy, "wasm_epp_peer_requests_refused", pool), Some(0.0), "{pool}");
            assert!(pool_stat(envoy, "wasm_epp_peer_requests_accepted", pool).unwrap_or(0.0) > 0.0, "{pool}");
        }
        assert_every_series_labelled(envoy, &["wasm_epp_peer_requests_accepted{", "wasm_epp_peer_events_received{"]);
    }
}
