//! Clients that stop reading their answers (a paused consumer, a slow link): Envoy holds the
//! answer's end until the client reads on or resets, so the stream ends (`on_log`) long after
//! the pod's last byte passed (an HTTP/2 client with its window shut: up to the stream idle
//! timeout). What the request holds of its pod is given back at that last byte, once: its
//! in-flight count and flow-control place, its usage-reading slot.

mod common;

use common::{completion, Bench, COMPLETIONS};
use wasm_epp_router::{RequestStream, Step};

const POD: &str = "10.0.0.1:8000";

/// One pod, one place: a second request waits for the first's.
const ONE_PLACE: &str = r#"{"fallback_destinations": 0,
    "flow_control": {"enabled": true, "max_inflight_per_pod": 1, "ttl_ms": 1000}}"#;

/// One usage-reading slot per pod, and a chunk budget no test stream exhausts.
const ONE_READING_SLOT: &str = r#"{"fallback_destinations": 0,
    "learning": {"enabled": true, "usage_streams_per_pod": 1, "usage_chunks_per_stream": 1000}}"#;

const EVENT: &[u8] = b"data: {\"choices\":[{\"text\":\" a\"}],\"usage\":null}\n\n";

fn streamed(prompt: &str) -> String {
    format!(
        r#"{{"model":"m","prompt":"{prompt}","max_tokens":4,"stream":true,"stream_options":{{"include_usage":true}}}}"#
    )
}

fn inflight(bench: &Bench) -> u32 {
    bench.worker.inflight.borrow().count(POD)
}

/// The pod's answer passes whole: headers, an event, and the last chunk (`end_of_stream`);
/// the client has not taken it yet, so the stream goes on.
fn answer_passes(bench: &Bench, stream: &mut RequestStream) {
    bench.host.set_response(&[(":status", "200")], b"");
    assert_eq!(stream.on_response_headers(&bench.host, false), Step::Continue);
    bench.host.set_response(&[(":status", "200")], EVENT);
    assert_eq!(stream.on_response_body(&bench.host, EVENT.len(), false), Step::Continue);
    let end = b"data: [DONE]\n\n";
    bench.host.set_response(&[(":status", "200")], end);
    assert_eq!(stream.on_response_body(&bench.host, end.len(), true), Step::Continue);
}

#[test]
fn an_answer_s_last_byte_gives_its_pod_s_place_to_the_next_request_once() {
    let bench = Bench::new(ONE_PLACE);
    bench.publish(1, &[(POD, 0.0)]);
    let (mut unread, step) = bench.send_as(&bench.worker, 1, &COMPLETIONS, &streamed("unread"));
    assert_eq!(step, Step::Continue);
    let (mut waiting, step) = bench.send_as(&bench.worker, 2, &COMPLETIONS, &completion("waiting"));
    assert_eq!(step, Step::Pause, "held behind the first");

    answer_passes(&bench, &mut unread);
    // The pod is done; the first client has not read its answer and its stream goes on: the
    // place is the waiting request's now, not at that stream's end.
    assert_eq!(bench.resumed(), vec![2], "released at the first answer's last byte");
    assert_eq!(inflight(&bench), 1, "the released request's count alone");

    // The unread stream's end (its client read on, reset, or timed out) gives nothing back twice.
    assert!(bench.end(&mut unread).is_empty());
    assert_eq!(inflight(&bench), 1, "the released request still counts");
    assert!(bench.end(&mut waiting).is_empty());
    assert_eq!(inflight(&bench), 0);
}

#[test]
fn an_answer_s_last_byte_gives_back_its_pod_s_usage_reading_slot() {
    let bench = Bench::new(ONE_READING_SLOT);
    bench.publish(1, &[(POD, 0.0)]);
    let (mut unread, _) = bench.request(&COMPLETIONS, &streamed("unread"));
    answer_passes(&bench, &mut unread);
    // The next stream to the pod is read for its usage while the first's client still has
    // not taken its answer.
    let (mut next, _) = bench.request(&COMPLETIONS, &streamed("next"));
    answer_passes(&bench, &mut next);
    assert_eq!(bench.stat("wasm_epp.learning.usage_streams_not_read"), 0, "the slot was free");
    bench.end(&mut unread);
    bench.end(&mut next);
    assert_eq!(bench.stat("wasm_epp.learning.usage_streams_not_read"), 0);
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
