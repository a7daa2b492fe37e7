//! The live comparison with a baseline (`comparison`), through the whole request path of one
//! worker on a `MockHost`: arms on their own pods, the baseline blind to prefixes, sessions
//! kept in their arm, and each arm's answers counted and timed.

// Helpers outside #[test] functions read replies: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::{completion, publish_models, Bench, COMPLETIONS, NOW};
use picker::address::PodAddress;
use picker::comparison::{Arm, PodSplit};
use picker::keys;
use picker::pod_table::{encode_version, PodState, PodTable};
use wasm_epp_host::SharedStore;
use wasm_epp_router::RequestStream;

const FOUR_PODS: [(&str, f64); 4] =
    [("10.0.0.1:8000", 0.0), ("10.0.0.2:8000", 0.0), ("10.0.0.3:8000", 0.0), ("10.0.0.4:8000", 0.0)];

const HALF: &str = r#"{"comparison": {"baseline_share": 0.5}, "debug_decision_header": true}"#;

fn chosen(destination: &Option<String>) -> String {
    destination.clone().unwrap_or_default().split(',').next().unwrap_or_default().to_owned()
}

/// The arm the decision header names, once the answer's headers are in.
fn arm_of(bench: &Bench, stream: &mut RequestStream, status: &str) -> String {
    bench.host.set_response(&[(":status", status)], b"");
    stream.on_response_headers(&bench.host, false);
    let explain = bench.host.response_header("x-wasm-epp-decision").unwrap();
    explain.split("; arm=").nth(1).unwrap().to_owned()
}

fn streamed(prompt: &str) -> String {
    format!(r#"{{"model":"m","prompt":"{prompt}","max_tokens":4,"stream":true}}"#)
}

#[test]
fn each_arm_keeps_to_its_pods_and_the_baseline_ignores_prefixes() {
    let bench = Bench::new(HALF);
    bench.publish(1, &FOUR_PODS);
    // One long prompt, again and again, one at a time: the picker keeps it on one pod; the
    // baseline, blind to prefixes, spreads it over both of its own (equally loaded: ties).
    let prompt = "the same long shared document ".repeat(40);
    let mut pods_of: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for _ in 0..60 {
        let (mut stream, answer) = bench.request(&COMPLETIONS, &completion(&prompt));
        let arm = arm_of(&bench, &mut stream, "200");
        pods_of.entry(arm).or_default().insert(chosen(&answer.destination));
        stream.on_log(&bench.host);
    }
    let (picker, baseline) = (&pods_of["picker"], &pods_of["baseline"]);
    assert_eq!(picker.len(), 1, "the picker keeps the prefix on one pod: {pods_of:?}");
    assert_eq!(baseline.len(), 2, "the baseline spreads it over its two pods: {pods_of:?}");
    assert!(picker.is_disjoint(baseline), "{pods_of:?}");
    let total =
        bench.stat("wasm_epp.comparison_requests.arm.picker") + bench.stat("wasm_epp.comparison_requests.arm.baseline");
    assert_eq!(total, 60);
    assert!(bench.stat("wasm_epp.comparison_requests.arm.baseline") >= 15, "about half each");
}

#[test]
fn the_least_request_baseline_goes_where_fewest_are_in_flight() {
    let bench = Bench::new(HALF);
    bench.publish(1, &FOUR_PODS);
    let mut open = Vec::new();
    let mut baseline_pods: BTreeMap<String, usize> = BTreeMap::new();
    for i in 0..40 {
        let (mut stream, answer) = bench.request(&COMPLETIONS, &completion(&format!("unrelated {i}")));
        if arm_of(&bench, &mut stream, "200") == "baseline" {
            *baseline_pods.entry(chosen(&answer.destination)).or_default() += 1;
        }
        open.push(stream);
    }
    let counts: Vec<usize> = baseline_pods.values().copied().collect();
    assert_eq!(counts.len(), 2, "{baseline_pods:?}");
    assert!(counts[0].abs_diff(counts[1]) <= 1, "kept even by in-flight counts: {baseline_pods:?}");
    for mut stream in open {
        stream.on_log(&bench.host);
    }
}

#[test]
fn a_session_stays_in_one_arm() {
    let bench = Bench::new(HALF);
    bench.publish(1, &FOUR_PODS);
    let mut arms = BTreeSet::new();
    for turn in 0..12 {
        let headers = [COMPLETIONS.as_slice(), &[("x-session-id", "conversation-7")]].concat();
        let (mut stream, _) = bench.request(&headers, &completion(&format!("turn {turn}")));
        arms.insert(arm_of(&bench, &mut stream, "200"));
        stream.on_log(&bench.host);
    }
    assert_eq!(arms.len(), 1, "{arms:?}");
}

#[test]
fn answers_are_timed_and_failures_counted_per_arm() {
    let bench = Bench::new(HALF);
    bench.publish(1, &FOUR_PODS);
    let mut first_bytes: BTreeMap<String, u64> = BTreeMap::new();
    for i in 0..40 {
        // The clock moves 330 ms a request: fresh pod data, as the pool service publishes it.
        bench.publish(i + 2, &FOUR_PODS);
        bench.tick();
        let (mut stream, _) = bench.request(&COMPLETIONS, &streamed(&format!("prompt {i}")));
        let status = if i % 10 == 0 { "503" } else { "200" };
        let arm = arm_of(&bench, &mut stream, status);
        bench.host.advance(30);
        bench.host.set_response(&[(":status", status)], b"data: {}\n\n");
        stream.on_response_body(&bench.host, 10, false);
        stream.on_response_body(&bench.host, 10, false);
        bench.host.advance(300);
        stream.on_log(&bench.host);
        if status == "200" {
            *first_bytes.entry(arm).or_default() += 1;
        }
    }
    for arm in ["picker", "baseline"] {
        let timed = first_bytes.get(arm).copied().unwrap_or(0);
        assert_eq!(bench.stat(&format!("wasm_epp.comparison_first_byte_ms_count.arm.{arm}")), timed, "{arm}");
        assert_eq!(bench.stat(&format!("wasm_epp.comparison_first_byte_ms_sum.arm.{arm}")), 30 * timed, "{arm}");
        assert_eq!(bench.stat(&format!("wasm_epp.comparison_first_byte_ms_bucket.arm.{arm}.le.25")), 0);
        assert_eq!(bench.stat(&format!("wasm_epp.comparison_first_byte_ms_bucket.arm.{arm}.le.50")), timed);
        let routed = bench.stat(&format!("wasm_epp.comparison_requests.arm.{arm}"));
        assert_eq!(bench.stat(&format!("wasm_epp.comparison_duration_ms_count.arm.{arm}")), routed, "{arm}");
        assert_eq!(bench.stat(&format!("wasm_epp.comparison_duration_ms_sum.arm.{arm}")), 330 * routed, "{arm}");
    }
    let errors =
        bench.stat("wasm_epp.comparison_errors.arm.picker") + bench.stat("wasm_epp.comparison_errors.arm.baseline");
    assert_eq!(errors, 4, "the 5xx answers, each in its arm");
}

#[test]
fn a_stream_that_opens_with_a_server_error_is_its_arms_failure_not_a_first_token() {
    let bench = Bench::new(HALF);
    bench.publish(1, &FOUR_PODS);
    let error = b"data: {\"error\": {\"message\": \"boom\", \"type\": \"InternalServerError\", \"param\": null, \"code\": 500}}\n\n";
    let mut arms: BTreeMap<String, u64> = BTreeMap::new();
    for i in 0..20 {
        bench.publish(i + 2, &FOUR_PODS);
        bench.tick();
        let (mut stream, _) = bench.request(&COMPLETIONS, &streamed(&format!("prompt {i}")));
        let arm = arm_of(&bench, &mut stream, "200");
        bench.host.advance(5);
        bench.host.set_response(&[(":status", "200")], error);
        stream.on_response_body(&bench.host, error.len(), false);
        stream.on_log(&bench.host);
        *arms.entry(arm).or_default() += 1;
    }
    for (arm, failed) in arms {
        assert_eq!(bench.stat(&format!("wasm_epp.comparison_errors.arm.{arm}")), failed, "{arm}");
        assert_eq!(bench.stat(&format!("wasm_epp.comparison_first_byte_ms_count.arm.{arm}")), 0, "{arm}: no TTFT");
    }
}

#[test]
fn a_stream_that_opens_with_a_client_error_is_no_first_token_nor_an_arm_failure() {
    let bench = Bench::new(HALF);
    bench.publish(1, &FOUR_PODS);
    // vLLM answered 200, then the request's own error (a 4xx code): as a 4xx status would be.
    let error =
        b"data: {\"error\": {\"message\": \"bad\", \"type\": \"BadRequestError\", \"param\": null, \"code\": 400}}\n\n";
    for i in 0..20 {
        bench.publish(i + 2, &FOUR_PODS);
        bench.tick();
        let (mut stream, _) = bench.request(&COMPLETIONS, &streamed(&format!("prompt {i}")));
        arm_of(&bench, &mut stream, "200");
        bench.host.advance(5);
        bench.host.set_response(&[(":status", "200")], error);
        stream.on_response_body(&bench.host, error.len(), false);
        stream.on_log(&bench.host);
    }
    for arm in ["picker", "baseline"] {
        assert_eq!(bench.stat(&format!("wasm_epp.comparison_errors.arm.{arm}")), 0, "{arm}: the pod answered");
        assert_eq!(
            bench.stat(&format!("wasm_epp.comparison_first_byte_ms_count.arm.{arm}")),
            0,
            "{arm}: an error in 5 ms is no first token"
        );
    }
}

#[test]
fn a_chat_stream_is_timed_from_its_role_chunk_unless_an_error_follows_it() {
    let bench = Bench::new(HALF);
    bench.publish(1, &FOUR_PODS);
    let chat = [(":method", "POST"), (":path", "/v1/chat/completions"), ("content-type", "application/json")];
    let role = b"data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n";
    let token = b"data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n";
    let error = b"data: {\"error\": {\"message\": \"Internal server error\", \"type\": \"InternalServerError\", \"param\": null, \"code\": 500}}\n\n";
    let (mut failed, mut timed): (BTreeMap<String, u64>, BTreeMap<String, u64>) = Default::default();
    for i in 0..20 {
        bench.publish(i + 2, &FOUR_PODS);
        bench.tick();
        let body = format!(r#"{{"model":"m","messages":[{{"role":"user","content":"chat {i}"}}],"stream":true}}"#);
        let (mut stream, _) = bench.request(&chat, &body);
        let arm = arm_of(&bench, &mut stream, "200");
        bench.host.advance(40);
        bench.host.set_response(&[(":status", "200")], role);
        stream.on_response_body(&bench.host, role.len(), false);
        bench.host.advance(20);
        let next: &[u8] = if i % 2 == 0 { error } else { token };
        bench.host.set_response(&[(":status", "200")], next);
        stream.on_response_body(&bench.host, next.len(), false);
        stream.on_log(&bench.host);
        *(if i % 2 == 0 { &mut failed } else { &mut timed }).entry(arm).or_default() += 1;
    }
    for arm in ["picker", "baseline"] {
        let (failed, timed) = (failed.get(arm).copied().unwrap_or(0), timed.get(arm).copied().unwrap_or(0));
        assert_eq!(bench.stat(&format!("wasm_epp.comparison_errors.arm.{arm}")), failed, "{arm}");
        assert_eq!(bench.stat(&format!("wasm_epp.comparison_first_byte_ms_count.arm.{arm}")), timed, "{arm}");
        assert_eq!(bench.stat(&format!("wasm_epp.comparison_first_byte_ms_sum.arm.{arm}")), 40 * timed, "{arm}");
    }
}

#[test]
fn requests_the_picker_must_route_are_not_compared() {
    let bench = Bench::new(HALF);
    publish_models(
        &bench,
        &[("10.0.0.1:8000", "m", &[], 0.0), ("10.0.0.2:8000", "m", &[], 0.0), ("10.0.0.3:8000", "solo", &[], 0.0)],
    );
    // A model one pod serves: no arm has a pod of each side for it.
    let body = r#"{"model":"solo","prompt":"hi","max_tokens":4}"#;
    let (mut stream, answer) = bench.request(&COMPLETIONS, body);
    assert_eq!(chosen(&answer.destination), "10.0.0.3:8000");
    bench.host.set_response(&[(":status", "200")], b"");
    stream.on_response_headers(&bench.host, false);
    assert!(!bench.host.response_header("x-wasm-epp-decision").unwrap().contains("arm="));
    stream.on_log(&bench.host);
    // Another endpoint's body is read for its model alone: not compared either.
    let embeddings = [(":method", "POST"), (":path", "/v1/embeddings"), ("content-type", "application/json")];
    bench.complete(&embeddings, r#"{"model":"m","input":"hi"}"#);
    let compared =
        bench.stat("wasm_epp.comparison_requests.arm.picker") + bench.stat("wasm_epp.comparison_requests.arm.baseline");
    assert_eq!(compared, 0);
}

#[test]
fn off_by_default_with_no_stats() {
    let bench = Bench::new("{}");
    bench.publish(1, &FOUR_PODS);
    bench.complete(&COMPLETIONS, &completion("hello"));
    bench.tick();
    assert!(!bench.host.metric_names.borrow().iter().any(|(name, _)| name.contains("comparison")));
}

#[test]
fn a_chat_conversation_stays_in_one_arm_without_a_session_header() {
    let bench = Bench::new(HALF);
    bench.publish(1, &FOUR_PODS);
    let chat = [(":method", "POST"), (":path", "/v1/chat/completions"), ("content-type", "application/json")];
    let mut arms_by_conversation: BTreeMap<usize, BTreeSet<String>> = BTreeMap::new();
    for conversation in 0..16 {
        let mut history =
            format!(r#"{{"role":"system","content":"You help."}},{{"role":"user","content":"Topic {conversation}"}}"#);
        for turn in 0..4 {
            let body = format!(r#"{{"model":"m","messages":[{history}]}}"#);
            let (mut stream, _) = bench.request(&chat, &body);
            arms_by_conversation.entry(conversation).or_default().insert(arm_of(&bench, &mut stream, "200"));
            stream.on_log(&bench.host);
            history.push_str(&format!(
                r#",{{"role":"assistant","content":"Answer {turn}"}},{{"role":"user","content":"More {turn}"}}"#
            ));
        }
    }
    assert!(arms_by_conversation.values().all(|arms| arms.len() == 1), "{arms_by_conversation:?}");
    let arms: BTreeSet<&String> = arms_by_conversation.values().flatten().collect();
    assert_eq!(arms.len(), 2, "16 conversations use both arms: {arms_by_conversation:?}");
}

#[test]
fn an_arm_whose_pods_are_down_takes_no_share_and_compared_requests_are_never_shed() {
    let bench = Bench::new(HALF);
    // Every pod with a long queue: the pool is saturated for sheddable requests.
    bench.publish(1, &FOUR_PODS.map(|(address, _)| (address, 9.0)));
    let sheddable = [COMPLETIONS.as_slice(), &[("x-gateway-inference-priority", "-1")]].concat();
    for i in 0..20 {
        let answer = bench.complete(&sheddable, &completion(&format!("low {i}")));
        assert_eq!(answer.reply, None, "compared, so routed, not shed: {answer:?}");
    }
    // The baseline's two pods stop answering their scrapes: their arm gets nothing.
    let mut table = PodTable { version: 2, published_at_ms: NOW, poll_interval_ms: 100, ..PodTable::default() };
    for (address, _) in FOUR_PODS {
        let mut pod = PodState::unknown(&PodAddress::parse(address).unwrap());
        (pod.healthy, pod.last_success_ms) = (true, NOW);
        table.pods.push(pod);
    }
    let split = PodSplit::of(&table, 0.5);
    let mut down = Vec::new();
    for (_, pod) in table.pods.iter_mut().enumerate().filter(|(i, _)| split.arm_at(*i) == Arm::Baseline) {
        pod.healthy = false;
        down.push(pod.address.to_string());
    }
    bench.host.set(keys::POD_TABLE, &table.encode(), None).unwrap();
    bench.host.set(keys::POD_TABLE_VERSION, &encode_version(2), None).unwrap();
    bench.tick();
    let before = bench.stat("wasm_epp.comparison_requests.arm.baseline");
    for i in 0..20 {
        let (mut stream, answer) = bench.request(&COMPLETIONS, &completion(&format!("after {i}")));
        assert!(!down.contains(&chosen(&answer.destination)), "{answer:?}");
        stream.on_log(&bench.host);
    }
    assert_eq!(bench.stat("wasm_epp.comparison_requests.arm.baseline"), before, "no share for an arm that is down");
}
