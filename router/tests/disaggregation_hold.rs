//! A split request's hold on its prefill pod ends at the earlier of the decode pod's answer
//! headers and the prefill's estimated end (the tick ends it then), exactly once. A whole
//! (non-streamed) answer's headers come after its decode: held until then, its prefill pod
//! looked busy long after computing the prompt.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use common::{long_prompt, Bench, COMPLETIONS};
use picker::address::PodAddress;
use picker::keys;
use picker::pod_table::{encode_version, PodState, PodTable};
use picker::role::PodRole;
use wasm_epp_host::{Host, SharedStore};
use wasm_epp_router::prefill_hold::{Prefill, MAX_TIMED_HOLDS};

const PREFILLER: &str = "x-prefiller-host-port";

fn publish(bench: &Bench, pods: &[(&str, PodRole)]) {
    let now = bench.host.now_ms();
    let mut table = PodTable { version: 1, published_at_ms: now, poll_interval_ms: 100, ..PodTable::default() };
    for (address, role) in pods {
        let mut pod = PodState::unknown(&PodAddress::parse(address).unwrap());
        (pod.healthy, pod.kv_usage, pod.last_success_ms, pod.role) = (true, Some(0.1), now, *role);
        table.pods.push(pod);
    }
    bench.host.set(keys::POD_TABLE, &table.encode(), None).unwrap();
    bench.host.set(keys::POD_TABLE_VERSION, &encode_version(1), None).unwrap();
    bench.heartbeat();
}

fn body(tokens: usize, seed: usize, stream: bool) -> String {
    format!(r#"{{"model":"m","prompt":"{}","max_tokens":150,"stream":{stream}}}"#, long_prompt(tokens, seed))
}

/// `ms` later, the tick run (the clock moves, the table stays fresh).
fn tick_after(bench: &Bench, ms: u64) {
    bench.later(ms);
    bench.tick();
}

#[test]
fn a_fifth_long_prompt_is_split_once_the_others_prefills_are_done_though_their_whole_answers_are_not() {
    // The measured case: four 2,000-token prompts on two prefill pods (4,000 tokens ahead on
    // each, past the limit of 3,000), their answers whole and still decoding 800 ms later.
    // Held to their headers, both prefill pods looked backed up and the fifth prompt was
    // prefilled by its decode pod.
    let bench = Bench::new(r#"{"pd": {"threshold_tokens": 1024, "max_prefill_tokens_ahead": 3000}}"#);
    let prefill = [("10.0.0.1:8000", PodRole::Prefill), ("10.0.0.2:8000", PodRole::Prefill)];
    let decode = [("10.0.0.3:8000", PodRole::Decode), ("10.0.0.4:8000", PodRole::Decode)];
    publish(&bench, &[prefill, decode].concat());
    let mut decoding = Vec::new();
    for seed in 0..4 {
        let (stream, _) = bench.request(&COMPLETIONS, &body(2000, seed, false));
        assert!(bench.host.header(PREFILLER).is_some(), "prompt {seed} is split");
        decoding.push(stream);
    }
    let tokens = |pod: &str| bench.worker.inflight.borrow().tokens(pod);
    assert!(tokens(prefill[0].0) > 3000 && tokens(prefill[1].0) > 3000, "both past the limit");
    tick_after(&bench, 800);
    assert_eq!((tokens(prefill[0].0), tokens(prefill[1].0)), (0, 0), "their prefills are long done");
    let (_fifth, _) = bench.request(&COMPLETIONS, &body(2000, 4, false));
    assert!(bench.host.header(PREFILLER).is_some(), "the fifth is split too");
    assert_eq!(bench.stat("wasm_epp.pd_prefill_backed_up"), 0);
    for mut stream in decoding {
        bench.end(&mut stream);
    }
}

#[test]
fn the_hold_ends_at_the_estimate_for_a_whole_answer_and_at_the_headers_for_a_stream_once_each() {
    // One prefill pod; defaults: 100 ms + 0.05 ms per token it computes before the prompt.
    let bench = Bench::new(r#"{"pd": {"threshold_tokens": 1024}}"#);
    let pod = "10.0.0.1:8000";
    publish(&bench, &[(pod, PodRole::Prefill), ("10.0.0.2:8000", PodRole::Decode)]);
    let held = || (bench.worker.inflight.borrow().count(pod), bench.worker.inflight.borrow().tokens(pod));
    // A whole answer (its prefill about 100 + 2,000 × 0.05 = 200 ms), then a stream behind it
    // (100 + 4,000 × 0.05 = 300 ms).
    let (mut whole, _) = bench.request(&COMPLETIONS, &body(2000, 1, false));
    let (_, whole_tokens) = held();
    let (mut streamed, _) = bench.request(&COMPLETIONS, &body(2000, 2, true));
    assert_eq!(bench.host.header(PREFILLER).as_deref(), Some(pod));
    let (count, both_tokens) = held();
    assert_eq!(count, 2);
    let stream_tokens = both_tokens - whole_tokens;
    tick_after(&bench, 150);
    assert_eq!(held(), (2, both_tokens), "no prefill estimated done yet");
    tick_after(&bench, 100);
    assert_eq!(held(), (1, stream_tokens), "the whole answer's prefill is estimated done: its hold ends");
    let endings = || {
        (
            bench.stat("wasm_epp.pd_prefill_holds_ended_by_estimate"),
            bench.stat("wasm_epp.pd_prefill_holds_ended_by_request"),
        )
    };
    assert_eq!(endings(), (1, 0), "counted as ended by the estimate");
    bench.host.set_response(&[(":status", "200")], b"");
    whole.on_response_headers(&bench.host, false);
    bench.end(&mut whole);
    assert_eq!(held(), (1, stream_tokens), "its headers and its end end nothing more");
    // The stream's first token comes before its estimate: its headers end its hold.
    streamed.on_response_headers(&bench.host, false);
    assert_eq!(held(), (0, 0));
    assert_eq!(endings(), (1, 1), "counted as ended by the request (its headers), the whole answer's end not at all");
    let (mut next, _) = bench.request(&COMPLETIONS, &body(2000, 3, false));
    let next_held = held();
    assert_eq!(next_held.0, 1);
    tick_after(&bench, 100);
    assert_eq!(held(), next_held, "the stream's hold, ended by its headers, is not ended again at its estimate");
    bench.end(&mut streamed);
    assert_eq!(held(), next_held);
    bench.end(&mut next);
    assert_eq!(held(), (0, 0), "a stream that ends before its estimate ends its hold");
    tick_after(&bench, 1_000);
    assert_eq!(held(), (0, 0));
    assert!(bench.worker.prefill_timers.borrow().is_empty(), "no timer left behind");
    assert_eq!(endings(), (1, 2), "each hold counted once, by what ended it");
    assert_eq!(bench.stat("wasm_epp.pd_prefill_holds_untimed"), 0);
}

#[test]
fn a_hold_the_full_timers_cannot_take_is_counted_untimed_and_ended_by_its_request() {
    let bench = Bench::new(r#"{"pd": {"threshold_tokens": 1024}}"#);
    let pod = "10.0.0.1:8000";
    publish(&bench, &[(pod, PodRole::Prefill), ("10.0.0.2:8000", PodRole::Decode)]);
    // Timers full of holds on a pod not in the table, due never.
    let elsewhere =
        Prefill { address: PodAddress::parse("10.9.9.9:8000").unwrap(), uncached_tokens: 1, ends_by_ms: u64::MAX };
    for _ in 0..MAX_TIMED_HOLDS {
        bench.worker.prefill_timers.borrow_mut().time(elsewhere.clone());
    }
    let (mut whole, _) = bench.request(&COMPLETIONS, &body(2000, 1, false));
    assert_eq!(bench.host.header(PREFILLER).as_deref(), Some(pod), "split");
    assert_eq!(bench.stat("wasm_epp.pd_prefill_holds_untimed"), 1);
    tick_after(&bench, 1_000);
    assert_eq!(bench.worker.inflight.borrow().count(pod), 1, "past its estimate, held to its answer");
    assert_eq!(bench.stat("wasm_epp.pd_prefill_holds_ended_by_estimate"), 0);
    bench.end(&mut whole);
    assert_eq!(bench.worker.inflight.borrow().count(pod), 0);
    assert_eq!(bench.stat("wasm_epp.pd_prefill_holds_ended_by_request"), 1);
}

#[test]
fn with_learning_on_the_prefill_s_end_is_the_learned_model_s() {
    // The configured cost would hold the pod 2 s; the model (its prior, 30 ms + 0.02 ms per
    // token, before any answer) says 70 ms.
    let config = r#"{"pd": {"threshold_tokens": 1024, "prefill_overhead_ms": 10, "prefill_ms_per_token": 1},
        "learning": {"enabled": true}}"#;
    let bench = Bench::new(config);
    let pod = "10.0.0.1:8000";
    publish(&bench, &[(pod, PodRole::Prefill), ("10.0.0.2:8000", PodRole::Decode)]);
    let (mut whole, _) = bench.request(&COMPLETIONS, &body(2000, 1, false));
    assert_eq!(bench.host.header(PREFILLER).as_deref(), Some(pod));
    assert_eq!(bench.worker.inflight.borrow().count(pod), 1);
    tick_after(&bench, 60);
    assert_eq!(bench.worker.inflight.borrow().count(pod), 1);
    tick_after(&bench, 20);
    assert_eq!(bench.worker.inflight.borrow().count(pod), 0, "done at the learned time");
    assert_eq!(bench.worker.inflight.borrow().tokens(pod), 0);
    bench.end(&mut whole);
}
