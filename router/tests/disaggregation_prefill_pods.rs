//! Prefill/decode disaggregation where the prefill pods are the only ones for a request: a
//! model no decode pod serves is served whole on a prefill pod (llm-d's prefill pods are full
//! vLLM servers), and past the scorers' first eight prefill pods the least busy one is still
//! found by its work.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use common::{completions_with, long_prompt, model_completion, Bench, COMPLETIONS};
use picker::address::PodAddress;
use picker::keys;
use picker::pod_table::{encode_version, PodState, PodTable};
use picker::role::PodRole;
use wasm_epp_host::{Host, SharedStore};
use wasm_epp_router::Step;

const PREFILLER: &str = "x-prefiller-host-port";
const DECISION: &str = "x-wasm-epp-decision";

/// One pod of a published table: its role, the models it names, its queue.
struct Pod(&'static str, PodRole, &'static [&'static str], f64);

fn publish(bench: &Bench, version: u64, pods: &[Pod]) {
    let now = bench.host.now_ms();
    let mut table = PodTable { version, published_at_ms: now, poll_interval_ms: 100, ..PodTable::default() };
    for Pod(address, role, models, waiting) in pods {
        let mut pod = PodState::unknown(&PodAddress::parse(address).unwrap());
        (pod.healthy, pod.kv_usage, pod.last_success_ms, pod.role) = (true, Some(0.1), now, *role);
        (pod.models, pod.waiting) = (models.iter().map(|m| (*m).to_owned()).collect(), *waiting);
        table.pods.push(pod);
    }
    bench.host.set(keys::POD_TABLE, &table.encode(), None).unwrap();
    bench.host.set(keys::POD_TABLE_VERSION, &encode_version(version), None).unwrap();
    bench.heartbeat();
}

fn body(model: &str, seed: usize) -> String {
    format!(r#"{{"model":"{model}","prompt":"{}","max_tokens":4}}"#, long_prompt(2000, seed))
}

#[test]
fn a_model_only_prefill_pods_list_is_served_whole_on_the_least_busy_of_them() {
    // Model p is listed by the prefill pods alone. They are full vLLM servers (kv_both): the
    // request is served there, aggregated, by the filter's scorers, not refused as unknown.
    let bench = Bench::new(r#"{"pd": {"threshold_tokens": 1024}, "debug_decision_header": true}"#);
    publish(
        &bench,
        1,
        &[
            Pod("10.0.0.1:8000", PodRole::Prefill, &["a", "p"], 6.0),
            Pod("10.0.0.2:8000", PodRole::Prefill, &["p"], 0.0),
            Pod("10.0.0.3:8000", PodRole::Decode, &["a"], 0.0),
        ],
    );
    for seed in 0..3 {
        let (mut stream, answer) = bench.request(&COMPLETIONS, &body("p", seed));
        assert_eq!(answer.reply, None);
        let destination = answer.destination.unwrap();
        assert_eq!(destination.split(',').next(), Some("10.0.0.2:8000"), "the idle prefill pod: {destination}");
        assert!(!destination.contains("10.0.0.3"), "never the decode pod of another model: {destination}");
        assert_eq!(bench.host.header(PREFILLER), None, "no split: it prefills itself");
        bench.host.set_response(&[(":status", "200")], b"");
        stream.on_response_headers(&bench.host, false);
        let explain = bench.host.response_header(DECISION).unwrap();
        assert!(explain.contains("; pd=served_on_prefill_pod"), "{explain}");
        assert!(!explain.contains("prefill="), "no prefill pick: {explain}");
        bench.end(&mut stream);
    }
    assert_eq!(bench.stat("wasm_epp.pd_served_on_prefill_pods"), 3);
    assert_eq!(bench.stat("wasm_epp.pd_disaggregated") + bench.stat("wasm_epp.pd_decode_only"), 0);
    // A model its decode pod lists is split as before.
    let answer = bench.complete(&COMPLETIONS, &body("a", 9));
    assert_eq!(answer.destination.as_deref().and_then(|d| d.split(',').next()), Some("10.0.0.3:8000"));
    assert_eq!(bench.host.header(PREFILLER).as_deref(), Some("10.0.0.1:8000"));
}

#[test]
fn a_model_no_pod_of_either_role_lists_is_still_the_gateway_s_404() {
    let bench = Bench::new(r#"{"pd": {"threshold_tokens": 1024}}"#);
    publish(
        &bench,
        1,
        &[Pod("10.0.0.1:8000", PodRole::Prefill, &["p"], 0.0), Pod("10.0.0.2:8000", PodRole::Decode, &["a"], 0.0)],
    );
    let answer = bench.complete(&COMPLETIONS, &body("nobody", 1));
    assert_eq!((answer.reply, answer.destination), (Some(404), None));
    assert_eq!(bench.stat("wasm_epp.model_unknown"), 1);
    assert_eq!(bench.stat("wasm_epp.pd_served_on_prefill_pods"), 0);
}

#[test]
fn past_eight_prefill_pods_the_least_busy_one_ranked_last_by_the_scorers_is_found() {
    // Twelve prefill pods: eleven with one prompt of 5,000 uncached tokens in flight, the
    // twelfth with none in flight but ten waiting by its last scrape (its queue score ranks it
    // last). By work it is the least busy: it must be compared, not only the scorers' first
    // eight.
    let bench = Bench::new(r#"{"pd": {"threshold_tokens": 1024}}"#);
    let addresses: Vec<String> = (1..=13).map(|i| format!("10.0.0.{i}:8000")).collect();
    let leaked: Vec<&'static str> = addresses.iter().map(|a| &*String::leak(a.clone())).collect();
    let mut pods: Vec<Pod> = leaked.iter().take(11).map(|a| Pod(a, PodRole::Prefill, &[], 0.0)).collect();
    pods.push(Pod(leaked[11], PodRole::Prefill, &[], 10.0));
    pods.push(Pod(leaked[12], PodRole::Decode, &[], 0.0));
    publish(&bench, 1, &pods);
    {
        let mut inflight = bench.worker.inflight.borrow_mut();
        for address in &leaked[..11] {
            inflight.started(address, 1, bench.host.now_ms());
            inflight.add_tokens(address, 5000);
        }
    }
    let (mut stream, answer) = bench.request(&COMPLETIONS, &body("m", 1));
    assert_eq!(answer.reply, None);
    assert_eq!(bench.host.header(PREFILLER).as_deref(), Some("10.0.0.12:8000"), "the twelfth, idle");
    bench.end(&mut stream);
}

#[test]
fn flow_control_holds_a_model_only_prefill_pods_list_for_their_room_not_the_decode_pods() {
    // One place per pod. Model p is listed by the prefill pod alone, so its requests go there
    // whole: that pod's room is theirs, and the decode pod's is another model's.
    const PREFILL: &str = "10.0.0.1:8000";
    const DECODE: &str = "10.0.0.2:8000";
    let bench = Bench::new(
        r#"{"pd": {"threshold_tokens": 1024}, "fallback_destinations": 0,
            "flow_control": {"enabled": true, "max_inflight_per_pod": 1, "ttl_ms": 1000}}"#,
    );
    publish(&bench, 1, &[Pod(PREFILL, PodRole::Prefill, &["p"], 0.0), Pod(DECODE, PodRole::Decode, &["a"], 0.0)]);
    let send = |id: u32, model: &str, priority: &str| {
        let headers = completions_with(&[("x-gateway-inference-priority", priority)]);
        bench.send_as(&bench.worker, id, &headers, &model_completion(model, id, 1))
    };
    let (mut first, step) = send(1, "p", "0");
    assert_eq!((step, bench.destination().as_deref()), (Step::Continue, Some(PREFILL)));

    // The prefill pod is full: p's next requests wait for it (they were let through at once,
    // the decode pod's room read as theirs), in their priorities' order.
    let (_second, step) = send(2, "p", "0");
    assert_eq!(step, Step::Pause, "held: its prefill pod is full");
    let (_critical, step) = send(3, "p", "5");
    assert_eq!(step, Step::Pause);
    bench.tick();
    assert!(bench.resumed().is_empty(), "nothing released past the prefill pod's bound");

    // The decode pod's model goes past them at once, and its place is no room for p.
    let (mut other, step) = send(4, "a", "0");
    assert_eq!((step, bench.destination().as_deref()), (Step::Continue, Some(DECODE)));
    assert!(bench.end(&mut other).is_empty(), "the decode pod's place is no room for p");

    // The prefill pod's place frees: the critical p request goes there first.
    assert_eq!(bench.end(&mut first), [3]);
    assert_eq!(bench.destination().as_deref(), Some(PREFILL));
    assert_eq!(bench.stat("wasm_epp.pd_served_on_prefill_pods"), 2);
}
