//! `n` > 1 served as vLLM serves it: `n` choices per prompt numbered `p*n + k`, streamed chunks
//! carrying each choice's index and finish, `usage` counting each prompt once and every
//! choice's tokens, and the engine running one request per sample (vLLM V1's parallel
//! sampling), the siblings finding the first sample's prompt in the prefix cache.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

mod common;

use std::collections::BTreeMap;

use bytes::Bytes;
use common::{start_pod, stats};
use serde_json::{json, Value};
use vllm_sim::client::{sum_metric, Method};
use vllm_sim::{text_of_tokens, SimClient};

/// The `data:` events of a stream, `[DONE]` left out.
fn chunks(body: &str) -> Vec<Value> {
    body.split("\n\n")
        .filter_map(|event| event.strip_prefix("data: "))
        .filter(|data| *data != "[DONE]")
        .map(|data| serde_json::from_str(data).unwrap())
        .collect()
}

/// Each choice's streamed text and finish reasons, by index.
fn streamed_choices(chunks: &[Value], field: &str) -> BTreeMap<u64, (String, Vec<String>)> {
    let mut choices: BTreeMap<u64, (String, Vec<String>)> = BTreeMap::new();
    for chunk in chunks {
        for choice in chunk["choices"].as_array().unwrap() {
            let entry = choices.entry(choice["index"].as_u64().unwrap()).or_default();
            let text = if field == "text" { &choice["text"] } else { &choice["delta"]["content"] };
            entry.0.push_str(text.as_str().unwrap_or(""));
            if let Some(reason) = choice["finish_reason"].as_str() {
                entry.1.push(reason.to_owned());
            }
        }
    }
    choices
}

#[tokio::test]
async fn chat_with_n_answers_n_choices_whole_and_streamed() {
    let pod = start_pod(|config| config.prompt_tokens_details = true).await;
    let client = SimClient::new();
    let url = format!("{}/v1/chat/completions", pod.base_url());
    let content = text_of_tokens(60, 7);
    let body = |n: usize, stream: bool| {
        let mut body = json!({"model": "sim-model", "max_completion_tokens": 4, "n": n,
                              "messages": [{"role": "user", "content": content}]});
        if stream {
            body["stream"] = json!(true);
            body["stream_options"] = json!({"include_usage": true});
        }
        body
    };
    let (status, one) = client.post_json(&url, &body(1, false)).await.unwrap();
    assert_eq!(status, 200, "{one}");
    let prompt_tokens = one["usage"]["prompt_tokens"].as_u64().unwrap();

    let (status, whole) = client.post_json(&url, &body(3, false)).await.unwrap();
    assert_eq!(status, 200, "{whole}");
    let choices = whole["choices"].as_array().unwrap();
    let indices: Vec<u64> = choices.iter().map(|choice| choice["index"].as_u64().unwrap()).collect();
    assert_eq!(indices, [0, 1, 2]);
    let texts: Vec<&str> = choices.iter().map(|choice| choice["message"]["content"].as_str().unwrap()).collect();
    assert_eq!(texts[0], one["choices"][0]["message"]["content"].as_str().unwrap(), "the first sample as n = 1");
    assert!(texts[0] != texts[1] && texts[1] != texts[2] && texts[0] != texts[2], "samples differ: {texts:?}");
    assert!(choices.iter().all(|choice| choice["finish_reason"] == "length"));
    assert_eq!(whole["usage"]["prompt_tokens"], prompt_tokens, "the prompt counted once");
    assert_eq!(whole["usage"]["completion_tokens"], 12, "every choice's tokens");
    assert_eq!(whole["usage"]["total_tokens"], prompt_tokens + 12);

    let raw = client.request(Method::POST, &url, Bytes::from(body(3, true).to_string())).await.unwrap();
    assert_eq!(raw.status, 200, "{}", raw.body);
    assert!(raw.body.ends_with("data: [DONE]\n\n"));
    let chunks = chunks(&raw.body);
    // vLLM sends every choice's role chunk first (serving_chat.py, first_iteration).
    for (index, chunk) in chunks.iter().take(3).enumerate() {
        assert_eq!(chunk["choices"][0]["index"], index, "{chunk}");
        assert_eq!(chunk["choices"][0]["delta"]["role"], "assistant", "{chunk}");
    }
    let streamed = streamed_choices(&chunks, "delta");
    assert_eq!(streamed.keys().copied().collect::<Vec<_>>(), [0, 1, 2]);
    for (index, (text, finishes)) in &streamed {
        assert_eq!(text, texts[*index as usize], "choice {index} streams what the whole answer said");
        assert_eq!(finishes, &["length"], "one finish per choice");
    }
    let usage = &chunks.last().unwrap()["usage"];
    assert_eq!(chunks.last().unwrap()["choices"], json!([]));
    assert_eq!((usage["prompt_tokens"].as_u64(), usage["completion_tokens"].as_u64()), (Some(prompt_tokens), Some(12)));
    pod.shutdown().await;
}

#[tokio::test]
async fn completions_with_n_number_choices_per_prompt_and_stream_their_indices() {
    let pod = start_pod(|_| {}).await;
    let client = SimClient::new();
    let url = format!("{}/v1/completions", pod.base_url());
    let (first, second) = (text_of_tokens(20, 1), text_of_tokens(36, 2));
    let alone = |prompt: &str| json!({"prompt": prompt, "max_tokens": 3});
    let first_alone = client.post_json(&url, &alone(&first)).await.unwrap().1;
    let second_alone = client.post_json(&url, &alone(&second)).await.unwrap().1;

    let batch = json!({"prompt": [first, second], "max_tokens": 3, "n": 2});
    let (status, whole) = client.post_json(&url, &batch).await.unwrap();
    assert_eq!(status, 200, "{whole}");
    let choices = whole["choices"].as_array().unwrap();
    assert_eq!(choices.iter().map(|choice| choice["index"].as_u64().unwrap()).collect::<Vec<_>>(), [0, 1, 2, 3]);
    // Choices p*n .. p*n + n - 1 are prompt p's samples (serving_completion.py).
    assert_eq!(choices[0]["text"], first_alone["choices"][0]["text"]);
    assert_eq!(choices[2]["text"], second_alone["choices"][0]["text"]);
    assert_ne!(choices[0]["text"], choices[1]["text"]);
    assert_eq!(whole["usage"]["prompt_tokens"], 56, "each prompt once");
    assert_eq!(whole["usage"]["completion_tokens"], 12);

    let mut streamed = batch.clone();
    streamed["stream"] = json!(true);
    streamed["stream_options"] = json!({"include_usage": true, "continuous_usage_stats": true});
    let raw = client.request(Method::POST, &url, Bytes::from(streamed.to_string())).await.unwrap();
    assert_eq!(raw.status, 200, "{}", raw.body);
    let chunks = chunks(&raw.body);
    let by_index = streamed_choices(&chunks, "text");
    assert_eq!(by_index.keys().copied().collect::<Vec<_>>(), [0, 1, 2, 3]);
    for (index, (text, finishes)) in &by_index {
        assert_eq!(text, choices[*index as usize]["text"].as_str().unwrap());
        assert_eq!(finishes, &["length"]);
    }
    // Continuous usage: the choice's own prompt and tokens so far.
    let last_of_choice_three = chunks.iter().rev().find(|chunk| chunk["choices"][0]["index"] == 3).unwrap();
    assert_eq!(last_of_choice_three["usage"]["prompt_tokens"], 36);
    assert_eq!(last_of_choice_three["usage"]["completion_tokens"], 3);
    let usage = &chunks.last().unwrap()["usage"];
    assert_eq!((usage["prompt_tokens"].as_u64(), usage["completion_tokens"].as_u64()), (Some(56), Some(12)));
    pod.shutdown().await;
}

/// vLLM V1 runs `n` child requests: each is a request to the scheduler and the metrics
/// (`vllm:request_success_total`, prompt and generation token counters, the prefix cache's
/// queries), and the siblings find the first one's prompt blocks in the cache.
#[tokio::test]
async fn the_engine_runs_one_request_per_sample_sharing_the_prompt() {
    let pod = start_pod(|_| {}).await;
    let client = SimClient::new();
    let url = format!("{}/v1/completions", pod.base_url());
    let body = json!({"prompt": text_of_tokens(40, 3), "max_tokens": 5, "n": 3});
    let (status, answer) = client.post_json(&url, &body).await.unwrap();
    assert_eq!(status, 200, "{answer}");
    let counts = stats(&client, &pod).await;
    assert_eq!(counts["requests_finished"]["length"], 3);
    assert_eq!(counts["prefix_cache_queries"], 120, "three requests of 40 tokens");
    assert_eq!(counts["prefix_cache_hits"], 64, "the two siblings hit two full blocks each");
    assert_eq!(counts["prompt_tokens"], 120);
    assert_eq!(counts["generation_tokens"], 15);
    // Admitted together: one step computes the prompt once and the siblings' last block.
    assert_eq!(counts["steps"]["max_batched_tokens"], 40 + 8 + 8, "{}", counts["steps"]);
    let metrics = client.get_text(&format!("{}/metrics", pod.base_url())).await.unwrap().1;
    assert_eq!(sum_metric(&metrics, "vllm:request_success_total"), 3.0);
    assert_eq!(sum_metric(&metrics, "vllm:prompt_tokens_total"), 120.0);
    assert_eq!(sum_metric(&metrics, "vllm:generation_tokens_total"), 15.0);
    assert_eq!(sum_metric(&metrics, "vllm:time_to_first_token_seconds_count"), 3.0);
    pod.shutdown().await;
}
