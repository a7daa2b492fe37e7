//! Two workers' decisions that cross (each reads the other's counts before the other
//! publishes) during a worker's first seconds of serving: the later one gives way.

#![allow(clippy::unwrap_used)]

mod common;

use std::cell::RefCell;
use std::rc::Rc;

use common::{completion, Bench, COMPLETIONS, NOW};
use picker::inflight::{WorkerInflight, SLOT_DISCOVERY_MS};
use picker::keys::{INFLIGHT_DECISIONS, INFLIGHT_SLOT_KEYS};
use picker::store::{MemoryStore, SharedStore};

/// Idle: every pick's first choice.
const FIRST: &str = "10.0.0.1:8000";
/// With requests waiting: the runner-up.
const SECOND: &str = "10.0.0.2:8000";

/// A worker on the same Envoy, whose pick of `FIRST` is published (and its decision counted)
/// right after the bench worker publishes its own: it crossed the bench worker's decision.
fn crossing_worker(bench: &Bench) {
    let other = Rc::new(RefCell::new(WorkerInflight::new()));
    other.borrow_mut().sync(&bench.host.store, bench.host.clock_ms.get(), 60_000);
    // The bench worker learns of the other's slot at its tick.
    bench.tick();
    let mut crossed = false;
    *bench.host.after_write.borrow_mut() = Some(Box::new(move |store: &MemoryStore, key: &str| {
        if key != INFLIGHT_SLOT_KEYS[0] || crossed {
            return;
        }
        crossed = true;
        let mut other = other.borrow_mut();
        other.started(FIRST, 1, NOW);
        other.publish_now(store, NOW);
        // (A failed bump shows as no pick given way, which the tests check.)
        if let Ok((_, version)) = store.get(INFLIGHT_DECISIONS) {
            let _ = store.set(INFLIGHT_DECISIONS, &NOW.to_le_bytes(), version);
        }
    }));
}

fn bench() -> Bench {
    let bench = Bench::new(r#"{"debug_decision_header": true}"#);
    bench.publish(1, &[(FIRST, 0.0), (SECOND, 3.0)]);
    bench.tick();
    bench
}

#[test]
fn early_on_a_pick_crossed_by_another_workers_pick_of_the_same_pod_goes_to_the_runner_up() {
    let bench = bench();
    crossing_worker(&bench);
    let (mut stream, answer) = bench.request(&COMPLETIONS, &completion("hello"));
    assert_eq!(
        answer.destination.as_deref(),
        Some("10.0.0.2:8000,10.0.0.1:8000"),
        "the runner-up, then the pod given up"
    );
    assert_eq!(bench.stat("wasm_epp.inflight_picks_yielded"), 1);
    assert_eq!(bench.worker.inflight.borrow().local_count(FIRST), 0, "the first pick is no longer counted");
    assert_eq!(bench.worker.inflight.borrow().count(FIRST), 1, "the other worker's is");
    bench.host.set_response(&[(":status", "200")], b"");
    stream.on_response_headers(&bench.host, false);
    let value = bench.host.response_header("x-wasm-epp-decision").unwrap();
    assert!(value.starts_with("pod=10.0.0.2:8000; yielded_from=10.0.0.1:8000; reason="), "{value}");
    stream.on_log(&bench.host);
    assert_eq!(bench.worker.inflight.borrow().local_count(SECOND), 0, "the end releases the pod taken");
}

#[test]
fn a_pick_nobody_crossed_stands_and_later_decisions_are_not_linearized() {
    let bench = bench();
    let answer = bench.complete(&COMPLETIONS, &completion("hello"));
    assert_eq!(answer.destination.as_deref(), Some("10.0.0.1:8000,10.0.0.2:8000"));
    // Past the worker's first seconds a crossing goes unseen: no shared-data call for it.
    bench.host.advance(SLOT_DISCOVERY_MS);
    bench.publish(2, &[(FIRST, 0.0), (SECOND, 3.0)]);
    bench.tick();
    crossing_worker(&bench);
    let counter = || bench.host.store.get(INFLIGHT_DECISIONS).unwrap().1;
    let before = counter();
    let answer = bench.complete(&COMPLETIONS, &completion("hello again"));
    assert_eq!(answer.destination.as_deref(), Some("10.0.0.1:8000,10.0.0.2:8000"));
    assert_eq!(bench.stat("wasm_epp.inflight_picks_yielded"), 0);
    let after_crossing = Some(before.map_or(1, |version| version + 1));
    assert_eq!(counter(), after_crossing, "only the other worker's bump: this decision left the counter alone");
}

#[test]
fn with_learning_a_pick_that_takes_a_pods_last_free_batch_slot_linearizes_the_next_decisions() {
    let bench = learning_beside_another_worker_with_a_batch_of_four();
    let counter = || bench.host.store.get(INFLIGHT_DECISIONS).unwrap().1;
    let mut streams = Vec::new();
    for k in 0..4 {
        assert_eq!(counter(), None, "request {k}: nothing linearized while the pod has free slots");
        streams.push(bench.request(&COMPLETIONS, &completion(&format!("prompt {k}"))).0);
    }
    // The fourth took the batch's last slot: the next decision is linearized.
    streams.push(bench.request(&COMPLETIONS, &completion("prompt 4")).0);
    assert!(counter().is_some(), "the decision counter was read and bumped");
    for mut stream in streams {
        stream.on_log(&bench.host);
    }
}

#[test]
fn a_pick_by_affinity_keeps_its_pod_when_crossed() {
    let bench = bench();
    let prompt = "a shared system prompt ".repeat(100);
    let first = bench.complete(&COMPLETIONS, &completion(&prompt));
    assert_eq!(first.destination.as_deref(), Some("10.0.0.1:8000,10.0.0.2:8000"));
    crossing_worker(&bench);
    let (mut again, answer) = bench.request(&COMPLETIONS, &completion(&prompt));
    assert_eq!(answer.destination.as_deref(), Some("10.0.0.1:8000,10.0.0.2:8000"), "the pod holding the prefix");
    assert_eq!(bench.stat("wasm_epp.inflight_picks_yielded"), 0, "joining the pod that holds it is the point");
    again.on_log(&bench.host);
}

#[test]
fn with_learning_a_crossing_on_a_pod_with_a_slot_for_both_costs_nothing_and_the_pick_stands() {
    let bench = Bench::new(r#"{"learning": {"enabled": true}}"#);
    // Both pods were seen running 4 with requests waiting: batches of 4.
    let mut table = picker::pod_table::PodTable {
        version: 1,
        published_at_ms: bench.host.clock_ms.get(),
        poll_interval_ms: 100,
        ..Default::default()
    };
    for (address, waiting) in [(FIRST, 1.0), (SECOND, 3.0)] {
        let mut pod = picker::pod_table::PodState::unknown(&picker::address::PodAddress::parse(address).unwrap());
        (pod.healthy, pod.running, pod.waiting, pod.last_success_ms) = (true, 4.0, waiting, bench.host.clock_ms.get());
        table.pods.push(pod);
    }
    bench.host.store.set(picker::keys::POD_TABLE, &table.encode(), None).unwrap();
    bench.host.store.set(picker::keys::POD_TABLE_VERSION, &picker::pod_table::encode_version(1), None).unwrap();
    bench.heartbeat();
    bench.tick();
    crossing_worker(&bench);
    let (mut stream, answer) = bench.request(&COMPLETIONS, &completion("hello"));
    assert_eq!(answer.destination.as_deref().and_then(|d| d.split(',').next()), Some(FIRST), "2 of its 4 slots");
    assert_eq!(bench.stat("wasm_epp.inflight_picks_yielded"), 0);
    assert_eq!(bench.worker.inflight.borrow().count(FIRST), 2, "the crossing was seen: both picks count");
    stream.on_log(&bench.host);
}

/// A completions request for `n` choices (vLLM runs one child request, one batch slot, per choice).
fn samples(prompt: &str, n: u32) -> String {
    format!(r#"{{"model":"m","prompt":"{prompt}","n":{n},"max_tokens":4}}"#)
}

#[test]
fn a_pick_that_gives_way_moves_all_of_its_samples_to_the_runner_up() {
    let bench = bench();
    crossing_worker(&bench);
    let (mut stream, answer) = bench.request(&COMPLETIONS, &samples("hello", 3));
    assert_eq!(answer.destination.as_deref(), Some("10.0.0.2:8000,10.0.0.1:8000"));
    let local = |pod: &str| bench.worker.inflight.borrow().local_count(pod);
    assert_eq!((local(FIRST), local(SECOND)), (0, 3), "its 3 samples left the pod given up, all of them");
    stream.on_log(&bench.host);
    assert_eq!((local(FIRST), local(SECOND)), (0, 0));
}

#[test]
fn with_learning_a_pick_whose_samples_fill_a_pods_free_batch_slots_linearizes_the_next_decisions() {
    let bench = learning_beside_another_worker_with_a_batch_of_four();
    let counter = || bench.host.store.get(INFLIGHT_DECISIONS).unwrap().1;
    // One request of 4 samples takes the batch's 4 slots.
    let (mut four, _) = bench.request(&COMPLETIONS, &samples("four samples", 4));
    assert_eq!(counter(), None);
    let (mut next, _) = bench.request(&COMPLETIONS, &completion("next"));
    assert!(counter().is_some(), "the pick of 4 samples took the last slot: the next decision is linearized");
    four.on_log(&bench.host);
    next.on_log(&bench.host);
}

/// A learning worker past its first seconds, beside another worker (alone, nothing could cross
/// its decisions), whose one pod FIRST learned a batch of 4 from a scrape: 4 running, 1 waiting.
fn learning_beside_another_worker_with_a_batch_of_four() -> Bench {
    let bench = Bench::new(r#"{"learning": {"enabled": true}}"#);
    bench.publish(1, &[(FIRST, 0.0)]);
    bench.tick();
    bench.host.advance(SLOT_DISCOVERY_MS);
    let mut table = picker::pod_table::PodTable {
        version: 2,
        published_at_ms: bench.host.clock_ms.get(),
        poll_interval_ms: 100,
        ..Default::default()
    };
    let mut pod = picker::pod_table::PodState::unknown(&picker::address::PodAddress::parse(FIRST).unwrap());
    (pod.healthy, pod.running, pod.waiting, pod.last_success_ms) = (true, 4.0, 1.0, bench.host.clock_ms.get());
    table.pods.push(pod);
    bench.host.store.set(picker::keys::POD_TABLE, &table.encode(), None).unwrap();
    bench.host.store.set(picker::keys::POD_TABLE_VERSION, &picker::pod_table::encode_version(2), None).unwrap();
    bench.heartbeat();
    WorkerInflight::new().sync(&bench.host.store, bench.host.clock_ms.get(), 60_000);
    bench.tick();
    bench
}
