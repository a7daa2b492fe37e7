//! Live reconfiguration under load (launcher/src/live_config.rs): five new filter
//! configurations delivered through Envoy's watched-folder ECDS while clients keep sending,
//! with no failed request; a refused configuration leaves the old one serving; a prompt's
//! pod is still preferred after every change (the prefix index survives); the last change
//! turns the opt-in decision header on, and it names the pod that answered.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use e2e::Cluster;
use launcher::live_config::{apply, Applied};

/// Clients sending all the time while the configuration changes.
const CLIENTS: usize = 4;
/// Reconfigurations that must be accepted (the figure).
const RECONFIGURATIONS: usize = 5;
/// Load keeps running this long after each change, so requests straddle every switch.
const BETWEEN_CHANGES: Duration = Duration::from_millis(1500);

/// A long shared prefix: its pod is what the prefix index remembers.
fn remembered_prompt(suffix: usize) -> String {
    format!("{} and then question {suffix}", "Remember this exact preamble about live configuration. ".repeat(30))
}

fn config_with(pool: &[String], queue_weight: f64, queue_threshold: f64) -> serde_json::Value {
    serde_json::json!({
        "pool": pool,
        "weights": {"queue": queue_weight, "kv_cache": 1.0, "inflight": 2.0, "prefix": 3.0},
        "saturation": {"queue_threshold": queue_threshold, "kv_cache_threshold": 0.8},
    })
}

#[test]
fn five_reconfigurations_under_load_fail_no_request_and_keep_the_prefix_index() {
    let live_dir = launcher::paths::run_dir("live-reconfig-filter").unwrap();
    let mut options = None;
    let cluster = Cluster::start("live-reconfig", 3, &[], |o| {
        o.live_filter_dir = Some(live_dir.clone());
        options = Some(o.clone());
    });
    let options = options.unwrap();
    assert!(cluster.envoy.wait_for_healthy_pods(3, Duration::from_secs(15)), "{}", cluster.envoy.log_tail(30));
    let pool = cluster.pool();

    let home = cluster.served_by_pool(&cluster.complete(&remembered_prompt(0)));
    let stop = AtomicBool::new(false);
    let (sent, failed) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let mut moved_away = Vec::new();
    std::thread::scope(|scope| {
        for client in 0..CLIENTS {
            let (cluster, stop, sent, failed) = (&cluster, &stop, &sent, &failed);
            scope.spawn(move || {
                let mut i = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    let body = serde_json::json!({"model": "sim-model", "prompt": format!("client {client} request {i}"), "max_tokens": 8});
                    let reply = launcher::http::post(&cluster.envoy.url("/v1/completions"), &[], &body.to_string(), e2e::REQUEST_TIMEOUT);
                    sent.fetch_add(1, Ordering::Relaxed);
                    if !reply.as_ref().is_ok_and(|r| r.status == 200) {
                        failed.fetch_add(1, Ordering::Relaxed);
                        eprintln!("failed: {:?}", reply.map(|r| (r.status, r.body)));
                    }
                    i += 1;
                }
            });
        }
        std::thread::sleep(BETWEEN_CHANGES);
        for change in 1..=RECONFIGURATIONS {
            let mut config = config_with(&pool, 1.0 + change as f64, 5.0 + change as f64);
            if change == RECONFIGURATIONS {
                // The last change also turns the decision header on (checked below).
                config["debug_decision_header"] = true.into();
            }
            let outcome = apply(&cluster.envoy, &options, &config).unwrap();
            assert_eq!(outcome, Applied::Accepted, "change {change}");
            if change == 3 {
                // A bad one between good ones: refused with the plugin's reason, old one stays.
                let bad = config_with(&pool, -1.0, 5.0);
                match apply(&cluster.envoy, &options, &bad).unwrap() {
                    Applied::Refused(reason) => assert!(reason.contains("weights.queue"), "{reason}"),
                    Applied::Accepted => panic!("a negative weight was accepted"),
                }
                let unknown = serde_json::json!({"pool": pool, "no_such_setting": 1});
                assert!(matches!(apply(&cluster.envoy, &options, &unknown).unwrap(), Applied::Refused(_)));
            }
            std::thread::sleep(BETWEEN_CHANGES);
            let pod = cluster.served_by_pool(&cluster.complete(&remembered_prompt(change)));
            if pod != home {
                moved_away.push((change, pod));
            }
        }
        stop.store(true, Ordering::Relaxed);
    });

    let (sent, failed) = (sent.into_inner(), failed.into_inner());
    println!(
        "live reconfiguration: {RECONFIGURATIONS} accepted + 2 refused under load: {sent} requests, {failed} failed"
    );
    assert!(sent >= CLIENTS * RECONFIGURATIONS, "the load did not run: {sent} requests");
    assert_eq!(failed, 0, "requests failed across reconfiguration");
    assert!(moved_away.is_empty(), "the remembered prompt left its pod {home} after: {moved_away:?}");
    let log = cluster.envoy.log();
    let last = format!("weights ScorerWeights {{ queue: {:.1}", 1.0 + RECONFIGURATIONS as f64);
    assert!(log.contains(&last), "the last configuration never reached the plugin");
    // Not `assert_plugin_healthy`: a refused configuration makes Envoy log "Plugin configured
    // to fail closed failed to load" for that configuration alone, which never served.
    for fatal in ["panicked", "wasm trap", "Function: proxy_on"] {
        assert!(!log.contains(fatal), "Envoy log shows a Wasm failure ({fatal})");
    }
    let body = serde_json::json!({"model": "sim-model", "prompt": "still routing after the changes?", "max_tokens": 4});
    let reply = cluster.post("/v1/completions", &[("x-wasm-epp-decision", "pod=6.6.6.6:6666")], &body.to_string());
    assert_eq!(reply.status, 200, "{}", reply.body);
    let decision = reply.header("x-wasm-epp-decision").unwrap_or_default().to_string();
    let served = cluster.served_by_pool(&reply);
    assert!(decision.starts_with(&format!("pod={served}; reason=")), "decision header: {decision:?}");
    assert!(decision.contains("candidates=") && !decision.contains("6.6.6.6"), "{decision}");
}

/// Requests waiting in flow control's queue when a new configuration turns it off are not
/// lost: they stay on the filter they arrived through (its root keeps ticking while its
/// streams live) and are released to the pod as its requests end, while new requests take
/// the new configuration and go at once.
#[test]
fn requests_waiting_in_the_queue_survive_a_change_that_turns_flow_control_off() {
    let live_dir = launcher::paths::run_dir("live-reconfig-flow").unwrap();
    let mut options = None;
    let cluster = Cluster::start("live-reconfig-flow", 1, &["--time-scale", "0"], |o| {
        o.live_filter_dir = Some(live_dir.clone());
        o.filter_config["flow_control"] =
            serde_json::json!({"enabled": true, "max_inflight_per_pod": 1, "ttl_ms": 20000});
        options = Some(o.clone());
    });
    let options = options.unwrap();
    assert!(cluster.envoy.wait_for_healthy_pods(1, Duration::from_secs(15)), "{}", cluster.envoy.log_tail(30));
    cluster.pods[0].set_faults(&serde_json::json!({"extra_latency_ms": 1500})).unwrap();
    const HELD: usize = 4;
    let statuses: Vec<u16> = std::thread::scope(|scope| {
        let senders: Vec<_> = (0..HELD)
            .map(|i| {
                let cluster = &cluster;
                scope.spawn(move || {
                    let body =
                        serde_json::json!({"model": "sim-model", "prompt": format!("held {i}"), "max_tokens": 4});
                    let reply = launcher::http::post(
                        &cluster.envoy.url("/v1/completions"),
                        &[],
                        &body.to_string(),
                        e2e::REQUEST_TIMEOUT,
                    );
                    reply.map_or(0, |r| r.status)
                })
            })
            .collect();
        // One in flight on the pod, the others held by the filter: then flow control goes off.
        // Every request is waited for at the filter (a fixed pause let late ones arrive after
        // the change on a loaded machine, where nothing holds them).
        let stat = |name: &str| cluster.envoy.stat(name).unwrap_or(0.0);
        let arrived = || stat("wasm_epp_flow_queued") + stat("wasm_epp_flow_dispatched_directly");
        let all_in = launcher::wait_until(Duration::from_secs(10), || arrived() >= HELD as f64);
        assert!(all_in, "{} of {HELD} requests reached flow control before the change", arrived());
        let mut config = options.filter_config.clone();
        config["flow_control"] = serde_json::json!({"enabled": false});
        assert_eq!(apply(&cluster.envoy, &options, &config).unwrap(), Applied::Accepted);
        let fresh = serde_json::json!({"model": "sim-model", "prompt": "after the change", "max_tokens": 4});
        let reply =
            launcher::http::post(&cluster.envoy.url("/v1/completions"), &[], &fresh.to_string(), e2e::REQUEST_TIMEOUT);
        assert_eq!(reply.map(|r| r.status).ok(), Some(200), "a request after the change");
        senders.into_iter().map(|sender| sender.join().unwrap()).collect()
    });
    assert_eq!(statuses, vec![200; HELD], "every request held across the change was answered");
    let queued = cluster.envoy.stat("wasm_epp_flow_queued").unwrap_or(0.0);
    assert!(queued >= 1.0, "requests waited in the queue before the change: {queued}");
}
