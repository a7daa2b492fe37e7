//! A pod that lists an adapter it does not serve (a stale `/v1/models`, a broken exporter, a
//! lying pod), idle and reporting the adapter running, so it is every request's first choice,
//! and answers each with vLLM's "model does not exist" 404. Envoy does not retry a 404: each
//! request sent there fails. The filter believes the 404 over the listing and sends the
//! adapter's requests to the simulator pod that serves it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use e2e::{Cluster, REQUEST_TIMEOUT};

/// Idle, with adapter `x` running (resident: ranked before a pod that must load it).
const LYING_METRICS: &str = "vllm:num_requests_running{model_name=\"sim-model\",engine=\"0\"} 0\n\
vllm:num_requests_waiting{model_name=\"sim-model\",engine=\"0\"} 0\n\
vllm:kv_cache_usage_perc{model_name=\"sim-model\",engine=\"0\"} 0\n\
vllm:lora_requests_info{max_lora=\"4\",running_lora_adapters=\"x\",waiting_lora_adapters=\"\"} 1700000000\n";

const LYING_MODELS: &str = r#"{"object":"list","data":[{"id":"sim-model","object":"model","parent":null},{"id":"x","object":"model","parent":"sim-model"}]}"#;

/// vLLM's answer (`OpenAIServing._check_model`).
const NOT_FOUND: &str =
    r#"{"error":{"message":"The model `x` does not exist.","type":"NotFoundError","param":null,"code":404}}"#;

/// A completion of its base model.
const COMPLETION: &str = r#"{"id":"cmpl-1","object":"text_completion","model":"sim-model","choices":[{"index":0,"text":"ok","finish_reason":"length"}]}"#;

#[test]
fn a_pod_that_lists_an_adapter_it_does_not_serve_stops_drawing_its_requests() {
    let refused = Arc::new(AtomicU64::new(0));
    let counter = refused.clone();
    // Its base model it serves (the plugin's health check below asks for it).
    let liar = e2e::fake_pod::start_listing(LYING_METRICS, LYING_MODELS, move |request, _| {
        if !request.asks_for(r#""model":"x""#) {
            return Some(e2e::fake_pod::whole("application/json", COMPLETION));
        }
        counter.fetch_add(1, Ordering::SeqCst);
        let head = "HTTP/1.1 404 Not Found\r\ncontent-type: application/json";
        Some(format!("{head}\r\ncontent-length: {}\r\n\r\n{NOT_FOUND}", NOT_FOUND.len()))
    });
    let sim = ["--time-scale", "0", "--lora-adapters", "x", "--max-loras", "4"];
    let cluster = Cluster::start("disowned-models", 1, &sim, |options| e2e::add_to_pool(options, &liar));
    assert!(cluster.envoy.wait_for_healthy_pods(2, Duration::from_secs(15)), "{}", cluster.envoy.log_tail(20));
    let mut statuses = Vec::new();
    for i in 0..30 {
        let body = serde_json::json!({"model": "x", "prompt": format!("request {i}"), "max_tokens": 4});
        let reply =
            launcher::http::post(&cluster.envoy.url("/v1/completions"), &[], &body.to_string(), REQUEST_TIMEOUT);
        statuses.push(reply.map_or(0, |r| r.status));
    }
    let refused = refused.load(Ordering::SeqCst);
    let disowned = cluster.envoy.stat("wasm_epp_models_disowned").unwrap_or(0.0);
    println!("30 requests for x: the lying pod answered {refused} of them 404; disowned {disowned} times");
    assert!(refused >= 1, "the lying pod was never chosen: {statuses:?}");
    // Each worker learns it once (the request that found it gets the 404).
    assert!(refused <= 4, "the lying pod kept drawing requests: {refused} ({statuses:?})");
    assert_eq!(disowned, refused as f64, "{}", cluster.envoy.log_tail(30));
    assert!(statuses[20..].iter().all(|s| *s == 200), "404s at the end: {statuses:?}");
    assert!(cluster.envoy.log().contains("answers that it does not exist"), "{}", cluster.envoy.log_tail(30));
    // The health check may land on the lying pod, which writes no `x-served-by`: asked of
    // the simulator's model alone, as the log's Wasm failures are.
    let log = cluster.envoy.log();
    assert!(!log.contains("panicked") && !log.contains("wasm trap"), "{}", cluster.envoy.log_tail(40));
    assert_eq!(cluster.complete("still alive?").status, 200);
}
