//! A pod that lists a model or adapter it does not serve (a stale `/v1/models`, a broken
//! exporter, a lying pod) and answers vLLM's 404 to its requests: the worker stops sending
//! that name there while another pod lists it, and keeps sending when none does.

// Helpers outside #[test] functions read replies: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use common::{model_completion, Bench, COMPLETIONS};
use picker::address::PodAddress;
use picker::keys;
use picker::pod_table::{encode_version, PodState, PodTable};
use wasm_epp_host::{Host, SharedStore};

const LIAR: &str = "10.0.0.1:8000";
const HONEST: &str = "10.0.0.2:8000";
const SERVED: &str = "x-gateway-destination-endpoint-served";
/// vLLM's answer to a model it does not serve (`OpenAIServing._check_model`), as its recent
/// releases write it.
const NOT_FOUND: &[u8] =
    br#"{"error":{"message":"The model `x` does not exist.","type":"NotFoundError","param":null,"code":404}}"#;
/// FastAPI's answer to a path the pod has no route for: not a word on the model.
const NO_ROUTE: &[u8] = br#"{"detail":"Not Found"}"#;

/// Both pods serve base model `m`; the liar reports adapter `x` running (resident, so first
/// choice) and is idle, the honest pod lists `x` unloaded (only when `honest_lists` is set).
fn publish(bench: &Bench, version: u64, epoch: u32, honest_lists: bool) {
    let now = bench.host.now_ms();
    let mut table = PodTable { version, published_at_ms: now, poll_interval_ms: 100, ..PodTable::default() };
    for (address, waiting) in [(LIAR, 0.0), (HONEST, 3.0)] {
        let mut pod = PodState::unknown(&PodAddress::parse(address).unwrap());
        (pod.healthy, pod.waiting, pod.last_success_ms) = (true, waiting, now);
        pod.models = vec!["m".to_owned()];
        pod.max_loras = 4;
        if address == LIAR {
            pod.running_loras = vec!["x".to_owned()];
            pod.epoch = epoch;
        } else if honest_lists {
            pod.adapters = vec!["x".to_owned()];
        }
        table.pods.push(pod);
    }
    bench.host.set(keys::POD_TABLE, &table.encode(), None).unwrap();
    bench.host.set(keys::POD_TABLE_VERSION, &encode_version(version), None).unwrap();
    bench.heartbeat();
    bench.tick();
}

/// One request for `model`, answered by the pod it went to: the liar answers `liar_says`
/// (404) to `x`, every other answer is a 200. Returns the pod it went to.
fn request(bench: &Bench, model: &str, id: u32, liar_says: &[u8]) -> String {
    let (mut stream, answer) = bench.request(&COMPLETIONS, &model_completion(model, id, 1));
    let pod = answer.destination.unwrap().split(',').next().unwrap().to_owned();
    let refused = pod == LIAR && model == "x";
    let (status, body) = if refused { ("404", liar_says) } else { ("200", &b"{}"[..]) };
    bench.host.set_response(&[(":status", status), (SERVED, &pod), ("content-type", "application/json")], body);
    stream.on_response_headers(&bench.host, false);
    stream.on_response_body(&bench.host, body.len(), true);
    stream.on_log(&bench.host);
    pod
}

#[test]
fn a_pod_that_answers_404_to_an_adapter_it_lists_stops_drawing_it_while_another_pod_lists_it() {
    let bench = Bench::new("{}");
    publish(&bench, 1, 1, true);
    assert_eq!(request(&bench, "x", 0, NOT_FOUND), LIAR, "resident: the first choice");
    let next: Vec<String> = (1..=10).map(|i| request(&bench, "x", i, NOT_FOUND)).collect();
    assert_eq!(next, [HONEST; 10], "the 404 is believed over the listing");
    assert_eq!(bench.stat("wasm_epp.models_disowned"), 1);
    // Its other model is not in question: `m` still goes to the idle pod.
    assert_eq!(request(&bench, "m", 11, NOT_FOUND), LIAR);
    // Scrapes that keep lying change nothing while the time lasts.
    publish(&bench, 2, 1, true);
    assert_eq!(request(&bench, "x", 12, NOT_FOUND), HONEST);
}

#[test]
fn the_pod_is_tried_again_after_a_while_or_once_its_engine_restarts() {
    let bench = Bench::new("{}");
    publish(&bench, 1, 1, true);
    assert_eq!(request(&bench, "x", 0, NOT_FOUND), LIAR);
    assert_eq!(request(&bench, "x", 1, NOT_FOUND), HONEST);
    // A new engine (a new epoch) may have loaded it: tried at once.
    publish(&bench, 2, 2, true);
    assert_eq!(request(&bench, "x", 2, NOT_FOUND), LIAR, "a new epoch");
    assert_eq!(request(&bench, "x", 3, NOT_FOUND), HONEST);
    // Same engine, after the time: one more try (one 404 per period and worker at most).
    bench.host.advance(wasm_epp_router::disowned::DISOWNED_FOR_MS + 1);
    publish(&bench, 3, 2, true);
    assert_eq!(request(&bench, "x", 4, NOT_FOUND), LIAR, "its time is up");
    assert_eq!(request(&bench, "x", 5, NOT_FOUND), HONEST);
    assert_eq!(bench.stat("wasm_epp.models_disowned"), 3);
}

#[test]
fn with_no_other_pod_listing_it_the_404_is_the_answer() {
    let bench = Bench::new("{}");
    publish(&bench, 1, 1, false);
    let picks: Vec<String> = (0..3).map(|i| request(&bench, "x", i, NOT_FOUND)).collect();
    assert_eq!(picks, [LIAR; 3], "no other pod lists it: the pod's own 404 goes to the client");
}

#[test]
fn a_404_that_says_nothing_of_the_model_is_not_a_disowning() {
    let bench = Bench::new("{}");
    publish(&bench, 1, 1, true);
    // An endpoint the pod has no route for (an older engine) is not the model's fault.
    let picks: Vec<String> = (0..3).map(|i| request(&bench, "x", i, NO_ROUTE)).collect();
    assert_eq!(picks, [LIAR; 3]);
    assert_eq!(bench.stat("wasm_epp.models_disowned"), 0);
}
