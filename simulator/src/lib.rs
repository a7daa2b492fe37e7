//! vllm-sim: a simulated vLLM (V1) server for wasm-epp's tests and routing benchmarks.
//!
//! Every routing benchmark of the project is measured on these pods, so they must cache, queue
//! and report like vLLM: exact prefix-cache accounting in blocks, vLLM V1's engine step (a
//! token budget shared by decodes and chunked prefill, FCFS admission under `max_num_seqs` and
//! KV pressure), step durations from a latency model on real timers, and vLLM's `/metrics`.
//! Reading order follows a request: `http` (server, router, handlers) → `api` (parsing,
//! responses, streaming) → `pod` (lifecycle, step loop, generation) → `engine` (scheduler, step) →
//! `kv_cache` (blocks and hashes), with `latency`, `metrics` and `faults` beside them.
//! `client` and `calibration` are reused by the benchmark tool.

pub mod api;
pub mod calibration;
pub mod chat_template;
pub mod cli;
pub mod client;
pub mod config;
pub mod engine;
pub mod faults;
pub mod hashing;
pub mod http;
pub mod kv_cache;
pub mod latency;
pub mod lora;
pub mod metrics;
pub mod pd;
pub mod pod;
pub mod tokenizer;

pub use client::{stream_completion, ClientError, ClientTiming, SimClient};
pub use config::{MetricsStyle, PodConfig, Preset};
pub use http::{spawn_pod, RunningPod, SERVED_BY_HEADER};
pub use tokenizer::{text_of_tokens, tokenize};
