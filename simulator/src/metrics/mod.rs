//! What a pod reports on `/metrics`: counters and histograms it accumulates, and a snapshot that
//! is taken under the pod lock and rendered outside it (rendering is the slow part).

pub mod histogram;
pub mod name_filter;
pub mod prom_writer;
mod sglang_text;
mod vllm_text;

use crate::config::MetricsStyle;
use histogram::{Histogram, INTER_TOKEN_BUCKETS, REQUEST_LATENCY_BUCKETS, TTFT_BUCKETS};

/// Distinct `vllm:lora_requests_info` label sets kept; `prometheus_client` keeps every label set
/// it ever saw, which is why readers take the newest series. Old ones beyond this are dropped.
pub const MAX_LORA_INFO_SERIES: usize = 32;

/// Why a request finished, as vLLM's `finished_reason` label says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// Reached `max_tokens` (the simulator's normal ending).
    Length,
    /// Stopped on EOS or a stop string (never produced by the simulator; kept for the series).
    Stop,
    /// Client went away, or the pod restarted.
    Abort,
}

/// Accumulated request-level metrics of one pod.
#[derive(Debug, Clone)]
pub struct PodMetrics {
    /// Unix time the counters started (the `_created` samples).
    pub created_unix: f64,
    /// `vllm:prompt_tokens_total`.
    pub prompt_tokens: u64,
    /// `vllm:generation_tokens_total`.
    pub generation_tokens: u64,
    /// `vllm:request_success_total` by reason: length, stop, abort.
    pub finished: [u64; 3],
    /// Time to first token, seconds.
    pub ttft: Histogram,
    /// Gap between consecutive tokens, seconds.
    pub inter_token: Histogram,
    /// Arrival to last token, seconds.
    pub e2e: Histogram,
    /// Time spent waiting for admission, seconds.
    pub queue_time: Histogram,
    /// `vllm:lora_requests_info` label sets and the last time each was current.
    pub lora_series: Vec<LoraInfoSeries>,
}

/// One `vllm:lora_requests_info` series.
#[derive(Debug, Clone, PartialEq)]
pub struct LoraInfoSeries {
    /// Comma-separated running adapters.
    pub running: String,
    /// Comma-separated waiting adapters.
    pub waiting: String,
    /// Unix time this label set was last current (the sample value).
    pub timestamp: f64,
}

impl PodMetrics {
    /// Empty metrics starting at `created_unix`.
    pub fn new(created_unix: f64) -> Self {
        Self {
            created_unix,
            prompt_tokens: 0,
            generation_tokens: 0,
            finished: [0; 3],
            ttft: Histogram::new(TTFT_BUCKETS),
            inter_token: Histogram::new(INTER_TOKEN_BUCKETS),
            e2e: Histogram::new(REQUEST_LATENCY_BUCKETS),
            queue_time: Histogram::new(REQUEST_LATENCY_BUCKETS),
            lora_series: Vec::new(),
        }
    }

    /// Counts a finished request.
    pub fn record_finish(&mut self, reason: FinishReason) {
        let slot = match reason {
            FinishReason::Length => self.finished.get_mut(0),
            FinishReason::Stop => self.finished.get_mut(1),
            FinishReason::Abort => self.finished.get_mut(2),
        };
        if let Some(count) = slot {
            *count += 1;
        }
    }

    /// Marks the adapter label set as current at `now` (vLLM does this every engine step).
    pub fn record_lora_state(&mut self, running: &[String], waiting: &[String], now: f64) {
        let running = running.join(",");
        let waiting = waiting.join(",");
        if let Some(series) = self.lora_series.iter_mut().find(|s| s.running == running && s.waiting == waiting) {
            series.timestamp = now;
            return;
        }
        if self.lora_series.len() >= MAX_LORA_INFO_SERIES {
            let oldest = self
                .lora_series
                .iter()
                .enumerate()
                .min_by(|a, b| a.1.timestamp.total_cmp(&b.1.timestamp))
                .map(|(index, _)| index);
            if let Some(index) = oldest {
                self.lora_series.swap_remove(index);
            }
        }
        self.lora_series.push(LoraInfoSeries { running, waiting, timestamp: now });
    }
}

/// Everything `/metrics` shows, copied out of the pod under its lock.
#[derive(Debug, Clone)]
pub struct MetricsSnapshot {
    /// Naming convention.
    pub style: MetricsStyle,
    /// `model_name` label.
    pub model: String,
    /// Running requests (gauge; may be overridden by a fault to lie).
    pub running: f64,
    /// Waiting requests (gauge).
    pub waiting: f64,
    /// KV usage 0..1 (gauge).
    pub kv_usage: f64,
    /// Prefix cache queries in tokens.
    pub prefix_queries: f64,
    /// Prefix cache hits in tokens.
    pub prefix_hits: f64,
    /// Preemptions.
    pub preemptions: f64,
    /// Request metrics.
    pub metrics: PodMetrics,
    /// Tokens per block (`vllm:cache_config_info`).
    pub block_size: usize,
    /// KV pool size (`vllm:cache_config_info`).
    pub num_gpu_blocks: usize,
    /// `Some(max_loras)` when LoRA is enabled (then `vllm:lora_requests_info` is shown).
    pub max_loras: Option<usize>,
    /// Adapters known and resident on the GPU, with load counters.
    pub lora: LoraResidency,
    /// Requests answered 404 for a model this pod does not serve.
    pub model_not_found: u64,
}

/// Which adapters a pod knows and which sit on its GPU (`vllm:lora_adapter_loaded`).
#[derive(Debug, Clone, Default)]
pub struct LoraResidency {
    /// Every adapter the server can serve (command line and runtime loads), sorted.
    pub registered: Vec<String>,
    /// Adapters on the GPU now (at most `max_loras`).
    pub resident: Vec<String>,
    /// GPU loads since start.
    pub loads: u64,
    /// Evictions (swaps) since start.
    pub evictions: u64,
}

impl MetricsSnapshot {
    /// Replaces every gauge and counter by NaN (a pod whose exporter is broken).
    pub fn poison_with_nan(&mut self) {
        self.map_scalars(|_| f64::NAN);
    }

    /// Makes every gauge and counter negative (a pod that reports impossible values).
    pub fn make_negative(&mut self) {
        self.map_scalars(|value| -(value.abs() + 1.0));
    }

    fn map_scalars(&mut self, change: impl Fn(f64) -> f64) {
        for value in [
            &mut self.running,
            &mut self.waiting,
            &mut self.kv_usage,
            &mut self.prefix_queries,
            &mut self.prefix_hits,
            &mut self.preemptions,
        ] {
            *value = change(*value);
        }
    }

    /// The exposition text in the configured style.
    pub fn render(&self) -> String {
        match self.style {
            MetricsStyle::Vllm => vllm_text::render(self, false),
            MetricsStyle::VllmLegacy => vllm_text::render(self, true),
            MetricsStyle::Sglang => sglang_text::render(self),
        }
    }
}

#[cfg(test)]
mod tests;
