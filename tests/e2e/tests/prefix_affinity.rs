//! Prefix-cache affinity end to end: shared prefixes stick to one pod across worker threads,
//! sessions stick, affinity is released under saturation and forgotten when a pod restarts
//! (but not when its /metrics merely failed for a while).

use std::time::{Duration, Instant};

use e2e::{tally, Cluster};

/// About 2 KB of text that a group of prompts shares (≈ 32 blocks of 64 bytes).
fn shared_prefix(group: usize) -> String {
    (0..300).map(|i| format!("g{group}w{i}")).collect::<Vec<_>>().join(" ")
}

fn prompt(group: usize, suffix: usize) -> String {
    format!("{} question {suffix} please answer briefly", shared_prefix(group))
}

#[test]
fn prompts_sharing_a_prefix_go_to_one_pod_and_groups_spread() {
    let cluster = Cluster::start_ready("prefix-groups", 4, &["--time-scale", "0"]);
    let mut homes = Vec::new();
    for group in 0..8 {
        // Each request is a new connection, so both Envoy workers serve the group.
        let first = cluster.served_by_pool(&cluster.complete(&prompt(group, 0)));
        std::thread::sleep(Duration::from_millis(300)); // let the other worker learn it (~60 ms)
        let served: Vec<String> =
            (1..10).map(|i| cluster.served_by_pool(&cluster.complete(&prompt(group, i)))).collect();
        assert!(served.iter().all(|pod| *pod == first), "group {group} left its pod {first}: {served:?}");
        homes.push(first);
    }
    let spread = tally(homes.iter().map(String::as_str));
    // New prefixes are placed by rendezvous hashing over pods on random ports: 8 of them land
    // on at most 2 of 4 pods in ~2.3 % of runs (seen in CI-like runs), on one pod in 0.006 %.
    assert!(spread.len() >= 2, "8 new prefixes spread over the pool: {spread:?}");
    // 72 follow-ups; a few may have matched their pod by load alone on a very busy machine.
    assert!(cluster.envoy.stat("wasm_epp_affinity_picks").unwrap_or(0.0) >= 64.0);
}

#[test]
fn a_decision_on_one_worker_is_visible_to_the_other_within_a_bounded_time() {
    let cluster = Cluster::start_ready("prefix-visibility", 4, &["--time-scale", "0"]);
    let mut worst_ms = 0u128;
    for group in 0..12 {
        let home = cluster.served_by_pool(&cluster.complete(&prompt(100 + group, 0)));
        let decided = Instant::now();
        // Poll on fresh connections (either worker) until 6 in a row agree.
        let mut agreeing = 0;
        while agreeing < 6 {
            assert!(decided.elapsed() < Duration::from_secs(2), "group {group} never converged");
            let pod = cluster.served_by_pool(&cluster.complete(&prompt(100 + group, 1 + agreeing)));
            agreeing = if pod == home { agreeing + 1 } else { 0 };
        }
        worst_ms = worst_ms.max(decided.elapsed().as_millis());
    }
    eprintln!("MEASURED cross-worker prefix visibility: all 12 groups converged within {worst_ms} ms");
}

#[test]
fn sessions_stick_to_their_pod() {
    let cluster = Cluster::start_ready("sessions", 4, &["--time-scale", "0"]);
    for session in ["alice", "bob", "carol"] {
        let mut pods = Vec::new();
        for turn in 0..8 {
            let body = serde_json::json!({"model": "sim-model", "prompt": format!("turn {turn} unrelated words {session}"), "max_tokens": 2});
            let reply = cluster.post("/v1/completions", &[("x-session-id", session)], &body.to_string());
            pods.push(cluster.served_by_pool(&reply));
            // A user reads and types between turns; the other worker hears of a session's pod
            // within a sync interval or two (see the visibility test).
            std::thread::sleep(Duration::from_millis(150));
        }
        assert!(pods.iter().all(|p| *p == pods[0]), "session {session} moved: {pods:?}");
    }
}

#[test]
fn affinity_is_released_when_the_pod_is_saturated() {
    let cluster = Cluster::start_ready("prefix-saturated", 3, &["--time-scale", "0"]);
    let home = cluster.served_by_pool(&cluster.complete(&prompt(7, 0)));
    std::thread::sleep(Duration::from_millis(150));
    let pod = cluster.pods.iter().find(|p| p.address() == home).unwrap();
    pod.set_faults(&serde_json::json!({"report": {"waiting": 30}})).unwrap();
    e2e::wait_for_pod_gauge(&cluster.envoy, "waiting", &home, 30.0);
    let served: Vec<String> = (1..10).map(|i| cluster.served_by_pool(&cluster.complete(&prompt(7, i)))).collect();
    assert!(!served.contains(&home), "the saturated pod kept its prefix traffic: {served:?}");
}

#[test]
fn a_restarted_pod_loses_its_prefix_affinity() {
    let cluster = Cluster::start_ready("prefix-restart", 3, &["--time-scale", "0"]);
    let home = cluster.served_by_pool(&cluster.complete(&prompt(9, 0)));
    std::thread::sleep(Duration::from_millis(150));
    let before = cluster.envoy.stat("wasm_epp_affinity_picks").unwrap_or(0.0);
    cluster.served_by_pool(&cluster.complete(&prompt(9, 1)));
    assert_eq!(cluster.envoy.stat("wasm_epp_affinity_picks").unwrap_or(0.0), before + 1.0, "warm before the restart");
    // A restart empties the engine's cache; its counters go back to zero and the singleton
    // gives the pod a new epoch, which voids what the index remembers of it.
    let pod = cluster.pods.iter().find(|p| p.address() == home).unwrap();
    let dropped_before = cluster.envoy.stat("wasm_epp_pod_caches_dropped").unwrap_or(0.0);
    let reply = launcher::http::post(&pod.url("/sim/restart"), &[], "{}", Duration::from_secs(5)).unwrap();
    assert_eq!(reply.status, 200, "{}", reply.body);
    let dropped = launcher::wait_until(Duration::from_secs(15), || {
        cluster.envoy.stat("wasm_epp_pod_caches_dropped").unwrap_or(0.0) > dropped_before
    });
    assert!(dropped, "the singleton never saw the restart:\n{}", cluster.envoy.log_tail(20));
    std::thread::sleep(e2e::TABLE_REACHES_WORKERS);
    let before = cluster.envoy.stat("wasm_epp_affinity_picks").unwrap_or(0.0);
    cluster.served_by_pool(&cluster.complete(&prompt(9, 2)));
    assert_eq!(cluster.envoy.stat("wasm_epp_affinity_picks").unwrap_or(0.0), before, "affinity survived a restart");
}

#[test]
fn a_pod_whose_metrics_failed_for_a_while_keeps_its_prefix_affinity() {
    let cluster = Cluster::start_ready("prefix-metrics-gap", 3, &["--time-scale", "0"]);
    let home = cluster.served_by_pool(&cluster.complete(&prompt(10, 0)));
    std::thread::sleep(Duration::from_millis(150));
    let healthy = || cluster.envoy.stat("wasm_epp_pods_healthy").unwrap_or(-1.0);
    // The home pod's own gauge: on a loaded machine another pod's scrape can time out too,
    // and the pool's count alone once took that for the home pod leaving.
    let home_healthy = || cluster.envoy.stat(&format!("wasm_epp_pod_healthy{{pod=\"{home}\"}}")).unwrap_or(-1.0);
    let wait_for = |what: &str, pods: f64, home: f64| {
        let reached = launcher::wait_until(Duration::from_secs(10), || healthy() == pods && home_healthy() == home);
        assert!(reached, "{what}: {} healthy pods, wanted {pods}; home pod healthy {}", healthy(), home_healthy());
    };
    wait_for("all scraped", 3.0, 1.0);
    // Its /metrics fails long enough to take it out of rotation (a scrape timing out under
    // load looks the same), while the engine and its cache live on: the counters carry on.
    let pod = cluster.pods.iter().find(|p| p.address() == home).unwrap();
    pod.set_faults(&serde_json::json!({"metrics_fail": true})).unwrap();
    wait_for("the pod out of rotation", 2.0, 0.0);
    pod.clear_faults().unwrap();
    wait_for("the pod back", 3.0, 1.0);
    std::thread::sleep(Duration::from_millis(150)); // the new table reaches both workers
    let before = cluster.envoy.stat("wasm_epp_affinity_picks").unwrap_or(0.0);
    let served = cluster.served_by_pool(&cluster.complete(&prompt(10, 1)));
    assert_eq!(served, home, "the prompt left the pod that still holds its prefix");
    assert_eq!(cluster.envoy.stat("wasm_epp_affinity_picks").unwrap_or(0.0), before + 1.0, "picked by affinity");
}
