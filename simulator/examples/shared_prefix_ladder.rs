//! llm-d's shared-prefix ladder on simulated pods, without a router: 50 prefixes of 2,048
//! tokens, 256-token questions, 256-token outputs, 4 small-preset pods with KV pressure
//! (`num_gpu_blocks` 2,500), requests sent at a fixed rate to the pods either with perfect
//! prefix affinity (prefix `i` always to pod `i mod 4`) or round robin.
//!
//! It shows what the engine-step model buys: uncached prefill takes step time from everyone's
//! decode, so the saturated pool's output throughput rises with the hit rate.
//!
//! ```sh
//! cargo run --release -p vllm-sim --example shared_prefix_ladder -- 4 8 16   # rates, req/s
//! # the same with H100-like decode steps (3 ms + 0.05 ms per sequence):
//! cargo run --release -p vllm-sim --example shared_prefix_ladder -- 16 32 64 --decode 3 0.05
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::time::{Duration, Instant};

use serde_json::json;
use vllm_sim::client::sum_metric;
use vllm_sim::{spawn_pod, text_of_tokens, PodConfig, Preset, RunningPod, SimClient};

const PODS: usize = 4;
const PREFIXES: usize = 50;
const PREFIX_TOKENS: usize = 2048;
const QUESTION_TOKENS: usize = 256;
const OUTPUT_TOKENS: usize = 256;
/// The issue's KV pressure: 2,500 blocks of 16 tokens = 40,000 tokens per pod.
const GPU_BLOCKS: usize = 2500;
/// Seconds of arrivals per rate (the run lasts longer while the pool drains).
const SECONDS_PER_RATE: f64 = 20.0;

#[derive(Clone, Copy)]
enum Placement {
    Affinity,
    RoundRobin,
}

/// Decode step parameters: base and per-sequence milliseconds.
#[derive(Clone, Copy)]
struct Decode {
    base_ms: f64,
    per_seq_ms: f64,
}

async fn start_pods(decode: Decode) -> Vec<RunningPod> {
    let mut pods = Vec::new();
    for _ in 0..PODS {
        let mut config = PodConfig::for_preset(Preset::Small);
        config.latency.decode_base_ms = decode.base_ms;
        config.latency.decode_per_seq_ms = decode.per_seq_ms;
        config.num_gpu_blocks = GPU_BLOCKS;
        config.max_model_len = 32_768;
        pods.push(spawn_pod(config).await.unwrap());
    }
    pods
}

async fn run(rate: f64, placement: Placement, prefixes: &[String], decode: Decode) -> String {
    let pods = start_pods(decode).await;
    let client = SimClient::new();
    let requests = (rate * SECONDS_PER_RATE) as usize;
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(requests);
    for index in 0..requests {
        let prefix = (index * 7919) % PREFIXES; // a fixed, well-mixed prefix order
        let pod = match placement {
            Placement::Affinity => prefix % PODS,
            Placement::RoundRobin => index % PODS,
        };
        let prompt = format!("{} {}", prefixes[prefix], text_of_tokens(QUESTION_TOKENS, 1_000_000 + index as u64));
        let body = json!({"model": "sim-model", "prompt": prompt, "max_tokens": OUTPUT_TOKENS, "ignore_eos": true});
        let url = format!("{}/v1/completions", pods[pod].base_url());
        let client = client.clone();
        let send_at = started + Duration::from_secs_f64(index as f64 / rate);
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep_until(send_at.into()).await;
            client.stream_completion(&url, &body).await
        }));
    }
    let mut ttft = Vec::new();
    let mut tokens = 0;
    for task in tasks {
        let timing = task.await.unwrap().unwrap();
        ttft.push(timing.ttft.as_secs_f64() * 1000.0);
        tokens += timing.output_tokens;
    }
    let wall = started.elapsed().as_secs_f64();
    let (mut hits, mut queries) = (0.0, 0.0);
    for pod in &pods {
        let metrics = client.get_text(&format!("{}/metrics", pod.base_url())).await.unwrap().1;
        hits += sum_metric(&metrics, "vllm:prefix_cache_hits_total");
        queries += sum_metric(&metrics, "vllm:prefix_cache_queries_total");
    }
    for pod in pods {
        pod.shutdown().await;
    }
    ttft.sort_by(f64::total_cmp);
    let at = |q: f64| ttft[((q * ttft.len() as f64).ceil() as usize).clamp(1, ttft.len()) - 1];
    format!(
        "hit {:>5.1} %  TTFT p50 {:>7.0} p90 {:>7.0} ms  {:>6.0} out tok/s",
        100.0 * hits / queries.max(1.0),
        at(0.5),
        at(0.9),
        tokens as f64 / wall
    )
}

#[tokio::main]
async fn main() {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    let preset = Preset::Small.latency();
    let mut decode = Decode { base_ms: preset.decode_base_ms, per_seq_ms: preset.decode_per_seq_ms };
    let mut rates = Vec::new();
    let mut position = 0;
    while position < arguments.len() {
        if arguments[position] == "--decode" {
            decode = Decode {
                base_ms: arguments[position + 1].parse().unwrap(),
                per_seq_ms: arguments[position + 2].parse().unwrap(),
            };
            position += 3;
        } else {
            rates.push(arguments[position].parse::<f64>().unwrap());
            position += 1;
        }
    }
    let rates = if rates.is_empty() { vec![4.0, 8.0, 16.0] } else { rates };
    let prefixes: Vec<String> = (0..PREFIXES).map(|seed| text_of_tokens(PREFIX_TOKENS, seed as u64)).collect();
    println!("| rate (req/s) | perfect affinity | round robin |\n| --- | --- | --- |");
    for rate in rates {
        let affinity = run(rate, Placement::Affinity, &prefixes, decode).await;
        let round_robin = run(rate, Placement::RoundRobin, &prefixes, decode).await;
        println!("| {rate} | {affinity} | {round_robin} |");
    }
}
