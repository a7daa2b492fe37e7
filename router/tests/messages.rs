//! The Anthropic Messages API (`POST /v1/messages`, as vLLM serves it to Claude Code and the
//! Anthropic SDKs) through one worker on a `MockHost`: an agent's resent conversation keeps its
//! pod, and with learning on a stream's `message_start` is its first token and its
//! `message_delta` usage is read.

mod common;

use common::Bench;

const MESSAGES: [(&str, &str); 3] =
    [(":method", "POST"), (":path", "/v1/messages"), ("content-type", "application/json")];
const POOL: [(&str, f64); 3] = [("10.0.0.1:8000", 0.0), ("10.0.0.2:8000", 0.0), ("10.0.0.3:8000", 0.0)];

fn body(agent: usize, turns: usize, stream: bool) -> String {
    let system = (0..300).map(|i| format!("a{agent}w{i}")).collect::<Vec<_>>().join(" ");
    let mut messages = vec![format!(r#"{{"role":"user","content":"task of agent {agent}"}}"#)];
    for turn in 0..turns {
        messages.push(format!(
            r#"{{"role":"assistant","content":[{{"type":"tool_use","id":"t{turn}","name":"bash","input":{{"cmd":"ls"}}}}]}}"#
        ));
        messages.push(format!(
            r#"{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"t{turn}","content":"out {turn}"}}]}}"#
        ));
    }
    format!(
        r#"{{"model":"m","max_tokens":32,"stream":{stream},"system":[{{"type":"text","text":"{system}"}}],"messages":[{}]}}"#,
        messages.join(",")
    )
}

#[test]
fn an_agents_conversation_keeps_its_pod() {
    let bench = Bench::new("{}");
    bench.publish(1, &POOL);
    for agent in 0..3 {
        let first = bench.complete(&MESSAGES, &body(agent, 0, false)).destination.unwrap_or_default();
        bench.tick();
        for turns in 1..5 {
            let next = bench.complete(&MESSAGES, &body(agent, turns, turns % 2 == 0)).destination;
            assert_eq!(
                next.unwrap_or_default().split(',').next(),
                first.split(',').next(),
                "agent {agent} turn {turns}"
            );
            bench.tick();
        }
    }
    assert_eq!(bench.stat("wasm_epp.body_invalid"), 0);
}

#[test]
fn with_learning_a_messages_stream_is_learned_from_its_first_event() {
    let bench = Bench::new(r#"{"fallback_destinations": 0, "learning": {"enabled": true}}"#);
    bench.publish(1, &POOL);
    bench.tick();
    let (mut stream, routed) = bench.request(&MESSAGES, &body(0, 2, true));
    let pod = routed.destination.unwrap();
    assert!(bench.worker.inflight.borrow().tokens(&pod) > 500, "the prompt counts in flight");
    bench.host.advance(120);
    bench.host.set_response(&[(":status", "200")], b"");
    stream.on_response_headers(&bench.host, false);
    // vLLM's stream: `message_start` with the chat's first chunk, the text, then the usage.
    let start = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"chatcmpl-1\",\"content\":[]},\"usage\":{\"input_tokens\":900,\"output_tokens\":0}}\n\n";
    bench.host.set_response(&[(":status", "200")], start.as_bytes());
    stream.on_response_body(&bench.host, start.len(), false);
    assert_eq!(bench.worker.inflight.borrow().tokens(&pod), 0, "released at message_start");
    assert_eq!(bench.stat("wasm_epp.learning.ttft_samples"), 1);
    let end = "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"max_tokens\"},\"usage\":{\"input_tokens\":900,\"output_tokens\":32}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\ndata: [DONE]\n\n";
    bench.host.set_response(&[(":status", "200")], end.as_bytes());
    stream.on_response_body(&bench.host, end.len(), true);
    stream.on_log(&bench.host);
    assert_eq!(bench.stat("wasm_epp.learning.usage_reports"), 1, "usage read though the client did not ask for it");
    let ratio = bench.worker.learning.borrow().text_ratio.value();
    assert!((ratio - 1.0).abs() > 0.05, "the reported input_tokens corrected the text estimate: {ratio}");
}
