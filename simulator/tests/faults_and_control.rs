//! Faults, restart, overload, disconnects and /metrics, end to end over real sockets.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::{completion_body, start_pod, stats};
use serde_json::json;
use vllm_sim::client::{sum_metric, Method};
use vllm_sim::{text_of_tokens, SimClient};

#[tokio::test]
async fn metrics_count_prefix_hits_and_faults_make_them_lie() {
    let pod = start_pod(|_| {}).await;
    let client = SimClient::new();
    let base = pod.base_url();
    let prompt = text_of_tokens(100, 7);
    for _ in 0..2 {
        let (status, _) =
            client.post_json(&format!("{base}/v1/completions"), &completion_body(&prompt, 3)).await.unwrap();
        assert_eq!(status, 200);
    }
    let metrics = client.request(Method::GET, &format!("{base}/metrics"), Bytes::new()).await.unwrap();
    assert_eq!(metrics.status, 200);
    assert!(metrics.headers["content-type"].to_str().unwrap().starts_with("text/plain; version=0.0.4"));
    assert!(metrics.served_by().is_some());
    assert_eq!(sum_metric(&metrics.body, "vllm:prefix_cache_queries_total"), 200.0);
    assert_eq!(sum_metric(&metrics.body, "vllm:prefix_cache_hits_total"), 96.0);
    assert_eq!(sum_metric(&metrics.body, "vllm:generation_tokens_total"), 6.0);
    assert_eq!(sum_metric(&metrics.body, "vllm:time_to_first_token_seconds_count"), 2.0);

    let faults = json!({"report": {"waiting": 42, "kv_usage": 0.9}, "metrics_garbage": "negative"});
    let (status, current) = client.post_json(&format!("{base}/sim/faults"), &faults).await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(current["report"]["waiting"], 42.0);
    let lying = client.get_text(&format!("{base}/metrics")).await.unwrap().1;
    assert!(sum_metric(&lying, "vllm:num_requests_waiting") < 0.0, "negative mode applies after the override");
    client.post_json(&format!("{base}/sim/faults"), &json!({"metrics_garbage": false})).await.unwrap();
    let lying = client.get_text(&format!("{base}/metrics")).await.unwrap().1;
    assert_eq!(sum_metric(&lying, "vllm:num_requests_waiting"), 42.0);
    assert_eq!(sum_metric(&lying, "vllm:kv_cache_usage_perc"), 0.9);
    client.post_json(&format!("{base}/sim/faults"), &json!({"metrics_fail": true})).await.unwrap();
    assert_eq!(client.get_text(&format!("{base}/metrics")).await.unwrap().0, 500);
    let cleared = client.request(Method::DELETE, &format!("{base}/sim/faults"), Bytes::new()).await.unwrap();
    assert_eq!(cleared.json()["metrics_fail"], false);
    assert_eq!(client.get_text(&format!("{base}/metrics")).await.unwrap().0, 200);
    let typo = client.post_json(&format!("{base}/sim/faults"), &json!({"hnag": true})).await.unwrap();
    assert_eq!(typo.0, 400);
    pod.shutdown().await;
}

#[tokio::test]
async fn failing_and_hanging_pods() {
    let pod = start_pod(|_| {}).await;
    let client = SimClient::new();
    let base = pod.base_url();
    let url = format!("{base}/v1/completions");
    client.post_json(&format!("{base}/sim/faults"), &json!({"fail_fraction": 1.0, "fail_status": 503})).await.unwrap();
    let failed = client.request(Method::POST, &url, Bytes::from(completion_body("a b", 2).to_string())).await.unwrap();
    assert_eq!(failed.status, 503);
    assert_eq!(failed.json()["error"]["code"], 503);
    assert!(failed.served_by().is_some());

    // As vLLM answers a stream whose generation fails: 200, the error event, then [DONE].
    client.post_json(&format!("{base}/sim/faults"), &json!({"fail_in_stream": true})).await.unwrap();
    let mut streamed = completion_body("a b", 2);
    streamed["stream"] = json!(true);
    let failed = client.request(Method::POST, &url, Bytes::from(streamed.to_string())).await.unwrap();
    assert_eq!(failed.status, 200);
    assert!(failed.headers["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    let body = &failed.body;
    assert!(body.starts_with(r#"data: {"error":"#), "{body}");
    assert!(body.contains(r#""code":503"#) && body.ends_with("data: [DONE]\n\n"), "{body}");
    let whole = client.request(Method::POST, &url, Bytes::from(completion_body("a b", 2).to_string())).await.unwrap();
    assert_eq!(whole.status, 503, "a whole answer keeps its status");
    // A chat stream of two choices: both role chunks, then the error (vLLM's order).
    let chat = json!({"messages": [{"role": "user", "content": "a b"}], "max_tokens": 2, "n": 2, "stream": true});
    let chat_url = format!("{base}/v1/chat/completions");
    let failed = client.request(Method::POST, &chat_url, Bytes::from(chat.to_string())).await.unwrap();
    let events: Vec<&str> = failed.body.split("\n\n").filter(|event| !event.is_empty()).collect();
    assert_eq!(events.len(), 4, "{}", failed.body);
    assert!(events[0].contains(r#""role":"assistant""#) && events[1].contains(r#""index":1"#), "{}", failed.body);
    assert!(events[2].starts_with(r#"data: {"error":"#), "{}", failed.body);

    client.post_json(&format!("{base}/sim/faults"), &json!({"fail_fraction": 0.0, "hang": true})).await.unwrap();
    let hung = tokio::spawn({
        let (client, url) = (client.clone(), url.clone());
        async move { client.post_json(&url, &completion_body("a b", 2)).await }
    });
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(!hung.is_finished(), "a hung pod does not answer");
    client.request(Method::DELETE, &format!("{base}/sim/faults"), Bytes::new()).await.unwrap();
    let answered = tokio::time::timeout(Duration::from_secs(5), hung).await.unwrap().unwrap().unwrap();
    assert_eq!(answered.0, 200, "clearing the fault releases it");
    pod.shutdown().await;
}

#[tokio::test]
async fn restart_empties_cache_and_counters() {
    let pod = start_pod(|_| {}).await;
    let client = SimClient::new();
    let base = pod.base_url();
    let prompt = text_of_tokens(64, 3);
    client.post_json(&format!("{base}/v1/completions"), &completion_body(&prompt, 2)).await.unwrap();
    assert_eq!(stats(&client, &pod).await["prefix_cache_queries"], 64);
    let (status, _) = client.post_json(&format!("{base}/sim/restart"), &json!({})).await.unwrap();
    assert_eq!(status, 200);
    let after = stats(&client, &pod).await;
    assert_eq!((after["prefix_cache_queries"].as_u64(), after["restarts"].as_u64()), (Some(0), Some(1)));
    let again = client.post_json(&format!("{base}/v1/completions"), &completion_body(&prompt, 2)).await.unwrap().1;
    assert_eq!(again["usage"]["prompt_tokens_details"], json!(null), "the cache was emptied: no hit, no details");
    let metrics = client.get_text(&format!("{base}/metrics")).await.unwrap().1;
    assert_eq!(sum_metric(&metrics, "vllm:prompt_tokens_total"), 64.0);
    pod.shutdown().await;
}

#[tokio::test]
async fn a_full_waiting_queue_answers_503_and_disconnects_free_seats() {
    let pod = start_pod(|config| {
        config.max_num_seqs = 1;
        config.max_waiting = 1;
        config.latency.time_scale = 1.0;
    })
    .await;
    let client = SimClient::new();
    let base = pod.base_url();
    let url = format!("{base}/v1/completions");
    // A long request holds the only seat; a second waits; a third is refused.
    let holder = tokio::spawn({
        let (client, url) = (client.clone(), url.clone());
        async move { client.stream_completion(&url, &completion_body("a b c", 10_000)).await }
    });
    let waiter = tokio::spawn({
        let (client, url) = (client.clone(), url.clone());
        async move { client.post_json(&url, &completion_body("d e f", 1)).await }
    });
    let mut seen = json!(null);
    for _ in 0..100 {
        seen = stats(&client, &pod).await;
        if seen["running"] == 1 && seen["waiting"] == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!((seen["running"].as_u64(), seen["waiting"].as_u64()), (Some(1), Some(1)), "{seen}");
    let refused = client.request(Method::POST, &url, Bytes::from(completion_body("g", 1).to_string())).await.unwrap();
    assert_eq!(refused.status, 503);
    assert_eq!(refused.json()["error"]["type"], "ServiceUnavailableError");
    // The client of the long request goes away: vLLM aborts it, and the waiter runs.
    holder.abort();
    let served = tokio::time::timeout(Duration::from_secs(5), waiter).await.unwrap().unwrap().unwrap();
    assert_eq!(served.0, 200);
    let after = stats(&client, &pod).await;
    assert_eq!(after["client_aborts"], 1);
    assert_eq!(after["rejected_overload"], 1);
    // vLLM v0.11 counts a client abort as no finished request and observes none of its latencies.
    assert_eq!(after["requests_finished"]["abort"], 0);
    let metrics = client.get_text(&format!("{}/metrics", pod.base_url())).await.unwrap().1;
    let aborted =
        metrics.lines().find(|line| line.starts_with("vllm:request_success_total{") && line.contains("abort"));
    assert!(aborted.is_some_and(|line| line.ends_with(" 0") || line.ends_with(" 0.0")), "{aborted:?}");
    assert_eq!(sum_metric(&metrics, "vllm:e2e_request_latency_seconds_count"), 1.0, "the waiter only");
    assert_eq!(sum_metric(&metrics, "vllm:request_queue_time_seconds_count"), 1.0, "the waiter only");
    pod.shutdown().await;
}

#[tokio::test]
async fn max_waiting_zero_never_queues_but_still_admits() {
    let pod = start_pod(|config| {
        config.max_num_seqs = 1;
        config.max_waiting = 0;
    })
    .await;
    let first = pod.pod.submit(vec![1, 2, 3], None).expect("a free seat admits at once");
    let refused = pod.pod.submit(vec![4, 5, 6], None).unwrap_err();
    assert_eq!(refused.status, 503);
    assert_eq!(pod.pod.lock().engine.num_waiting(), 0, "the refused request left no trace");
    drop(first);
    pod.shutdown().await;
}
