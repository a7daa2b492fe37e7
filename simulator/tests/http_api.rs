//! The OpenAI surface end to end over real sockets: JSON, streams, errors, and side endpoints.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

mod common;

use bytes::Bytes;
use common::{completion_body, start_pod, stats};
use serde_json::json;
use vllm_sim::client::{sum_metric, Method};
use vllm_sim::{text_of_tokens, SimClient};

#[tokio::test]
async fn json_completion_has_openai_shape_usage_and_served_by() {
    let pod = start_pod(|config| config.prompt_tokens_details = true).await;
    let client = SimClient::new();
    let url = format!("{}/v1/completions", pod.base_url());
    let prompt = text_of_tokens(40, 1);
    let body = Bytes::from(completion_body(&prompt, 5).to_string());
    let first = client.request(Method::POST, &url, body.clone()).await.unwrap();
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.served_by(), Some(pod.addr.to_string().as_str()));
    let answer = first.json();
    assert_eq!(answer["object"], "text_completion");
    assert_eq!(answer["choices"][0]["finish_reason"], "length");
    assert_eq!(
        answer["usage"],
        json!({"prompt_tokens": 40, "completion_tokens": 5, "total_tokens": 45, "prompt_tokens_details": null}),
        "no hit: vLLM leaves the details null"
    );
    let second = client.request(Method::POST, &url, body).await.unwrap().json();
    assert_eq!(second["usage"]["prompt_tokens_details"]["cached_tokens"], 32, "two full blocks, last token recomputed");
    assert_eq!(second["choices"][0]["text"], answer["choices"][0]["text"], "same prompt, same words");

    let batch = json!({"prompt": [text_of_tokens(3, 2), text_of_tokens(4, 3)], "max_tokens": 2});
    let batch = client.post_json(&url, &batch).await.unwrap().1;
    assert_eq!(batch["choices"].as_array().unwrap().len(), 2);
    assert_eq!(batch["choices"][1]["index"], 1);
    assert_eq!(batch["usage"]["prompt_tokens"], 7);
    let id_batch = client.post_json(&url, &json!({"prompt": [[1, 2], [3, 4, 5]], "max_tokens": 1})).await.unwrap().1;
    assert_eq!(id_batch["usage"]["prompt_tokens"], 5);
    pod.shutdown().await;
}

/// vLLM reports cached tokens only with `--enable-prompt-tokens-details` (off by default), and
/// for several prompts one prompt's count, not the sum: the last prompt's in a JSON answer
/// (serving_completion.py 587-590), the first output's in a stream (346-348, 471).
#[tokio::test]
async fn cached_tokens_need_the_flag_and_a_batch_reports_one_prompt() {
    let client = SimClient::new();
    let plain = start_pod(|_| {}).await;
    let url = format!("{}/v1/completions", plain.base_url());
    let body = completion_body(&text_of_tokens(40, 1), 2);
    client.post_json(&url, &body).await.unwrap();
    let again = client.post_json(&url, &body).await.unwrap().1;
    assert_eq!(again["usage"]["prompt_tokens_details"], json!(null), "off by default, as in vLLM");
    plain.shutdown().await;

    let pod = start_pod(|config| config.prompt_tokens_details = true).await;
    let url = format!("{}/v1/completions", pod.base_url());
    let (short, long) = (text_of_tokens(40, 1), text_of_tokens(80, 2));
    client.post_json(&url, &json!({"prompt": [short.clone(), long.clone()], "max_tokens": 1})).await.unwrap();
    // Both cached now: 32 and 64 tokens (full blocks, the last token recomputed).
    let batch =
        client.post_json(&url, &json!({"prompt": [short.clone(), long.clone()], "max_tokens": 1})).await.unwrap().1;
    assert_eq!(batch["usage"]["prompt_tokens_details"]["cached_tokens"], 64, "the last prompt's, not 96");
    let reversed = client.post_json(&url, &json!({"prompt": [long, short], "max_tokens": 1})).await.unwrap().1;
    assert_eq!(reversed["usage"]["prompt_tokens_details"]["cached_tokens"], 32);
    let streamed = json!({"prompt": [text_of_tokens(40, 1)], "max_tokens": 1, "stream": true, "stream_options": {}});
    let raw = client.request(Method::POST, &url, Bytes::from(streamed.to_string())).await.unwrap();
    let usage_event = raw.body.split("\n\n").find(|event| event.contains("\"choices\":[]")).unwrap();
    assert!(usage_event.contains("\"prompt_tokens_details\":{\"cached_tokens\":32}"), "{usage_event}");
    pod.shutdown().await;
}

#[tokio::test]
async fn streamed_chat_paces_tokens_and_ends_with_done() {
    let pod = start_pod(|config| config.latency.time_scale = 0.05).await;
    let client = SimClient::new();
    let url = format!("{}/v1/chat/completions", pod.base_url());
    let body = json!({"model": "sim-model", "max_completion_tokens": 8, "stream": true,
                      "stream_options": {"include_usage": true},
                      "messages": [{"role": "user", "content": "hello there"}]});
    let raw = client.request(Method::POST, &url, Bytes::from(body.to_string())).await.unwrap();
    assert_eq!(raw.status, 200);
    assert!(raw.headers["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    assert_eq!(raw.served_by(), Some(pod.addr.to_string().as_str()));
    let events: Vec<&str> = raw.body.split("\n\n").filter(|event| !event.is_empty()).collect();
    assert_eq!(*events.last().unwrap(), "data: [DONE]");
    assert!(events[0].contains("\"role\":\"assistant\""));
    assert!(events[1].contains("chat.completion.chunk"));
    assert!(events[events.len() - 2].contains("\"usage\""));

    let timing = client.stream_completion(&url, &body).await.unwrap();
    assert_eq!(timing.output_tokens, 8);
    assert_eq!(timing.served_by.as_deref(), Some(pod.addr.to_string().as_str()));
    // TTFT is at least the scaled API overhead plus a step; decode adds 7 more steps.
    assert!(timing.ttft.as_secs_f64() >= 0.05 * 0.043, "{timing:?}");
    assert!(timing.e2e > timing.ttft);
    pod.shutdown().await;
}

#[tokio::test]
async fn errors_use_openai_shape_and_vllm_status_codes() {
    let pod = start_pod(|config| config.max_model_len = 100).await;
    let client = SimClient::new();
    let base = pod.base_url();
    let post = |path: &str, body: &str| {
        let url = format!("{base}{path}");
        let client = client.clone();
        let body = Bytes::from(body.to_owned());
        async move { client.request(Method::POST, &url, body).await.unwrap() }
    };
    let unknown_model = post("/v1/completions", r#"{"model": "nope", "prompt": "x"}"#).await;
    assert_eq!(unknown_model.status, 404);
    assert_eq!(unknown_model.json()["error"]["type"], "NotFoundError");
    assert!(unknown_model.served_by().is_some(), "errors carry x-served-by too");
    assert_eq!(post("/v1/completions", "{not json").await.status, 400);
    assert_eq!(post("/v1/chat/completions", r#"{"model": "sim-model"}"#).await.status, 400);
    let too_long = post("/v1/completions", &json!({"prompt": text_of_tokens(100, 1)}).to_string()).await;
    assert_eq!(too_long.status, 400);
    assert_eq!(
        too_long.json()["error"]["message"],
        "This model's maximum context length is 100 tokens. However, your request has 100 input tokens. \
         Please reduce the length of the input messages.",
        "vLLM v0.11's wording (serving_engine.py 674-679)"
    );
    let too_many = post("/v1/completions", &json!({"prompt": "a b", "max_tokens": 99}).to_string()).await;
    assert_eq!(
        too_many.json()["error"],
        json!({"message": "'max_tokens' or 'max_completion_tokens' is too large: 99. This model's maximum context \
                           length is 100 tokens and your request has 2 input tokens (99 > 100 - 2).",
               "type": "BadRequestError", "param": null, "code": 400})
    );
    assert_eq!(post("/nowhere", "").await.status, 404);
    let wrong_method = client.request(Method::GET, &format!("{base}/v1/completions"), Bytes::new()).await.unwrap();
    assert_eq!(wrong_method.status, 405);
    assert_eq!(wrong_method.json()["error"]["code"], 405);
    let counts = stats(&client, &pod).await;
    assert_eq!(counts["endpoints"]["/v1/completions"]["failed"], 5);
    pod.shutdown().await;
}

#[tokio::test]
async fn side_endpoints_models_health_tokenize_render_and_lora() {
    let pod = start_pod(|config| {
        config.lora_adapters = vec!["a".to_owned()];
        config.lora_enabled = true;
    })
    .await;
    let client = SimClient::new();
    let base = pod.base_url();
    let health = client.request(Method::GET, &format!("{base}/health"), Bytes::new()).await.unwrap();
    assert_eq!((health.status, health.body.as_str()), (200, ""));
    let tokenized = client.post_json(&format!("{base}/tokenize"), &json!({"prompt": "one two"})).await.unwrap().1;
    assert_eq!(tokenized["count"], 2);
    assert_eq!(tokenized["tokens"], json!(vllm_sim::tokenize("one two")));
    let rendered = client
        .post_json(
            &format!("{base}/v1/chat/completions/render"),
            &json!({"messages": [{"role": "user", "content": "hi"}]}),
        )
        .await
        .unwrap()
        .1;
    assert_eq!(rendered["prompt"], "<|user|>\nhi\n<|assistant|>\n");
    assert_eq!(rendered["token_ids"], json!(vllm_sim::tokenize("<|user|>\nhi\n<|assistant|>\n")));
    let rendered =
        client.post_json(&format!("{base}/v1/completions/render"), &json!({"prompt": [[5, 6], [7]]})).await.unwrap().1;
    assert_eq!(rendered[0]["token_ids"], json!([5, 6]));
    assert_eq!(rendered[1]["prompt"], json!(null));

    let load = json!({"lora_name": "b", "lora_path": "/tmp/b"});
    assert_eq!(client.post_json(&format!("{base}/v1/load_lora_adapter"), &load).await.unwrap().0, 200);
    assert_eq!(client.post_json(&format!("{base}/v1/load_lora_adapter"), &load).await.unwrap().0, 400);
    let models = client.get_text(&format!("{base}/v1/models")).await.unwrap().1;
    let models: serde_json::Value = serde_json::from_str(&models).unwrap();
    let ids: Vec<&str> = models["data"].as_array().unwrap().iter().map(|model| model["id"].as_str().unwrap()).collect();
    assert_eq!(ids, vec!["sim-model", "a", "b"]);
    assert_eq!(models["data"][2]["parent"], "sim-model");
    let on_adapter = json!({"model": "b", "prompt": "x y", "max_tokens": 2});
    assert_eq!(client.post_json(&format!("{base}/v1/completions"), &on_adapter).await.unwrap().0, 200);
    let unload = json!({"lora_name": "b"});
    assert_eq!(client.post_json(&format!("{base}/v1/unload_lora_adapter"), &unload).await.unwrap().0, 200);
    assert_eq!(client.post_json(&format!("{base}/v1/completions"), &on_adapter).await.unwrap().0, 404);
    let metrics = client.get_text(&format!("{base}/metrics")).await.unwrap().1;
    assert!(metrics.contains("vllm:lora_requests_info{max_lora=\"1\""));
    assert_eq!(sum_metric(&metrics, "vllm:request_success_total"), 1.0);
    pod.shutdown().await;
}

#[tokio::test]
async fn a_stored_response_is_retrieved_by_id_on_its_pod_only() {
    let pod = start_pod(|config| config.responses_store = true).await;
    let client = SimClient::new();
    let base = pod.base_url();
    for stream in [false, true] {
        let body = json!({"model": "sim-model", "input": "hello", "max_output_tokens": 3, "stream": stream});
        let raw = client.request(Method::POST, &format!("{base}/v1/responses"), Bytes::from(body.to_string())).await;
        let raw = raw.unwrap();
        assert_eq!(raw.status, 200, "{}", raw.body);
        let id = raw.body.split("\"id\":\"").nth(1).and_then(|rest| rest.split('"').next()).unwrap().to_owned();
        let stored = client.request(Method::GET, &format!("{base}/v1/responses/{id}"), Bytes::new()).await.unwrap();
        assert_eq!(stored.status, 200, "{}", stored.body);
        let stored = stored.json();
        assert_eq!((stored["id"].as_str(), stored["object"].as_str()), (Some(id.as_str()), Some("response")));
        assert_eq!(stored["usage"]["output_tokens"], 3, "stream {stream}: {stored}");
    }
    let unknown = client.request(Method::GET, &format!("{base}/v1/responses/resp_nope"), Bytes::new()).await.unwrap();
    assert_eq!(unknown.status, 404, "{}", unknown.body);
    assert_eq!(stats(&client, &pod).await["responses_not_found"], 1);
    pod.shutdown().await;

    let plain = start_pod(|_| {}).await;
    let url = format!("{}/v1/responses/resp_1", plain.base_url());
    let refused = client.request(Method::GET, &url, Bytes::new()).await.unwrap();
    assert_eq!(refused.status, 400, "no store, no retrieval: {}", refused.body);
    plain.shutdown().await;
}

#[tokio::test]
async fn the_messages_api_answers_whole_and_streamed_in_anthropic_shapes() {
    let pod = start_pod(|_| {}).await;
    let client = SimClient::new();
    let url = format!("{}/v1/messages", pod.base_url());
    let body = |stream: bool| {
        json!({"model": "sim-model", "max_tokens": 4, "stream": stream, "system": "Be brief.",
               "messages": [{"role": "user", "content": [{"type": "text", "text": "hello there"}]}]})
    };
    let whole = client.post_json(&url, &body(false)).await.unwrap().1;
    assert_eq!((whole["type"].as_str(), whole["role"].as_str()), (Some("message"), Some("assistant")));
    assert_eq!(whole["stop_reason"], "max_tokens");
    assert_eq!(whole["usage"]["output_tokens"], 4);
    let input_tokens = whole["usage"]["input_tokens"].as_u64().unwrap();
    let raw = client.request(Method::POST, &url, Bytes::from(body(true).to_string())).await.unwrap();
    assert_eq!(raw.status, 200, "{}", raw.body);
    assert!(raw.headers["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    assert!(raw.body.starts_with("event: message_start\n"), "{}", raw.body);
    assert_eq!(raw.body.matches("event: content_block_delta").count(), 4);
    assert!(raw.body.contains(&format!("\"usage\":{{\"input_tokens\":{input_tokens},\"output_tokens\":4}}")));
    assert!(raw.body.ends_with("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\ndata: [DONE]\n\n"));
    let refused = client.post_json(&url, &json!({"model": "sim-model", "messages": []})).await.unwrap();
    assert_eq!(refused.0, 400);
    pod.shutdown().await;
}

/// `cache_salt` (completions and chat) keys the first block as vLLM does: requests share
/// cached blocks only under the same salt.
#[tokio::test]
async fn a_cache_salt_keeps_tenants_apart() {
    let pod = start_pod(|config| config.prompt_tokens_details = true).await;
    let client = SimClient::new();
    let url = format!("{}/v1/completions", pod.base_url());
    let prompt = text_of_tokens(40, 9);
    let salted = |salt: &str| json!({"prompt": prompt, "max_tokens": 1, "cache_salt": salt});
    client.post_json(&url, &salted("a")).await.unwrap();
    let cached = |answer: serde_json::Value| answer["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64();
    assert_eq!(cached(client.post_json(&url, &salted("b")).await.unwrap().1), None, "another salt");
    assert_eq!(cached(client.post_json(&url, &completion_body(&prompt, 1)).await.unwrap().1), None, "no salt");
    assert_eq!(cached(client.post_json(&url, &salted("a")).await.unwrap().1), Some(32), "the same salt");
    let (status, _) = client.post_json(&url, &salted("")).await.unwrap();
    assert_eq!(status, 400, "an empty salt is refused, as vLLM");
    pod.shutdown().await;
}

/// A `multipart/form-data` upload with `parts` (name, content), as clients send one.
fn audio_form(boundary: &str, parts: &[(&str, &[u8])]) -> Bytes {
    let mut body = Vec::new();
    for (name, content) in parts {
        let file = if *name == "file" { "; filename=\"a.wav\"\r\nContent-Type: audio/wav" } else { "" };
        body.extend(format!("--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"{file}\r\n\r\n").bytes());
        body.extend_from_slice(content);
        body.extend(b"\r\n");
    }
    body.extend(format!("--{boundary}--\r\n").bytes());
    Bytes::from(body)
}

#[tokio::test]
async fn audio_uploads_are_checked_for_their_file_and_model_as_vllm_checks_them() {
    let pod = start_pod(|config| config.model = "whisper".into()).await;
    let client = SimClient::new();
    let content_type = [("content-type", "multipart/form-data; boundary=xyz")];
    for path in ["/v1/audio/transcriptions", "/v1/audio/translations"] {
        let url = format!("{}{path}", pod.base_url());
        let send = |parts: &[(&str, &[u8])]| {
            client.request_with_headers(Method::POST, &url, &content_type, audio_form("xyz", parts))
        };
        let answered = send(&[("file", b"RIFF0000WAVE"), ("model", b"whisper")]).await.unwrap();
        assert_eq!(answered.status, 200, "{}", answered.body);
        assert!(answered.json()["text"].as_str().unwrap().contains("12 bytes"), "{}", answered.body);
        assert_eq!(send(&[("file", b"RIFF"), ("model", b"llama")]).await.unwrap().status, 404);
        assert_eq!(send(&[("model", b"whisper")]).await.unwrap().status, 400, "no file");
        let not_a_form = client.request_with_headers(Method::POST, &url, &[], Bytes::from_static(b"{}")).await.unwrap();
        assert_eq!(not_a_form.status, 400);
    }
    assert_eq!(stats(&client, &pod).await["model_not_found"], 2);
}

#[tokio::test]
async fn a_transcription_asked_to_stream_streams_and_fails_in_its_stream_as_vllm_does() {
    let pod = start_pod(|config| config.model = "whisper".into()).await;
    let client = SimClient::new();
    let url = format!("{}/v1/audio/transcriptions", pod.base_url());
    let content_type = [("content-type", "multipart/form-data; boundary=xyz")];
    let form = audio_form("xyz", &[("file", b"RIFF0000WAVE"), ("model", b"whisper"), ("stream", b"true")]);
    let send = || client.request_with_headers(Method::POST, &url, &content_type, form.clone());
    let streamed = send().await.unwrap();
    assert_eq!(streamed.status, 200, "{}", streamed.body);
    assert!(streamed.headers["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    assert!(streamed.body.starts_with("data: {") && streamed.body.contains("\"transcription.chunk\""));
    assert!(streamed.body.contains("12 bytes") && streamed.body.ends_with("data: [DONE]\n\n"), "{}", streamed.body);
    // Injected failures: the stream's 200, then its error as the first event, then [DONE].
    let faults = json!({"fail_fraction": 1.0, "fail_status": 500, "fail_in_stream": true});
    client.post_json(&format!("{}/sim/faults", pod.base_url()), &faults).await.unwrap();
    let failed = send().await.unwrap();
    assert_eq!(failed.status, 200, "{}", failed.body);
    assert!(failed.body.starts_with("data: {\"error\": {") || failed.body.starts_with("data: {\"error\":{"));
    assert!(failed.body.contains("\"code\":500") && failed.body.ends_with("data: [DONE]\n\n"), "{}", failed.body);
    // Not in the stream: the failure's status.
    client.post_json(&format!("{}/sim/faults", pod.base_url()), &json!({"fail_in_stream": false})).await.unwrap();
    assert_eq!(send().await.unwrap().status, 500);
}
