//! Learning from Responses API answers (agents' endpoint) through one worker on a `MockHost`:
//! the prompt's tokens stay in flight through the events a stream opens with and go at its first
//! output event, which is the TTFT sample; `usage` (`input_tokens`, cached ones) comes from
//! `response.completed`; the chunk and the answering pod are read once for learning and the
//! response-id watch together.

mod common;

use common::Bench;
use wasm_epp_router::RequestStream;

const RESPONSES: [(&str, &str); 3] =
    [(":method", "POST"), (":path", "/v1/responses"), ("content-type", "application/json")];
const POOL: [(&str, f64); 2] = [("10.0.0.1:8000", 0.0), ("10.0.0.2:8000", 0.0)];
const LEARNING: &str = r#"{"fallback_destinations": 0, "learning": {"enabled": true}}"#;

fn agent_turn(instructions: &str, stream: bool) -> String {
    format!(
        r#"{{"model":"m","instructions":"{instructions}","input":[{{"role":"user","content":"go"}}],"stream":{stream}}}"#
    )
}

/// `response.created` and `response.in_progress`, as vLLM sends them before the prefill.
const PREAMBLE: &str = concat!(
    "event: response.created\ndata: {\"response\":{\"id\":\"resp_0a1b\",\"status\":\"in_progress\",",
    "\"usage\":null},\"sequence_number\":0,\"type\":\"response.created\"}\n\n",
    "event: response.in_progress\ndata: {\"response\":{\"id\":\"resp_0a1b\"},\"sequence_number\":1,",
    "\"type\":\"response.in_progress\"}\n\n",
);

const FIRST_OUTPUT: &str = concat!(
    "event: response.output_item.added\ndata: {\"item\":{\"type\":\"message\"},\"output_index\":0,",
    "\"sequence_number\":2,\"type\":\"response.output_item.added\"}\n\n",
    "event: response.output_text.delta\ndata: {\"delta\":\"Hi\",\"type\":\"response.output_text.delta\"}\n\n",
);

fn completed(input_tokens: u64, cached: u64) -> String {
    format!(
        "event: response.completed\ndata: {{\"response\":{{\"id\":\"resp_0a1b\",\"status\":\"completed\",\
         \"usage\":{{\"input_tokens\":{input_tokens},\"input_tokens_details\":{{\"cached_tokens\":{cached}}},\
         \"output_tokens\":4,\"total_tokens\":{}}}}},\"type\":\"response.completed\"}}\n\n",
        input_tokens + 4
    )
}

fn chunk(bench: &Bench, stream: &mut RequestStream, bytes: &str, end: bool) {
    bench.host.set_response(&[(":status", "200")], bytes.as_bytes());
    stream.on_response_body(&bench.host, bytes.len(), end);
}

#[test]
fn a_responses_stream_holds_its_prompt_tokens_until_its_first_output_event() {
    let bench = Bench::new(LEARNING);
    bench.publish(1, &POOL);
    bench.tick();
    let instructions = "x".repeat(16_000); // ~4k tokens at 4 bytes per token
    let (mut stream, routed) = bench.request(&RESPONSES, &agent_turn(&instructions, true));
    let pod = routed.destination.unwrap();
    let tokens = bench.worker.inflight.borrow().tokens(&pod);
    assert!((3_900..4_200).contains(&tokens), "the agent's prompt is counted in flight: {tokens}");
    bench.host.tally.take();
    bench.host.advance(5);
    bench.host.set_response(&[(":status", "200"), ("x-gateway-destination-endpoint-served", &pod)], b"");
    stream.on_response_headers(&bench.host, false);
    let calls = bench.host.tally.take();
    let count = |call: &str| calls.get(call).map_or(0, |c| c.calls);
    // The answering pod is read once for learning, the response-id watch and outlier
    // detection; the status once, and a 2xx's content type once, for outlier detection; its
    // `content-encoding` once, for the watchers that read its body: four values, all from one
    // copy of the header map, no lookup each.
    assert_eq!(
        (count("proxy_get_header_map_pairs"), count("proxy_get_header_map_value")),
        (1, 0),
        "the answering pod, the status, the type, the encoding from one read: {calls:?}"
    );
    chunk(&bench, &mut stream, PREAMBLE, false);
    assert_eq!(bench.worker.inflight.borrow().tokens(&pod), tokens, "the preamble is no token: still prefilling");
    assert_eq!(bench.stat("wasm_epp.learning.ttft_samples"), 0);
    assert_eq!(bench.stat("wasm_epp.response_ids_noted"), 1, "the id was read from the same copy");
    bench.host.advance(395);
    chunk(&bench, &mut stream, FIRST_OUTPUT, false);
    assert_eq!(bench.worker.inflight.borrow().tokens(&pod), 0, "released at the first output event");
    assert_eq!(bench.stat("wasm_epp.learning.ttft_samples"), 1);
    chunk(&bench, &mut stream, &completed(4_100, 0), true);
    let copies = bench.host.tally.take().get("proxy_get_buffer_bytes").map_or(0, |c| c.calls);
    assert_eq!(copies, 3, "each chunk copied once for both watchers");
    stream.on_log(&bench.host);
    assert_eq!(bench.stat("wasm_epp.learning.usage_reports"), 1, "usage from response.completed");
    assert_eq!(bench.stat("wasm_epp.learning.cached_reports"), 1);
    // The sample is the time to the first output event (400 ms), not to the preamble (5 ms):
    // the pod's model moved from the prior's 112 ms for this prompt to about 400.
    let learner = bench.worker.learning.borrow();
    let predicted = learner.models.predict(&pod, picker::learn::Load { tokens: 4_100.0, requests: 0.0 });
    assert!((300.0..500.0).contains(&predicted), "learned from the first output event: {predicted} ms");
}

#[test]
fn a_whole_responses_answer_teaches_its_usage_and_a_failed_stream_releases_at_its_first_byte() {
    let bench = Bench::new(LEARNING);
    bench.publish(1, &POOL);
    bench.tick();
    let (mut whole, routed) = bench.request(&RESPONSES, &agent_turn("be brief", false));
    let pod = routed.destination.unwrap();
    bench.host.advance(30);
    bench.host.set_response(&[(":status", "200")], b"");
    whole.on_response_headers(&bench.host, false);
    let body = r#"{"id":"resp_77","object":"response","output":[],"usage":{"input_tokens":12,"input_tokens_details":{"cached_tokens":0},"output_tokens":3}}"#;
    chunk(&bench, &mut whole, body, false);
    assert!(bench.worker.inflight.borrow().tokens(&pod) > 0, "a whole answer's tokens go at its end");
    chunk(&bench, &mut whole, "", true);
    assert_eq!(bench.worker.inflight.borrow().tokens(&pod), 0, "at its last byte, not the stream's end");
    whole.on_log(&bench.host);
    assert_eq!(bench.stat("wasm_epp.learning.usage_reports"), 1);
    assert_eq!(bench.stat("wasm_epp.learning.ttft_samples"), 0, "a whole answer's first byte is no TTFT");

    let (mut failed, routed) = bench.request(&RESPONSES, &agent_turn("be brief", true));
    let pod = routed.destination.unwrap();
    bench.host.set_response(&[(":status", "503")], b"");
    failed.on_response_headers(&bench.host, false);
    chunk(&bench, &mut failed, r#"{"error":{"message":"overloaded","code":503}}"#, true);
    assert_eq!(bench.worker.inflight.borrow().tokens(&pod), 0, "not an event stream: released at once");
    failed.on_log(&bench.host);
    assert_eq!(bench.stat("wasm_epp.learning.ttft_samples"), 0);
    assert_eq!(bench.stat("wasm_epp.learning.usage_reports"), 1, "an error teaches nothing");
}

#[test]
fn a_stream_that_never_sends_an_output_event_is_given_up_on_after_its_opening_chunks() {
    let bench = Bench::new(LEARNING);
    bench.publish(1, &POOL);
    bench.tick();
    let (mut stream, routed) = bench.request(&RESPONSES, &agent_turn(&"y".repeat(8_000), true));
    let pod = routed.destination.unwrap();
    bench.host.set_response(&[(":status", "200")], b"");
    stream.on_response_headers(&bench.host, false);
    let other = "event: response.progress\ndata: {\"type\":\"response.progress\"}\n\n";
    let limit = picker::learn::first_token::MAX_OPENING_CHUNKS;
    for _ in 1..limit {
        chunk(&bench, &mut stream, other, false);
    }
    assert!(bench.worker.inflight.borrow().tokens(&pod) > 0, "still waiting for the first token");
    chunk(&bench, &mut stream, other, false);
    assert_eq!(bench.worker.inflight.borrow().tokens(&pod), 0, "given up: its tokens go");
    chunk(&bench, &mut stream, &completed(2_000, 0), true);
    stream.on_log(&bench.host);
    assert_eq!(bench.stat("wasm_epp.learning.ttft_samples"), 0, "no first token was seen: no sample");
    assert_eq!(bench.stat("wasm_epp.learning.usage_reports"), 1, "its usage is read all the same");
}

#[test]
fn a_responses_stream_past_the_watch_budget_still_holds_its_prompt_until_its_first_output_event() {
    // Nothing watched: no TTFT sample and no usage, but the token load must stay exact.
    let bench = Bench::new(
        r#"{"fallback_destinations": 0, "learning": {"enabled": true, "watch_share": 0, "watch_per_second": 0}}"#,
    );
    bench.publish(1, &POOL);
    bench.tick();
    let (mut stream, routed) = bench.request(&RESPONSES, &agent_turn(&"x".repeat(16_000), true));
    let pod = routed.destination.unwrap();
    let tokens = bench.worker.inflight.borrow().tokens(&pod);
    assert!(tokens > 3_900, "{tokens}");
    bench.host.set_response(&[(":status", "200")], b"");
    stream.on_response_headers(&bench.host, false);
    chunk(&bench, &mut stream, PREAMBLE, false);
    assert_eq!(bench.worker.inflight.borrow().tokens(&pod), tokens, "the preamble comes before the prefill");
    chunk(&bench, &mut stream, FIRST_OUTPUT, false);
    assert_eq!(bench.worker.inflight.borrow().tokens(&pod), 0, "released at the first output event");
    bench.host.tally.take();
    chunk(&bench, &mut stream, &completed(4_100, 0), true);
    let copies = bench.host.tally.take().get("proxy_get_buffer_bytes").map_or(0, |c| c.calls);
    assert_eq!(copies, 0, "past its first token an answer not watched is not read");
    stream.on_log(&bench.host);
    assert_eq!(bench.stat("wasm_epp.learning.answers_not_watched"), 1);
    assert_eq!(bench.stat("wasm_epp.learning.ttft_samples"), 0, "not watched: nothing learned");
    assert_eq!(bench.stat("wasm_epp.learning.usage_reports"), 0);
}
