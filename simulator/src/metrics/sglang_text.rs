//! `/metrics` with SGLang's names, so the picker's multi-engine parsing can be tested end to end.
//!
//! Names follow SGLang's `metrics/collector.py`: `sglang:num_running_reqs`,
//! `sglang:num_queue_reqs`, `sglang:token_usage` (0..1), `sglang:cache_hit_rate`, token counters
//! and latency histograms. Recent SGLang labels every series with `model_name`, `engine_type`,
//! `tp_rank` and `pp_rank`; older releases only had `model_name`, which parsers must accept too.

use super::prom_writer::PromWriter;
use super::MetricsSnapshot;

/// Renders the snapshot with SGLang's names.
pub fn render(snapshot: &MetricsSnapshot) -> String {
    let mut writer = PromWriter::new();
    let labels =
        [("model_name", snapshot.model.as_str()), ("engine_type", "unified"), ("tp_rank", "0"), ("pp_rank", "0")];
    let created = snapshot.metrics.created_unix;
    writer.gauge("sglang:num_running_reqs", "The number of running requests.", &labels, snapshot.running);
    writer.gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", &labels, snapshot.waiting);
    writer.gauge("sglang:token_usage", "The token usage.", &labels, snapshot.kv_usage);
    let hit_rate = if snapshot.prefix_queries > 0.0 { snapshot.prefix_hits / snapshot.prefix_queries } else { 0.0 };
    writer.gauge("sglang:cache_hit_rate", "The prefix cache hit rate.", &labels, hit_rate);
    let metrics = &snapshot.metrics;
    writer.counter(
        "sglang:prompt_tokens",
        "Number of prefill tokens processed.",
        &labels,
        metrics.prompt_tokens as f64,
        created,
    );
    writer.counter(
        "sglang:generation_tokens",
        "Number of generation tokens processed.",
        &labels,
        metrics.generation_tokens as f64,
        created,
    );
    writer.counter("sglang:cached_tokens", "Number of cached prompt tokens.", &labels, snapshot.prefix_hits, created);
    let finished: u64 = metrics.finished.iter().sum();
    writer.counter("sglang:num_requests", "The number of processed requests.", &labels, finished as f64, created);
    writer.histogram(
        "sglang:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        &labels,
        &metrics.ttft,
        created,
    );
    writer.histogram(
        "sglang:inter_token_latency_seconds",
        "Histogram of inter-token latency in seconds.",
        &labels,
        &metrics.inter_token,
        created,
    );
    writer.histogram(
        "sglang:e2e_request_latency_seconds",
        "Histogram of End-to-end request latency in seconds",
        &labels,
        &metrics.e2e,
        created,
    );
    writer.finish()
}
