//! Prefill/decode disaggregation and model names: the prefill pick sends a prompt only to a
//! prefill pod that serves its model, or may (names none; its lists were cut and no pod lists
//! the name), as the decode pick and the aggregated pick presume.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use common::{long_prompt, Bench, COMPLETIONS};
use picker::address::PodAddress;
use picker::keys;
use picker::pod_table::{encode_version, PodState, PodTable};
use picker::role::PodRole;
use wasm_epp_host::{Host, SharedStore};

const PREFILLER: &str = "x-prefiller-host-port";
const PD_CONFIG: &str = r#"{"pd": {"threshold_tokens": 1024}}"#;

/// One pod of a published table: its role, the models it names, whether its lists were cut.
struct Pod(&'static str, PodRole, &'static [&'static str], bool);

fn publish(bench: &Bench, version: u64, pods: &[Pod]) {
    let now = bench.host.now_ms();
    let mut table = PodTable { version, published_at_ms: now, poll_interval_ms: 100, ..PodTable::default() };
    for Pod(address, role, models, cut) in pods {
        let mut pod = PodState::unknown(&PodAddress::parse(address).unwrap());
        (pod.healthy, pod.kv_usage, pod.last_success_ms, pod.role) = (true, Some(0.1), now, *role);
        pod.models = models.iter().map(|m| (*m).to_owned()).collect();
        pod.names_cut = *cut;
        table.pods.push(pod);
    }
    bench.host.set(keys::POD_TABLE, &table.encode(), None).unwrap();
    bench.host.set(keys::POD_TABLE_VERSION, &encode_version(version), None).unwrap();
    bench.heartbeat();
}

/// Sends a long prompt for `model`: its destination and prefill pod.
fn route(bench: &Bench, model: &str, seed: usize) -> (Option<String>, Option<String>) {
    let body = format!(r#"{{"model":"{model}","prompt":"{}","max_tokens":4}}"#, long_prompt(2000, seed));
    let answer = bench.complete(&COMPLETIONS, &body);
    (answer.destination, bench.host.header(PREFILLER))
}

#[test]
fn a_model_its_decode_pods_list_is_not_prefilled_on_a_cut_prefill_pod_that_does_not() {
    // Model b is served by a decode pod alone; the one prefill pod lists model a (and, cut,
    // more adapters than its lists keep). A name some pod lists is that pod's: the prefill
    // pod would answer 404 and the decode pod prefill after all, a round trip later. Nor is
    // it routed by load: `route_by_load` is for names no pod lists.
    let by_load = r#"{"pd": {"threshold_tokens": 1024}, "models": {"unknown_model": "route_by_load"}}"#;
    for (config, cut) in [(PD_CONFIG, true), (by_load, true), (by_load, false)] {
        let bench = Bench::new(config);
        publish(
            &bench,
            1,
            &[
                Pod("10.0.0.1:8000", PodRole::Prefill, &["a"], cut),
                Pod("10.0.0.2:8000", PodRole::Decode, &["a"], false),
                Pod("10.0.0.3:8000", PodRole::Decode, &["b"], false),
            ],
        );
        let (destination, prefiller) = route(&bench, "b", 1);
        assert_eq!((destination.as_deref(), prefiller.as_deref()), (Some("10.0.0.3:8000"), None), "{config} {cut}");
        assert_eq!(bench.stat("wasm_epp.pd_decode_only"), 1, "{config} {cut}");
        let (destination, prefiller) = route(&bench, "a", 2);
        assert_eq!(destination.as_deref(), Some("10.0.0.2:8000"), "{config}");
        assert_eq!(prefiller.as_deref(), Some("10.0.0.1:8000"), "a model it lists: {config}");
    }
}

#[test]
fn a_name_no_pod_lists_goes_to_cut_pods_of_both_roles() {
    // As the aggregated pick: a name no list holds may be one a cut pod left out.
    let bench = Bench::new(PD_CONFIG);
    publish(
        &bench,
        1,
        &[
            Pod("10.0.0.1:8000", PodRole::Prefill, &["a"], false),
            Pod("10.0.0.2:8000", PodRole::Prefill, &["a"], true),
            Pod("10.0.0.3:8000", PodRole::Decode, &["a"], false),
            Pod("10.0.0.4:8000", PodRole::Decode, &["a"], true),
        ],
    );
    for seed in 0..4 {
        let (destination, prefiller) = route(&bench, "a99", seed);
        assert_eq!(destination.as_deref(), Some("10.0.0.4:8000"));
        assert_eq!(
            prefiller.as_deref(),
            Some("10.0.0.2:8000"),
            "the cut prefill pod, not the one whose lists are whole"
        );
    }
}

#[test]
fn prefill_pods_that_name_no_model_still_prefill_a_model_the_decode_pods_list() {
    // An engine without model labels may serve anything: it is no cut pod guessing.
    let bench = Bench::new(PD_CONFIG);
    publish(
        &bench,
        1,
        &[Pod("10.0.0.1:8000", PodRole::Prefill, &[], false), Pod("10.0.0.2:8000", PodRole::Decode, &["b"], false)],
    );
    let (destination, prefiller) = route(&bench, "b", 3);
    assert_eq!((destination.as_deref(), prefiller.as_deref()), (Some("10.0.0.2:8000"), Some("10.0.0.1:8000")));
}

#[test]
fn a_prefill_pod_holding_the_adapter_takes_its_prompts_over_an_idler_one_that_must_swap_it_in() {
    // Adapter x is resident on prefill pod 1; prefill pod 2's one adapter slot holds y. The
    // prefill pick compares its best pods by tokens in flight: only pods of the adapter's best
    // tier, as the scheduler keeps them, not runners-up it filtered out (a swap evicts y and
    // loads x, which the next request for y pays again).
    let bench = Bench::new(PD_CONFIG);
    let now = bench.host.now_ms();
    let mut table = PodTable { version: 1, published_at_ms: now, poll_interval_ms: 100, ..PodTable::default() };
    for (address, role, resident) in [
        ("10.0.0.1:8000", PodRole::Prefill, "x"),
        ("10.0.0.2:8000", PodRole::Prefill, "y"),
        ("10.0.0.3:8000", PodRole::Decode, "x"),
        ("10.0.0.4:8000", PodRole::Decode, "x"),
    ] {
        let mut pod = PodState::unknown(&PodAddress::parse(address).unwrap());
        (pod.healthy, pod.kv_usage, pod.last_success_ms, pod.role) = (true, Some(0.1), now, role);
        pod.models = vec!["base".to_owned()];
        pod.adapters = vec!["x".to_owned(), "y".to_owned()];
        (pod.resident_loras, pod.max_loras) = (vec![resident.to_owned()], 1);
        table.pods.push(pod);
    }
    bench.host.set(keys::POD_TABLE, &table.encode(), None).unwrap();
    bench.host.set(keys::POD_TABLE_VERSION, &encode_version(1), None).unwrap();
    bench.heartbeat();
    let body = |seed| format!(r#"{{"model":"x","prompt":"{}","max_tokens":4}}"#, long_prompt(2000, seed));
    let mut streams = Vec::new();
    for seed in 0..3 {
        let (stream, answer) = bench.request(&COMPLETIONS, &body(seed));
        assert_eq!(answer.reply, None);
        let prefiller = bench.host.header(PREFILLER);
        assert_eq!(prefiller.as_deref(), Some("10.0.0.1:8000"), "prompt {seed}: x's prefill pod, busy or not");
        streams.push(stream);
    }
    for mut stream in streams {
        stream.on_log(&bench.host);
    }
}

#[test]
fn a_prefill_pod_with_many_short_prompts_in_flight_is_not_left_out_as_a_full_queue() {
    // A prefill pod admits every prompt at once (chunked): its requests in flight past its
    // running ones are no queue, and the least-work rule weighs their tokens. Six short
    // prompts on one pod are less work than one long prompt on the other.
    let bench = Bench::new(PD_CONFIG);
    publish(
        &bench,
        1,
        &[
            Pod("10.0.0.1:8000", PodRole::Prefill, &[], false),
            Pod("10.0.0.2:8000", PodRole::Prefill, &[], false),
            Pod("10.0.0.3:8000", PodRole::Decode, &[], false),
            Pod("10.0.0.4:8000", PodRole::Decode, &[], false),
        ],
    );
    let send = |tokens, seed| {
        let body = format!(r#"{{"model":"m","prompt":"{}","max_tokens":4}}"#, long_prompt(tokens, seed));
        let (stream, _) = bench.request(&COMPLETIONS, &body);
        (stream, bench.host.header(PREFILLER).unwrap())
    };
    let (long, busy) = send(8000, 0);
    let mut streams = vec![long];
    let mut short_pods = Vec::new();
    for seed in 1..=7 {
        let (stream, pod) = send(1100, seed);
        short_pods.push(pod);
        streams.push(stream);
    }
    assert!(short_pods.iter().all(|pod| *pod != busy), "7,700 tokens ahead or fewer beat 9,100: {short_pods:?}");
    for mut stream in streams {
        stream.on_log(&bench.host);
    }
}

#[test]
fn the_decision_header_scores_the_decode_pods_with_the_decode_weights() {
    // Weighed on in-flight requests alone (none yet), the decode pods tie whatever their KV
    // cache: the header showed them scored with the filter's weights, which the pick never used.
    let bench = Bench::new(
        r#"{"pd": {"threshold_tokens": 1024, "decode_weights": {"queue": 0, "kv_cache": 0, "inflight": 1, "prefix": 0}},
            "debug_decision_header": true}"#,
    );
    publish(
        &bench,
        1,
        &[
            Pod("10.0.0.1:8000", PodRole::Prefill, &[], false),
            Pod("10.0.0.2:8000", PodRole::Decode, &[], false),
            Pod("10.0.0.3:8000", PodRole::Decode, &[], false),
        ],
    );
    let mut table = PodTable::decode(&bench.host.get(keys::POD_TABLE).unwrap().0.unwrap()).unwrap();
    table.version = 2;
    table.pods[1].kv_usage = Some(0.7);
    bench.host.set(keys::POD_TABLE, &table.encode(), None).unwrap();
    bench.host.set(keys::POD_TABLE_VERSION, &encode_version(2), None).unwrap();
    let (mut stream, _) = bench.request(&COMPLETIONS, r#"{"model":"m","prompt":"short","max_tokens":4}"#);
    bench.host.set_response(&[(":status", "200")], b"");
    stream.on_response_headers(&bench.host, false);
    let explain = bench.host.response_header("x-wasm-epp-decision").unwrap();
    let candidates = explain.split("candidates=").nth(1).unwrap().split(';').next().unwrap();
    let scores: Vec<&str> = candidates.split(',').map(|c| c.rsplit('=').next().unwrap()).collect();
    assert_eq!(scores.len(), 2, "the decode pods only: {explain}");
    assert_eq!(scores[0], scores[1], "{explain}");
    stream.on_log(&bench.host);
}

#[test]
fn the_decision_header_names_the_prefill_pod_or_why_the_decode_pod_prefills() {
    let bench = Bench::new(r#"{"pd": {"threshold_tokens": 1024}, "debug_decision_header": true}"#);
    publish(
        &bench,
        1,
        &[
            Pod("10.0.0.1:8000", PodRole::Prefill, &["m"], false),
            Pod("10.0.0.2:8000", PodRole::Decode, &["m", "b"], false),
        ],
    );
    let explain = |model: &str, tokens: usize| {
        let body = format!(r#"{{"model":"{model}","prompt":"{}","max_tokens":4}}"#, long_prompt(tokens, tokens));
        let (mut stream, _) = bench.request(&COMPLETIONS, &body);
        bench.host.set_response(&[(":status", "200")], b"");
        stream.on_response_headers(&bench.host, false);
        stream.on_log(&bench.host);
        bench.host.response_header("x-wasm-epp-decision").unwrap()
    };
    assert!(explain("m", 2000).ends_with("; prefill=10.0.0.1:8000"), "{}", explain("m", 2001));
    assert!(explain("m", 10).ends_with("; prefill=local:cached"), "{}", explain("m", 11));
    assert!(explain("b", 2000).ends_with("; prefill=local:no_prefill_pod"), "{}", explain("b", 2002));
}

#[test]
fn a_prefill_pod_s_free_adapter_slot_taken_by_one_cold_adapter_is_not_offered_to_the_next() {
    // Prefill pod 1 has the pool's one free adapter slot; pod 2's holds z. Adapter x's prompt
    // loads x into it; before the next scrape, adapter y's prompt must not see that slot free
    // (as the decode picks see theirs taken): it would load y there and evict x, which its
    // prompt in flight is using.
    let bench = Bench::new(r#"{"pd": {"threshold_tokens": 1024}}"#);
    let now = bench.host.now_ms();
    let mut table = PodTable { version: 1, published_at_ms: now, poll_interval_ms: 100, ..PodTable::default() };
    for (address, role, resident, slots) in [
        ("10.0.0.1:8000", PodRole::Prefill, &[][..], 1),
        ("10.0.0.2:8000", PodRole::Prefill, &["z"][..], 1),
        ("10.0.0.3:8000", PodRole::Decode, &["x", "y"][..], 2),
        ("10.0.0.4:8000", PodRole::Decode, &["x", "y"][..], 2),
    ] {
        let mut pod = PodState::unknown(&PodAddress::parse(address).unwrap());
        (pod.healthy, pod.kv_usage, pod.last_success_ms, pod.role) = (true, Some(0.1), now, role);
        pod.models = vec!["base".to_owned()];
        pod.adapters = ["x", "y", "z"].iter().map(|a| (*a).to_owned()).collect();
        (pod.resident_loras, pod.max_loras) = (resident.iter().map(|a| (*a).to_owned()).collect(), slots);
        table.pods.push(pod);
    }
    bench.host.set(keys::POD_TABLE, &table.encode(), None).unwrap();
    bench.host.set(keys::POD_TABLE_VERSION, &encode_version(1), None).unwrap();
    bench.heartbeat();
    let body =
        |adapter, seed| format!(r#"{{"model":"{adapter}","prompt":"{}","max_tokens":4}}"#, long_prompt(2000, seed));
    let (mut first, _) = bench.request(&COMPLETIONS, &body("x", 1));
    assert_eq!(bench.host.header(PREFILLER).as_deref(), Some("10.0.0.1:8000"), "x takes the free slot");
    let (mut second, _) = bench.request(&COMPLETIONS, &body("y", 2));
    assert_eq!(
        bench.host.header(PREFILLER).as_deref(),
        Some("10.0.0.2:8000"),
        "no free slot is left: y swaps in on the idle pod, not over x on the busy one"
    );
    bench.end(&mut first);
    bench.end(&mut second);
}
