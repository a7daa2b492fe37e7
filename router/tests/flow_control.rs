//! Flow control on one worker, natively: hold, release in order, TTL, disconnect, no pods.

mod common;

use common::{completion, Bench, COMPLETIONS};
use std::rc::Rc;
use wasm_epp_host::Host;

use wasm_epp_router::{RequestStream, Step, Worker};

const ONE_POD: [(&str, f64); 1] = [("10.0.0.1:8000", 0.0)];

fn config(extra: &str) -> String {
    config_with(1, extra)
}

fn config_with(max_inflight_per_pod: u32, extra: &str) -> String {
    format!(
        r#"{{"fallback_destinations": 0, "flow_control": {{"enabled": true,
            "max_inflight_per_pod": {max_inflight_per_pod}, "ttl_ms": 1000, "sheddable_ttl_ms": 200 {extra}}}}}"#
    )
}

/// Sends headers and body of a request on context `id`; returns the stream and its body step.
fn send(bench: &Bench, id: u32, headers: &[(&str, &str)], prompt: &str) -> (RequestStream, Step) {
    send_body(bench, id, headers, &completion(prompt))
}

fn send_body(bench: &Bench, id: u32, headers: &[(&str, &str)], body: &str) -> (RequestStream, Step) {
    send_on(bench, &bench.worker, id, headers, body)
}

/// [`send_body`] on `worker` (another worker of the same Envoy).
fn send_on(bench: &Bench, worker: &Rc<Worker>, id: u32, headers: &[(&str, &str)], body: &str) -> (RequestStream, Step) {
    let mut all: Vec<(&str, &str)> = COMPLETIONS.to_vec();
    all.extend_from_slice(headers);
    bench.host.set_request(&all, body.as_bytes());
    let mut stream = RequestStream::for_context(worker.clone(), id);
    assert_eq!(stream.on_request_headers(&bench.host, false), Step::Pause);
    let step = stream.on_request_body(&bench.host, body.len(), true);
    (stream, step)
}

/// The last local reply's status and `x-llm-d-request-dropped-reason`.
fn last_refusal(bench: &Bench) -> Option<(u32, String)> {
    let replies = bench.host.replies.borrow();
    let reply = replies.last()?;
    let reason = reply.headers.iter().find(|(name, _)| name == "x-llm-d-request-dropped-reason");
    Some((reply.status, reason.map(|(_, value)| value.clone()).unwrap_or_default()))
}

fn resumed(bench: &Bench) -> Vec<u32> {
    std::mem::take(&mut *bench.host.resumed.borrow_mut())
}

#[test]
fn with_room_a_request_goes_on_at_once_and_without_it_waits_until_one_ends() {
    let bench = Bench::new(&config(""));
    bench.publish(1, &ONE_POD);
    let (mut first, step) = send(&bench, 1, &[], "first");
    assert_eq!(step, Step::Continue, "room: routed directly");
    let (mut second, step) = send(&bench, 2, &[], "second");
    assert_eq!(step, Step::Pause, "the pod has its one request in flight: held");
    assert!(bench.host.replies.borrow().is_empty(), "held, not answered");
    bench.host.headers.borrow_mut().clone_from(&Default::default());
    first.on_log(&bench.host);
    assert_eq!(resumed(&bench), [2], "the end of the first releases the second at once");
    assert_eq!(bench.host.header("x-gateway-destination-endpoint").as_deref(), Some("10.0.0.1:8000"));
    assert_eq!(bench.host.effective_context.get(), Some(2), "the header went to the held stream");
    assert_eq!(bench.worker.inflight.borrow().count("10.0.0.1:8000"), 1);
    second.on_log(&bench.host);
    assert_eq!(bench.worker.inflight.borrow().count("10.0.0.1:8000"), 0, "the released one's count is released too");
    assert_eq!(bench.stat("wasm_epp.flow.released"), 1);
    assert_eq!(bench.stat("wasm_epp.flow.dispatched_directly"), 1);
}

#[test]
fn release_order_is_priority_then_turns_between_tenants() {
    let bench = Bench::new(&config(""));
    bench.publish(1, &ONE_POD);
    let (mut busy, _) = send(&bench, 1, &[], "busy");
    let arrivals: [(u32, &str, &str); 6] =
        [(10, "0", "a"), (11, "0", "a"), (12, "0", "a"), (13, "-1", "a"), (14, "0", "b"), (15, "2", "c")];
    let mut streams = std::collections::BTreeMap::new();
    for (id, priority, tenant) in arrivals {
        let headers = [("x-gateway-inference-priority", priority), ("x-llm-d-inference-fairness-id", tenant)];
        let (stream, step) = send(&bench, id, &headers, &format!("p{id}"));
        assert_eq!(step, Step::Pause);
        streams.insert(id, stream);
    }
    busy.on_log(&bench.host);
    let mut order = resumed(&bench);
    while let Some(last) = order.last().copied().filter(|_| order.len() < arrivals.len()) {
        // The released one ends, freeing the one place: the next in line follows.
        streams.get_mut(&last).unwrap().on_log(&bench.host);
        let next = resumed(&bench);
        assert_eq!(next.len(), 1, "one place, one release: {next:?}");
        order.extend(next);
    }
    assert_eq!(order, [15, 10, 14, 11, 12, 13], "critical, then a and b alternate, sheddable last");
}

#[test]
fn a_request_that_waits_its_ttl_gets_429_with_the_reason_and_sheddable_ones_go_first() {
    let bench = Bench::new(&config(""));
    bench.publish(1, &ONE_POD);
    let (_busy, _) = send(&bench, 1, &[], "busy");
    let (_standard, _) = send(&bench, 2, &[], "standard");
    let (_sheddable, _) = send(&bench, 3, &[("x-gateway-inference-priority", "-1")], "sheddable");
    bench.host.advance(250);
    bench.heartbeat();
    bench.tick();
    let replies = bench.host.replies.borrow().clone();
    assert_eq!(replies.len(), 1, "only the sheddable one has passed its TTL: {replies:?}");
    assert_eq!(replies[0].status, 429);
    assert!(replies[0].headers.contains(&("x-llm-d-request-dropped-reason".into(), "rejected-ttl-expired".into())));
    assert_eq!(bench.host.effective_context.get(), Some(3));
    assert_eq!(bench.host.tick_period_ms.get(), Some(5), "ticks fast while something waits");
    bench.host.advance(800);
    bench.heartbeat();
    bench.tick();
    assert_eq!(bench.host.replies.borrow().len(), 2);
    assert_eq!(bench.stat("wasm_epp.flow.dropped.ttl_expired"), 2);
    assert_eq!(bench.worker.flow.waiting(), 0);
    bench.tick();
    assert_eq!(bench.host.tick_period_ms.get(), Some(20), "back to the normal tick when nothing waits");
}

#[test]
fn a_client_that_goes_away_leaves_the_queue_at_once() {
    let bench = Bench::new(&config(""));
    bench.publish(1, &ONE_POD);
    let (mut busy, _) = send(&bench, 1, &[], "busy");
    let (mut gone, _) = send(&bench, 2, &[], "gone");
    gone.on_done(&bench.host);
    gone.on_log(&bench.host);
    assert_eq!(bench.worker.flow.waiting(), 0);
    assert_eq!(bench.stat("wasm_epp.flow.dropped.client_gone"), 1);
    busy.on_log(&bench.host);
    assert!(resumed(&bench).is_empty(), "nothing left to release");
    assert_eq!(bench.worker.inflight.borrow().count("10.0.0.1:8000"), 0);
}

#[test]
fn with_no_pod_at_all_requests_wait_for_one_then_get_503() {
    let bench = Bench::new(&config(""));
    bench.publish(1, &[]);
    let (_early, step) = send(&bench, 1, &[], "early");
    assert_eq!(step, Step::Pause, "scale from zero: it waits");
    bench.host.advance(100);
    bench.publish(2, &ONE_POD);
    bench.tick();
    assert_eq!(resumed(&bench), [1], "a pod appeared: released");
    let (_late, _) = send(&bench, 2, &[], "late");
    bench.publish(3, &[]);
    bench.host.advance(1_001);
    bench.heartbeat();
    bench.tick();
    let refusal = last_refusal(&bench);
    assert_eq!(refusal, Some((503, "rejected-no-endpoints".into())), "as llm-d answers a TTL with no pod");
}

#[test]
fn a_full_queue_refuses_and_evicts_sheddable_work_for_higher_priority() {
    let bench = Bench::new(&config(r#", "max_queued_requests": 2"#));
    bench.publish(1, &ONE_POD);
    let (_busy, _) = send(&bench, 1, &[], "busy");
    let (_s1, _) = send(&bench, 2, &[("x-gateway-inference-priority", "-1")], "s1");
    let (_s2, _) = send(&bench, 3, &[("x-gateway-inference-priority", "-1")], "s2");
    let (_std, step) = send(&bench, 4, &[], "standard");
    assert_eq!(step, Step::Pause);
    assert!(bench.host.replies.borrow().is_empty(), "the evicted one is answered on the tick");
    bench.tick();
    assert_eq!(bench.host.effective_context.get(), Some(3), "the newest sheddable one was evicted");
    assert_eq!(bench.stat("wasm_epp.flow.dropped.evicted"), 1);
    assert_eq!(last_refusal(&bench), Some((429, "evicted-for-higher-priority".into())), "our own value");
    let (_std2, _) = send(&bench, 5, &[], "standard 2");
    let (_std3, _) = send(&bench, 6, &[], "standard 3");
    assert_eq!(last_refusal(&bench), Some((429, "rejected-saturated".into())), "llm-d's value for a full queue");
    assert_eq!(bench.stat("wasm_epp.flow.dropped.capacity"), 1);
    assert_eq!(bench.host.now_ms(), common::NOW);
}

#[test]
fn an_evicted_request_whose_client_leaves_before_the_tick_is_not_answered() {
    // Found by the chaos test's HTTP/2 clients (an Envoy crash): Envoy ends a reset stream's
    // filter (`on_log`, `on_done`, then the SDK's `on_delete`) before it frees the stream, and
    // until then `set_effective_context` on it still succeeds; a reply sent then runs the
    // stream's response callbacks on a context the SDK has deleted ("invalid context_id").
    let bench = Bench::new(&config(r#", "max_queued_requests": 2"#));
    bench.publish(1, &ONE_POD);
    let (_busy, _) = send(&bench, 1, &[], "busy");
    let (_s1, _) = send(&bench, 2, &[("x-gateway-inference-priority", "-1")], "s1");
    let (mut s2, _) = send(&bench, 3, &[("x-gateway-inference-priority", "-1")], "s2");
    let (_std, _) = send(&bench, 4, &[], "standard");
    // Evicted (answered on the tick), its client resets the stream first; Envoy still knows
    // context 3 (it is not in `gone_contexts`).
    s2.on_log(&bench.host);
    s2.on_done(&bench.host);
    bench.tick();
    assert!(bench.host.replies.borrow().is_empty(), "no reply to a stream whose filter ended");
    assert_eq!(bench.host.effective_context.get(), None, "nothing done on its stream");
    assert_eq!(bench.stat("wasm_epp.flow.dropped.client_gone"), 1, "counted once, as a client gone");
    assert_eq!(bench.stat("wasm_epp.flow.dropped.evicted"), 0);
}

#[test]
fn stale_metrics_follow_the_configured_policy() {
    for (policy, released) in [("ignore", true), ("saturated", false)] {
        let bench = Bench::new(&config_with(4, &format!(r#", "stale_metrics": "{policy}""#)));
        bench.publish(1, &ONE_POD);
        bench.host.advance(6_000);
        bench.heartbeat();
        let (_r, step) = send(&bench, 1, &[], "stale");
        assert_eq!(step == Step::Continue, released, "policy {policy}");
    }
}

#[test]
fn reserved_places_are_left_to_higher_priorities() {
    let bench = Bench::new(&config_with(2, r#", "reserved_per_pod": 1, "reserved_min_priority": 1"#));
    bench.publish(1, &ONE_POD);
    let (_standard, step) = send(&bench, 1, &[], "standard");
    assert_eq!(step, Step::Continue, "one place below the reserve");
    let (mut waiting, step) = send(&bench, 2, &[], "standard 2");
    assert_eq!(step, Step::Pause, "the last place is reserved");
    let (mut critical, step) = send(&bench, 3, &[("x-gateway-inference-priority", "2")], "critical");
    assert_eq!(step, Step::Continue, "a critical request takes the reserved place at once");
    critical.on_log(&bench.host);
    assert!(resumed(&bench).is_empty(), "the freed place is reserved again: the standard one still waits");
    waiting.on_done(&bench.host);
}

#[test]
fn the_reserve_is_kept_on_each_pod_with_room_so_a_saturated_pod_holds_nothing_back() {
    let bench = Bench::new(&config_with(4, r#", "reserved_per_pod": 2, "reserved_min_priority": 1"#));
    // The second pod's engine queue is long: saturated, it has no place to reserve.
    bench.publish(1, &[("10.0.0.1:8000", 0.0), ("10.0.0.2:8000", 9.0)]);
    for id in 1..=2 {
        let (_standard, step) = send(&bench, id, &[], &format!("standard {id}"));
        assert_eq!(step, Step::Continue, "request {id}: 2 of the idle pod's 4 places are open to standard");
        assert_eq!(bench.host.header("x-gateway-destination-endpoint").as_deref(), Some("10.0.0.1:8000"));
    }
    let (mut third, step) = send(&bench, 3, &[], "standard 3");
    assert_eq!(step, Step::Pause, "the idle pod's other 2 places are reserved");
    let (_critical, step) = send(&bench, 4, &[("x-gateway-inference-priority", "2")], "critical");
    assert_eq!(step, Step::Continue, "and a critical request finds one at once");
    third.on_done(&bench.host);
}

#[test]
fn with_a_slow_waiting_tick_two_backlogged_workers_still_share_the_pool() {
    // Ticks every 500 ms while waiting, 250 ms out of step: each worker reads the other's
    // record a quarter to a half tick old, and must still count it.
    let bench = Bench::new(&config_with(4, r#", "waiting_tick_ms": 500"#));
    bench.publish(1, &ONE_POD);
    let other = bench.another_worker(9);
    let mut busy: Vec<RequestStream> = (1..=4).map(|id| send(&bench, id, &[], &format!("busy {id}")).0).collect();
    let (_a5, step) = send(&bench, 5, &[], "a5");
    assert_eq!(step, Step::Pause, "the pod's 4 places are this worker's");
    let (_a6, _) = send(&bench, 6, &[], "a6");
    let other_tick = || wasm_epp_router::tick::on_tick(&other, &bench.host);
    bench.tick();
    other_tick();
    let (_b1, step) = send_on(&bench, &other, 21, &[], &completion("b1"));
    assert_eq!(step, Step::Pause, "the other worker sees the pod full");
    bench.later(250);
    other_tick();
    bench.later(250);
    bench.tick();
    busy.remove(0).on_log(&bench.host);
    assert!(resumed(&bench).is_empty(), "both wait: this worker's share is 2 of 4, and it has 3 in flight");
    bench.later(250);
    other_tick();
    assert_eq!(resumed(&bench), [21], "the freed place goes to the other worker's queue");
    for mut stream in busy {
        stream.on_done(&bench.host);
    }
}

#[test]
fn a_critical_request_on_one_worker_goes_before_the_sheddable_ones_waiting_on_another() {
    let bench = Bench::new(&config_with(4, ""));
    bench.publish(1, &ONE_POD);
    let other = bench.another_worker(9);
    let other_tick = || wasm_epp_router::tick::on_tick(&other, &bench.host);
    // The other worker holds the pod's 4 places; this one has sheddable requests waiting.
    let mut busy: Vec<RequestStream> =
        (21..=24).map(|id| send_on(&bench, &other, id, &[], &completion(&format!("busy {id}"))).0).collect();
    other_tick();
    bench.tick();
    let sheddable = [("x-gateway-inference-priority", "-1")];
    let mut held: Vec<RequestStream> = (1..=2)
        .map(|id| {
            let (stream, step) = send(&bench, id, &sheddable, &format!("sheddable {id}"));
            assert_eq!(step, Step::Pause, "the pool is full");
            stream
        })
        .collect();
    // A critical request reaches the other worker: it waits too.
    let (mut critical, step) =
        send_on(&bench, &other, 25, &[("x-gateway-inference-priority", "2")], &completion("critical"));
    assert_eq!(step, Step::Pause);
    for _ in 0..2 {
        bench.tick();
        other_tick();
        bench.later(5);
    }
    // A place frees on the other worker: its critical request takes it, although the other
    // worker has more than half the pool in flight (the sheddable ones' worker holds).
    busy.remove(0).on_log(&bench.host);
    assert_eq!(resumed(&bench), [25], "the critical request first");
    busy.remove(0).on_log(&bench.host);
    bench.tick();
    assert!(resumed(&bench).is_empty(), "this worker holds until the other says its critical band no longer waits");
    bench.later(5);
    other_tick();
    bench.tick(); // releases on its last view, then reads the new one
    bench.later(5);
    bench.tick();
    assert_eq!(resumed(&bench), [1], "then the sheddable ones");
    critical.on_done(&bench.host);
    for mut stream in busy.into_iter().chain(held.drain(..)) {
        stream.on_done(&bench.host);
    }
}

#[test]
fn a_worker_that_starts_waiting_leaves_a_place_its_own_request_frees_to_a_higher_band_waiting_elsewhere() {
    let bench = Bench::new(&config_with(2, ""));
    bench.publish(1, &ONE_POD);
    let other = bench.another_worker(9);
    let other_tick = || wasm_epp_router::tick::on_tick(&other, &bench.host);
    // One place each; this worker's queue is empty at its tick.
    let (mut mine, step) = send(&bench, 1, &[], "mine");
    assert_eq!(step, Step::Continue);
    let (mut theirs, step) = send_on(&bench, &other, 21, &[], &completion("theirs"));
    assert_eq!(step, Step::Continue);
    other_tick();
    bench.tick();
    // A critical request waits on the other worker, which says so on its tick; then a
    // sheddable one reaches this worker and waits, before this worker's next tick.
    let (mut critical, step) =
        send_on(&bench, &other, 22, &[("x-gateway-inference-priority", "2")], &completion("critical"));
    assert_eq!(step, Step::Pause, "the pool is full");
    other_tick();
    bench.later(1);
    let (mut sheddable, step) = send(&bench, 2, &[("x-gateway-inference-priority", "-1")], "sheddable");
    assert_eq!(step, Step::Pause);
    // This worker's request ends: the place it frees is the critical request's.
    mine.on_log(&bench.host);
    assert!(resumed(&bench).is_empty(), "the sheddable request holds while a critical one waits elsewhere");
    other_tick();
    assert_eq!(resumed(&bench), [22]);
    critical.on_log(&bench.host);
    bench.later(5);
    other_tick(); // says it no longer waits
    bench.tick(); // releases on its last view, then reads the new one
    bench.later(5);
    bench.tick();
    assert_eq!(resumed(&bench), [2], "then the sheddable one");
    theirs.on_log(&bench.host);
    sheddable.on_log(&bench.host);
}

#[test]
fn a_band_allowed_the_reserved_places_still_leaves_a_freed_place_to_a_higher_band_waiting_on_another_worker() {
    // Standard requests may use the reserved places here, so they are not held to this
    // worker's share; they are held behind a critical request waiting on the other worker.
    let bench = Bench::new(&config_with(4, r#", "reserved_per_pod": 1, "reserved_min_priority": 0"#));
    bench.publish(1, &ONE_POD);
    let other = bench.another_worker(9);
    let other_tick = || wasm_epp_router::tick::on_tick(&other, &bench.host);
    let critical = [("x-gateway-inference-priority", "2")];
    let (mut mine, step) = send(&bench, 1, &critical, "busy 1");
    assert_eq!(step, Step::Continue);
    let mut busy: Vec<RequestStream> =
        (21..=23).map(|id| send_on(&bench, &other, id, &critical, &completion(&format!("busy {id}"))).0).collect();
    other_tick();
    bench.tick();
    let (mut standard, step) = send(&bench, 2, &[], "standard");
    assert_eq!(step, Step::Pause, "the pool is full");
    let (mut waiting, step) = send_on(&bench, &other, 24, &critical, &completion("critical"));
    assert_eq!(step, Step::Pause);
    for _ in 0..2 {
        bench.tick();
        other_tick();
        bench.later(5);
    }
    // This worker's own request ends: the place it frees is left to the other's critical one.
    mine.on_log(&bench.host);
    assert!(resumed(&bench).is_empty(), "the standard request holds while a critical one waits elsewhere");
    other_tick();
    assert_eq!(resumed(&bench), [24]);
    waiting.on_done(&bench.host);
    standard.on_done(&bench.host);
    for mut stream in busy.drain(..) {
        stream.on_done(&bench.host);
    }
}

#[test]
fn a_replica_holding_the_pool_leaves_the_places_that_free_to_a_peer_replica_that_waits() {
    // This replica's worker holds the pod's 4 places and has 2 more waiting; another replica,
    // started during the overload, has a worker waiting too (its pool service told ours).
    let bench = Bench::new(
        r#"{"fallback_destinations": 0, "flow_control": {"enabled": true, "max_inflight_per_pod": 4, "ttl_ms": 60000}}"#,
    );
    bench.publish(1, &ONE_POD);
    let mut busy: Vec<RequestStream> = (1..=4).map(|id| send(&bench, id, &[], &format!("busy {id}")).0).collect();
    let held: Vec<(RequestStream, Step)> = (5..=7).map(|id| send(&bench, id, &[], &format!("held {id}"))).collect();
    assert!(held.iter().all(|(_, step)| *step == Step::Pause));
    bench.tick();
    // Alone in waiting, it refills the place that frees, in the ending request's callback.
    busy.remove(0).on_log(&bench.host);
    assert_eq!(resumed(&bench), [5], "no peer waits: refilled at once, as without peers");
    let mut peer = picker::flow_share::Waiting::default();
    peer.add(Some(0), 1);
    picker::flow_share::publish_peer_waiting(&bench.host, bench.host.now_ms(), peer).unwrap();
    bench.later(5);
    bench.tick();
    // Two workers wait in all: its share is ceil(4 / 2) = 2, and it has 4 in flight.
    busy.remove(0).on_log(&bench.host);
    busy.remove(0).on_log(&bench.host);
    bench.later(5);
    bench.tick();
    assert!(resumed(&bench).is_empty(), "the two freed places are left to the peer replica");
    busy.remove(0).on_log(&bench.host);
    assert_eq!(resumed(&bench), [6], "below its share again: it takes the next");
    // The peer's pool service stops publishing (the peer fell silent): the whole pool again.
    bench.later(picker::inflight::SLOT_STALE_MS + 1);
    bench.tick(); // releases on its last count, then reads the new one
    bench.later(5);
    bench.tick();
    assert_eq!(resumed(&bench), [7], "the peer no longer counts");
    for (mut stream, _) in held {
        stream.on_done(&bench.host);
    }
}

#[test]
fn a_released_request_goes_to_a_pod_with_room_not_to_its_warm_but_full_pod() {
    let bench = Bench::new(&config_with(1, ""));
    bench.publish(1, &[("10.0.0.1:8000", 0.0), ("10.0.0.2:8000", 0.0)]);
    let prompt = "the same long prompt ".repeat(40);
    let (_first, _) = send(&bench, 1, &[], &prompt);
    let warm = bench.host.header("x-gateway-destination-endpoint").unwrap();
    let (_second, step) = send(&bench, 2, &[], &prompt);
    assert_eq!(step, Step::Continue, "the other pod has room");
    let other = bench.host.header("x-gateway-destination-endpoint").unwrap();
    assert_ne!(warm, other, "the pod holding the prefix is at its bound: the request goes where there is room");
}

#[test]
fn a_request_ttl_header_shortens_its_wait_never_lengthens_it_and_answers_say_how_long_they_waited() {
    let bench = Bench::new(&config(""));
    bench.publish(1, &ONE_POD);
    let (mut busy, _) = send(&bench, 1, &[], "busy");
    bench.host.set_response(&[(":status", "200")], b"");
    busy.on_response_headers(&bench.host, false);
    assert_eq!(bench.host.response_header("x-llm-d-flow-queue-duration-ms").as_deref(), Some("0"), "routed at once");
    // The band's TTL is 1 s. In one flow: one without a TTL of its own, one asking for 100 ms
    // behind it, one asking for 5 s (llm-d's duration form), which the band's 1 s caps.
    let (mut standard, _) = send(&bench, 2, &[], "standard");
    let (mut short, _) = send(&bench, 3, &[("x-llm-d-inference-ttl", "100ms")], "short");
    let (mut long, _) = send(&bench, 4, &[("x-llm-d-inference-ttl", "5s")], "long");
    bench.host.advance(150);
    bench.heartbeat();
    bench.tick();
    let replies = bench.host.replies.borrow().clone();
    assert_eq!(replies.iter().map(|r| r.status).collect::<Vec<_>>(), [429], "the 100 ms one expired alone");
    assert_eq!(bench.host.effective_context.get(), Some(3), "behind a request with a longer wait");
    // Envoy runs the response hooks for a local reply too: no wait reported on the 429.
    bench.host.set_response(&[(":status", "429")], b"");
    short.on_response_headers(&bench.host, false);
    assert_eq!(bench.host.response_header("x-llm-d-flow-queue-duration-ms"), None);
    short.on_log(&bench.host);
    bench.host.advance(450);
    bench.heartbeat();
    bench.tick();
    busy.on_log(&bench.host);
    assert_eq!(resumed(&bench), [2], "the first in line, after 600 ms");
    bench.host.set_response(&[(":status", "200")], b"");
    standard.on_response_headers(&bench.host, false);
    assert_eq!(bench.host.response_header("x-llm-d-flow-queue-duration-ms").as_deref(), Some("600"));
    bench.host.advance(500);
    bench.heartbeat();
    bench.tick();
    assert_eq!(bench.host.replies.borrow().len(), 2, "1.1 s: the 5 s one had the band's 1 s");
    assert_eq!(bench.host.effective_context.get(), Some(4));
    long.on_log(&bench.host);
    standard.on_log(&bench.host);
}

#[test]
fn a_request_giving_up_at_its_own_ttl_does_not_send_the_sheddable_ones_away() {
    let bench = Bench::new(
        r#"{"fallback_destinations": 0, "flow_control": {"enabled": true, "max_inflight_per_pod": 1,
            "ttl_ms": 1000, "sheddable_ttl_ms": 1000}}"#,
    );
    bench.publish(1, &ONE_POD);
    let (mut busy, _) = send(&bench, 1, &[], "busy");
    let (_sheddable, _) = send(&bench, 2, &[("x-gateway-inference-priority", "-1")], "sheddable");
    let (_impatient, _) = send(&bench, 3, &[("x-llm-d-inference-ttl", "50ms")], "impatient");
    bench.host.advance(60);
    bench.heartbeat();
    bench.tick();
    let replies = bench.host.replies.borrow().clone();
    assert_eq!(replies.iter().map(|r| r.status).collect::<Vec<_>>(), [429], "the impatient one alone");
    assert_eq!(bench.host.effective_context.get(), Some(3));
    assert_eq!(bench.stat("wasm_epp.flow.dropped.evicted"), 0, "the sheddable one still waits");
    busy.on_log(&bench.host);
    assert_eq!(resumed(&bench), [2], "and is released when the pod frees up");
}

#[test]
fn a_released_request_reports_the_pod_that_answered_when_asked() {
    let bench = Bench::new(
        r#"{"fallback_destinations": 0, "flow_control": {"enabled": true, "max_inflight_per_pod": 1},
            "models": {"served_endpoint_header": "x-gateway-destination-endpoint-served"}}"#,
    );
    bench.publish(1, &ONE_POD);
    let (mut busy, _) = send(&bench, 1, &[], "busy");
    let (mut held, step) = send(&bench, 2, &[], "held");
    assert_eq!(step, Step::Pause);
    busy.on_log(&bench.host);
    assert_eq!(resumed(&bench), [2]);
    bench.host.set_response(&[(":status", "200")], b"");
    bench.host.properties.borrow_mut().insert("upstream\0address".into(), b"10.0.0.1:8000".to_vec());
    held.on_response_headers(&bench.host, false);
    let served = bench.host.response_header("x-gateway-destination-endpoint-served");
    assert_eq!(served.as_deref(), Some("10.0.0.1:8000"), "its pod became the stream's only at release");
    held.on_log(&bench.host);
}

#[test]
fn with_learning_on_a_released_request_s_prompt_tokens_leave_at_its_first_byte_and_it_is_learned_from() {
    let bench = Bench::new(
        r#"{"fallback_destinations": 0, "learning": {"enabled": true},
            "flow_control": {"enabled": true, "max_inflight_per_pod": 1, "ttl_ms": 1000}}"#,
    );
    bench.publish(1, &ONE_POD);
    let pod = ONE_POD[0].0;
    let tokens = || bench.worker.inflight.borrow().tokens(pod);
    let long = "x".repeat(8_000); // ~2k tokens at 4 bytes per token
    let streamed = |prompt: &str| format!(r#"{{"model":"m","prompt":"{prompt} {long}","max_tokens":4,"stream":true}}"#);
    let (mut first, step) = send_body(&bench, 1, &[], &streamed("first"));
    assert_eq!(step, Step::Continue);
    let (mut second, step) = send_body(&bench, 2, &[], &streamed("second"));
    assert_eq!(step, Step::Pause, "held behind the first");
    bench.host.set_response(&[(":status", "200")], b"{}");
    first.on_response_headers(&bench.host, true);
    first.on_log(&bench.host);
    assert_eq!(resumed(&bench), [2]);
    let held_tokens = tokens();
    assert!(held_tokens > 1_000, "the released prompt's uncached tokens are in flight: {held_tokens}");
    bench.host.advance(40);
    bench.host.set_response(&[(":status", "200")], b"data: {}\n\n");
    second.on_response_headers(&bench.host, false);
    second.on_response_body(&bench.host, 10, false);
    assert_eq!(tokens(), 0, "released at its first byte, as a request routed at once");
    assert_eq!(bench.worker.inflight.borrow().count(pod), 1, "the request itself is still in flight");
    second.on_response_body(&bench.host, 0, true);
    second.on_log(&bench.host);
    assert_eq!(
        bench.stat("wasm_epp.learning.ttft_samples"),
        1,
        "the released answer taught the model (the first sent no byte)"
    );
}

#[test]
fn a_request_whose_destination_cannot_be_written_gets_its_own_503_when_its_release_frees_a_held_one() {
    let bench = Bench::new(&config(""));
    bench.publish(1, &ONE_POD);
    // Another worker's request fills the one place; this worker holds one behind it.
    let other = bench.another_worker(9);
    let (mut elsewhere, _) = bench.request_on(&other, &COMPLETIONS, &completion("elsewhere"));
    wasm_epp_router::tick::on_tick(&other, &bench.host);
    bench.tick();
    let (_held, step) = send(&bench, 2, &[], "held");
    assert_eq!(step, Step::Pause);
    // The other ends: the place is free, but this worker releases on its next look.
    elsewhere.on_log(&bench.host);
    bench.host.replies.borrow_mut().clear();
    // A higher band routes at once; Envoy refuses its header (the stream is gone), and its
    // count's release hands the place to the held request, whose header is refused too.
    bench.host.refuse_header_writes.set(true);
    let (_urgent, step) = send(&bench, 3, &[("x-gateway-inference-priority", "2")], "urgent");
    assert_eq!(step, Step::Pause);
    let replies: Vec<(u32, Option<u32>)> = bench.host.replies.borrow().iter().map(|r| (r.status, r.context)).collect();
    assert_eq!(replies, [(503, None), (503, Some(2))], "each stream its own answer, none twice");
    let reasons = bench.host.replies.borrow().iter().map(|r| r.headers.clone()).collect::<Vec<_>>();
    for headers in reasons {
        let reason = ("x-llm-d-request-dropped-reason".to_owned(), "rejected-no-endpoints".to_owned());
        assert!(headers.contains(&reason), "routed at once or released, the same reason: {headers:?}");
    }
}

#[test]
fn a_standard_request_goes_to_a_pod_with_an_open_place_not_into_its_warm_pod_s_reserve() {
    let bench = Bench::new(&config_with(2, r#", "reserved_per_pod": 1, "reserved_min_priority": 1"#));
    bench.publish(1, &[("10.0.0.1:8000", 0.0), ("10.0.0.2:8000", 0.0)]);
    let prompt = "the same long prompt ".repeat(40);
    let (mut first, step) = send(&bench, 1, &[], &prompt);
    assert_eq!(step, Step::Continue);
    let warm = bench.host.header("x-gateway-destination-endpoint").unwrap();
    // The warm pod's open place is taken; its other place is reserved for critical requests.
    let (mut second, step) = send(&bench, 2, &[], &prompt);
    assert_eq!(step, Step::Continue, "the other pod has an open place");
    let other = bench.host.header("x-gateway-destination-endpoint").unwrap();
    assert_ne!(warm, other, "the warm pod's last place is reserved: the standard request goes where one is open");
    let (mut third, step) = send(&bench, 3, &[], &prompt);
    assert_eq!(step, Step::Pause, "both open places are taken");
    let critical = [("x-gateway-inference-priority", "2")];
    let mut criticals: Vec<RequestStream> = (4..=5)
        .map(|id| {
            let (stream, step) = send(&bench, id, &critical, &prompt);
            assert_eq!(step, Step::Continue, "critical request {id}: each pod kept its reserved place");
            stream
        })
        .collect();
    third.on_done(&bench.host);
    for stream in criticals.iter_mut().chain([&mut first, &mut second]) {
        stream.on_log(&bench.host);
    }
}
