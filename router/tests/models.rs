//! Many models in one pool and the Endpoint Picker Protocol's headers, through the whole
//! request path of one worker on a `MockHost`.

// Helpers outside #[test] functions read replies: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use common::{publish_models, publish_models_as, Bench, COMPLETIONS};
use wasm_epp_host::warnings::logged_warnings;
use wasm_epp_router::Step;

fn body(model: &str) -> String {
    format!(r#"{{"model":"{model}","prompt":"hello","max_tokens":4}}"#)
}

fn chosen(destination: Option<String>) -> String {
    destination.unwrap_or_default().split(',').next().unwrap_or_default().to_owned()
}

fn reply_header(bench: &Bench, name: &str) -> Option<String> {
    let replies = bench.host.replies.borrow();
    let reply = replies.last()?;
    reply.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone())
}

const POOL: [(&str, &str, &[&str], f64); 3] = [
    ("10.0.0.1:8000", "llama", &[], 0.0),
    ("10.0.0.2:8000", "qwen", &["sql-lora"], 5.0),
    ("10.0.0.3:8000", "qwen", &["chat-lora"], 9.0),
];

#[test]
fn requests_go_only_to_pods_serving_their_model() {
    let bench = Bench::new("{}");
    publish_models(&bench, &POOL);
    for _ in 0..20 {
        assert_eq!(chosen(bench.complete(&COMPLETIONS, &body("sql-lora")).destination), "10.0.0.2:8000");
        assert_eq!(chosen(bench.complete(&COMPLETIONS, &body("chat-lora")).destination), "10.0.0.3:8000");
        let qwen = chosen(bench.complete(&COMPLETIONS, &body("qwen")).destination);
        assert!(qwen == "10.0.0.2:8000" || qwen == "10.0.0.3:8000", "{qwen}");
    }
    for model in ["sql-lora", "chat-lora", "qwen"] {
        assert_eq!(bench.stat(&format!("wasm_epp.model_requests.model.{model}")), 20, "{model}");
    }
}

#[test]
fn requests_are_counted_by_model_and_names_no_pod_reports_as_other() {
    let bench = Bench::new(r#"{"models": {"unknown_model": "route_by_load"}}"#);
    publish_models(&bench, &POOL);
    for i in 0..5 {
        bench.complete(&COMPLETIONS, &body(&format!("made-up-{i}")));
        bench.complete(&COMPLETIONS, &body("llama"));
    }
    assert_eq!(bench.stat("wasm_epp.model_requests.model.llama"), 5);
    assert_eq!(bench.stat("wasm_epp.model_requests.model.other"), 5, "a client's names grow no series");
    assert_eq!(bench.stat("wasm_epp.model_requests.model.made-up-0"), 0);
}

#[test]
fn an_unknown_model_is_answered_404_by_the_gateway_or_routed_by_load_if_configured() {
    let bench = Bench::new("{}");
    publish_models(&bench, &POOL);
    let answer = bench.complete(&COMPLETIONS, &body("gpt-9"));
    assert_eq!((answer.reply, answer.destination), (Some(404), None));
    let reply: serde_json::Value = serde_json::from_slice(&bench.host.replies.borrow()[0].body).unwrap();
    assert_eq!(reply["error"]["message"], "The model `gpt-9` does not exist.");
    assert_eq!(reply["error"]["code"], 404);
    assert_eq!(bench.stat("wasm_epp.model_unknown"), 1);
    let lenient = Bench::new(r#"{"models": {"unknown_model": "route_by_load"}}"#);
    publish_models(&lenient, &POOL);
    assert_eq!(chosen(lenient.complete(&COMPLETIONS, &body("gpt-9")).destination), "10.0.0.1:8000");
}

#[test]
fn a_rewritten_model_is_split_by_weight_and_the_body_carries_the_target() {
    let config = r#"{"models": {"rewrites": [{"model": "public", "targets": [
        {"model": "sql-lora", "weight": 80}, {"model": "chat-lora", "weight": 20}]}]}}"#;
    let bench = Bench::new(config);
    publish_models(&bench, &POOL);
    let mut to_sql = 0;
    for _ in 0..1000 {
        let answer = bench.complete(&COMPLETIONS, &body("public"));
        let sent: serde_json::Value = serde_json::from_slice(&bench.host.body.borrow()).unwrap();
        let length = bench.host.header("content-length").unwrap();
        assert_eq!(length, bench.host.body.borrow().len().to_string(), "content-length follows the new body");
        match (sent["model"].as_str().unwrap(), chosen(answer.destination).as_str()) {
            ("sql-lora", "10.0.0.2:8000") => to_sql += 1,
            ("chat-lora", "10.0.0.3:8000") => {}
            other => panic!("target and pod disagree: {other:?}"),
        }
    }
    assert!((750..=850).contains(&to_sql), "80 % of 1,000 within ±5 %: {to_sql}");
    assert_eq!(bench.stat("wasm_epp.model_rewritten"), 1000);
}

#[test]
fn a_gateway_rewrite_header_sends_the_request_as_its_model_over_the_rules() {
    let config = r#"{"models": {"rewrites": [{"model": "public", "targets": [{"model": "sql-lora", "weight": 1}]}]}}"#;
    let bench = Bench::new(config);
    publish_models(&bench, &POOL);
    let sent_model = |bench: &Bench| {
        let sent: serde_json::Value = serde_json::from_slice(&bench.host.body.borrow()).unwrap();
        sent["model"].as_str().unwrap_or_default().to_owned()
    };
    for (header, asked) in [("x-llm-d-model-name-rewrite", "public"), ("x-gateway-model-name-rewrite", "qwen")] {
        let mut headers = COMPLETIONS.to_vec();
        headers.push((header, " chat-lora "));
        let answer = bench.complete(&headers, &body(asked));
        assert_eq!(chosen(answer.destination), "10.0.0.3:8000", "{header}: the pod serving chat-lora");
        assert_eq!(sent_model(&bench), "chat-lora", "{header}: the body carries the header's model");
    }
    assert_eq!(bench.stat("wasm_epp.model_rewritten"), 2);
    // The header naming the body's own model changes nothing; an empty one is no header.
    for value in ["qwen", "  "] {
        let mut headers = COMPLETIONS.to_vec();
        headers.push(("x-llm-d-model-name-rewrite", value));
        let answer = bench.complete(&headers, &body("qwen"));
        assert_ne!(chosen(answer.destination), "10.0.0.1:8000");
        assert_eq!(sent_model(&bench), "qwen");
    }
    assert_eq!(bench.stat("wasm_epp.model_rewritten"), 2, "no body rewritten for them");
    // A model no pod serves, named by the header, is the gateway's 404 as in a body.
    let mut headers = COMPLETIONS.to_vec();
    headers.push(("x-llm-d-model-name-rewrite", "gpt-9"));
    assert_eq!(bench.complete(&headers, &body("qwen")).reply, Some(404));
}

#[test]
fn the_subset_hint_narrows_the_pick_and_an_empty_subset_is_503_with_a_reason() {
    let bench = Bench::new("{}");
    publish_models(&bench, &POOL);
    let mut headers = COMPLETIONS.to_vec();
    headers.push(("x-gateway-destination-endpoint-subset", "10.0.0.3:8000"));
    assert_eq!(chosen(bench.complete(&headers, &body("qwen")).destination), "10.0.0.3:8000");
    headers.pop();
    headers.push(("x-gateway-destination-endpoint-subset", "10.0.0.9:8000"));
    assert_eq!(bench.complete(&headers, &body("qwen")).reply, Some(503));
    assert_eq!(reply_header(&bench, "x-llm-d-request-dropped-reason").as_deref(), Some("rejected-no-endpoints"));
}

#[test]
fn a_sheddable_objective_is_refused_with_its_reason_when_the_pool_is_saturated() {
    let bench = Bench::new(r#"{"models": {"objectives": {"batch": -1}}}"#);
    publish_models(&bench, &[("10.0.0.1:8000", "llama", &[], 1_000.0)]);
    let mut headers = COMPLETIONS.to_vec();
    headers.push(("x-llm-d-inference-objective", "batch"));
    assert_eq!(bench.complete(&headers, &body("llama")).reply, Some(429));
    assert_eq!(reply_header(&bench, "x-llm-d-request-dropped-reason").as_deref(), Some("rejected-saturated"));
    assert!(bench.complete(&COMPLETIONS, &body("llama")).destination.is_some(), "no objective: not sheddable");
}

#[test]
fn the_answering_pod_is_reported_in_a_response_header_when_asked() {
    let bench = Bench::new(r#"{"models": {"served_endpoint_header": "x-gateway-destination-endpoint-served"}}"#);
    publish_models(&bench, &POOL);
    let (mut stream, answer) = bench.request(&COMPLETIONS, &body("llama"));
    assert_eq!(answer.body_step, Some(Step::Continue));
    bench.host.properties.borrow_mut().insert("upstream\0address".into(), b"10.0.0.1:8000".to_vec());
    assert_eq!(stream.on_response_headers(&bench.host, false), Step::Continue);
    let served = bench.host.response_header("x-gateway-destination-endpoint-served");
    assert_eq!(served.as_deref(), Some("10.0.0.1:8000"));
    stream.on_log(&bench.host);
}

fn post(path: &'static str, content_type: &'static str) -> [(&'static str, &'static str); 3] {
    [(":method", "POST"), (":path", path), ("content-type", content_type)]
}

#[test]
fn other_endpoints_go_to_pods_serving_the_model_their_json_body_names() {
    let bench = Bench::new(r#"{"invalid_body": "reject"}"#);
    publish_models(&bench, &POOL);
    let embeddings = post("/v1/embeddings", "application/json; charset=utf-8");
    let responses = post("/v1/responses", "application/json");
    for _ in 0..20 {
        let answer = bench.complete(&embeddings, r#"{"input": [[1, 2, 3]], "model": "sql-lora"}"#);
        assert_eq!((answer.headers_step, chosen(answer.destination)), (Step::Pause, "10.0.0.2:8000".to_owned()));
        let answer = bench.complete(&responses, r#"{"model": "llama", "input": [{"role": "user", "content": "hi"}]}"#);
        assert_eq!(chosen(answer.destination), "10.0.0.1:8000");
    }
    let unknown = bench.complete(&embeddings, r#"{"model": "gpt-9", "input": "x"}"#);
    assert_eq!((unknown.reply, unknown.destination), (Some(404), None), "as for completions");
    // Not JSON, or JSON without a model: routed by load, never refused (not ours to judge).
    for body in ["input=hello", r#"{"input": "no model"}"#, r#"{"model": 7}"#] {
        let answer = bench.complete(&post("/tokenize", "text/plain"), body);
        assert!(answer.destination.is_some() && answer.reply.is_none(), "{body}");
    }
    assert_eq!(bench.stat("wasm_epp.body_invalid"), 0, "only inference bodies are judged");
}

#[test]
fn binary_uploads_and_bodyless_requests_on_other_endpoints_are_routed_by_load_at_their_headers() {
    let bench = Bench::new("{}");
    publish_models(&bench, &POOL);
    let form = "--x\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nqwen\r\n--x--\r\n";
    for content_type in ["application/octet-stream", "audio/wav"] {
        let answer = bench.complete(&post("/v1/audio/transcriptions", content_type), form);
        assert_eq!(answer.headers_step, Step::Continue, "{content_type}: not held for its body");
        assert!(answer.destination.is_some());
    }
    // A form is read for its `model` (router/tests/uploads.rs).
    let answer = bench.complete(&post("/v1/audio/transcriptions", "multipart/form-data; boundary=x"), form);
    assert_eq!((answer.headers_step, answer.body_step), (Step::Pause, Some(Step::Continue)));
    let pick = answer.destination.unwrap_or_default();
    assert!(POOL.iter().any(|(pod, model, ..)| *model == "qwen" && pick.starts_with(pod)), "{pick}");
    let files = bench.complete(&[(":method", "GET"), (":path", "/v1/files")], "");
    assert_eq!((files.headers_step, files.destination.is_some()), (Step::Continue, true));
}

const LIST: [(&str, &str); 2] = [(":method", "GET"), (":path", "/v1/models")];

fn listed(bench: &Bench) -> Vec<(String, Option<String>)> {
    let replies = bench.host.replies.borrow();
    let list: serde_json::Value = serde_json::from_slice(&replies.last().unwrap().body).unwrap();
    let entries = list["data"].as_array().unwrap().iter();
    entries.map(|e| (e["id"].as_str().unwrap().to_owned(), e["parent"].as_str().map(str::to_owned))).collect()
}

#[test]
fn the_gateway_answers_the_model_list_with_every_model_of_the_pool() {
    let config = r#"{"models": {"rewrites": [{"model": "public", "targets": [{"model": "sql-lora", "weight": 1}]}]}}"#;
    let bench = Bench::new(config);
    publish_models(&bench, &POOL);
    for path in ["/v1/models", "/v1/models?x=1"] {
        let answer = bench.complete(&[(":method", "GET"), (":path", path)], "");
        assert_eq!((answer.headers_step, answer.reply, answer.destination), (Step::Pause, Some(200), None), "{path}");
        let qwen = Some("qwen".to_owned());
        let expected =
            [("llama", None), ("public", None), ("qwen", None), ("chat-lora", qwen.clone()), ("sql-lora", qwen)];
        let expected: Vec<_> = expected.into_iter().map(|(id, parent)| (id.to_owned(), parent)).collect();
        assert_eq!(listed(&bench), expected);
        assert_eq!(reply_header(&bench, "x-wasm-epp").as_deref(), Some("local-reply"));
    }
    assert_eq!(bench.stat("wasm_epp.model_lists_answered"), 2);
    assert_eq!(bench.stat("wasm_epp.requests_routed"), 0, "no pod asked");
}

#[test]
fn no_model_list_from_a_table_the_pool_service_stopped_refreshing() {
    let bench = Bench::new(r#"{"fail_open_max_age_ms": 1000}"#);
    publish_models(&bench, &POOL);
    assert_eq!(bench.complete(&LIST, "").reply, Some(200));
    bench.host.advance(1_500);
    let stale = bench.complete(&LIST, "");
    assert_ne!(stale.reply, Some(200), "the pool's list is unknown once its data expired");
    assert_eq!(bench.stat("wasm_epp.model_lists_answered"), 1);
}

#[test]
fn the_model_list_follows_each_new_table() {
    let bench = Bench::new("{}");
    publish_models(&bench, &POOL);
    bench.complete(&LIST, "");
    assert_eq!(listed(&bench).len(), 4, "llama, qwen and two adapters");
    // The list is kept for its table: a new one (a pod gone, one with a new model) replaces it.
    publish_models_as(&bench, &[POOL[1], ("10.0.0.4:8000", "mistral", &[], 0.0)], 2);
    bench.tick();
    bench.complete(&LIST, "");
    let ids: Vec<String> = listed(&bench).into_iter().map(|(id, _)| id).collect();
    assert_eq!(ids, ["mistral", "qwen", "sql-lora"]);
}

#[test]
fn a_model_list_past_its_bytes_is_cut_counted_and_logged_once_while_it_stays_cut() {
    let _ = logged_warnings(); // (installs the logger)
    let bench = Bench::new("{}");
    // 40 pods of 512 adapters of 200-byte names: about 6 MB of entries, past the 4 MiB bound.
    let names: Vec<Vec<String>> =
        (0..40).map(|p| (0..512).map(|n| format!("tenant-{p:02}-{n:03}-{}", "x".repeat(186))).collect()).collect();
    let names: Vec<Vec<&str>> = names.iter().map(|pod| pod.iter().map(String::as_str).collect()).collect();
    let addresses: Vec<String> = (0..40).map(|p| format!("10.0.1.{}:8000", p + 1)).collect();
    let many: Vec<(&str, &str, &[&str], f64)> = addresses
        .iter()
        .zip(&names)
        .map(|(address, adapters)| (address.as_str(), "base", adapters.as_slice(), 0.0))
        .collect();
    let told = || logged_warnings().iter().filter(|w| w.contains("of the pool's model names")).count();
    publish_models(&bench, &many);
    for _ in 0..2 {
        assert_eq!(bench.complete(&LIST, "").reply, Some(200));
        let body_len = bench.host.replies.borrow().last().unwrap().body.len();
        assert!(body_len <= picker::models::listing::MAX_LIST_BYTES, "{body_len} bytes");
        let listed = listed(&bench);
        assert_eq!(listed.first().map(|(id, _)| id.as_str()), Some("base"), "bases first");
        assert!((10_000..40 * 512).contains(&listed.len()), "{} of {} names", listed.len(), 40 * 512 + 1);
    }
    assert_eq!((bench.stat("wasm_epp.model_lists_answered"), bench.stat("wasm_epp.model_lists_cut")), (2, 2));
    let warnings = logged_warnings();
    assert_eq!(told(), 1, "one warning while the lists stay cut: {warnings:?}");
    // A whole list in between: a list cut again is told again.
    publish_models_as(&bench, &POOL, 2);
    bench.tick();
    bench.complete(&LIST, "");
    assert_eq!((listed(&bench).len(), bench.stat("wasm_epp.model_lists_cut"), told()), (4, 2, 1));
    publish_models_as(&bench, &many, 3);
    bench.tick();
    bench.complete(&LIST, "");
    assert_eq!((bench.stat("wasm_epp.model_lists_cut"), told()), (3, 2));
}

#[test]
fn the_model_list_goes_to_a_pod_when_it_is_off_or_the_pool_cannot_be_listed() {
    let off = Bench::new(r#"{"models": {"list_path": ""}}"#);
    publish_models(&off, &POOL);
    assert!(off.complete(&LIST, "").destination.is_some(), "list_path empty: routed as before");
    // A pod that names no model may serve any: only the pods know the list.
    let silent = Bench::new("{}");
    publish_models(&silent, &[POOL[0], ("10.0.0.9:8000", "", &[], 0.0)]);
    assert!(silent.complete(&LIST, "").destination.is_some());
    // A GET with a body, or another method, is not the list.
    let bench = Bench::new("{}");
    publish_models(&bench, &POOL);
    let (_, with_body) = bench.request(&LIST, "{}");
    assert!(with_body.destination.is_some());
    assert!(bench.complete(&[(":method", "POST"), (":path", "/v1/models")], "").destination.is_some());
    assert_eq!(bench.stat("wasm_epp.model_lists_answered") + off.stat("wasm_epp.model_lists_answered"), 0);
}

#[test]
fn a_rewritten_model_on_another_endpoint_is_rewritten_too() {
    let config = r#"{"models": {"rewrites": [{"model": "public", "targets": [{"model": "chat-lora", "weight": 1}]}]}}"#;
    let bench = Bench::new(config);
    publish_models(&bench, &POOL);
    let answer = bench.complete(&post("/v1/embeddings", "application/json"), r#"{"model": "public", "input": "x"}"#);
    assert_eq!(chosen(answer.destination), "10.0.0.3:8000");
    let sent: serde_json::Value = serde_json::from_slice(&bench.host.body.borrow()).unwrap();
    assert_eq!((sent["model"].as_str(), sent["input"].as_str()), (Some("chat-lora"), Some("x")));
}

#[test]
fn a_prompt_sent_as_another_adapter_is_not_taken_for_cached() {
    // The engine keeps each adapter's cache apart: the same prompt sent as v1, then as v2,
    // finds nothing of v1's blocks (the prefix index must not say it does).
    let config = r#"{"debug_decision_header": true, "models": {"rewrites": [{"model": "sql", "targets": [
        {"model": "sql-v1", "weight": 1}, {"model": "sql-v2", "weight": 1}]}]}}"#;
    let bench = Bench::new(config);
    // One pod, so every request goes there and its decision tells what the index predicted.
    publish_models(&bench, &[("10.0.0.1:8000", "qwen", &["sql-v1", "sql-v2"], 0.0)]);
    let prompt = "Schema: ".to_owned() + &"CREATE TABLE t (id INT, name TEXT); ".repeat(40);
    let long = format!(r#"{{"model":"sql","prompt":"{prompt}","max_tokens":4}}"#);
    let prefix_of = |adapter: &str| {
        let mut headers = COMPLETIONS.to_vec();
        headers.push(("x-llm-d-model-name-rewrite", adapter));
        let (mut stream, _) = bench.request(&headers, &long);
        bench.host.set_response(&[(":status", "200")], b"");
        stream.on_response_headers(&bench.host, false);
        stream.on_log(&bench.host);
        let explain = bench.host.response_header("x-wasm-epp-decision").unwrap();
        let prefix = explain.split("; ").find_map(|part| part.strip_prefix("prefix=")).unwrap().to_owned();
        prefix.parse::<f64>().unwrap()
    };
    assert_eq!(prefix_of("sql-v1"), 0.0, "cold");
    assert!(prefix_of("sql-v1") > 0.9, "the same adapter again: its blocks are cached");
    assert_eq!(prefix_of("sql-v2"), 0.0, "another adapter: none of v1's blocks serve it");
}
