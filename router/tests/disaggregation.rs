//! Prefill/decode disaggregation on one worker: destinations among decode pods, a prefill
//! pod named for long uncached prompts only, the prefix recorded on both, the client's own
//! prefill header never passed on.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use common::{completion, long_prompt, Bench, COMPLETIONS};
use picker::address::PodAddress;
use picker::keys;
use picker::pod_table::{encode_version, PodState, PodTable};
use picker::role::PodRole;
use wasm_epp_host::{Host, SharedStore};
use wasm_epp_router::{RequestStream, Step};

const PREFILLER: &str = "x-prefiller-host-port";
const PD_CONFIG: &str = r#"{"pd": {"threshold_tokens": 1024}, "fallback_destinations": 1}"#;
/// With flow control, one request in flight per pod.
const PD_FLOW_CONFIG: &str = r#"{"pd": {"threshold_tokens": 1024}, "fallback_destinations": 1,
    "flow_control": {"enabled": true, "max_inflight_per_pod": 1, "ttl_ms": 1000}}"#;
const PREFILL_PODS: [&str; 2] = ["10.0.0.1:8000", "10.0.0.2:8000"];
const DECODE_PODS: [&str; 2] = ["10.0.0.3:8000", "10.0.0.4:8000"];

fn publish_roles(bench: &Bench, version: u64, pods: &[(&str, PodRole)]) {
    let now = bench.host.now_ms();
    let mut table = PodTable { version, published_at_ms: now, poll_interval_ms: 100, ..PodTable::default() };
    for (address, role) in pods {
        let mut pod = PodState::unknown(&PodAddress::parse(address).unwrap());
        (pod.healthy, pod.kv_usage, pod.last_success_ms, pod.role) = (true, Some(0.1), now, *role);
        table.pods.push(pod);
    }
    bench.host.set(keys::POD_TABLE, &table.encode(), None).unwrap();
    bench.host.set(keys::POD_TABLE_VERSION, &encode_version(version), None).unwrap();
    bench.heartbeat();
}

fn publish_models(bench: &Bench, version: u64, pods: &[(&str, PodRole, &str)]) {
    let now = bench.host.now_ms();
    let mut table = PodTable { version, published_at_ms: now, poll_interval_ms: 100, ..PodTable::default() };
    for (address, role, model) in pods {
        let mut pod = PodState::unknown(&PodAddress::parse(address).unwrap());
        (pod.healthy, pod.kv_usage, pod.last_success_ms, pod.role) = (true, Some(0.1), now, *role);
        pod.models = vec![(*model).to_owned()];
        table.pods.push(pod);
    }
    bench.host.set(keys::POD_TABLE, &table.encode(), None).unwrap();
    bench.host.set(keys::POD_TABLE_VERSION, &encode_version(version), None).unwrap();
    bench.heartbeat();
}

fn pd_pool(bench: &Bench) {
    let prefill = PREFILL_PODS.iter().map(|a| (*a, PodRole::Prefill));
    let decode = DECODE_PODS.iter().map(|a| (*a, PodRole::Decode));
    publish_roles(bench, 1, &prefill.chain(decode).collect::<Vec<_>>());
}

#[test]
fn a_long_prompt_gets_a_prefill_pod_and_a_decode_destination() {
    let bench = Bench::new(PD_CONFIG);
    pd_pool(&bench);
    let (mut stream, answer) = bench.request(&COMPLETIONS, &completion(&long_prompt(2000, 1)));
    let destination = answer.destination.unwrap();
    assert!(destination.split(',').all(|a| DECODE_PODS.contains(&a)), "decode pods only: {destination}");
    let prefiller = bench.host.header(PREFILLER).unwrap();
    assert!(PREFILL_PODS.contains(&prefiller.as_str()), "{prefiller}");
    assert_eq!(bench.worker.inflight.borrow().count(&prefiller), 1, "the prefill pod is busy for it");
    stream.on_response_headers(&bench.host, false);
    assert_eq!(bench.worker.inflight.borrow().count(&prefiller), 0, "until the decode pod answers");
    stream.on_log(&bench.host);
    assert_eq!(bench.stat("wasm_epp.pd_disaggregated"), 1);
}

#[test]
fn with_learning_on_the_uncached_tokens_in_flight_are_the_prefill_pods() {
    let bench = Bench::new(r#"{"pd": {"threshold_tokens": 1024}, "learning": {"enabled": true}}"#);
    pd_pool(&bench);
    let (mut stream, answer) = bench.request(&COMPLETIONS, &completion(&long_prompt(2000, 4)));
    let decode = answer.destination.unwrap();
    let prefiller = bench.host.header(PREFILLER).unwrap();
    let tokens = |pod: &str| bench.worker.inflight.borrow().tokens(pod);
    assert!(tokens(&prefiller) > 1000, "the prefill pod computes the prompt: {}", tokens(&prefiller));
    assert_eq!(tokens(&decode), 0, "the decode pod only imports its KV");
    stream.on_response_headers(&bench.host, false);
    assert_eq!(tokens(&prefiller), 0, "done once the decode pod answers");
    stream.on_log(&bench.host);
}

#[test]
fn the_prefill_pick_weighs_tokens_in_flight_not_requests() {
    let bench = Bench::new(PD_CONFIG);
    pd_pool(&bench);
    let tokens = |pod: &str| bench.worker.inflight.borrow().tokens(pod);
    // One long prompt on one prefill pod, then two short ones on the other.
    let (_long, _) = bench.request(&COMPLETIONS, &completion(&long_prompt(6000, 11)));
    let busy = bench.host.header(PREFILLER).unwrap();
    assert!(tokens(&busy) > 5000, "its uncached tokens count in flight, learning off: {}", tokens(&busy));
    let (_short_a, _) = bench.request(&COMPLETIONS, &completion(&long_prompt(1500, 12)));
    let (_short_b, _) = bench.request(&COMPLETIONS, &completion(&long_prompt(1500, 13)));
    let other = bench.host.header(PREFILLER).unwrap();
    assert_ne!(other, busy);
    assert_eq!(bench.worker.inflight.borrow().count(&other), 2, "two requests against one");
    let (_next, _) = bench.request(&COMPLETIONS, &completion(&long_prompt(2000, 14)));
    assert_eq!(bench.host.header(PREFILLER).unwrap(), other, "3,000 tokens ahead beat 6,000");
}

#[test]
fn the_decode_pod_prefills_itself_when_every_prefill_pod_is_backed_up() {
    let bench = Bench::new(r#"{"pd": {"threshold_tokens": 1024, "max_prefill_tokens_ahead": 4000}}"#);
    pd_pool(&bench);
    let (_first, _) = bench.request(&COMPLETIONS, &completion(&long_prompt(6000, 21)));
    let (_second, _) = bench.request(&COMPLETIONS, &completion(&long_prompt(6000, 22)));
    assert_eq!(bench.stat("wasm_epp.pd_disaggregated"), 2, "each prefill pod took one");
    let (_third, answer) = bench.request(&COMPLETIONS, &completion(&long_prompt(3000, 23)));
    assert!(DECODE_PODS.contains(&answer.destination.unwrap().split(',').next().unwrap()));
    assert_eq!(bench.host.header(PREFILLER), None, "6,000 tokens ahead on both: prefilled locally");
    assert_eq!(bench.stat("wasm_epp.pd_prefill_backed_up"), 1);
}

#[test]
fn the_decider_skips_short_prompts_and_prompts_the_decode_pod_holds() {
    let bench = Bench::new(PD_CONFIG);
    pd_pool(&bench);
    let short = bench.complete(&COMPLETIONS, &completion("a short question"));
    assert!(DECODE_PODS.contains(&short.destination.unwrap().split(',').next().unwrap()));
    assert_eq!(bench.host.header(PREFILLER), None, "a short prompt is prefilled where it decodes");

    let prompt = completion(&long_prompt(2000, 2));
    let first = bench.complete(&COMPLETIONS, &prompt);
    assert!(bench.host.header(PREFILLER).is_some(), "cold: disaggregated");
    let again = bench.complete(&COMPLETIONS, &prompt);
    assert_eq!(bench.host.header(PREFILLER), None, "the decode pod holds the transferred prompt now");
    assert_eq!(again.destination.unwrap().split(',').next(), first.destination.unwrap().split(',').next());
    assert_eq!((bench.stat("wasm_epp.pd_disaggregated"), bench.stat("wasm_epp.pd_decode_only")), (1, 2));
}

const CHAT: [(&str, &str); 3] =
    [(":method", "POST"), (":path", "/v1/chat/completions"), ("content-type", "application/json")];

#[test]
fn the_decider_counts_an_image_at_its_allowance_and_the_tools_as_prompt() {
    let bench = Bench::new(PD_CONFIG);
    pd_pool(&bench);
    // 400 KB of base64 is ~100,000 tokens as text, a few hundred to the engine.
    let image = format!(
        r#"{{"model":"m","messages":[{{"role":"user","content":[{{"type":"text","text":"What is this?"}},{{"type":"image_url","image_url":{{"url":"data:image/png;base64,{}"}}}}]}}]}}"#,
        "QUJD".repeat(100_000)
    );
    bench.complete(&CHAT, &image);
    assert_eq!(bench.host.header(PREFILLER), None, "an image and a question are prefilled where they decode");
    // 2,000 tokens of tool definitions are rendered into the prompt as much as its messages.
    let tools = format!(
        r#"{{"model":"m","tools":[{{"type":"function","function":{{"name":"f","description":"{}"}}}}],"messages":[{{"role":"user","content":"hi"}}]}}"#,
        long_prompt(2000, 5)
    );
    bench.complete(&CHAT, &tools);
    assert!(bench.host.header(PREFILLER).is_some(), "the tools' tokens are the prompt's too");
}

#[test]
fn a_shared_prefix_too_short_to_skip_the_hop_does_not_pin_its_requests_to_one_pair() {
    let bench = Bench::new(PD_CONFIG);
    pd_pool(&bench);
    // Half of every prompt is one shared document: enough for prefix affinity (0.5), not
    // enough for a decode pod to skip the prefill hop, and prefill pods never queue.
    let document = long_prompt(2048, 7);
    let (mut decode_pods, mut prefill_pods) = (Vec::new(), Vec::new());
    let mut in_flight = Vec::new();
    for own in 0..4 {
        let prompt = completion(&format!("{document}{}", long_prompt(2048, 100 + own)));
        let (stream, answer) = bench.request(&COMPLETIONS, &prompt);
        decode_pods.push(answer.destination.unwrap().split(',').next().unwrap().to_owned());
        prefill_pods.push(bench.host.header(PREFILLER).unwrap());
        in_flight.push(stream);
    }
    let distinct = |pods: &mut Vec<String>| {
        pods.sort();
        pods.dedup();
        pods.len()
    };
    assert_eq!(distinct(&mut decode_pods), 2, "load spreads the decode picks: {decode_pods:?}");
    assert_eq!(distinct(&mut prefill_pods), 2, "and the prefill picks: {prefill_pods:?}");
}

#[test]
fn a_client_prefill_header_is_removed_when_the_picker_names_none() {
    let bench = Bench::new(PD_CONFIG);
    pd_pool(&bench);
    let mut headers = COMPLETIONS.to_vec();
    headers.push((PREFILLER, "6.6.6.6:6666"));
    bench.complete(&headers, &completion("short"));
    assert_eq!(bench.host.header(PREFILLER), None);
    assert_eq!(bench.stat("wasm_epp.forged_destination_removed"), 1);
}

#[test]
fn a_pool_without_prefill_pods_routes_as_without_pd() {
    let bench = Bench::new(PD_CONFIG);
    let pods: Vec<(&str, PodRole)> = DECODE_PODS.iter().map(|a| (*a, PodRole::Both)).collect();
    publish_roles(&bench, 1, &pods);
    let answer = bench.complete(&COMPLETIONS, &completion(&long_prompt(2000, 3)));
    assert!(answer.destination.is_some());
    assert_eq!(bench.host.header(PREFILLER), None);
    assert_eq!(bench.stat("wasm_epp.pd_decode_only") + bench.stat("wasm_epp.pd_disaggregated"), 0);
}

#[test]
fn with_every_prefill_pod_unhealthy_the_decode_pod_prefills_itself() {
    let bench = Bench::new(PD_CONFIG);
    pd_pool(&bench);
    let mut table = PodTable::decode(&bench.host.get(keys::POD_TABLE).unwrap().0.unwrap()).unwrap();
    table.version = 2;
    table.pods.iter_mut().filter(|p| p.role == PodRole::Prefill).for_each(|p| p.healthy = false);
    bench.host.set(keys::POD_TABLE, &table.encode(), None).unwrap();
    bench.host.set(keys::POD_TABLE_VERSION, &encode_version(2), None).unwrap();
    let answer = bench.complete(&COMPLETIONS, &completion(&long_prompt(2000, 4)));
    assert!(DECODE_PODS.contains(&answer.destination.unwrap().split(',').next().unwrap()));
    assert_eq!(bench.host.header(PREFILLER), None);
}

#[test]
fn each_model_s_requests_reach_that_model_s_decode_and_prefill_pods() {
    // The role tables' positions differ from the full table's: a model index of the full
    // table sent model a's requests to model b's decode pod, and found no pod for model b.
    let bench = Bench::new(PD_CONFIG);
    let pods = [
        ("10.0.0.1:8000", PodRole::Decode, "a"),
        ("10.0.0.2:8000", PodRole::Prefill, "a"),
        ("10.0.0.3:8000", PodRole::Decode, "b"),
        ("10.0.0.4:8000", PodRole::Prefill, "b"),
    ];
    publish_models(&bench, 1, &pods);
    for (i, (model, decode, prefill)) in
        [("a", "10.0.0.1:8000", "10.0.0.2:8000"), ("b", "10.0.0.3:8000", "10.0.0.4:8000")]
            .into_iter()
            .cycle()
            .take(8)
            .enumerate()
    {
        let body = format!(r#"{{"model":"{model}","prompt":"{}","max_tokens":4}}"#, long_prompt(2000, i));
        let (mut stream, answer) = bench.request(&COMPLETIONS, &body);
        assert_eq!(answer.reply, None, "model {model}: routed, not refused");
        assert_eq!(answer.destination.as_deref(), Some(decode), "model {model}");
        assert_eq!(bench.host.header(PREFILLER).as_deref(), Some(prefill), "model {model}");
        // Past its one decode pod, Envoy's balancer could pick any of the four.
        assert_eq!(bench.host.header("x-envoy-max-retries").as_deref(), Some("0"), "model {model}");
        stream.on_response_headers(&bench.host, false);
        stream.on_log(&bench.host);
    }
}

#[test]
fn flow_control_counts_the_decode_pods_places_only() {
    // One request per pod: the two decode pods are full with two requests in flight, whatever
    // the prefill pods' places (requests never go there as destinations).
    let bench = Bench::new(PD_FLOW_CONFIG);
    pd_pool(&bench);
    let mut streams = Vec::new();
    for i in 0..2 {
        let (stream, answer) = bench.request(&COMPLETIONS, &completion(&format!("short {i}")));
        assert_eq!(answer.body_step, Some(wasm_epp_router::Step::Continue), "request {i}: a decode pod is free");
        streams.push(stream);
    }
    let (_third, answer) = bench.request(&COMPLETIONS, &completion("short 2"));
    assert_eq!(answer.body_step, Some(wasm_epp_router::Step::Pause), "both decode pods are full: it waits");
    for mut stream in streams {
        stream.on_log(&bench.host);
    }
}

#[test]
fn flow_control_does_not_count_a_split_request_s_prefill_pod_against_the_decode_places() {
    // Two decode places; one long prompt split (its prefill pod busy until its first token)
    // leaves one decode place, which the next request takes at once.
    let bench = Bench::new(PD_FLOW_CONFIG);
    pd_pool(&bench);
    let (mut split, answer) = bench.request(&COMPLETIONS, &completion(&long_prompt(2000, 9)));
    assert_eq!(answer.body_step, Some(wasm_epp_router::Step::Continue));
    assert!(bench.host.header(PREFILLER).is_some(), "split: a prefill pod computes it");
    let (mut second, answer) = bench.request(&COMPLETIONS, &completion("short"));
    assert_eq!(answer.body_step, Some(wasm_epp_router::Step::Continue), "the other decode place is free");
    split.on_log(&bench.host);
    second.on_log(&bench.host);
}

#[test]
fn a_released_split_request_keeps_its_prefill_pod_busy_until_the_decode_pod_answers() {
    // Both decode places taken; two long prompts wait, then are released one after the other.
    let bench = Bench::new(PD_FLOW_CONFIG);
    pd_pool(&bench);
    let send = |id: u32, prompt: &str| {
        let body = completion(prompt);
        bench.host.set_request(&COMPLETIONS, body.as_bytes());
        let mut stream = RequestStream::for_context(bench.worker.clone(), id);
        stream.on_request_headers(&bench.host, false);
        (stream.on_request_body(&bench.host, body.len(), true), stream)
    };
    let (_, mut short_a) = send(1, "short a");
    let (_, mut short_b) = send(2, "short b");
    let (step, mut first) = send(3, &long_prompt(2000, 31));
    assert_eq!(step, Step::Pause, "both decode pods are full");
    let (_, mut second) = send(4, &long_prompt(2000, 32));
    let inflight = |pod: &str| (bench.worker.inflight.borrow().count(pod), bench.worker.inflight.borrow().tokens(pod));
    bench.host.headers.borrow_mut().clone_from(&Default::default());
    short_a.on_log(&bench.host);
    let first_prefill = bench.host.header(PREFILLER).unwrap();
    let (count, tokens) = inflight(&first_prefill);
    assert_eq!(count, 1, "released, its prefill pod is computing its prompt");
    assert!(tokens > 1000, "with its uncached tokens in flight: {tokens}");
    bench.host.headers.borrow_mut().clone_from(&Default::default());
    short_b.on_log(&bench.host);
    let second_prefill = bench.host.header(PREFILLER).unwrap();
    assert_ne!(second_prefill, first_prefill, "the next release sees that load and goes to the other prefill pod");
    bench.host.set_response(&[(":status", "200")], b"");
    first.on_response_headers(&bench.host, false);
    assert_eq!(inflight(&first_prefill), (0, 0), "done once the decode pod answers");
    assert_eq!(inflight(&second_prefill).0, 1);
    first.on_log(&bench.host);
    second.on_log(&bench.host);
    assert_eq!(inflight(&second_prefill), (0, 0), "a stream that ends unanswered releases it too");
}

/// A Responses or Messages request is never split: its decode pod computes the prompt, so a
/// long one keeps the configured stickiness to the pod holding it (a splittable chat's is
/// weighed against the prefill hop, which computes the prompt anyway).
#[test]
fn a_long_prompt_that_is_never_split_stays_on_the_decode_pod_holding_it() {
    let responses = [(":method", "POST"), (":path", "/v1/responses"), ("content-type", "application/json")];
    let messages = [(":method", "POST"), (":path", "/v1/messages"), ("content-type", "application/json")];
    for (headers, body) in [
        (&responses, format!(r#"{{"model":"m","input":"{}"}}"#, long_prompt(8000, 31))),
        (
            &messages,
            format!(
                r#"{{"model":"m","max_tokens":8,"messages":[{{"role":"user","content":"{}"}}]}}"#,
                long_prompt(8000, 32)
            ),
        ),
    ] {
        let bench = Bench::new(PD_CONFIG);
        pd_pool(&bench);
        let (_first, answer) = bench.request(headers, &body);
        let first = answer.destination.unwrap().split(',').next().unwrap().to_owned();
        // The holding pod now has a queue (not full); the other is idle.
        let now = bench.host.now_ms();
        let mut table = PodTable { version: 2, published_at_ms: now, poll_interval_ms: 100, ..PodTable::default() };
        for (address, role) in
            PREFILL_PODS.iter().map(|a| (*a, PodRole::Prefill)).chain(DECODE_PODS.iter().map(|a| (*a, PodRole::Decode)))
        {
            let mut pod = PodState::unknown(&PodAddress::parse(address).unwrap());
            (pod.healthy, pod.kv_usage, pod.last_success_ms, pod.role) = (true, Some(0.1), now, role);
            if address == first {
                pod.waiting = 2.0;
                pod.running = 4.0;
            }
            table.pods.push(pod);
        }
        bench.host.set(keys::POD_TABLE, &table.encode(), None).unwrap();
        bench.host.set(keys::POD_TABLE_VERSION, &encode_version(2), None).unwrap();
        bench.heartbeat();
        bench.tick();
        let (_second, answer) = bench.request(headers, &body);
        let second = answer.destination.unwrap().split(',').next().unwrap().to_owned();
        assert_eq!(first, second, "{}: the decode pod holding the whole prompt, which computes it alone", headers[1].1);
    }
}

#[test]
fn a_split_request_of_n_choices_weighs_n_on_its_decode_pod_and_one_on_its_prefill_pod() {
    let bench = Bench::new(r#"{"pd": {"threshold_tokens": 1024}, "learning": {"enabled": true}}"#);
    pd_pool(&bench);
    let body = format!(r#"{{"model":"m","prompt":"{}","n":4,"max_tokens":4}}"#, long_prompt(2000, 21));
    let (mut stream, answer) = bench.request(&COMPLETIONS, &body);
    let decode = answer.destination.unwrap().split(',').next().unwrap().to_owned();
    let prefiller = bench.host.header(PREFILLER).unwrap();
    let count = |pod: &str| bench.worker.inflight.borrow().count(pod);
    let tokens = |pod: &str| bench.worker.inflight.borrow().tokens(pod);
    assert_eq!(count(&decode), 4, "4 samples decode there");
    assert_eq!(count(&prefiller), 1, "the prompt is prefilled once");
    assert!(tokens(&prefiller) > 1000 && tokens(&prefiller) < 3000, "once, not 4 times: {}", tokens(&prefiller));
    stream.on_response_headers(&bench.host, false);
    assert_eq!((count(&prefiller), tokens(&prefiller)), (0, 0));
    assert_eq!(count(&decode), 4);
    stream.on_log(&bench.host);
    assert_eq!(count(&decode), 0);
}

#[test]
fn flow_control_counts_the_decode_pods_a_model_is_routed_to_as_the_decision_reads_them() {
    // Only the prefill pods name the model; the decode pods name none, so the decision (which
    // reads the decode pods alone) may send it to any of them.
    let bench = Bench::new(PD_FLOW_CONFIG);
    let now = bench.host.now_ms();
    let mut table = PodTable { version: 1, published_at_ms: now, poll_interval_ms: 100, ..PodTable::default() };
    let prefill = PREFILL_PODS.iter().map(|a| (*a, PodRole::Prefill, &["qwen"][..]));
    let decode = DECODE_PODS.iter().map(|a| (*a, PodRole::Decode, &[][..]));
    for (address, role, models) in prefill.chain(decode) {
        let mut pod = PodState::unknown(&PodAddress::parse(address).unwrap());
        (pod.healthy, pod.kv_usage, pod.last_success_ms, pod.role) = (true, Some(0.1), now, role);
        pod.models = models.iter().map(|m| (*m).to_owned()).collect();
        table.pods.push(pod);
    }
    bench.host.set(keys::POD_TABLE, &table.encode(), None).unwrap();
    bench.host.set(keys::POD_TABLE_VERSION, &encode_version(1), None).unwrap();
    bench.heartbeat();
    let body = r#"{"model":"qwen","prompt":"short","max_tokens":4}"#;
    let (mut stream, answer) = bench.request(&COMPLETIONS, body);
    assert_eq!(answer.body_step, Some(Step::Continue), "a decode pod has room: not held to its TTL");
    let picked = answer.destination.as_deref().unwrap().split(',').next().unwrap().to_owned();
    assert!(DECODE_PODS.contains(&picked.as_str()), "{picked}");
    stream.on_log(&bench.host);
}
