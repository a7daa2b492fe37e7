//! Answers that end in trailers: an HTTP/2 answer, a gRPC-style one (`grpc-status` in its
//! trailers). Their last body chunk does not end the stream (`end_of_stream` comes with the
//! trailers), so the pod is done at the trailers, and what the request holds of it is given
//! back there, once, not at the stream's end (`on_log`), which a client that stops reading
//! holds off until the stream idle timeout (tests/slow_readers.rs).

mod common;

use common::{completion, Bench, COMPLETIONS};
use wasm_epp_router::{RequestStream, Step};

const POD: &str = "10.0.0.1:8000";

/// One pod, one place: a second request waits for the first's.
const ONE_PLACE: &str = r#"{"fallback_destinations": 0,
    "flow_control": {"enabled": true, "max_inflight_per_pod": 1, "ttl_ms": 1000}}"#;

/// One usage-reading slot per pod, and outlier detection judging each answer at its end.
const ONE_READING_SLOT: &str = r#"{"fallback_destinations": 0,
    "outlier_detection": {"consecutive_failures": 1},
    "learning": {"enabled": true, "usage_streams_per_pod": 1, "usage_chunks_per_stream": 1000}}"#;

const EVENT: &[u8] = b"data: {\"choices\":[{\"text\":\" a\"}],\"usage\":null}\n\n";

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

/// The pod's answer passes whole: `headers`, each chunk of `chunks` (none ends the stream),
/// then its trailers. The client has not taken it yet, so the stream goes on.
fn answer_with_trailers(bench: &Bench, stream: &mut RequestStream, headers: &[(&str, &str)], chunks: &[&[u8]]) {
    bench.host.set_response(headers, b"");
    assert_eq!(stream.on_response_headers(&bench.host, false), Step::Continue);
    for chunk in chunks {
        bench.host.set_response(headers, chunk);
        assert_eq!(stream.on_response_body(&bench.host, chunk.len(), false), Step::Continue);
    }
    bench.host.set_response(headers, b"");
    assert_eq!(stream.on_response_trailers(&bench.host), Step::Continue);
}

const H2_ANSWER: [(&str, &str); 2] = [(":status", "200"), ("content-type", "text/event-stream")];
const GRPC_ANSWER: [(&str, &str); 2] = [(":status", "200"), ("content-type", "application/grpc")];

#[test]
fn an_answer_s_trailers_give_its_pod_s_place_to_the_next_request_once() {
    for (headers, chunks) in [(H2_ANSWER, [EVENT, b"data: [DONE]\n\n"]), (GRPC_ANSWER, [GRPC_MESSAGE, GRPC_MESSAGE])] {
        let bench = Bench::new(ONE_PLACE);
        bench.publish(1, &[(POD, 0.0)]);
        let (mut unread, step) = bench.send_as(&bench.worker, 1, &COMPLETIONS, &streamed("unread"));
        assert_eq!(step, Step::Continue);
        let (mut waiting, step) = bench.send_as(&bench.worker, 2, &COMPLETIONS, &completion("waiting"));
        assert_eq!(step, Step::Pause, "held behind the first");

        answer_with_trailers(&bench, &mut unread, &headers, &chunks);
        assert_eq!(bench.resumed(), vec![2], "{headers:?}: released at the first answer's trailers");
        assert_eq!(inflight(&bench), 1, "the released request's count alone");

        // The first stream's end (its client read on, reset, or timed out) gives nothing back twice.
        assert!(bench.end(&mut unread).is_empty());
        assert_eq!(inflight(&bench), 1, "the released request still counts");
        assert!(bench.end(&mut waiting).is_empty());
        assert_eq!(inflight(&bench), 0);
    }
}

#[test]
fn an_answer_s_trailers_give_back_its_reading_slot_and_judge_it_whole() {
    let bench = Bench::new(ONE_READING_SLOT);
    bench.publish(1, &[(POD, 0.0)]);
    let (mut unread, _) = bench.request(&COMPLETIONS, &streamed("unread"));
    answer_with_trailers(&bench, &mut unread, &H2_ANSWER, &[EVENT, b"data: [DONE]\n\n"]);
    assert_eq!(inflight(&bench), 0, "released at its trailers");
    // The next stream to the pod is read for its usage while the first's client still has
    // not taken its answer.
    let (mut next, _) = bench.request(&COMPLETIONS, &streamed("next"));
    answer_with_trailers(&bench, &mut next, &H2_ANSWER, &[EVENT, b"data: [DONE]\n\n"]);
    assert_eq!(bench.stat("wasm_epp.learning.usage_streams_not_read"), 0, "the slot was free");
    // Its client then resets (Envoy's DR flag): the answer had ended whole, so no failure.
    bench.host.properties.borrow_mut().insert("response\0flags".to_owned(), 0x1000_0000u64.to_le_bytes().to_vec());
    bench.end(&mut unread);
    bench.end(&mut next);
    assert_eq!(bench.stat("wasm_epp.pod_attempts_failed"), 0);
    assert_eq!(inflight(&bench), 0, "never below zero");
}
