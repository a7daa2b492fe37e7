//! Prefill/decode disaggregation over real sockets: a decode pod that receives
//! `x-prefiller-host-port` has the prefill pod prefill the prompt (one token, cached there),
//! then decodes with the transferred blocks as a prefix hit; a dead prefill pod means a local
//! prefill, counted, and the client still gets its answer.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

mod common;

use bytes::Bytes;
use common::{completion_body, start_pod, stats};
use vllm_sim::client::{sum_metric, Method};
use vllm_sim::pd::{PodRole, PREFILLER_HEADER};
use vllm_sim::{text_of_tokens, SimClient};

#[tokio::test]
async fn a_decode_pod_decodes_what_the_prefill_pod_prefilled() {
    let prefill = start_pod(|config| config.role = PodRole::Prefill).await;
    let decode = start_pod(|config| {
        config.role = PodRole::Decode;
        config.prompt_tokens_details = true;
    })
    .await;
    let client = SimClient::new();
    let prompt = text_of_tokens(1000, 7);
    let body = Bytes::from(completion_body(&prompt, 20).to_string());
    let prefiller = prefill.addr.to_string();
    let url = format!("{}/v1/completions", decode.base_url());
    let answer =
        client.request_with_headers(Method::POST, &url, &[(PREFILLER_HEADER, &prefiller)], body).await.unwrap();
    assert_eq!(answer.status, 200, "{}", answer.body);
    let usage = &answer.json()["usage"];
    assert_eq!(usage["completion_tokens"], 20);
    assert_eq!(usage["prompt_tokens_details"]["cached_tokens"], 992, "every full block came from the prefill pod");

    let prefill_stats = stats(&client, &prefill).await;
    assert_eq!(prefill_stats["prompt_tokens"], 1000, "the prefill pod computed the prompt");
    assert_eq!(prefill_stats["generation_tokens"], 1, "and generated one token");
    assert_eq!(prefill_stats["pd"]["role"], "prefill");
    let decode_stats = stats(&client, &decode).await;
    assert_eq!(decode_stats["pd"]["remote_prefills"], 1);
    assert_eq!(decode_stats["pd"]["transferred_tokens"], 992);
    assert_eq!(decode_stats["generation_tokens"], 20);

    let (_, metrics) = client.get_text(&format!("{}/metrics", decode.base_url())).await.unwrap();
    assert!(metrics.contains("vllm_sim:pd_role_info{role=\"decode\"} 1"), "{metrics}");
    assert_eq!(sum_metric(&metrics, "vllm_sim:pd_remote_prefills_total"), 1.0);
}

#[tokio::test]
async fn a_dead_prefill_pod_means_a_local_prefill_not_an_error() {
    let decode = start_pod(|config| config.role = PodRole::Decode).await;
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
    let client = SimClient::new();
    let body = Bytes::from(completion_body(&text_of_tokens(500, 3), 5).to_string());
    let url = format!("{}/v1/completions", decode.base_url());
    for prefiller in [dead.as_str(), "not-an-address"] {
        let answer = client
            .request_with_headers(Method::POST, &url, &[(PREFILLER_HEADER, prefiller)], body.clone())
            .await
            .unwrap();
        assert_eq!(answer.status, 200, "{}", answer.body);
    }
    let decode_stats = stats(&client, &decode).await;
    assert_eq!(decode_stats["pd"]["prefill_fallbacks"], 2);
    assert_eq!(decode_stats["pd"]["remote_prefills"], 0);
    assert_eq!(decode_stats["prompt_tokens"], 1000, "both prompts prefilled here");
}

#[tokio::test]
async fn a_prefill_pod_ignores_the_header() {
    let prefill = start_pod(|config| config.role = PodRole::Prefill).await;
    let client = SimClient::new();
    let body = Bytes::from(completion_body(&text_of_tokens(100, 3), 2).to_string());
    let url = format!("{}/v1/completions", prefill.base_url());
    let answer =
        client.request_with_headers(Method::POST, &url, &[(PREFILLER_HEADER, "127.0.0.1:1")], body).await.unwrap();
    assert_eq!(answer.status, 200);
    let counters = &stats(&client, &prefill).await["pd"];
    assert_eq!((counters["remote_prefills"].as_u64(), counters["prefill_fallbacks"].as_u64()), (Some(0), Some(0)));
}
