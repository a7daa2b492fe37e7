//! Learning from responses through the whole request path, natively: token load counted at
//! the pick and released at the first byte, TTFT samples, usage read from the passing answer.

mod common;

use common::{Bench, COMPLETIONS};
use wasm_epp_router::{RequestStream, Step};

const POOL: [(&str, f64); 2] = [("10.0.0.1:8000", 0.0), ("10.0.0.2:8000", 0.0)];
const LEARNING: &str = r#"{"fallback_destinations": 0, "learning": {"enabled": true}}"#;

fn streamed(prompt: &str) -> String {
    format!(
        r#"{{"model":"m","prompt":"{prompt}","max_tokens":4,"stream":true,"stream_options":{{"include_usage":true}}}}"#
    )
}

fn usage_event(prompt_tokens: u64, cached: u64) -> String {
    format!(
        "data: {{\"choices\":[],\"usage\":{{\"prompt_tokens\":{prompt_tokens},\"completion_tokens\":4,\
         \"prompt_tokens_details\":{{\"cached_tokens\":{cached}}}}}}}\n\ndata: [DONE]\n\n"
    )
}

/// The pod answers after `ttft_ms`: headers, a first token, the usage event, the end.
fn answer(bench: &Bench, stream: &mut RequestStream, ttft_ms: u64, usage: &str) {
    bench.host.advance(ttft_ms);
    bench.host.set_response(&[(":status", "200")], b"");
    assert_eq!(stream.on_response_headers(&bench.host, false), Step::Continue);
    let first = b"data: {\"choices\":[{\"text\":\" a\"}],\"usage\":null}\n\n";
    bench.host.set_response(&[(":status", "200")], first);
    assert_eq!(stream.on_response_body(&bench.host, first.len(), false), Step::Continue);
    bench.host.set_response(&[(":status", "200")], usage.as_bytes());
    assert_eq!(stream.on_response_body(&bench.host, usage.len(), true), Step::Continue);
    stream.on_log(&bench.host);
}

#[test]
fn a_burst_of_long_prompts_spreads_by_tokens_and_releases_them_at_the_first_byte() {
    let bench = Bench::new(LEARNING);
    bench.publish(1, &POOL);
    bench.tick();
    let long = "x".repeat(32_000); // ~8k tokens at 4 bytes per token
    let (mut first, a) = bench.request(&COMPLETIONS, &streamed(&format!("one {long}")));
    let (mut second, b) = bench.request(&COMPLETIONS, &streamed(&format!("two {long}")));
    let (a, b) = (a.destination.unwrap(), b.destination.unwrap());
    assert_ne!(a, b, "the second long prompt avoids the pod already prefilling the first");
    let tokens = bench.worker.inflight.borrow().tokens(&a);
    assert!((7_900..8_200).contains(&tokens), "uncached prompt tokens in flight: {tokens}");
    bench.host.advance(40);
    bench.host.set_response(&[(":status", "200")], b"data: {}\n\n");
    first.on_response_headers(&bench.host, false);
    first.on_response_body(&bench.host, 10, false);
    assert_eq!(bench.worker.inflight.borrow().tokens(&a), 0, "released at the first byte");
    assert_eq!(bench.worker.inflight.borrow().count(&a), 1, "the request itself is still in flight");
    first.on_log(&bench.host);
    second.on_log(&bench.host);
    assert_eq!(bench.worker.inflight.borrow().tokens(&b), 0, "a stream reset before its first byte releases too");
    assert_eq!(bench.stat("wasm_epp.learning.ttft_samples"), 1);
}

#[test]
fn a_slow_pod_is_avoided_once_its_answers_show_it() {
    let bench = Bench::new(LEARNING);
    bench.publish(1, &POOL);
    bench.tick();
    let prompt = |i: usize| streamed(&format!("{i} {}", "y".repeat(4_000)));
    let mut to_slow_after_learning = 0;
    for i in 0..40 {
        let (mut stream, routed) = bench.request(&COMPLETIONS, &prompt(i));
        let pod = routed.destination.unwrap();
        let slow = pod == POOL[1].0;
        if i >= 20 && slow {
            to_slow_after_learning += 1;
        }
        answer(&bench, &mut stream, if slow { 400 } else { 50 }, &usage_event(1_000, 0));
    }
    let learner = bench.worker.learning.borrow();
    let load = picker::learn::Load { tokens: 1_000.0, requests: 0.0 };
    let (fast, slow) = (learner.models.predict(POOL[0].0, load), learner.models.predict(POOL[1].0, load));
    assert!(slow > 3.0 * fast, "slow {slow} ms vs fast {fast} ms");
    assert_eq!(to_slow_after_learning, 0, "an idle pool still prefers the pod predicted faster");
    assert_eq!(bench.stat("wasm_epp.learning.usage_reports"), 40);
}

#[test]
fn a_slow_pod_one_worker_learned_of_is_avoided_by_the_other_after_a_tick() {
    let bench = Bench::new(LEARNING);
    bench.publish(1, &POOL);
    let other = bench.another_worker(8);
    bench.tick_with(&other);
    let prompt = |i: usize| streamed(&format!("{i} {}", "y".repeat(4_000)));
    for i in 0..12 {
        let (mut stream, routed) = bench.request(&COMPLETIONS, &prompt(i));
        let slow = routed.destination.unwrap() == POOL[1].0;
        answer(&bench, &mut stream, if slow { 400 } else { 50 }, &usage_event(1_000, 0));
    }
    let load = picker::learn::Load { tokens: 1_000.0, requests: 0.0 };
    let predicted = |pod: &str| other.learning.borrow().models.predict(pod, load);
    assert!(predicted(POOL[1].0) < 2.0 * predicted(POOL[0].0), "the other worker has not heard yet");
    bench.host.advance(100);
    bench.tick_with(&other);
    let (fast, slow) = (predicted(POOL[0].0), predicted(POOL[1].0));
    assert!(slow > 3.0 * fast, "slow {slow} ms vs fast {fast} ms, from the first worker's answers");
    assert_eq!(other.learning.borrow().models.observed(), 0, "it observed nothing itself");
    for i in 12..16 {
        let (mut stream, routed) = bench.request_on(&other, &COMPLETIONS, &prompt(i));
        assert_eq!(routed.destination.as_deref(), Some(POOL[0].0), "request {i}");
        answer(&bench, &mut stream, 50, &usage_event(1_000, 0));
    }
    assert!(
        other.stats.metrics.pending("wasm_epp.learning.models_read")
            + bench.host.metric("wasm_epp.learning.models_read")
            >= 1
    );
}

#[test]
fn an_evicting_pod_loses_index_capacity() {
    let bench = Bench::new(LEARNING);
    bench.publish(1, &POOL);
    bench.tick();
    let shared = "z".repeat(4_000);
    let mut pods = Vec::new();
    for i in 0..20 {
        let (mut stream, routed) = bench.request(&COMPLETIONS, &streamed(&format!("{shared} {i}")));
        pods.push(routed.destination.unwrap());
        // The pod says it holds nothing of what the index predicted it holds.
        answer(&bench, &mut stream, 30, &usage_event(1_000, 0));
    }
    let sticky = &pods[19];
    assert!(pods[1..].iter().all(|p| p == sticky), "the shared prefix kept its pod: {pods:?}");
    let capacity = bench.worker.index_capacity(sticky, 16_384);
    assert!(capacity < 16_384 / 2, "index capacity after repeated under-reports: {capacity}");
    assert!(bench.stat("wasm_epp.learning.cached_tokens_predicted") > 0);
    assert_eq!(bench.stat("wasm_epp.learning.cached_tokens_reported"), 0);
}

#[test]
fn with_learning_off_answers_are_not_read() {
    let bench = Bench::new(r#"{"fallback_destinations": 0}"#);
    bench.publish(1, &POOL);
    let (mut stream, routed) = bench.request(&COMPLETIONS, &streamed("hello"));
    assert_eq!(bench.worker.inflight.borrow().tokens(&routed.destination.unwrap()), 0);
    answer(&bench, &mut stream, 30, &usage_event(10, 0));
    assert_eq!(bench.stat("wasm_epp.learning.first_bytes"), 0);
}

/// One streamed answer with `status` and `body`, all in one chunk.
fn answer_with(bench: &Bench, stream: &mut RequestStream, status: &str, body: &str) {
    bench.host.advance(30);
    bench.host.set_response(&[(":status", status)], b"");
    stream.on_response_headers(&bench.host, false);
    bench.host.set_response(&[(":status", status)], body.as_bytes());
    stream.on_response_body(&bench.host, body.len(), true);
    stream.on_log(&bench.host);
}

#[test]
fn an_error_answer_is_not_learned_from() {
    let bench = Bench::new(LEARNING);
    bench.publish(1, &POOL);
    // vLLM's error object, and Envoy's own local reply: neither is an event stream.
    let error = r#"{"object":"error","message":"overloaded","type":"ServiceUnavailable","code":503}"#;
    for (status, body) in [("503", error), ("503", "upstream connect error or disconnect/reset before headers")] {
        let (mut failed, routed) = bench.request(&COMPLETIONS, &streamed("hello"));
        answer_with(&bench, &mut failed, status, body);
        assert_eq!(bench.worker.inflight.borrow().tokens(&routed.destination.unwrap()), 0, "tokens released");
    }
    // A 200 stream whose first event is an error (it failed at once): no TTFT sample either.
    let failed_streams = [
        "data: {\"error\": {\"message\": \"engine dead\", \"code\": 500}}\n\ndata: [DONE]\n\n",
        "data: {\"object\":\"error\",\"message\":\"engine dead\"}\n\n",
        "event: error\ndata: {\"type\":\"error\",\"code\":\"server_error\"}\n\n",
    ];
    for body in failed_streams {
        let (mut failed, routed) = bench.request(&COMPLETIONS, &streamed("hello"));
        answer_with(&bench, &mut failed, "200", body);
        assert_eq!(bench.worker.inflight.borrow().tokens(&routed.destination.unwrap()), 0, "tokens released");
    }
    assert_eq!(bench.stat("wasm_epp.learning.first_bytes"), 5, "its tokens are released all the same");
    assert_eq!(bench.stat("wasm_epp.learning.ttft_samples"), 0, "an error is no TTFT sample");
    assert_eq!(bench.stat("wasm_epp.learning.usage_reports"), 0, "nor a usage report");
    let (mut served, _) = bench.request(&COMPLETIONS, &streamed("hello"));
    answer_with(&bench, &mut served, "200", &usage_event(10, 0));
    assert_eq!(bench.stat("wasm_epp.learning.ttft_samples"), 1, "an event stream is learned from");
    assert_eq!(bench.stat("wasm_epp.learning.usage_reports"), 1);
}

#[test]
fn an_answer_from_a_retried_fallback_is_not_learned_from() {
    let bench = Bench::new(LEARNING);
    bench.publish(1, &POOL);
    let (mut stream, routed) = bench.request(&COMPLETIONS, &streamed("hello"));
    let picked = routed.destination.unwrap();
    let fallback = POOL.iter().map(|(pod, _)| *pod).find(|pod| *pod != picked).unwrap();
    // Envoy's route writes the pod that answered (`%UPSTREAM_REMOTE_ADDRESS%`).
    let served = [(":status", "200"), ("x-gateway-destination-endpoint-served", fallback)];
    bench.host.advance(30);
    bench.host.set_response(&served, b"");
    stream.on_response_headers(&bench.host, false);
    let usage = usage_event(10, 0);
    bench.host.set_response(&served, usage.as_bytes());
    stream.on_response_body(&bench.host, usage.len(), true);
    stream.on_log(&bench.host);
    assert_eq!(bench.stat("wasm_epp.learning.other_upstream"), 1);
    assert_eq!(bench.stat("wasm_epp.learning.ttft_samples"), 0, "the fallback's time is not the picked pod's");
    assert_eq!(bench.stat("wasm_epp.learning.usage_reports"), 0);
    assert_eq!(bench.worker.inflight.borrow().tokens(&picked), 0, "the tokens are released all the same");
}

#[test]
fn a_stream_without_usage_is_read_no_further_than_its_first_chunk() {
    let bench = Bench::new(LEARNING);
    bench.publish(1, &POOL);
    let body = r#"{"model":"m","prompt":"hello","max_tokens":4,"stream":true}"#;
    let (mut stream, _) = bench.request(&COMPLETIONS, body);
    bench.host.tally.take();
    bench.host.advance(30);
    bench.host.set_response(&[(":status", "200")], b"");
    stream.on_response_headers(&bench.host, false);
    for _ in 0..10 {
        let event = b"data: {\"choices\":[{\"text\":\" a\"}]}\n\n";
        bench.host.set_response(&[(":status", "200")], event);
        stream.on_response_body(&bench.host, event.len(), false);
    }
    let copies = bench.host.tally.take().get("proxy_get_buffer_bytes").map_or(0, |count| count.calls);
    assert_eq!(copies, 1, "only the first chunk is copied (to see it is an event stream)");
    stream.on_log(&bench.host);
    assert_eq!(bench.stat("wasm_epp.learning.ttft_samples"), 1, "its first byte is a TTFT sample all the same");
}

/// Headers and a first token of a stream, without its end.
fn open_stream(bench: &Bench, stream: &mut RequestStream) {
    open_stream_with(bench, stream, b"data: {\"choices\":[{\"text\":\" a\"}],\"usage\":null}\n\n");
}

/// Headers and `first`, the stream's first chunk, without its end.
fn open_stream_with(bench: &Bench, stream: &mut RequestStream, first: &[u8]) {
    bench.host.advance(30);
    bench.host.set_response(&[(":status", "200")], b"");
    stream.on_response_headers(&bench.host, false);
    bench.host.set_response(&[(":status", "200")], first);
    stream.on_response_body(&bench.host, first.len(), false);
}

/// Ten more tokens, the usage event and the end; returns the chunks copied into the VM.
fn finish_stream(bench: &Bench, stream: &mut RequestStream) -> u64 {
    bench.host.tally.take();
    for _ in 0..10 {
        let event = b"data: {\"choices\":[{\"text\":\" a\"}],\"usage\":null}\n\n";
        bench.host.set_response(&[(":status", "200")], event);
        stream.on_response_body(&bench.host, event.len(), false);
    }
    let usage = usage_event(10, 0);
    bench.host.set_response(&[(":status", "200")], usage.as_bytes());
    stream.on_response_body(&bench.host, usage.len(), true);
    stream.on_log(&bench.host);
    bench.host.tally.take().get("proxy_get_buffer_bytes").map_or(0, |count| count.calls)
}

/// One reading slot per pod, and a chunk budget no test stream exhausts.
const ONE_SLOT_NO_BUDGET_LIMIT: &str = r#"{"fallback_destinations": 0,
    "learning": {"enabled": true, "usage_streams_per_pod": 1, "usage_chunks_per_stream": 1000}}"#;

#[test]
fn a_pod_has_only_so_many_streams_read_for_usage_at_once() {
    let bench = Bench::new(ONE_SLOT_NO_BUDGET_LIMIT);
    bench.publish(1, &[("10.0.0.1:8000", 0.0)]);
    let (mut read, _) = bench.request(&COMPLETIONS, &streamed("first"));
    open_stream(&bench, &mut read);
    let (mut skipped, _) = bench.request(&COMPLETIONS, &streamed("second"));
    open_stream(&bench, &mut skipped);
    assert_eq!(bench.stat("wasm_epp.learning.usage_streams_not_read"), 1, "the pod's one slot is taken");
    assert_eq!(finish_stream(&bench, &mut skipped), 0, "read no further than its first chunk");
    assert_eq!(bench.stat("wasm_epp.learning.usage_reports"), 0);
    assert_eq!(bench.stat("wasm_epp.learning.ttft_samples"), 2, "both first bytes are TTFT samples");
    assert_eq!(finish_stream(&bench, &mut read), 11, "the slot's stream is read to its end");
    assert_eq!(bench.stat("wasm_epp.learning.usage_reports"), 1);
    // Its end gave the slot back.
    let (mut next, _) = bench.request(&COMPLETIONS, &streamed("third"));
    open_stream(&bench, &mut next);
    assert_eq!(finish_stream(&bench, &mut next), 11);
    assert_eq!(bench.stat("wasm_epp.learning.usage_reports"), 2);
    assert_eq!(bench.stat("wasm_epp.learning.usage_streams_not_read"), 1);
}

#[test]
fn a_stream_left_unread_after_a_running_usage_in_its_first_chunk_teaches_nothing() {
    // `stream_options.continuous_usage_stats`: vLLM puts the usage so far on every chunk, the
    // first one's with no token generated and no cached-token details yet.
    let bench = Bench::new(ONE_SLOT_NO_BUDGET_LIMIT);
    bench.publish(1, &[("10.0.0.1:8000", 0.0)]);
    let (mut read, _) = bench.request(&COMPLETIONS, &streamed("first"));
    open_stream(&bench, &mut read);
    let (mut skipped, _) = bench.request(&COMPLETIONS, &streamed("second"));
    let running =
        b"data: {\"choices\":[{\"text\":\" a\"}],\"usage\":{\"prompt_tokens\":900,\"completion_tokens\":0}}\n\n";
    open_stream_with(&bench, &mut skipped, running);
    assert_eq!(bench.stat("wasm_epp.learning.usage_streams_not_read"), 1, "the pod's one slot is taken");
    finish_stream(&bench, &mut skipped);
    assert_eq!(bench.stat("wasm_epp.learning.usage_reports"), 0, "the first chunk's running usage is not the answer's");
    finish_stream(&bench, &mut read);
    assert_eq!(bench.stat("wasm_epp.learning.usage_reports"), 1, "the stream read to its end is learned from");
}

#[test]
fn streams_are_read_for_usage_only_as_far_as_the_chunk_budget_goes() {
    // The streams' share alone (the mock clock moves 30 ms a stream: no time share).
    let bench = Bench::new(
        r#"{"fallback_destinations": 0,
            "learning": {"enabled": true, "usage_chunks_per_stream": 2, "usage_chunks_per_second": 0}}"#,
    );
    bench.publish(1, &[("10.0.0.1:8000", 0.0)]);
    let (streams, mut chunks) = (24_u64, 0);
    for k in 0..streams {
        let (mut stream, _) = bench.request(&COMPLETIONS, &streamed(&format!("prompt {k}")));
        open_stream(&bench, &mut stream);
        chunks += finish_stream(&bench, &mut stream);
    }
    let reports = bench.stat("wasm_epp.learning.usage_reports");
    // Each stream read takes 11 chunks past its first token and 2 come with every stream:
    // the first, then one in six (the budget is never positive for five in a row).
    assert_eq!(reports, 5, "{chunks} chunks read");
    assert_eq!(chunks, 11 * reports);
    assert!(chunks <= 2 * streams + 11, "{chunks} chunks: the budget and one stream at most");
    assert_eq!(bench.stat("wasm_epp.learning.ttft_samples"), streams, "every stream's first byte is a sample");
    assert_eq!(bench.stat("wasm_epp.learning.usage_streams_not_read"), streams - reports);
}

#[test]
fn a_pod_whose_streams_fail_gets_its_reading_slots_back() {
    let bench = Bench::new(ONE_SLOT_NO_BUDGET_LIMIT);
    bench.publish(1, &[("10.0.0.1:8000", 0.0)]);
    for prompt in ["reset mid-stream", "never answered"] {
        let (mut stream, _) = bench.request(&COMPLETIONS, &streamed(prompt));
        if prompt == "reset mid-stream" {
            open_stream(&bench, &mut stream);
        }
        // The client or the pod goes away: Envoy ends the stream without its last chunk.
        stream.on_log(&bench.host);
    }
    let (mut next, _) = bench.request(&COMPLETIONS, &streamed("after"));
    open_stream(&bench, &mut next);
    assert_eq!(finish_stream(&bench, &mut next), 11, "the reset stream's slot was given back");
    assert_eq!(bench.stat("wasm_epp.learning.usage_streams_not_read"), 0);
}

#[test]
fn a_whole_answer_releases_its_tokens_at_the_end_and_reports_usage() {
    let bench = Bench::new(LEARNING);
    bench.publish(1, &POOL);
    let long = "x".repeat(8_000);
    let body = format!(r#"{{"model":"m","prompt":"{long}","max_tokens":4}}"#);
    let (mut stream, routed) = bench.request(&COMPLETIONS, &body);
    let pod = routed.destination.unwrap();
    assert!(bench.worker.inflight.borrow().tokens(&pod) > 1_000);
    let answer = r#"{"choices":[{"text":" a"}],"usage":{"prompt_tokens":2000,"completion_tokens":4}}"#;
    bench.host.advance(30);
    bench.host.set_response(&[(":status", "200")], answer.as_bytes());
    stream.on_response_headers(&bench.host, false);
    stream.on_response_body(&bench.host, answer.len(), false);
    assert!(bench.worker.inflight.borrow().tokens(&pod) > 1_000, "held until the end (one publish, not two)");
    stream.on_response_body(&bench.host, 0, true);
    stream.on_log(&bench.host);
    assert_eq!(bench.worker.inflight.borrow().tokens(&pod), 0);
    assert_eq!(bench.stat("wasm_epp.learning.ttft_samples"), 0, "a whole answer's first byte is no TTFT");
    assert_eq!(bench.stat("wasm_epp.learning.usage_reports"), 1);
}

const CHAT: [(&str, &str); 3] =
    [(":method", "POST"), (":path", "/v1/chat/completions"), ("content-type", "application/json")];

fn streamed_chat(messages: &[String]) -> String {
    format!(
        r#"{{"model":"m","messages":[{}],"max_tokens":4,"stream":true,"stream_options":{{"include_usage":true}}}}"#,
        messages.join(",")
    )
}

/// Cached prompt tokens predicted for a follow-up turn whose third message has `role`, after
/// the first turn went to a pod; the pods report exactly what was predicted.
fn follow_up_prediction(role: &str) -> u64 {
    let bench = Bench::new(LEARNING);
    bench.publish(1, &POOL);
    bench.tick();
    let message =
        |role: &str, letter: &str, len: usize| format!(r#"{{"role":"{role}","content":"{}"}}"#, letter.repeat(len));
    let first_turn = [message("system", "s", 3_000), message("user", "u", 500)];
    let (mut stream, _) = bench.request(&CHAT, &streamed_chat(&first_turn));
    answer(&bench, &mut stream, 30, &usage_event(900, 0));
    let before = bench.stat("wasm_epp.learning.cached_tokens_predicted");
    let mut next_turn = first_turn.to_vec();
    next_turn.extend([message(role, "r", 1_200), message("user", "v", 300)]);
    let (mut stream, _) = bench.request(&CHAT, &streamed_chat(&next_turn));
    answer(&bench, &mut stream, 30, &usage_event(1_300, 0));
    bench.stat("wasm_epp.learning.cached_tokens_predicted") - before
}

#[test]
fn a_follow_up_turn_is_predicted_to_find_the_reply_its_pod_generated_cached() {
    // ~3,550 bytes before the reply (~55 blocks of 64 bytes), the reply ~1,225 more (~19 blocks).
    let with_reply = follow_up_prediction("assistant");
    let without = follow_up_prediction("user");
    assert!((850..=900).contains(&without), "the previous turn's full blocks only: {without}");
    assert!(with_reply >= without + 280, "the reply counts too: {with_reply} vs {without}");
}

#[test]
fn past_the_watch_budget_an_answer_costs_no_host_call_and_still_releases_its_tokens() {
    // A quarter of an answer earned per answer (no time share), after the share of 64
    // answers the budget starts with. Learning's own host calls are counted: outlier
    // detection (its status and answering pod, on every answer) is off.
    let bench = Bench::new(
        r#"{"fallback_destinations": 0, "outlier_detection": {"enabled": false},
            "learning": {"enabled": true, "watch_share": 0.25, "watch_per_second": 0}}"#,
    );
    bench.publish(1, &[("10.0.0.1:8000", 0.0)]);
    let long = "x".repeat(8_000);
    let (answers, mut watched) = (40_u64, 0);
    for k in 0..answers {
        let (mut stream, routed) = bench.request(&COMPLETIONS, &streamed(&format!("{k} {long}")));
        let pod = routed.destination.unwrap();
        bench.host.tally.take();
        open_stream(&bench, &mut stream);
        let calls = bench.host.tally.take();
        let lookups = calls.get("proxy_get_header_map_value").map_or(0, |count| count.calls);
        let copies = calls.get("proxy_get_buffer_bytes").map_or(0, |count| count.calls);
        // A watched answer: the answering pod and its `content-encoding` (read as it came or
        // inflated), and one copy; another: none of them.
        assert_eq!(lookups, 2 * copies, "a watched answer does all three, another none: {calls:?}");
        watched += copies;
        assert_eq!(bench.worker.inflight.borrow().tokens(&pod), 0, "its prompt released at the first byte");
        finish_stream(&bench, &mut stream);
    }
    // The budget starts with 64 answers' share saved (16): with each answer adding a quarter
    // it lasts 22 answers, then one in four is watched (the 25th, 29th, 33rd and 37th).
    assert_eq!(watched, 22 + 4, "answers watched of {answers}");
    assert_eq!(bench.stat("wasm_epp.learning.ttft_samples"), watched);
    assert_eq!(bench.stat("wasm_epp.learning.answers_not_watched"), answers - watched);
    assert_eq!(bench.stat("wasm_epp.learning.first_bytes"), answers);
}

#[test]
fn a_body_routed_unread_is_not_observed_so_its_stream_is_not_read_chunk_by_chunk() {
    // Over max_body_bytes: routed by load at once, its `stream` flag unknown. Taken for a
    // whole answer, a stream would have every chunk copied into the VM.
    let bench = Bench::new(r#"{"fallback_destinations": 0, "max_body_bytes": 1024, "learning": {"enabled": true}}"#);
    bench.publish(1, &POOL);
    bench.tick();
    let (mut stream, answer) = bench.request(&COMPLETIONS, &streamed(&"x".repeat(2048)));
    let pod = answer.destination.unwrap();
    assert_eq!(bench.worker.inflight.borrow().tokens(&pod), 0, "no tokens counted for a prompt not read");
    bench.host.tally.take();
    bench.host.set_response(&[(":status", "200")], b"data: {\"choices\":[{\"text\":\" a\"}]}\n\n");
    stream.on_response_headers(&bench.host, false);
    for _ in 0..50 {
        stream.on_response_body(&bench.host, 40, false);
    }
    stream.on_log(&bench.host);
    let reads = bench.host.tally.take().get("proxy_get_buffer_bytes").map_or(0, |c| c.calls);
    assert_eq!(reads, 0, "no chunk of the answer copied into the VM");
    assert_eq!(bench.stat("wasm_epp.learning.ttft_samples"), 0);
}

#[test]
fn a_stream_given_up_before_its_first_byte_is_no_duration_sample() {
    let bench = Bench::new(LEARNING);
    bench.publish(1, &POOL);
    bench.tick();
    let observed = || bench.worker.learning.borrow().models.observed();
    let before = observed();
    let (mut stream, _) = bench.request(&COMPLETIONS, &streamed("gone"));
    bench.host.advance(5_000);
    stream.on_log(&bench.host);
    assert_eq!(observed(), before, "nothing learned from a stream that never opened");
}

#[test]
fn a_chat_stream_whose_error_follows_its_role_chunk_teaches_nothing() {
    let bench = Bench::new(LEARNING);
    bench.publish(1, &POOL);
    bench.tick();
    let observed = || bench.worker.learning.borrow().models.observed();
    // vLLM sends the role's chunk with the engine's first output, then finds that output an
    // error: the stream opened as a success would, and failed.
    let role = b"data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n";
    let error = b"data: {\"error\": {\"message\": \"boom\", \"type\": \"InternalServerError\", \"code\": 500}}\n\n";
    let before = observed();
    let (mut stream, answer) = bench.request(&CHAT, &streamed_chat(&[r#"{"role":"user","content":"hi"}"#.to_owned()]));
    let pod = answer.destination.unwrap().split(',').next().unwrap().to_owned();
    bench.host.set_response(&[(":status", "200"), ("x-gateway-destination-endpoint-served", &pod)], b"");
    stream.on_response_headers(&bench.host, false);
    bench.host.advance(3);
    for (chunk, end) in [(&role[..], false), (&error[..], false), (&b"data: [DONE]\n\n"[..], true)] {
        bench.host.set_response(&[(":status", "200")], chunk);
        stream.on_response_body(&bench.host, chunk.len(), end);
    }
    stream.on_log(&bench.host);
    assert_eq!(bench.stat("wasm_epp.streams_failed"), 1);
    // Its role chunk passed as a first byte would, but the error after it makes it no
    // success: no 3 ms TTFT sample, and its length is no answer's duration.
    assert_eq!(bench.stat("wasm_epp.learning.ttft_samples"), 0);
    assert_eq!(observed(), before, "nothing learned from it");
    // A success whose role chunk and first token come apart is sampled once its opening is read.
    let token = b"data: {\"id\":\"chatcmpl-2\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" a\"}}]}\n\n";
    let (mut stream, answer) = bench.request(&CHAT, &streamed_chat(&[r#"{"role":"user","content":"ok"}"#.to_owned()]));
    let pod = answer.destination.unwrap().split(',').next().unwrap().to_owned();
    bench.host.set_response(&[(":status", "200"), ("x-gateway-destination-endpoint-served", &pod)], b"");
    stream.on_response_headers(&bench.host, false);
    for chunk in [&role[..], &token[..]] {
        bench.host.set_response(&[(":status", "200")], chunk);
        stream.on_response_body(&bench.host, chunk.len(), false);
    }
    assert_eq!(bench.stat("wasm_epp.learning.ttft_samples"), 1);
    stream.on_log(&bench.host);
}

#[test]
fn a_retried_answer_releases_the_picks_prompt_tokens_once_and_no_one_elses() {
    let bench = Bench::new(r#"{"fallback_destinations": 1, "learning": {"enabled": true}}"#);
    // The pick stays every request's pick: the other pod is far busier.
    bench.publish(1, &[("10.0.0.1:8000", 0.0), ("10.0.0.2:8000", 30.0)]);
    let tokens = |pod: &str| bench.worker.inflight.borrow().tokens(pod);
    let (mut retried, routed) = bench.request(&COMPLETIONS, &streamed(&"long prompt ".repeat(400)));
    let list = routed.destination.unwrap();
    let (pick, fallback) = list.split_once(',').unwrap();
    assert_eq!(pick, "10.0.0.1:8000");
    assert!(tokens(pick) > 500);
    // The pick failed; Envoy's retry on the fallback answers.
    bench.host.set_response(&[(":status", "200"), ("x-gateway-destination-endpoint-served", fallback)], b"");
    retried.on_response_headers(&bench.host, false);
    assert_eq!(tokens(pick), 0, "the pick is not prefilling it any more");
    // Another request on the pick, before the retried answer's first byte.
    let (mut next, _) = bench.request(&COMPLETIONS, &streamed("short"));
    let next_tokens = tokens(pick);
    assert!(next_tokens > 0);
    let event = usage_event(10, 0);
    bench.host.set_response(&[(":status", "200")], event.as_bytes());
    retried.on_response_body(&bench.host, event.len(), true);
    retried.on_log(&bench.host);
    assert_eq!(tokens(pick), next_tokens, "the other request's tokens are untouched");
    next.on_log(&bench.host);
    assert_eq!((tokens(pick), tokens(fallback)), (0, 0));
}

#[test]
fn a_pod_whose_epoch_changes_is_learned_anew() {
    use picker::address::PodAddress;
    use picker::pod_table::{encode_version, PodState, PodTable};
    use wasm_epp_host::{Host, SharedStore};
    let bench = Bench::new(LEARNING);
    let publish = |version: u64, restarts: u32| {
        let now = bench.host.now_ms();
        let mut table = PodTable { version, published_at_ms: now, poll_interval_ms: 100, ..PodTable::default() };
        for (address, _) in POOL {
            let mut pod = PodState::unknown(&PodAddress::parse(address).unwrap());
            (pod.healthy, pod.kv_usage, pod.last_success_ms) = (true, Some(0.1), now);
            pod.epoch = if address == POOL[1].0 { restarts } else { 0 };
            table.pods.push(pod);
        }
        bench.host.set(picker::keys::POD_TABLE, &table.encode(), None).unwrap();
        bench.host.set(picker::keys::POD_TABLE_VERSION, &encode_version(version), None).unwrap();
        bench.heartbeat();
        bench.tick();
    };
    publish(1, 0);
    let dispatch = picker::learn::Dispatch {
        load: picker::learn::Load { tokens: 1_000.0, requests: 0.0 },
        sent_ms: bench.host.now_ms(),
        ..Default::default()
    };
    for _ in 0..5 {
        bench.worker.learning.borrow_mut().first_byte(POOL[1].0, &dispatch, bench.host.now_ms() + 900);
    }
    assert!(bench.worker.learning.borrow().models.fitted(POOL[1].0));
    publish(2, 0);
    assert!(bench.worker.learning.borrow().models.fitted(POOL[1].0), "a new table, the same engine");
    publish(3, 1);
    assert!(!bench.worker.learning.borrow().models.fitted(POOL[1].0), "it restarted: learned anew");
}

#[test]
fn cached_tokens_are_judged_in_the_pool_s_blocks_not_the_configured_ones() {
    use picker::address::PodAddress;
    use picker::pod_table::{encode_version, PodState, PodTable};
    use wasm_epp_host::{Host, SharedStore};
    // The configuration's `prefix.block_tokens` is 16; the pods report 64-token blocks.
    let bench = Bench::new(LEARNING);
    let now = bench.host.now_ms();
    let mut table = PodTable { version: 1, published_at_ms: now, poll_interval_ms: 100, ..PodTable::default() };
    for (address, _) in POOL {
        let mut pod = PodState::unknown(&PodAddress::parse(address).unwrap());
        (pod.healthy, pod.kv_usage, pod.last_success_ms, pod.block_size) = (true, Some(0.1), now, Some(64));
        table.pods.push(pod);
    }
    bench.host.set(picker::keys::POD_TABLE, &table.encode(), None).unwrap();
    bench.host.set(picker::keys::POD_TABLE_VERSION, &encode_version(1), None).unwrap();
    bench.heartbeat();
    bench.tick();
    // 8,000 bytes of prompt: 2,000 tokens at 4 bytes each, 31 full blocks of 64 tokens.
    let prompt = streamed(&"z".repeat(7_998));
    let usage = |cached: u64| {
        format!(
            "data: {{\"choices\":[],\"usage\":{{\"prompt_tokens\":2000,\"completion_tokens\":0,\
             \"prompt_tokens_details\":{{\"cached_tokens\":{cached}}}}}}}\n\ndata: [DONE]\n\n"
        )
    };
    let (mut stream, routed) = bench.request(&COMPLETIONS, &prompt);
    let pod = routed.destination.unwrap();
    answer(&bench, &mut stream, 50, &usage(0));
    for _ in 0..20 {
        let (mut stream, routed) = bench.request(&COMPLETIONS, &prompt);
        assert_eq!(routed.destination.as_deref(), Some(pod.as_str()), "the prompt's pod");
        // Predicted: 31 blocks of 64, 1,984 tokens; the engine's own rounding reports 40 fewer.
        answer(&bench, &mut stream, 50, &usage(1_944));
    }
    assert_eq!(bench.stat("wasm_epp.learning.cached_tokens_predicted"), 20 * 1_984);
    let capacity = bench.worker.learning.borrow().capacity(&pod, 10_000);
    assert_eq!(capacity, 10_000, "less than a block of the pool's apart is rounding, not eviction");
}

#[test]
fn a_batch_or_a_prompt_logprobs_answer_reports_no_cached_figure_for_the_prompt_hashed() {
    let bench = Bench::new(LEARNING);
    bench.publish(1, &POOL);
    let options = r#""max_tokens":4,"stream":true,"stream_options":{"include_usage":true}"#;
    let bodies = [
        // vLLM reports the last prompt's cached tokens alone.
        format!(r#"{{"model":"m","prompt":["first prompt","second prompt"],{options}}}"#),
        // vLLM computes prompt logprobs without its prefix cache: 0 cached, whatever it holds.
        format!(r#"{{"model":"m","prompt":"a prompt","prompt_logprobs":1,{options}}}"#),
        format!(r#"{{"model":"m","prompt":"a prompt","echo":true,"logprobs":0,{options}}}"#),
    ];
    for body in &bodies {
        let (mut stream, _) = bench.request(&COMPLETIONS, body);
        answer(&bench, &mut stream, 30, &usage_event(20, 0));
    }
    assert_eq!(bench.stat("wasm_epp.learning.usage_reports"), 3, "their usage is read");
    assert_eq!(bench.stat("wasm_epp.learning.cached_reports"), 0, "but not compared with the prediction");
    let (mut one, _) = bench.request(&COMPLETIONS, &streamed("one prompt"));
    answer(&bench, &mut one, 30, &usage_event(20, 0));
    assert_eq!(bench.stat("wasm_epp.learning.cached_reports"), 1, "one prompt's is");
}

/// `n` > 1: vLLM V1 runs a child request per choice; a whole answer carries the cached tokens
/// of the child that finished last, a sibling that hit the first one's prompt blocks (the
/// whole prompt on a cold pod), so it is not compared; a stream's is the first child's, and is.
#[test]
fn a_whole_answer_of_several_choices_reports_no_cached_figure_for_the_prompt() {
    let bench = Bench::new(LEARNING);
    bench.publish(1, &POOL);
    let whole = r#"{"model":"m","prompt":"a prompt","max_tokens":4,"n":2}"#;
    let (mut stream, _) = bench.request(&COMPLETIONS, whole);
    let body = r#"{"choices":[{"index":0,"text":" a"},{"index":1,"text":" b"}],"usage":{"prompt_tokens":20,"completion_tokens":8,"prompt_tokens_details":{"cached_tokens":16}}}"#;
    answer_with(&bench, &mut stream, "200", body);
    assert_eq!(bench.stat("wasm_epp.learning.usage_reports"), 1, "its usage is read");
    assert_eq!(bench.stat("wasm_epp.learning.cached_reports"), 0, "but not compared with the prediction");
    let streamed_n = r#"{"model":"m","prompt":"a prompt","max_tokens":4,"n":2,"stream":true,"stream_options":{"include_usage":true}}"#;
    let (mut stream, _) = bench.request(&COMPLETIONS, streamed_n);
    answer(&bench, &mut stream, 30, &usage_event(20, 0));
    assert_eq!(bench.stat("wasm_epp.learning.cached_reports"), 1, "a stream's is the first choice's");
}

#[test]
fn after_the_wall_clock_stepped_back_the_workers_still_share_what_they_learn() {
    let bench = Bench::new(LEARNING);
    bench.publish(1, &POOL);
    let other = bench.another_worker(8);
    bench.tick_with(&other);
    // The wall clock steps back an hour (NTP at boot, a VM restored): each worker's next share
    // was set 100 ms ahead of the old time, so none shared until the clock caught up.
    bench.host.clock_ms.set(common::NOW - 3_600_000);
    bench.publish(2, &POOL);
    bench.tick_with(&other);
    let prompt = |i: usize| streamed(&format!("{i} {}", "y".repeat(4_000)));
    for i in 0..12 {
        let (mut stream, routed) = bench.request(&COMPLETIONS, &prompt(i));
        let slow = routed.destination.unwrap() == POOL[1].0;
        answer(&bench, &mut stream, if slow { 400 } else { 50 }, &usage_event(1_000, 0));
    }
    bench.host.advance(200);
    bench.tick_with(&other);
    let load = picker::learn::Load { tokens: 1_000.0, requests: 0.0 };
    let predicted = |pod: &str| other.learning.borrow().models.predict(pod, load);
    let (fast, slow) = (predicted(POOL[0].0), predicted(POOL[1].0));
    assert!(slow > 3.0 * fast, "slow {slow} ms vs fast {fast} ms, from the first worker's answers");
}

#[test]
fn a_stream_ending_in_trailers_inside_its_opening_is_judged_as_at_its_last_chunk() {
    // An HTTP/2 answer may end in trailers, not in a last body chunk. A chat stream's first
    // chunk: its role chunk, then the start of the next event (`data: {"`, which may still be
    // an error). Judged at the end as it stands (no error): its first byte is a TTFT sample,
    // whichever way the stream ended.
    let role = "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n";
    let first_chunk = format!("{role}data: {{\"");
    let chat = [(":method", "POST"), (":path", "/v1/chat/completions"), ("content-type", "application/json")];
    let body = r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}"#;
    for trailers in [false, true] {
        let bench = Bench::new(LEARNING);
        bench.publish(1, &POOL);
        let (mut stream, routed) = bench.request(&chat, body);
        let pick = routed.destination.unwrap();
        bench.host.advance(30);
        // The pick answered: outlier detection judges the stream, so its opening is read.
        bench.host.set_response(&[(":status", "200"), ("x-gateway-destination-endpoint-served", &pick)], b"");
        stream.on_response_headers(&bench.host, false);
        bench.host.set_response(&[(":status", "200")], first_chunk.as_bytes());
        stream.on_response_body(&bench.host, first_chunk.len(), false);
        assert_eq!(bench.stat("wasm_epp.learning.ttft_samples"), 0, "held while the opening is read");
        if trailers {
            assert_eq!(stream.on_response_trailers(&bench.host), Step::Continue);
        } else {
            stream.on_response_body(&bench.host, 0, true);
        }
        stream.on_log(&bench.host);
        assert_eq!(bench.stat("wasm_epp.learning.ttft_samples"), 1, "ended in trailers: {trailers}");
    }
}
