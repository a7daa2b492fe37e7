//! Stateful Responses API conversations through one worker on a `MockHost`: the answer's id is
//! noted as its pod's session, and a follow-up naming it (`previous_response_id`) goes there.

mod common;

use std::rc::Rc;

use common::Bench;
use wasm_epp_router::{RequestStream, Step, Worker};

const RESPONSES: [(&str, &str); 3] =
    [(":method", "POST"), (":path", "/v1/responses"), ("content-type", "application/json")];

fn chosen(destination: Option<String>) -> String {
    destination.unwrap_or_default().split(',').next().unwrap_or_default().to_owned()
}

/// Sends a Responses request and answers it from `answering` with `answer` as the first chunk.
fn exchange(bench: &Bench, body: &str, answering: &str, answer: &[u8]) -> String {
    let (mut stream, routed) = bench.request(&RESPONSES, body);
    bench.host.set_response(&[(":status", "200"), ("x-gateway-destination-endpoint-served", answering)], b"");
    assert_eq!(stream.on_response_headers(&bench.host, false), Step::Continue);
    bench.host.set_response(&[(":status", "200")], answer);
    assert_eq!(stream.on_response_body(&bench.host, answer.len(), false), Step::Continue);
    stream.on_log(&bench.host);
    chosen(routed.destination)
}

#[test]
fn a_follow_up_goes_to_the_pod_that_answered_the_response_it_continues() {
    let bench = Bench::new("{}");
    bench.publish(1, &[("10.0.0.1:8000", 0.0), ("10.0.0.2:8000", 0.0), ("10.0.0.3:8000", 0.0)]);
    let first = r#"{"model":"m","input":"plan the work","store":true}"#;
    let picked = exchange(&bench, first, "10.0.0.2:8000", br#"{"id":"resp_abc","object":"response"}"#);
    assert!(!picked.is_empty());
    assert_eq!(bench.stat("wasm_epp.response_ids_noted"), 1);
    // The pod that answered (here after a retry: not necessarily the pick) holds the response;
    // make it the busiest so load alone would go elsewhere.
    bench.publish(2, &[("10.0.0.1:8000", 0.0), ("10.0.0.2:8000", 3.0), ("10.0.0.3:8000", 0.0)]);
    bench.tick();
    let next = r#"{"model":"m","input":"go on","previous_response_id":"resp_abc"}"#;
    for _ in 0..5 {
        let stream_answer = b"event: response.created\ndata: {\"response\":{\"id\":\"resp_def\"}}\n\n";
        assert_eq!(exchange(&bench, next, "10.0.0.2:8000", stream_answer), "10.0.0.2:8000");
    }
    assert_eq!(bench.stat("wasm_epp.response_ids_followed"), 5);
    // A continuation of the streamed answer's id sticks too.
    let after_stream = r#"{"model":"m","input":"and then","previous_response_id":"resp_def"}"#;
    assert_eq!(exchange(&bench, after_stream, "10.0.0.2:8000", b"{}"), "10.0.0.2:8000");
}

#[test]
fn answers_without_an_id_and_the_switch_off_note_nothing() {
    let bench = Bench::new("{}");
    bench.publish(1, &[("10.0.0.1:8000", 0.0), ("10.0.0.2:8000", 0.0)]);
    exchange(&bench, r#"{"input":"x"}"#, "10.0.0.1:8000", br#"{"error":{"message":"bad"}}"#);
    exchange(&bench, r#"{"input":"x"}"#, "10.0.0.9:8000", br#"{"id":"resp_from_a_pod_not_in_the_table"}"#);
    assert_eq!(bench.stat("wasm_epp.response_ids_noted"), 0);
    let off = Bench::new(r#"{"prefix": {"follow_response_ids": false}}"#);
    off.publish(1, &[("10.0.0.1:8000", 0.0), ("10.0.0.2:8000", 0.0)]);
    exchange(&off, r#"{"input":"x"}"#, "10.0.0.1:8000", br#"{"id":"resp_1"}"#);
    exchange(&off, r#"{"input":"y","previous_response_id":"resp_1"}"#, "10.0.0.1:8000", b"{}");
    assert_eq!((off.stat("wasm_epp.response_ids_noted"), off.stat("wasm_epp.response_ids_followed")), (0, 0));
}

#[test]
fn another_worker_follows_an_id_at_once_before_the_ring_brings_it() {
    let bench = Bench::new("{}");
    bench.publish(1, &[("10.0.0.1:8000", 0.0), ("10.0.0.2:8000", 0.0), ("10.0.0.3:8000", 0.0)]);
    exchange(&bench, r#"{"input":"start"}"#, "10.0.0.3:8000", br#"{"id":"resp_now"}"#);
    // A second worker of the same Envoy: no tick has run, so the ring has told it nothing.
    let config = bench.host.configuration.borrow().clone();
    let other = Rc::new(wasm_epp_router::configure(&bench.host, config.len(), 8).unwrap());
    other.serving.set(true);
    bench.publish(2, &[("10.0.0.1:8000", 0.0), ("10.0.0.2:8000", 0.0), ("10.0.0.3:8000", 4.0)]);
    let next = r#"{"input":"go on","previous_response_id":"resp_now"}"#;
    assert_eq!(exchange_on(&bench, &other, next), "10.0.0.3:8000", "found in the shared slot");
    let unknown = r#"{"input":"go on","previous_response_id":"resp_never_seen"}"#;
    assert_ne!(exchange_on(&bench, &other, unknown), "10.0.0.3:8000", "an unknown id goes by load");
}

/// A Responses request through `worker` (on the bench's host), routed and ended.
fn exchange_on(bench: &Bench, worker: &Rc<Worker>, body: &str) -> String {
    bench.host.set_request(&RESPONSES, body.as_bytes());
    let mut stream = RequestStream::new(Rc::clone(worker));
    assert_eq!(stream.on_request_headers(&bench.host, false), Step::Pause);
    assert_eq!(stream.on_request_body(&bench.host, body.len(), true), Step::Continue);
    let destination = bench.host.header("x-gateway-destination-endpoint");
    stream.on_log(&bench.host);
    chosen(destination)
}

#[test]
fn a_retrieval_or_cancel_of_a_stored_response_goes_to_the_pod_that_stored_it() {
    let bench = Bench::new("{}");
    bench.publish(1, &[("10.0.0.1:8000", 0.0), ("10.0.0.2:8000", 0.0), ("10.0.0.3:8000", 0.0)]);
    // A background request: answered at once, queued, with its id.
    let queued = br#"{"id":"resp_bg1","object":"response","status":"queued","background":true}"#;
    exchange(&bench, r#"{"model":"m","input":"long task","background":true}"#, "10.0.0.1:8000", queued);
    bench.publish(2, &[("10.0.0.1:8000", 5.0), ("10.0.0.2:8000", 0.0), ("10.0.0.3:8000", 0.0)]);
    bench.tick();
    for (method, path) in [
        ("GET", "/v1/responses/resp_bg1"),
        ("GET", "/v1/responses/resp_bg1?stream=true&starting_after=2"),
        ("GET", "/v1/responses/resp_bg1/input_items"),
        ("POST", "/v1/responses/resp_bg1/cancel"),
    ] {
        let headers = [(":method", method), (":path", path)];
        let answer = bench.complete(&headers, "");
        assert_eq!(chosen(answer.destination), "10.0.0.1:8000", "{method} {path}: the pod holding it, busy or not");
    }
    assert_eq!(bench.stat("wasm_epp.response_ids_followed"), 4);
    // An id never seen, and another path under /v1/responses/, go by load.
    let unknown = bench.complete(&[(":method", "GET"), (":path", "/v1/responses/resp_unknown")], "");
    assert_ne!(chosen(unknown.destination), "10.0.0.1:8000");
    let compact = bench.complete(&[(":method", "POST"), (":path", "/v1/responses/compact")], "");
    assert_ne!(chosen(compact.destination), "10.0.0.1:8000");
    assert_eq!(bench.stat("wasm_epp.response_ids_followed"), 5, "the unknown id was looked for, compact not");
}

#[test]
fn an_id_in_the_second_chunk_of_the_answer_s_head_is_noted() {
    let bench = Bench::new("{}");
    bench.publish(1, &[("10.0.0.1:8000", 0.0), ("10.0.0.2:8000", 0.0)]);
    let (mut stream, _) = bench.request(&RESPONSES, r#"{"model":"m","input":"plan","stream":true}"#);
    bench.host.set_response(&[(":status", "200"), ("x-gateway-destination-endpoint-served", "10.0.0.2:8000")], b"");
    stream.on_response_headers(&bench.host, false);
    // The event's name alone in the first chunk (a proxy's flush, a keep-alive comment).
    for chunk in [&b": ping\n\nevent: response.created\n"[..], b"data: {\"response\":{\"id\":\"resp_split\"}}\n\n"] {
        bench.host.set_response(&[(":status", "200")], chunk);
        stream.on_response_body(&bench.host, chunk.len(), false);
    }
    stream.on_log(&bench.host);
    assert_eq!(bench.stat("wasm_epp.response_ids_noted"), 1);
    let next = r#"{"model":"m","input":"go on","previous_response_id":"resp_split"}"#;
    bench.publish(2, &[("10.0.0.1:8000", 0.0), ("10.0.0.2:8000", 3.0)]);
    bench.tick();
    assert_eq!(exchange(&bench, next, "10.0.0.2:8000", b"{}"), "10.0.0.2:8000", "the follow-up goes to its pod");
}
