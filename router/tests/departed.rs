//! A pod that leaves the pool for a moment (a Kubernetes pod NotReady while its readiness
//! probe times out under load) and comes back under the same epoch: the worker kept its
//! prefix entries, sessions, learned state and ejection meanwhile. Gone past the grace, it is
//! forgotten, on a tick without any new table.

// Helpers outside #[test] functions read answers: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use common::{completion, Bench, COMPLETIONS};
use picker::departed::GRACE_MS;
use picker::prefix::worker::session_key;

const CONFIG: &str = r#"{"learning": {"enabled": true},
    "outlier_detection": {"consecutive_failures": 1, "base_ejection_ms": 120000, "max_ejection_ms": 120000}}"#;

/// `A` reports the emptiest queue: by load it is every request's pick.
const A: &str = "10.0.0.1:8000";
const POOL: [(&str, f64); 3] = [(A, 0.0), ("10.0.0.2:8000", 1.0), ("10.0.0.3:8000", 1.0)];

/// One request of `session` for `prompt`, answered by its pick with `status`; returns the pick.
fn request(bench: &Bench, prompt: &str, session: &str, status: &str) -> String {
    let headers = [COMPLETIONS[0], COMPLETIONS[1], COMPLETIONS[2], ("x-session-id", session)];
    let (mut stream, answer) = bench.request(&headers, &completion(prompt));
    let pick = answer.destination.unwrap().split(',').next().unwrap().to_owned();
    bench.host.set_response(&[(":status", status), ("x-gateway-destination-endpoint-served", &pick)], b"");
    stream.on_response_headers(&bench.host, false);
    stream.on_log(&bench.host);
    pick
}

fn long_prompt() -> String {
    format!("{} and a question", "a system prompt shared by every turn ".repeat(40))
}

/// The pool of three, `A` ejected for failing, a conversation on its home pod; then `A` and
/// the home pod leave the pool. Returns the home pod.
fn start_then_two_pods_leave(bench: &Bench) -> String {
    bench.publish(1, &POOL);
    bench.tick();
    assert_eq!(request(bench, "fails", "other", "500"), A);
    assert_eq!(bench.worker.outliers.borrow().ejected_now(), [picker::address::PodAddress::parse(A).unwrap()]);
    let home = request(bench, &long_prompt(), "alice", "200");
    assert_ne!(home, A, "ejected");
    bench.tick();
    let stays: Vec<(&str, f64)> = POOL.iter().copied().filter(|(pod, _)| *pod != A && *pod != home).collect();
    bench.host.advance(1_000);
    bench.publish(2, &stays);
    bench.tick();
    home
}

#[test]
fn a_pod_back_within_the_grace_keeps_its_prefix_sessions_learning_and_ejection() {
    let bench = Bench::new(CONFIG);
    let home = start_then_two_pods_leave(&bench);
    assert_eq!(bench.worker.learning.borrow().pods_remembered(), 3, "kept while away");
    // Ready again 30 s later, the same engines (the same epochs: the pool service's first
    // scrape found their counters carried on).
    bench.host.advance(30_000);
    bench.publish(3, &POOL);
    bench.tick();
    let affinity = bench.stat("wasm_epp.affinity_picks");
    assert_eq!(request(&bench, &long_prompt(), "alice", "200"), home, "back to the pod holding its prefix");
    assert_eq!(bench.stat("wasm_epp.affinity_picks"), affinity + 1, "picked for what it holds, not by chance");
    assert_ne!(request(&bench, "next", "bob", "200"), A, "still ejected: it failed, and it is the same engine");
    assert_eq!(bench.worker.learning.borrow().pods_remembered(), 3);
}

#[test]
fn a_pod_gone_past_the_grace_is_forgotten_without_a_new_table() {
    let bench = Bench::new(CONFIG);
    let home = start_then_two_pods_leave(&bench);
    let prefix = || bench.worker.prefix.borrow();
    assert_eq!(prefix().session_pod(session_key("alice")), Some((home.as_str(), 0)), "kept while away");
    bench.host.advance(GRACE_MS);
    bench.heartbeat();
    bench.tick();
    assert!(prefix().session_pod(session_key("alice")).is_some(), "not gone past the grace yet");
    bench.host.advance(1);
    bench.tick();
    assert_eq!(prefix().session_pod(session_key("alice")), None, "its sessions are forgotten");
    assert_eq!(prefix().index().pod_count(), 0, "and its prefix entries: the pod left holds none");
    assert!(bench.worker.outliers.borrow().ejected_now().is_empty(), "its ejection with it");
    assert_eq!(bench.worker.learning.borrow().pods_remembered(), 1, "the pod in the pool alone");
}
