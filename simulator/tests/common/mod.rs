//! Shared helpers: start a pod in-process on an ephemeral port with fast simulated time.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use serde_json::{json, Value};
use vllm_sim::{spawn_pod, PodConfig, Preset, RunningPod, SimClient};

/// Time scale for tests: 1 simulated second takes 2 ms, so streams still have distinct gaps.
pub const FAST: f64 = 0.002;

/// A small-preset pod on 127.0.0.1:0 with `change` applied to its configuration.
pub async fn start_pod(change: impl FnOnce(&mut PodConfig)) -> RunningPod {
    let mut config = PodConfig::for_preset(Preset::Small);
    config.latency.time_scale = FAST;
    change(&mut config);
    spawn_pod(config).await.expect("pod starts")
}

/// `{"prompt": ..., "max_tokens": ...}` for /v1/completions.
pub fn completion_body(prompt: &str, max_tokens: usize) -> Value {
    json!({"model": "sim-model", "prompt": prompt, "max_tokens": max_tokens})
}

/// The pod's /sim/stats document.
pub async fn stats(client: &SimClient, pod: &RunningPod) -> Value {
    let (status, body) = client.get_text(&format!("{}/sim/stats", pod.base_url())).await.unwrap();
    assert_eq!(status, 200);
    serde_json::from_str(&body).unwrap()
}
