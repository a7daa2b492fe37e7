//! In a pool of several models, flow control counts the room of the pods a request may go to:
//! one model's full pods hold its requests in the gateway (their priorities and turns kept),
//! while another model's requests go to their own pods with room, past them.

mod common;

use common::{completions_with, model_completion, publish_models, publish_models_as, Bench, COMPLETIONS};
use wasm_epp_router::{RequestStream, Step};

/// Serves `qwen` and its adapter `sql-lora`.
const QWEN: &str = "10.0.0.1:8000";
const LLAMA: &str = "10.0.0.2:8000";

fn config(per_pod: u32) -> String {
    format!(
        r#"{{"fallback_destinations": 0, "flow_control": {{"enabled": true, "max_inflight_per_pod": {per_pod}, "ttl_ms": 1000}}}}"#
    )
}

/// Sends a completion for `model` of `n` choices on context `id`, with extra `headers`.
fn send(bench: &Bench, id: u32, model: &str, n: u32, headers: &[(&str, &str)]) -> (RequestStream, Step) {
    bench.send_as(&bench.worker, id, &completions_with(headers), &model_completion(model, id, n))
}

#[test]
fn a_full_models_requests_wait_for_its_pods_while_another_models_go_to_theirs() {
    let bench = Bench::new(&config(1));
    publish_models(&bench, &[(QWEN, "qwen", &[], 0.0), (LLAMA, "llama", &[], 0.0)]);
    let (mut first, step) = send(&bench, 1, "qwen", 1, &[]);
    assert_eq!((step, bench.destination().as_deref()), (Step::Continue, Some(QWEN)));

    // The pool has room (llama's pod), but qwen's pod is at its bound: qwen waits here, not
    // in the engine's queue past the bound.
    let (_second, step) = send(&bench, 2, "qwen", 1, &[]);
    assert_eq!(step, Step::Pause, "held: its model's pod is full");
    let (_sheddable, step) = send(&bench, 3, "qwen", 1, &[("x-gateway-inference-priority", "-1")]);
    assert_eq!(step, Step::Pause);
    let (_critical, step) = send(&bench, 4, "qwen", 1, &[("x-gateway-inference-priority", "5")]);
    assert_eq!(step, Step::Pause);
    bench.tick();
    assert!(bench.host.resumed.borrow().is_empty(), "nothing released past qwen's bound");

    // A llama request of the same band goes past the waiting qwen ones, at once.
    let (mut llama, step) = send(&bench, 5, "llama", 1, &[]);
    assert_eq!((step, bench.destination().as_deref()), (Step::Continue, Some(LLAMA)));
    assert!(bench.end(&mut llama).is_empty(), "llama's place is no room for qwen");

    // qwen's place frees: its requests go in their priorities' order.
    assert_eq!(bench.end(&mut first), [4], "the critical one first");
    assert_eq!(bench.destination().as_deref(), Some(QWEN));
    assert_eq!(bench.stat("wasm_epp.flow.queued"), 3);
}

#[test]
fn a_request_keeps_its_turn_on_its_pods_against_another_models_sharing_them() {
    // Two places per pod; qwen's pod also serves the adapter.
    let bench = Bench::new(&config(2));
    publish_models(&bench, &[(QWEN, "qwen", &["sql-lora"], 0.0), (LLAMA, "llama", &[], 0.0)]);
    let (mut busy_one, _) = send(&bench, 1, "qwen", 1, &[]);
    let (mut busy_two, _) = send(&bench, 2, "qwen", 1, &[]);
    assert_eq!(bench.destination().as_deref(), Some(QWEN));

    // Two choices need two places on one pod; the adapter's request after it needs one.
    let (_pair, step) = send(&bench, 3, "qwen", 2, &[]);
    assert_eq!(step, Step::Pause);
    let (_adapter, step) = send(&bench, 4, "sql-lora", 1, &[]);
    assert_eq!(step, Step::Pause);

    // One place frees on qwen's pod: the pair does not fit, and the adapter's request, which
    // would, does not take the place the pair waits for.
    assert!(bench.end(&mut busy_one).is_empty(), "the pair keeps its turn on its pod");
    // A model on other pods is not held by it.
    let (_llama, step) = send(&bench, 5, "llama", 1, &[]);
    assert_eq!((step, bench.destination().as_deref()), (Step::Continue, Some(LLAMA)));

    assert_eq!(bench.end(&mut busy_two), [3], "both places free: the pair goes");
    assert_eq!(bench.destination().as_deref(), Some(QWEN));
}

#[test]
fn behind_a_long_queue_of_hinted_requests_another_models_request_goes_at_once() {
    // The gateway's hint on every request (it restricts to its healthy endpoints): each
    // waiting request's pods are the same, looked up once per scan (looked up again for each
    // of a long queue at every arrival, tick and request end, this test took ~50 s
    // unoptimized; `flow_scan/.../hinted` in `cargo bench -p bench-cost --bench decision`
    // gives the scan's cost).
    const WAITING: u32 = 1_500;
    let config = r#"{"fallback_destinations": 0, "flow_control": {"enabled": true, "max_inflight_per_pod": 1,
        "ttl_ms": 600000, "max_queued_requests": 4096, "max_band_requests": 4096}}"#;
    let bench = Bench::new(config);
    let addresses: Vec<String> = (1..=32).map(|i| format!("10.0.1.{i}:8000")).collect();
    let mut pods: Vec<(&str, &str, &[&str], f64)> =
        addresses.iter().map(|address| (address.as_str(), "qwen", &[][..], 0.0)).collect();
    pods.push((LLAMA, "llama", &[], 0.0));
    publish_models(&bench, &pods);
    let mut hint: Vec<&str> = pods.iter().map(|pod| pod.0).collect();
    hint.sort_unstable();
    let hint = hint.join(",");
    let hinted = [("x-gateway-destination-endpoint-subset", hint.as_str())];
    let mut streams = Vec::new();
    for id in 1..=32 {
        let (stream, step) = send(&bench, id, "qwen", 1, &hinted);
        assert_eq!(step, Step::Continue, "qwen's pods fill");
        streams.push(stream);
    }
    for id in 100..100 + WAITING {
        let (stream, step) = send(&bench, id, "qwen", 1, &hinted);
        assert_eq!(step, Step::Pause);
        streams.push(stream);
    }
    bench.tick();
    // Llama's idle pod still takes a llama request at once, past the long qwen queue.
    let (_llama, step) = send(&bench, 9_000, "llama", 1, &hinted);
    assert_eq!((step, bench.destination().as_deref()), (Step::Continue, Some(LLAMA)));
    assert_eq!(bench.end(&mut streams[0]), [100], "qwen's freed place goes to the first in line");
}

#[test]
fn in_the_static_pool_a_hinted_request_waits_for_room_on_its_hints_pods() {
    // No table: the static pool's pods, which the decision still picks among within the hint.
    let bench = Bench::new(&format!(
        r#"{{"pool": ["{QWEN}", "{LLAMA}"], "fallback_destinations": 0,
            "flow_control": {{"enabled": true, "max_inflight_per_pod": 1, "ttl_ms": 1000}}}}"#
    ));
    let hinted = [("x-gateway-destination-endpoint-subset", QWEN)];
    let (mut first, step) = send(&bench, 1, "qwen", 1, &hinted);
    assert_eq!((step, bench.destination().as_deref()), (Step::Continue, Some(QWEN)));
    let (_second, step) = send(&bench, 2, "qwen", 1, &hinted);
    assert_eq!(step, Step::Pause, "its hint's pod is full, whatever the other's room");
    bench.host.replies.borrow_mut().clear();
    let (_outside, _) = send(&bench, 3, "qwen", 1, &[("x-gateway-destination-endpoint-subset", "10.0.0.9:8000")]);
    let status = bench.host.replies.borrow().last().map(|reply| reply.status);
    assert_eq!(status, Some(503), "no pod of the pool in its hint: answered at once");
    assert_eq!(bench.end(&mut first), [2]);
    assert_eq!(bench.destination().as_deref(), Some(QWEN));
}

#[test]
fn a_request_whose_hinted_pod_left_is_answered_though_the_ones_before_it_wait() {
    const OTHER_QWEN: &str = "10.0.0.3:8000";
    let bench = Bench::new(&config(1));
    publish_models(&bench, &[(QWEN, "qwen", &[], 0.0), (OTHER_QWEN, "qwen", &[], 0.0)]);
    let (_busy, _) = send(&bench, 1, "qwen", 1, &[]);
    let (_busy_too, _) = send(&bench, 2, "qwen", 1, &[]);
    // Every pod is full and kept by the first waiting request: a scan stops there.
    let (_waiting, step) = send(&bench, 3, "qwen", 1, &[]);
    assert_eq!(step, Step::Pause);
    let (_hinted, step) = send(&bench, 4, "qwen", 1, &[("x-gateway-destination-endpoint-subset", OTHER_QWEN)]);
    assert_eq!(step, Step::Pause);
    bench.tick();
    // Its pod leaves the pool: no pod will ever take it.
    publish_models_as(&bench, &[(QWEN, "qwen", &[], 0.0)], 2);
    bench.host.replies.borrow_mut().clear();
    bench.tick();
    let status = bench.host.replies.borrow().last().map(|reply| reply.status);
    assert_eq!(status, Some(503), "answered on the next tick, as one arriving now");
    assert_eq!(bench.host.effective_context.get(), Some(4));
}

/// [`send`] on `worker`, another worker of the same Envoy.
fn send_on(bench: &Bench, worker: &std::rc::Rc<wasm_epp_router::Worker>, id: u32, model: &str) -> Step {
    bench.send_as(worker, id, &COMPLETIONS, &model_completion(model, id, 1)).1
}

#[test]
fn a_worker_with_nothing_in_flight_on_a_requests_pods_takes_their_places_summed() {
    // Another worker's requests take a place on each of qwen's two pods; this worker's own
    // request in flight is on llama's pod, and its end frees no place of qwen's.
    const OTHER_QWEN: &str = "10.0.0.3:8000";
    let bench = Bench::new(&config(2));
    publish_models(&bench, &[(QWEN, "qwen", &[], 0.0), (OTHER_QWEN, "qwen", &[], 0.0), (LLAMA, "llama", &[], 0.0)]);
    let other = bench.another_worker(11);
    assert_eq!(send_on(&bench, &other, 1, "qwen"), Step::Continue);
    assert_eq!(send_on(&bench, &other, 2, "qwen"), Step::Continue);
    let (_llama, step) = send(&bench, 3, "llama", 1, &[]);
    assert_eq!((step, bench.destination().as_deref()), (Step::Continue, Some(LLAMA)));
    bench.tick_with(&other);
    // No pod of qwen's has two places free, nor will one while the other worker's requests
    // take each as it frees: as a worker with nothing in flight, it takes them across its pods.
    let (_pair, step) = send(&bench, 4, "qwen", 2, &[]);
    assert_eq!(step, Step::Continue, "not held for places no end of its own will free");
}

#[test]
fn a_workers_share_is_of_a_requests_own_pods_not_of_the_pool() {
    // Two workers wait (llama's two pods are full); this one holds both llama places, half the
    // pool's three. Counted over the pool it has used its share; qwen's pod, free and of
    // another model, is no part of what it holds.
    const LLAMA_TWO: &str = "10.0.0.3:8000";
    let bench = Bench::new(&config(1));
    publish_models(&bench, &[(QWEN, "qwen", &[], 0.0), (LLAMA, "llama", &[], 0.0), (LLAMA_TWO, "llama", &[], 0.0)]);
    let other = bench.another_worker(11);
    let (_one, step) = send(&bench, 1, "llama", 1, &[]);
    assert_eq!(step, Step::Continue);
    let (_two, step) = send(&bench, 2, "llama", 1, &[]);
    assert_eq!(step, Step::Continue);
    let (_three, step) = send(&bench, 3, "llama", 1, &[]);
    assert_eq!(step, Step::Pause, "llama's pods are full");
    bench.tick_with(&other);
    assert_eq!(send_on(&bench, &other, 4, "llama"), Step::Pause, "the other worker waits too");
    // The other worker says so on its tick; this one reads it on its next.
    bench.tick_with(&other);
    bench.tick();
    let (_qwen, step) = send(&bench, 5, "qwen", 1, &[]);
    assert_eq!(
        (step, bench.destination().as_deref()),
        (Step::Continue, Some(QWEN)),
        "its share of qwen's pod is whole"
    );
}

#[test]
fn a_request_queued_while_the_table_had_expired_is_checked_against_it_when_it_is_back() {
    // The static pool is qwen's pod; the table (version 1) serves qwen alone.
    let bench = Bench::new(&format!(
        r#"{{"pool": ["{QWEN}"], "fallback_destinations": 0, "fail_open_max_age_ms": 1000,
            "flow_control": {{"enabled": true, "max_inflight_per_pod": 1, "ttl_ms": 600000}}}}"#
    ));
    publish_models(&bench, &[(QWEN, "qwen", &[], 0.0)]);
    let (_busy, step) = send(&bench, 1, "qwen", 1, &[]);
    assert_eq!((step, bench.destination().as_deref()), (Step::Continue, Some(QWEN)));
    let (_waiting, step) = send(&bench, 2, "qwen", 1, &[]);
    assert_eq!(step, Step::Pause);
    // Every waiting request checked against table 1: a scan may now stop at the first.
    bench.tick();
    // The pool service goes silent: the table no longer says who is in the pool, and a
    // request for a model it does not serve waits for the static pool's full pod.
    bench.host.advance(2_000);
    let (_unknown, step) = send(&bench, 3, "mistral", 1, &[]);
    assert_eq!(step, Step::Pause, "in the static pool every pod may serve it");
    // The service is back with table 1 before any tick: no pod of it serves that model.
    bench.heartbeat();
    bench.host.replies.borrow_mut().clear();
    bench.tick();
    let status = bench.host.replies.borrow().last().map(|reply| reply.status);
    assert_eq!(status, Some(404), "answered as one arriving now, though the one before it waits");
    assert_eq!(bench.host.effective_context.get(), Some(3));
}

#[test]
fn past_the_scans_cap_a_newcomer_does_not_take_a_place_a_higher_band_waits_for() {
    // More qwen requests wait than one scan looks at, all in a high band; behind them, a llama
    // request of that band waits for llama's pod.
    let config = r#"{"fallback_destinations": 0, "flow_control": {"enabled": true, "max_inflight_per_pod": 1,
        "ttl_ms": 600000, "max_queued_requests": 8192, "max_band_requests": 8192}}"#;
    let bench = Bench::new(config);
    publish_models(&bench, &[(QWEN, "qwen", &[], 0.0), (LLAMA, "llama", &[], 0.0)]);
    let (_qwen_busy, _) = send(&bench, 1, "qwen", 1, &[]);
    let (mut llama_busy, step) = send(&bench, 2, "llama", 1, &[]);
    assert_eq!((step, bench.destination().as_deref()), (Step::Continue, Some(LLAMA)));
    let high = [("x-gateway-inference-priority", "5")];
    let mut streams = Vec::new();
    for id in 100..4_300 {
        let (stream, step) = send(&bench, id, "qwen", 1, &high);
        assert_eq!(step, Step::Pause);
        streams.push(stream);
    }
    let (_llama_waiting, step) = send(&bench, 9_000, "llama", 1, &high);
    assert_eq!(step, Step::Pause, "llama's pod is full");
    // Llama's place frees; the scan stops at its cap before the waiting llama request (past
    // it, requests wait for those before them).
    bench.end(&mut llama_busy);
    // A lower band's llama request must not take the place the higher band's waits for.
    let (_low, step) = send(&bench, 9_001, "llama", 1, &[("x-gateway-inference-priority", "0")]);
    assert_eq!(step, Step::Pause, "a lower band does not go past a waiting request of its pods");
}

#[test]
fn a_newcomer_does_not_take_a_place_a_request_after_a_releasable_one_waits_for() {
    // Another worker (one that never waits) fills llama's pod and qwen's; a critical llama
    // request, then a critical qwen one, wait here for them.
    let bench = Bench::new(&config(1));
    publish_models(&bench, &[(QWEN, "qwen", &[], 0.0), (LLAMA, "llama", &[], 0.0)]);
    let other = bench.another_worker(11);
    let mut busy = Vec::new();
    for (id, model) in [(1, "llama"), (2, "qwen")] {
        let body = format!(r#"{{"model":"{model}","prompt":"request {id}","max_tokens":4}}"#);
        bench.host.set_request(&COMPLETIONS, body.as_bytes());
        let mut stream = RequestStream::for_context(other.clone(), id);
        assert_eq!(stream.on_request_headers(&bench.host, false), Step::Pause);
        assert_eq!(stream.on_request_body(&bench.host, body.len(), true), Step::Continue);
        busy.push(stream);
    }
    bench.tick_with(&other);
    let critical = [("x-gateway-inference-priority", "5")];
    let (_llama, step) = send(&bench, 3, "llama", 1, &critical);
    assert_eq!(step, Step::Pause);
    let (_qwen, step) = send(&bench, 4, "qwen", 1, &critical);
    assert_eq!(step, Step::Pause);
    bench.tick();
    // Both of the other worker's requests end: both pods have a place, before this worker's
    // next tick releases its two waiting requests.
    for stream in &mut busy {
        assert!(bench.end(stream).is_empty());
    }
    // A standard qwen request arrives: the llama request may go first (its pods are not
    // qwen's), and the critical qwen request after it waits for qwen's place.
    let (_newcomer, step) = send(&bench, 5, "qwen", 1, &[]);
    assert_eq!(step, Step::Pause, "the critical qwen request waits for qwen's free place");
    bench.tick();
    assert_eq!(std::mem::take(&mut *bench.host.resumed.borrow_mut()), [3, 4]);
}
