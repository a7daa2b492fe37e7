//! `/metrics` with vLLM's names, types, help texts and labels (V1, or the older names).
//!
//! Names and labels follow `vllm/v1/metrics/loggers.py`: per-engine series carry
//! `model_name` and `engine`; `vllm:cache_config_info` carries the cache configuration as labels;
//! `vllm:lora_requests_info` carries `max_lora`, `waiting_lora_adapters`, `running_lora_adapters`
//! and a Unix timestamp as its value. The legacy style swaps in the names vLLM used before 0.9
//! (`vllm:gpu_cache_usage_perc`, `vllm:gpu_prefix_cache_*`, `vllm:time_per_output_token_seconds`).

use super::prom_writer::{MetricKind, PromWriter};
use super::MetricsSnapshot;

/// Renders the snapshot with V1 names, or the pre-0.9 names when `legacy`.
pub fn render(snapshot: &MetricsSnapshot, legacy: bool) -> String {
    let mut writer = PromWriter::new();
    let labels = [("model_name", snapshot.model.as_str()), ("engine", "0")];
    let created = snapshot.metrics.created_unix;
    writer.gauge(
        "vllm:num_requests_running",
        "Number of requests in model execution batches.",
        &labels,
        snapshot.running,
    );
    writer.gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", &labels, snapshot.waiting);
    let (usage_name, usage_help) = if legacy {
        ("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.")
    } else {
        ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
    };
    writer.gauge(usage_name, usage_help, &labels, snapshot.kv_usage);
    let prefix = if legacy { "vllm:gpu_prefix_cache" } else { "vllm:prefix_cache" };
    writer.counter(
        &format!("{prefix}_queries"),
        "Prefix cache queries, in terms of number of queried tokens.",
        &labels,
        snapshot.prefix_queries,
        created,
    );
    writer.counter(
        &format!("{prefix}_hits"),
        "Prefix cache hits, in terms of number of cached tokens.",
        &labels,
        snapshot.prefix_hits,
        created,
    );
    writer.counter(
        "vllm:num_preemptions",
        "Cumulative number of preemption from the engine.",
        &labels,
        snapshot.preemptions,
        created,
    );
    let metrics = &snapshot.metrics;
    writer.counter(
        "vllm:prompt_tokens",
        "Number of prefill tokens processed.",
        &labels,
        metrics.prompt_tokens as f64,
        created,
    );
    writer.counter(
        "vllm:generation_tokens",
        "Number of generation tokens processed.",
        &labels,
        metrics.generation_tokens as f64,
        created,
    );
    write_request_success(&mut writer, snapshot);
    writer.histogram(
        "vllm:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        &labels,
        &metrics.ttft,
        created,
    );
    let (token_gap_name, token_gap_help) = if legacy {
        ("vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.")
    } else {
        ("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.")
    };
    writer.histogram(token_gap_name, token_gap_help, &labels, &metrics.inter_token, created);
    writer.histogram(
        "vllm:e2e_request_latency_seconds",
        "Histogram of e2e request latency in seconds.",
        &labels,
        &metrics.e2e,
        created,
    );
    writer.histogram(
        "vllm:request_queue_time_seconds",
        "Histogram of time spent in WAITING phase for request.",
        &labels,
        &metrics.queue_time,
        created,
    );
    write_cache_config_info(&mut writer, snapshot);
    write_lora_info(&mut writer, snapshot);
    write_lora_residency(&mut writer, snapshot);
    write_model_not_found(&mut writer, snapshot);
    writer.finish()
}

fn write_request_success(writer: &mut PromWriter, snapshot: &MetricsSnapshot) {
    let name = "vllm:request_success_total";
    writer.family(name, MetricKind::Counter, "Count of successfully processed requests.");
    let reasons = ["length", "stop", "abort"];
    for (reason, count) in reasons.iter().zip(snapshot.metrics.finished.iter()) {
        let labels = [("model_name", snapshot.model.as_str()), ("engine", "0"), ("finished_reason", reason)];
        writer.sample(name, &labels, *count as f64);
        writer.sample("vllm:request_success_created", &labels, snapshot.metrics.created_unix);
    }
}

fn write_cache_config_info(writer: &mut PromWriter, snapshot: &MetricsSnapshot) {
    let block_size = snapshot.block_size.to_string();
    let num_gpu_blocks = snapshot.num_gpu_blocks.to_string();
    let labels = [
        ("block_size", block_size.as_str()),
        ("cache_dtype", "auto"),
        ("calculate_kv_scales", "False"),
        ("cpu_offload_gb", "0"),
        ("enable_prefix_caching", "True"),
        ("engine", "0"),
        ("gpu_memory_utilization", "0.9"),
        ("is_attention_free", "False"),
        ("num_cpu_blocks", "None"),
        ("num_gpu_blocks", num_gpu_blocks.as_str()),
        ("num_gpu_blocks_override", "None"),
        ("prefix_caching_hash_algo", "sha256"),
        ("sliding_window", "None"),
        ("swap_space", "4"),
    ];
    writer.gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", &labels, 1.0);
}

fn write_lora_info(writer: &mut PromWriter, snapshot: &MetricsSnapshot) {
    let Some(max_loras) = snapshot.max_loras else { return };
    let name = "vllm:lora_requests_info";
    writer.family(name, MetricKind::Gauge, "Running stats on lora requests.");
    let max_lora = max_loras.to_string();
    for series in &snapshot.metrics.lora_series {
        let labels = [
            ("max_lora", max_lora.as_str()),
            ("waiting_lora_adapters", series.waiting.as_str()),
            ("running_lora_adapters", series.running.as_str()),
        ];
        writer.sample(name, &labels, series.timestamp);
    }
}

/// The residency metrics vLLM does not have yet: the upstream proposal (vllm-project/vllm PR
/// 45411, continued in 54830; llm-d-router#2792 reads them) writes one
/// `vllm:lora_adapter_loaded{adapter_name, level, pinned}` series per loaded adapter
/// (`level="gpu"` when resident on the GPU, `"cpu"` when only in CPU memory; the simulator pins
/// nothing), `vllm:num_gpu_loaded_lora_adapters` and `vllm:num_cpu_loaded_lora_adapters` (every
/// loaded adapter is held in CPU memory, the GPU's too, as in the proposal's test report) and
/// the slot count `vllm:max_gpu_lora_adapters`; then the simulator's own load and eviction
/// counters (vLLM has none).
fn write_lora_residency(writer: &mut PromWriter, snapshot: &MetricsSnapshot) {
    let Some(max_loras) = snapshot.max_loras else { return };
    let model = snapshot.model.as_str();
    let name = "vllm:lora_adapter_loaded";
    writer.family(name, MetricKind::Gauge, "LoRA adapters loaded, by where they are held.");
    let lora = &snapshot.lora;
    for adapter in &lora.registered {
        let level = if lora.resident.contains(adapter) { "gpu" } else { "cpu" };
        let labels = [
            ("model_name", model),
            ("engine", "0"),
            ("adapter_name", adapter.as_str()),
            ("level", level),
            ("pinned", "false"),
        ];
        writer.sample(name, &labels, 1.0);
    }
    let labels = [("model_name", model), ("engine", "0")];
    let on_gpu = lora.registered.iter().filter(|adapter| lora.resident.contains(adapter)).count();
    writer.gauge("vllm:num_gpu_loaded_lora_adapters", "LoRA adapters loaded on the GPU.", &labels, on_gpu as f64);
    let in_cpu = lora.registered.len() as f64;
    writer.gauge("vllm:num_cpu_loaded_lora_adapters", "LoRA adapters loaded in CPU memory.", &labels, in_cpu);
    writer.gauge("vllm:max_gpu_lora_adapters", "Most LoRA adapters held on the GPU.", &labels, max_loras as f64);
    let created = snapshot.metrics.created_unix;
    writer.counter(
        "vllm_sim:lora_adapter_loads",
        "LoRA adapters loaded onto the GPU.",
        &labels,
        lora.loads as f64,
        created,
    );
    writer.counter(
        "vllm_sim:lora_adapter_evictions",
        "LoRA adapters evicted from the GPU to load another.",
        &labels,
        lora.evictions as f64,
        created,
    );
}

/// Requests that named a model this pod does not serve (answered 404); the simulator's own.
fn write_model_not_found(writer: &mut PromWriter, snapshot: &MetricsSnapshot) {
    let labels = [("model_name", snapshot.model.as_str())];
    let count = snapshot.model_not_found as f64;
    let help = "Requests answered 404 because their model is not served here.";
    writer.counter("vllm_sim:model_not_found", help, &labels, count, snapshot.metrics.created_unix);
}
