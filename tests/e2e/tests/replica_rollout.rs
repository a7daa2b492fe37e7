//! A rolling restart of one gateway replica under streaming load loses no request: clients
//! pick among the replicas that are "ready" (as a Service's endpoints list them), the replica
//! leaves that list as its drain starts (envoy/drain-before-exit.sh, the preStop hook), is
//! stopped by SIGTERM once drained, and a new one takes its place. The replicas share their
//! decisions; Envoy runs as the Kubernetes manifests start it (`--drain-strategy immediate`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use e2e::drain::{as_the_manifests_run_it, drain_script, in_flight};
use e2e::replicas::{prompt, ReplicaCluster};

/// Clients streaming at once.
const CLIENTS: usize = 6;
/// ~40 steps of the simulator's small preset: streams of about half a second.
const MAX_TOKENS: u64 = 40;
/// Traffic before the restart and after the new replica joins.
const STEADY: Duration = Duration::from_secs(2);

#[derive(Default)]
struct Outcome {
    ok: usize,
    failed: Vec<String>,
    /// Answers through each replica's listener port.
    by_port: std::collections::BTreeMap<u16, usize>,
}

#[test]
fn restarting_a_replica_under_streaming_load_loses_no_request() {
    let mut cluster = ReplicaCluster::start_with_pods("replica-rollout", &[], 2, 2, 2, true, as_the_manifests_run_it);
    let ports: Vec<(u16, u16)> = cluster.plan.ports.iter().map(|p| (p.listen, p.admin)).collect();
    let ready = Arc::new(Mutex::new(ports.iter().map(|&(listen, _)| listen).collect::<Vec<u16>>()));
    let stop = Arc::new(AtomicBool::new(false));
    let outcome = Arc::new(Mutex::new(Outcome::default()));

    let clients: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let (ready, stop, outcome) = (ready.clone(), stop.clone(), outcome.clone());
            thread::spawn(move || {
                let mut sent = 0;
                while !stop.load(Ordering::Relaxed) {
                    let port = {
                        let ready = ready.lock().unwrap();
                        ready[(client + sent) % ready.len()]
                    };
                    let body = serde_json::json!({
                        "model": "sim-model", "prompt": prompt(client % 3, sent), "max_tokens": MAX_TOKENS, "stream": true
                    });
                    let url = format!("http://127.0.0.1:{port}/v1/completions");
                    let reply = launcher::http::post(&url, &[], &body.to_string(), e2e::REQUEST_TIMEOUT);
                    let whole = reply.as_ref().is_ok_and(|r| r.status == 200 && r.body.trim_end().ends_with("data: [DONE]"));
                    let mut outcome = outcome.lock().unwrap();
                    if whole {
                        outcome.ok += 1;
                        *outcome.by_port.entry(port).or_default() += 1;
                    } else {
                        outcome.failed.push(format!("via {port}: {reply:?}"));
                    }
                    sent += 1;
                }
            })
        })
        .collect();

    thread::sleep(STEADY);
    // Replica 0 is being stopped, with streams in flight through it: it leaves the endpoints
    // and its preStop hook drains it.
    let (listen, admin) = ports[0];
    let in_flight = launcher::wait_until(Duration::from_secs(5), || in_flight(cluster.replica(0)) >= 1.0);
    assert!(in_flight, "no stream in flight through replica 0 to protect");
    ready.lock().unwrap().retain(|&port| port != listen);
    let drained = drain_script(admin, 1).status().unwrap();
    assert_eq!(drained.code(), Some(0), "the drain did not finish");
    cluster.stop(0);
    // Its replacement starts (same ports, as a new pod behind the same Service) and joins.
    cluster.start_replica(0);
    let before_rejoin = outcome.lock().unwrap().by_port.get(&listen).copied().unwrap_or(0);
    ready.lock().unwrap().push(listen);
    thread::sleep(STEADY);
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.join().unwrap();
    }

    let outcome = outcome.lock().unwrap();
    println!(
        "rollout: {} streams whole, {} failed, by replica port {:?}",
        outcome.ok,
        outcome.failed.len(),
        outcome.by_port
    );
    assert!(outcome.failed.is_empty(), "requests lost in the rollout:\n{}", outcome.failed.join("\n"));
    assert!(outcome.ok >= 2 * CLIENTS, "too little traffic to mean anything: {}", outcome.ok);
    let after_rejoin = outcome.by_port.get(&listen).copied().unwrap_or(0) - before_rejoin;
    assert!(after_rejoin > 0, "the new replica 0 served nothing");
    cluster.assert_plugins_healthy();
}
