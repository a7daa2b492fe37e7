//! Clients that stop reading their answers (a paused consumer, a slow link): Envoy holds the
//! answer's end until the client reads on or resets, so the stream ends (`on_log`) long after
//! the pod's last byte passed (an HTTP/2 client with its window shut: up to the stream idle
//! timeout). What the request holds of its pod is given back when the pod is done, once: its
//! in-flight count and flow-control place, its usage-reading slot. The pod is done at its
//! answer's last byte, or at its trailers for an answer that ends in them (an HTTP/2 answer, a
//! gRPC-style one with `grpc-status`), whose last body chunk does not end the stream.

mod common;

use common::{completion, Bench, COMPLETIONS};
use wasm_epp_router::{RequestStream, Step};

const POD: &str = "10.0.0.1:8000";

/// One pod, one place: a second request waits for the first's.
const ONE_PLACE: &str = r#"{"fallback_destinations": 0,
    "flow_control": {"enabled": true, "max_inflight_per_pod": 1, "ttl_ms": 1000}}"#;

/// One usage-reading slot per pod, a chunk budget no test stream exhausts, and outlier
/// detection judging each answer at its end.
const ONE_READING_SLOT: &str = r#"{"fallback_destinations": 0,
    "outlier_detection": {"consecutive_failures": 1},
    "learning": {"enabled": true, "usage_streams_per_pod": 1, "usage_chunks_per_stream": 1000}}"#;

const EVENT: &[u8] = b"data: {\"choices\":[{\"text\":\" a\"}],\"usage\":null}\n\n";
const DONE: &[u8] = b"data: [DONE]\n\n";

/// A gRPC message: its 5-byte prefix (uncompressed, length 3), then its bytes.
const GRPC_MESSAGE: &[u8] = b"\x00\x00\x00\x00\x03abc";

fn streamed(prompt: &str) -> String {
    format!(
        r#"{{"model":"m","prompt":"{prompt}","max_tokens":4,"stream":true,"stream_options":{{"include_usage":true}}}}"#
    )
}

fn inflight(bench: &Bench) -> u32 {
    bench.worker.inflight.borrow().count(POD)
}

/// How a pod's answer passes whole while its client has not taken it (so the stream goes on):
/// its last chunk ends the stream, or its trailers do.
type Ending = fn(&Bench, &mut RequestStream);

const ENDINGS: [(&str, Ending); 3] =
    [("its last byte", answer_passes), ("HTTP/2 trailers", h2_trailers), ("gRPC trailers", grpc_trailers)];

fn answer_passes(bench: &Bench, stream: &mut RequestStream) {
    answer(bench, stream, &[(":status", "200")], &[EVENT, DONE], false);
}

fn h2_trailers(bench: &Bench, stream: &mut RequestStream) {
    answer(bench, stream, &[(":status", "200"), ("content-type", "text/event-stream")], &[EVENT, DONE], true);
}

fn grpc_trailers(bench: &Bench, stream: &mut RequestStream) {
    answer(bench, stream, &[(":status", "200"), ("content-type", "application/grpc")], &[GRPC_MESSAGE; 2], true);
}

/// `headers`, then `chunks`: the last ends the stream, or trailers follow it.
fn answer(bench: &Bench, stream: &mut RequestStream, headers: &[(&str, &str)], chunks: &[&[u8]], trailers: bool) {
    bench.host.set_response(headers, b"");
    assert_eq!(stream.on_response_headers(&bench.host, false), Step::Continue);
    for (i, chunk) in chunks.iter().enumerate() {
        let last = !trailers && i + 1 == chunks.len();
        bench.host.set_response(headers, chunk);
        assert_eq!(stream.on_response_body(&bench.host, chunk.len(), last), Step::Continue);
    }
    if trailers {
        bench.host.set_response(headers, b"");
        assert_eq!(stream.on_response_trailers(&bench.host), Step::Continue);
    }
}

#[test]
fn an_answer_s_end_gives_its_pod_s_place_to_the_next_request_once() {
    for (ending, ends) in ENDINGS {
        let bench = Bench::new(ONE_PLACE);
        bench.publish(1, &[(POD, 0.0)]);
        let (mut unread, step) = bench.send_as(&bench.worker, 1, &COMPLETIONS, &streamed("unread"));
        assert_eq!(step, Step::Continue);
        let (mut waiting, step) = bench.send_as(&bench.worker, 2, &COMPLETIONS, &completion("waiting"));
        assert_eq!(step, Step::Pause, "held behind the first");

        ends(&bench, &mut unread);
        // The pod is done; the first client has not read its answer and its stream goes on:
        // the place is the waiting request's now, not at that stream's end.
        assert_eq!(bench.resumed(), vec![2], "released at the first answer's end, {ending}");
        assert_eq!(inflight(&bench), 1, "the released request's count alone");

        // The unread stream's end (its client read on, reset, or timed out) gives nothing back twice.
        assert!(bench.end(&mut unread).is_empty());
        assert_eq!(inflight(&bench), 1, "the released request still counts");
        assert!(bench.end(&mut waiting).is_empty());
        assert_eq!(inflight(&bench), 0);
    }
}

#[test]
fn an_answer_s_end_gives_back_its_pod_s_usage_reading_slot_and_judges_it_whole() {
    for (ending, ends) in ENDINGS {
        let bench = Bench::new(ONE_READING_SLOT);
        bench.publish(1, &[(POD, 0.0)]);
        let (mut unread, _) = bench.request(&COMPLETIONS, &streamed("unread"));
        ends(&bench, &mut unread);
        assert_eq!(inflight(&bench), 0, "released at {ending}");
        // The next stream to the pod is read for its usage while the first's client still has
        // not taken its answer.
        let (mut next, _) = bench.request(&COMPLETIONS, &streamed("next"));
        ends(&bench, &mut next);
        assert_eq!(bench.stat("wasm_epp.learning.usage_streams_not_read"), 0, "the slot was free, {ending}");
        // Its client then resets (Envoy's DR flag): the answer had ended whole, so no failure.
        bench.host.properties.borrow_mut().insert("response\0flags".to_owned(), 0x1000_0000u64.to_le_bytes().to_vec());
        bench.end(&mut unread);
        bench.end(&mut next);
        assert_eq!(bench.stat("wasm_epp.learning.usage_streams_not_read"), 0);
        // (A gRPC answer is no answer of /v1/completions: each is its pod's failure, judged at
        // its headers, `answer_type`; the others were judged at their ends, as successes.)
        let foreign = if ending == "gRPC trailers" { 2 } else { 0 };
        assert_eq!(bench.stat("wasm_epp.answers_foreign"), foreign, "{ending}");
        assert_eq!(bench.stat("wasm_epp.pod_attempts_failed"), foreign, "{ending}");
        assert_eq!(inflight(&bench), 0, "never below zero");
    }
}

#[test]
fn envoy_s_own_answer_to_a_waiting_request_takes_it_out_of_the_queue_once() {
    // Envoy answers a request still held (its request_timeout, say): that answer's end, like
    // any other, gives back what the request held (its queue place), and its stream's end
    // nothing more.
    let bench = Bench::new(ONE_PLACE);
    bench.publish(1, &[(POD, 0.0)]);
    let (mut busy, _) = bench.send_as(&bench.worker, 1, &COMPLETIONS, &completion("busy"));
    let (mut timed_out, step) = bench.send_as(&bench.worker, 2, &COMPLETIONS, &completion("timed out"));
    assert_eq!(step, Step::Pause);
    bench.host.set_response(&[(":status", "408")], b"request timeout");
    timed_out.on_response_headers(&bench.host, false);
    timed_out.on_response_body(&bench.host, 15, true);
    assert_eq!(bench.worker.flow.waiting(), 0, "out of the queue at its answer's end");
    timed_out.on_done(&bench.host);
    bench.end(&mut timed_out);
    assert_eq!(bench.stat("wasm_epp.flow.dropped.client_gone"), 1, "counted once");
    assert!(bench.end(&mut busy).is_empty(), "nothing left to release");
    assert_eq!(inflight(&bench), 0);
}
