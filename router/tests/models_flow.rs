//! A request held by flow control is routed at release as it would have been at once: as
//! its rewrite target (the body rewritten then) and within its subset hint, from the header
//! or from Envoy's metadata.

mod common;

use common::{publish_models, publish_models_as, Bench, COMPLETIONS};
use wasm_epp_host::headers::serialize;
use wasm_epp_router::{RequestStream, Step};

const QWEN_A: &str = "10.0.0.1:8000";
const QWEN_B: &str = "10.0.0.2:8000";
const QWEN_C: &str = "10.0.0.3:8000";

/// One request in flight per pod at most: three requests fill the pool.
const CONFIG: &str = r#"{"fallback_destinations": 0,
    "flow_control": {"enabled": true, "max_inflight_per_pod": 1, "ttl_ms": 1000},
    "models": {"rewrites": [{"model": "public", "targets": [{"model": "sql-lora", "weight": 1}]}],
               "subset_metadata_namespace": "envoy.lb.subset_hint"}}"#;

const METADATA_PATH: &str = "metadata\0filter_metadata\0envoy.lb.subset_hint\0x-gateway-destination-endpoint-subset";

/// Sends a request for `model` on context `id`; `metadata`: a subset hint in Envoy's metadata
/// (as a list), present only while its headers are read.
fn send(bench: &Bench, id: u32, model: &str, headers: &[(&str, &str)], metadata: &[&str]) -> (RequestStream, Step) {
    let mut all: Vec<(&str, &str)> = COMPLETIONS.to_vec();
    all.extend_from_slice(headers);
    let body = format!(r#"{{"model":"{model}","prompt":"request {id}","max_tokens":4}}"#);
    bench.host.set_request(&all, body.as_bytes());
    if !metadata.is_empty() {
        let list: Vec<(&str, &str)> = metadata.iter().map(|address| (*address, "")).collect();
        bench.host.properties.borrow_mut().insert(METADATA_PATH.into(), serialize(&list));
    }
    let mut stream = RequestStream::for_context(bench.worker.clone(), id);
    assert_eq!(stream.on_request_headers(&bench.host, false), Step::Pause);
    bench.host.properties.borrow_mut().remove(METADATA_PATH);
    let step = stream.on_request_body(&bench.host, body.len(), true);
    (stream, step)
}

/// Sends a chat for `model` on context `id` that vLLM reads and the picker's chat parse does not
/// (`NaN`, which Python's `json` takes): read for its model alone.
fn send_lenient(bench: &Bench, id: u32, model: &str) -> (RequestStream, Step) {
    let chat = [(":method", "POST"), (":path", "/v1/chat/completions"), ("content-type", "application/json")];
    let body = format!(r#"{{"model":"{model}","messages":[{{"role":"user","content":"hi"}}],"temperature":NaN}}"#);
    bench.host.set_request(&chat, body.as_bytes());
    let mut stream = RequestStream::for_context(bench.worker.clone(), id);
    assert_eq!(stream.on_request_headers(&bench.host, false), Step::Pause);
    let step = stream.on_request_body(&bench.host, body.len(), true);
    (stream, step)
}

#[test]
fn a_released_request_is_rewritten_and_stays_within_its_subset_hint() {
    let bench = Bench::new(CONFIG);
    let pool: [(&str, &str, &[&str], f64); 3] =
        [(QWEN_A, "qwen", &[], 0.0), (QWEN_B, "qwen", &["sql-lora"], 0.0), (QWEN_C, "qwen", &["sql-lora"], 0.0)];
    publish_models(&bench, &pool);
    let mut busy = Vec::new();
    for (id, pod) in [(1, QWEN_A), (2, QWEN_B), (3, QWEN_C)] {
        let (stream, step) = send(&bench, id, "qwen", &[("x-gateway-destination-endpoint-subset", pod)], &[]);
        assert_eq!((step, bench.destination().as_deref()), (Step::Continue, Some(pod)));
        busy.push(stream);
    }
    let [mut busy_a, mut busy_b, mut busy_c] = <[RequestStream; 3]>::try_from(busy).ok().unwrap();

    let (_public, step) = send(&bench, 10, "public", &[], &[]);
    assert_eq!(step, Step::Pause, "held");
    let (mut hinted, step) = send(&bench, 11, "qwen", &[], &[QWEN_C]);
    assert_eq!(step, Step::Pause, "held, its metadata hint kept");
    bench.host.replies.borrow_mut().clear();
    let (_outside, _) = send(&bench, 12, "qwen", &[("x-gateway-destination-endpoint-subset", "10.0.0.9:8000")], &[]);
    {
        let replies = bench.host.replies.borrow();
        let refused = replies.last().expect("answered at once: no pod of its hint will ever have room for it");
        assert_eq!(refused.status, 503, "never routed outside the hint");
        assert!(refused.headers.contains(&("x-llm-d-request-dropped-reason".into(), "rejected-no-endpoints".into())));
    }
    assert_eq!(bench.stat("wasm_epp.flow.queued"), 2, "only the requests with pods to wait for");

    assert_eq!(bench.end(&mut busy_b), [10], "B's place goes to the first in line");
    assert_eq!(bench.destination().as_deref(), Some(QWEN_B), "routed as sql-lora, which A does not serve");
    let sent: serde_json::Value = serde_json::from_slice(&bench.host.body.borrow()).unwrap();
    assert_eq!(sent["model"], "sql-lora", "the released request's body carries its rewrite target");
    assert_eq!(bench.host.header("content-length"), Some(bench.host.body.borrow().len().to_string()));
    assert_eq!(bench.stat("wasm_epp.model_rewritten"), 1);

    assert!(bench.end(&mut busy_a).is_empty(), "A's place is outside the waiting request's hint: no room for it");
    bench.tick();
    assert!(bench.host.resumed.borrow().is_empty(), "it waits for pod C, not past C's bound");
    assert_eq!(bench.end(&mut busy_c), [11], "C's place is its");
    assert_eq!(bench.destination().as_deref(), Some(QWEN_C), "within its metadata hint");
    bench.end(&mut hinted);
}

#[test]
fn a_request_for_a_model_no_pod_serves_is_refused_at_once_not_queued() {
    let bench = Bench::new(CONFIG);
    publish_models(&bench, &[(QWEN_A, "qwen", &[], 0.0)]);
    let (mut busy, step) = send(&bench, 1, "qwen", &[], &[]);
    assert_eq!(step, Step::Continue);
    let (_waiting, step) = send(&bench, 2, "qwen", &[], &[]);
    assert_eq!(step, Step::Pause, "the pool is full: a request for its model waits");
    bench.host.replies.borrow_mut().clear();
    let (_unknown, _) = send(&bench, 3, "gpt-9", &[], &[]);
    let replies = bench.host.replies.borrow();
    assert_eq!(replies.last().map(|r| r.status), Some(404), "the gateway's 404 at once, as when there is room");
    assert_eq!(bench.stat("wasm_epp.flow.queued"), 1, "only the qwen request was queued");
    drop(replies);
    bench.end(&mut busy);
}

#[test]
fn a_request_for_a_name_only_a_cut_pod_may_serve_waits_for_its_place_like_any_other() {
    let bench = Bench::new(CONFIG);
    // The pod registers more adapters than its lists keep (a worker drops the names past the hard bound): a name
    // no pod lists goes to it, so it waits for a place there, never past the pod's bound.
    let adapters: Vec<String> = (0..=picker::models::MAX_NAMES_PER_POD).map(|i| format!("a{i}")).collect();
    let adapters: Vec<&str> = adapters.iter().map(String::as_str).collect();
    publish_models(&bench, &[(QWEN_A, "qwen", &adapters, 0.0)]);
    let (mut busy, step) = send(&bench, 1, "qwen", &[], &[]);
    assert_eq!(step, Step::Continue);
    bench.host.replies.borrow_mut().clear();
    let unlisted = format!("a{}", picker::models::MAX_NAMES_PER_POD);
    let (_waiting, step) = send(&bench, 2, &unlisted, &[], &[]);
    assert_eq!(step, Step::Pause, "held: the pod that may serve it is full");
    assert!(bench.host.replies.borrow().is_empty(), "not the gateway's 404 either");
    assert_eq!(bench.stat("wasm_epp.flow.queued"), 1);
    assert_eq!(bench.end(&mut busy), [2], "the cut pod's place is its");
    assert_eq!(bench.destination().as_deref(), Some(QWEN_A));
}

#[test]
fn a_request_whose_model_left_while_it_waited_gets_the_404_it_would_get_arriving_now() {
    let bench = Bench::new(CONFIG);
    publish_models(&bench, &[(QWEN_A, "qwen", &[], 0.0), (QWEN_B, "llama", &[], 0.0)]);
    let (_busy_qwen, _) = send(&bench, 1, "qwen", &[], &[]);
    let (mut busy_llama, _) = send(&bench, 2, "llama", &[], &[]);
    let (_waiting, step) = send(&bench, 3, "qwen", &[], &[]);
    assert_eq!(step, Step::Pause, "the pool is full: it waits");
    // qwen's only pod leaves the pool; llama's stays and frees its place.
    publish_models_as(&bench, &[(QWEN_B, "llama", &[], 0.0)], 2);
    bench.host.replies.borrow_mut().clear();
    bench.tick();
    let replies = bench.host.replies.borrow();
    let refused = replies.last().expect("answered on the next tick: no place will ever be its");
    assert_eq!(bench.host.effective_context.get(), Some(3));
    assert_eq!(refused.status, 404, "as a request for qwen arriving now, not a 503");
    let body: serde_json::Value = serde_json::from_slice(&refused.body).unwrap();
    assert_eq!(body["error"]["message"], "The model `qwen` does not exist.");
    assert_eq!(bench.stat("wasm_epp.model_unknown"), 1);
    assert_eq!(bench.stat("wasm_epp.flow.dropped.unknown_model"), 1);
    drop(replies);
    bench.end(&mut busy_llama);
}

#[test]
fn a_body_read_for_its_model_alone_waits_in_the_queue_and_is_released_to_its_models_pod() {
    const LLAMA: &str = "10.0.0.4:8000";
    let bench = Bench::new(CONFIG);
    // The llama pod looks idler: routed by load alone, the released request would go there.
    publish_models(&bench, &[(QWEN_A, "qwen", &[], 2.0), (LLAMA, "llama", &[], 0.0)]);
    let (mut busy_qwen, _) = send(&bench, 1, "qwen", &[], &[]);
    assert_eq!(bench.destination().as_deref(), Some(QWEN_A));
    let (mut busy_llama, _) = send(&bench, 2, "llama", &[], &[]);
    assert_eq!(bench.destination().as_deref(), Some(LLAMA));

    let (_lenient, step) = send_lenient(&bench, 3, "qwen");
    assert_eq!(step, Step::Pause, "held like any inference request while the pool is full");
    assert_eq!(bench.stat("wasm_epp.body_routed_by_model"), 1);

    // The llama pod's place frees first: no room for a qwen request, which waits for qwen's.
    assert!(bench.end(&mut busy_llama).is_empty(), "llama's place is not qwen's");
    assert_eq!(bench.end(&mut busy_qwen), [3], "released");
    assert_eq!(bench.destination().as_deref(), Some(QWEN_A), "released to its model's pod, read for its model again");
}

#[test]
fn a_body_read_for_its_model_alone_whose_model_left_while_it_waited_gets_the_404_naming_it() {
    let bench = Bench::new(CONFIG);
    publish_models(&bench, &[(QWEN_A, "qwen", &[], 0.0), (QWEN_B, "llama", &[], 0.0)]);
    let (_busy_qwen, _) = send(&bench, 1, "qwen", &[], &[]);
    let (_busy_llama, _) = send(&bench, 2, "llama", &[], &[]);
    let (_lenient, step) = send_lenient(&bench, 3, "qwen");
    assert_eq!(step, Step::Pause);
    publish_models_as(&bench, &[(QWEN_B, "llama", &[], 0.0)], 2);
    bench.host.replies.borrow_mut().clear();
    bench.tick();
    let replies = bench.host.replies.borrow();
    let refused = replies.last().expect("answered on the next tick");
    assert_eq!(refused.status, 404);
    let body: serde_json::Value = serde_json::from_slice(&refused.body).unwrap();
    assert_eq!(body["error"]["message"], "The model `qwen` does not exist.");
}
