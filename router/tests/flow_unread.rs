//! Flow control and requests whose body is not read whole: over `max_body_bytes`, past
//! `max_buffered_bytes`, or one the parse refuses. None may pass the queue nor take a pod past
//! `max_inflight_per_pod`: a body read whole waits like any other, one that streams (not
//! buffered, so not holdable) goes on only when it would be sent at once, else gets 429.
//! Requests without a body (no prompt) and other endpoints' are not flow control's.

// Helpers outside #[test] functions read replies: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use common::{completion, Bench, COMPLETIONS};
use wasm_epp_router::{RequestStream, Step};

const POD: &str = "10.0.0.1:8000";

const CHAT: [(&str, &str); 3] =
    [(":method", "POST"), (":path", "/v1/chat/completions"), ("content-type", "application/json")];

/// One pod, one place; bodies over 1 KiB are not read (buffered at most 1 KiB per worker
/// with `extra` `"max_buffered_bytes": 1024`).
fn bench(extra: &str) -> Bench {
    let bench = Bench::new(&format!(
        r#"{{"fallback_destinations": 0, "max_body_bytes": 1024 {extra},
            "flow_control": {{"enabled": true, "max_inflight_per_pod": 1, "ttl_ms": 1000}}}}"#
    ));
    bench.publish(1, &[(POD, 0.0)]);
    bench
}

/// A whole completions request on context `id`, body read at its end.
fn send(bench: &Bench, id: u32, headers: &[(&str, &str)], body: &str) -> (RequestStream, Step) {
    bench.host.set_request(headers, body.as_bytes());
    let mut stream = RequestStream::for_context(bench.worker.clone(), id);
    assert_eq!(stream.on_request_headers(&bench.host, false), Step::Pause, "{headers:?}");
    let step = stream.on_request_body(&bench.host, body.len(), true);
    (stream, step)
}

/// A request declaring a body over `max_body_bytes`: decided at its headers.
fn send_large(bench: &Bench, id: u32, extra: &[(&str, &str)]) -> (RequestStream, Step) {
    let mut headers = COMPLETIONS.to_vec();
    headers.push(("content-length", "5000"));
    headers.extend_from_slice(extra);
    bench.host.set_request(&headers, b"");
    let mut stream = RequestStream::for_context(bench.worker.clone(), id);
    let step = stream.on_request_headers(&bench.host, false);
    (stream, step)
}

fn inflight(bench: &Bench) -> u32 {
    bench.worker.inflight.borrow().count(POD)
}

/// The last local reply's status and `x-llm-d-request-dropped-reason`, taken.
fn take_refusal(bench: &Bench) -> Option<(u32, String)> {
    let reply = bench.host.replies.borrow_mut().pop()?;
    let reason = reply.headers.iter().find(|(name, _)| name == "x-llm-d-request-dropped-reason");
    Some((reply.status, reason.map(|(_, value)| value.clone()).unwrap_or_default()))
}

fn saturated() -> Option<(u32, String)> {
    Some((429, "rejected-saturated".into()))
}

fn resumed(bench: &Bench) -> Vec<u32> {
    std::mem::take(&mut *bench.host.resumed.borrow_mut())
}

#[test]
fn a_body_over_max_body_bytes_never_passes_the_queue_nor_the_pod_s_bound() {
    let bench = bench("");
    let (mut busy, step) = send(&bench, 1, &COMPLETIONS, &completion("busy"));
    assert_eq!(step, Step::Continue);
    let (mut waiting, step) = send(&bench, 2, &COMPLETIONS, &completion("waiting"));
    assert_eq!(step, Step::Pause, "held behind the first");

    // Declared over the limit, of a higher band even: it cannot wait (its body streams), so
    // it is answered as a full queue answers, not sent to the full pod.
    let (mut large, step) = send_large(&bench, 3, &[("x-gateway-inference-priority", "2")]);
    assert_eq!(step, Step::Pause);
    assert_eq!(take_refusal(&bench), saturated());
    assert_eq!(inflight(&bench), 1, "the pod keeps its one request");
    large.on_log(&bench.host);
    assert_eq!(inflight(&bench), 1);

    // Chunked, without a length, growing past the limit: the same once it does.
    bench.host.set_request(&COMPLETIONS, &[b'x'; 2000]);
    let mut chunked = RequestStream::for_context(bench.worker.clone(), 4);
    assert_eq!(chunked.on_request_headers(&bench.host, false), Step::Pause);
    assert_eq!(chunked.on_request_body(&bench.host, 600, false), Step::Pause, "still buffering");
    assert_eq!(chunked.on_request_body(&bench.host, 2000, false), Step::Pause);
    assert_eq!(take_refusal(&bench), saturated());
    assert_eq!(chunked.on_request_body(&bench.host, 2000, true), Step::Continue, "answered: the rest passes");
    chunked.on_log(&bench.host);
    assert_eq!(inflight(&bench), 1);
    assert_eq!(bench.worker.buffered_bytes.get(), 0, "nothing left counted as buffered");
    assert_eq!(bench.stat("wasm_epp.flow.dropped.capacity"), 2);

    // The first ends: the waiting one takes the place, in order; the queue is empty again.
    busy.on_log(&bench.host);
    assert_eq!(resumed(&bench), [2]);
    assert_eq!(inflight(&bench), 1);
    waiting.on_log(&bench.host);
    assert_eq!(inflight(&bench), 0);
    assert_eq!(bench.stat("wasm_epp.flow.queued"), 1);
}

#[test]
fn with_room_and_nothing_waiting_a_large_body_goes_on_and_holds_its_place_until_it_ends() {
    let bench = bench("");
    let (mut large, step) = send_large(&bench, 1, &[]);
    assert_eq!(step, Step::Continue, "routed at once, unread");
    assert_eq!(bench.host.header("x-gateway-destination-endpoint").as_deref(), Some(POD));
    assert_eq!(inflight(&bench), 1, "it takes the place");
    assert_eq!(bench.stat("wasm_epp.flow.dispatched_directly"), 1);
    bench.host.set_response(&[(":status", "200")], b"");
    large.on_response_headers(&bench.host, false);
    assert_eq!(bench.host.response_header("x-llm-d-flow-queue-duration-ms").as_deref(), Some("0"));

    // A request behind it waits for its place, and gets it when it ends.
    let (mut next, step) = send(&bench, 2, &COMPLETIONS, &completion("next"));
    assert_eq!(step, Step::Pause, "the large body holds the one place");
    large.on_log(&bench.host);
    assert_eq!(resumed(&bench), [2], "its end released the next");
    next.on_log(&bench.host);
    assert_eq!(inflight(&bench), 0);

    // Reset before any answer (client gone, pod reset): its place is released all the same.
    let (mut reset, step) = send_large(&bench, 3, &[]);
    assert_eq!(step, Step::Continue);
    reset.on_done(&bench.host);
    reset.on_log(&bench.host);
    assert_eq!(inflight(&bench), 0);
}

#[test]
fn with_no_pod_at_all_a_large_body_gets_the_503_it_would_get_waiting() {
    let bench = bench("");
    bench.publish(2, &[]);
    let (_large, step) = send_large(&bench, 1, &[]);
    assert_eq!(step, Step::Pause);
    assert_eq!(take_refusal(&bench), Some((503, "rejected-no-endpoints".into())));
}

#[test]
fn a_body_the_parse_refuses_waits_in_the_queue_like_any_other() {
    let bench = bench("");
    let (mut busy, _) = send(&bench, 1, &COMPLETIONS, &completion("busy"));
    let (mut unreadable, step) = send(&bench, 2, &CHAT, "{not json");
    assert_eq!(step, Step::Pause, "held, not sent to the full pod");
    assert!(bench.host.replies.borrow().is_empty());
    assert_eq!((inflight(&bench), bench.worker.flow.waiting()), (1, 1));
    let (mut after, step) = send(&bench, 3, &COMPLETIONS, &completion("after"));
    assert_eq!(step, Step::Pause);
    busy.on_log(&bench.host);
    assert_eq!(resumed(&bench), [2], "released first, in its turn, by load (its model unread)");
    assert_eq!(bench.host.header("x-gateway-destination-endpoint").as_deref(), Some(POD));
    unreadable.on_log(&bench.host);
    assert_eq!(resumed(&bench), [3]);
    after.on_log(&bench.host);
    assert_eq!(inflight(&bench), 0);
    // With room it goes on at once, as before.
    let (mut alone, step) = send(&bench, 4, &CHAT, "{not json");
    assert_eq!(step, Step::Continue);
    alone.on_log(&bench.host);
    assert_eq!(inflight(&bench), 0);
}

#[test]
fn a_body_past_the_worker_s_buffer_does_not_pass_the_queue() {
    let bench = bench(r#", "max_buffered_bytes": 1024"#);
    let (mut busy, _) = send(&bench, 1, &COMPLETIONS, &completion("busy"));

    // Two bodies each under the limit, together past the worker's buffer: the second
    // streams on unread, so it cannot wait either.
    bench.host.set_request(&COMPLETIONS, &[b' '; 800]);
    let mut first = RequestStream::for_context(bench.worker.clone(), 3);
    assert_eq!(first.on_request_headers(&bench.host, false), Step::Pause);
    assert_eq!(first.on_request_body(&bench.host, 800, false), Step::Pause);
    let mut second = RequestStream::for_context(bench.worker.clone(), 4);
    assert_eq!(second.on_request_headers(&bench.host, false), Step::Pause);
    assert_eq!(second.on_request_body(&bench.host, 300, false), Step::Pause);
    assert_eq!(take_refusal(&bench), saturated());
    assert_eq!(bench.worker.buffered_bytes.get(), 800, "only the first's bytes stay counted");
    assert_eq!(inflight(&bench), 1, "nothing sent past the pod's bound");
    first.on_done(&bench.host);
    first.on_log(&bench.host);
    second.on_log(&bench.host);
    assert_eq!(bench.worker.buffered_bytes.get(), 0);
    busy.on_log(&bench.host);
    assert_eq!(inflight(&bench), 0);
}

#[test]
fn requests_without_a_body_and_other_endpoints_are_not_queued_they_go_on_and_count_in_flight() {
    let bench = bench("");
    let (mut busy, _) = send(&bench, 1, &COMPLETIONS, &completion("busy"));
    let upload = [
        (":method", "POST"),
        (":path", "/v1/audio/transcriptions"),
        ("content-type", "multipart/form-data; boundary=x"),
    ];
    // Read for its form's model (its first chunk carries it), then on: never queued.
    let form = b"--x\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nm\r\n--x\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n\r\nRIFF";
    bench.host.set_request(&upload, form);
    let mut stream = RequestStream::for_context(bench.worker.clone(), 2);
    assert_eq!(stream.on_request_headers(&bench.host, false), Step::Pause, "until its model arrives");
    assert_eq!(stream.on_request_body(&bench.host, form.len(), false), Step::Continue, "not flow control's to hold");
    assert_eq!(inflight(&bench), 2, "counted, so the queue sees the place taken");
    let (mut held, step) = send(&bench, 3, &COMPLETIONS, &completion("held"));
    assert_eq!(step, Step::Pause);
    busy.on_log(&bench.host);
    assert!(resumed(&bench).is_empty(), "the upload still holds the pod's place");
    stream.on_log(&bench.host);
    assert_eq!(resumed(&bench), [3]);
    // No body, so no prompt (a CORS preflight, a HEAD): not held nor refused either.
    for method in ["OPTIONS", "POST"] {
        bench.host.set_request(&[(":method", method), (":path", "/v1/chat/completions")], b"");
        let mut bodyless = RequestStream::for_context(bench.worker.clone(), 4);
        assert_eq!(bodyless.on_request_headers(&bench.host, true), Step::Continue, "{method}");
        assert_eq!(inflight(&bench), 2, "{method}: counted while it runs");
        bodyless.on_log(&bench.host);
    }
    held.on_log(&bench.host);
    assert_eq!(inflight(&bench), 0);
    assert!(bench.host.replies.borrow().is_empty());
}

#[test]
fn a_hinted_body_over_max_body_bytes_is_judged_by_its_hints_pods_not_the_pools() {
    // Two pods; the gateway's hint names the first alone, which is full.
    const OTHER: &str = "10.0.0.2:8000";
    let bench = bench("");
    bench.publish(2, &[(POD, 0.0), (OTHER, 0.0)]);
    let hinted = [("x-gateway-destination-endpoint-subset", POD)];
    let mut headers = COMPLETIONS.to_vec();
    headers.extend_from_slice(&hinted);
    let (_busy, step) = send(&bench, 1, &headers, &completion("busy"));
    assert_eq!((step, bench.host.header("x-gateway-destination-endpoint").as_deref()), (Step::Continue, Some(POD)));

    // Its body streams unread, so it cannot wait; the other pod's room is none of its own:
    // routed within its hint, it would take the full pod past its bound.
    bench.host.replies.borrow_mut().clear();
    let (_large, _) = send_large(&bench, 2, &hinted);
    assert_eq!(inflight(&bench), 1, "not sent to its hint's full pod");
    assert_eq!(take_refusal(&bench), saturated());
}
