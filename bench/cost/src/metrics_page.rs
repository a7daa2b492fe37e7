//! A `/metrics` page shaped like a real vLLM V1 pod's: the same families, labels, help texts
//! and histogram buckets, so the singleton parses as much text per scrape as it would in
//! production (about 25 KB, inside the 20–60 KB a real pod serves).
//!
//! The load numbers are fixed: this page is for measuring the cost of scraping, not routing.

use std::fmt::Write;

const LABELS: &str = r#"engine="0",model_name="sim-model""#;

/// vLLM's buckets (seconds) for its latency histograms.
const LATENCY_BUCKETS: [f64; 23] = [
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
    160.0, 640.0, 2560.0, 7680.0,
];

/// vLLM's buckets (tokens) for its token-count histograms.
const TOKEN_BUCKETS: [f64; 17] = [
    1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0, 10000.0, 20000.0, 50000.0, 100000.0,
    200000.0,
];

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

fn gauge(out: &mut String, name: &str, help: &str, value: f64) {
    family(out, name, "gauge", help);
    let _ = writeln!(out, "{name}{{{LABELS}}} {value:?}");
}

fn counter(out: &mut String, name: &str, help: &str, value: f64) {
    family(out, &format!("{name}_total"), "counter", help);
    let _ = writeln!(out, "{name}_total{{{LABELS}}} {value:?}");
    let _ = writeln!(out, "{name}_created{{{LABELS}}} 1.7e+09");
}

fn histogram(out: &mut String, name: &str, help: &str, buckets: &[f64], count: u64) {
    family(out, name, "histogram", help);
    let mut cumulative = 0;
    let step = (count / buckets.len().max(1) as u64).max(1);
    for bucket in buckets {
        cumulative = (cumulative + step).min(count);
        let _ = writeln!(out, "{name}_bucket{{{LABELS},le=\"{bucket:?}\"}} {cumulative:?}");
    }
    let _ = writeln!(out, "{name}_bucket{{{LABELS},le=\"+Inf\"}} {count:?}");
    let _ = writeln!(out, "{name}_count{{{LABELS}}} {count:?}");
    let _ = writeln!(out, "{name}_sum{{{LABELS}}} {:?}", count as f64 * 0.35);
    let _ = writeln!(out, "{name}_created{{{LABELS}}} 1.7e+09");
}

/// The page, with `waiting` requests queued.
pub fn vllm_page(waiting: u32) -> String {
    let mut out = String::with_capacity(32 * 1024);
    for (name, help) in [
        ("python_gc_objects_collected", "Objects collected during gc"),
        ("python_gc_objects_uncollectable", "Uncollectable objects found during GC"),
        ("python_gc_collections", "Number of times this generation was collected"),
    ] {
        family(&mut out, &format!("{name}_total"), "counter", help);
        for generation in 0..3 {
            let _ = writeln!(out, "{name}_total{{generation=\"{generation}\"}} {}.0", 1000 + generation);
        }
    }
    for (name, value) in [
        ("process_virtual_memory_bytes", "1.2e+10"),
        ("process_resident_memory_bytes", "2.1e+09"),
        ("process_start_time_seconds", "1.7e+09"),
        ("process_cpu_seconds_total", "312.5"),
        ("process_open_fds", "87.0"),
        ("process_max_fds", "1.048576e+06"),
    ] {
        family(&mut out, name, "gauge", "Process statistic.");
        let _ = writeln!(out, "{name} {value}");
    }
    gauge(&mut out, "vllm:num_requests_running", "Number of requests in model execution batches.", 3.0);
    gauge(&mut out, "vllm:num_requests_waiting", "Number of requests waiting to be processed.", f64::from(waiting));
    gauge(&mut out, "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", 0.21);
    counter(
        &mut out,
        "vllm:prefix_cache_queries",
        "Prefix cache queries, in terms of number of queried tokens.",
        9.1e6,
    );
    counter(&mut out, "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", 6.2e6);
    counter(&mut out, "vllm:num_preemptions", "Cumulative number of preemption from the engine.", 0.0);
    counter(&mut out, "vllm:prompt_tokens", "Number of prefill tokens processed.", 9.1e6);
    counter(&mut out, "vllm:generation_tokens", "Number of generation tokens processed.", 4.4e5);
    family(&mut out, "vllm:request_success_total", "counter", "Count of successfully processed requests.");
    for reason in ["stop", "length", "abort"] {
        let _ = writeln!(out, "vllm:request_success_total{{{LABELS},finished_reason=\"{reason}\"}} 1234.0");
    }
    let latency = [
        ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds."),
        ("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds."),
        ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds."),
        ("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request."),
        ("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request."),
        ("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request."),
        ("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request."),
    ];
    for (name, help) in latency {
        histogram(&mut out, name, help, &LATENCY_BUCKETS, 3702);
    }
    let tokens = [
        ("vllm:request_prompt_tokens", "Number of prefill tokens processed."),
        ("vllm:request_generation_tokens", "Number of generation tokens processed."),
        ("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step."),
        ("vllm:request_max_num_generation_tokens", "Histogram of maximum number of requested generation tokens."),
        ("vllm:request_params_n", "Histogram of the n request parameter."),
        ("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter."),
    ];
    for (name, help) in tokens {
        histogram(&mut out, name, help, &TOKEN_BUCKETS, 3702);
    }
    family(&mut out, "vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig");
    let _ = writeln!(
        out,
        "vllm:cache_config_info{{block_size=\"16\",cache_dtype=\"auto\",calculate_kv_scales=\"False\",cpu_offload_gb=\"0\",enable_prefix_caching=\"True\",engine=\"0\",gpu_memory_utilization=\"0.9\",is_attention_free=\"False\",num_cpu_blocks=\"None\",num_gpu_blocks=\"16384\",num_gpu_blocks_override=\"None\",prefix_caching_hash_algo=\"sha256\",sliding_window=\"None\",swap_space=\"4\"}} 1.0"
    );
    out
}

/// A pod registering `adapters` LoRA adapters (`adapter-0`...), two on the GPU and running:
/// its page ([`vllm_page`] with the adapters' series) and its `/v1/models`, each adapter card
/// as vLLM writes it (~450 bytes with its permission object).
pub fn page_naming_adapters(adapters: usize) -> (String, String) {
    let mut page = vllm_page(3);
    let _ = writeln!(
        page,
        "vllm:lora_requests_info{{max_lora=\"2\",running_lora_adapters=\"adapter-0,adapter-1\",waiting_lora_adapters=\"\"}} 1.7e+09"
    );
    let mut cards = Vec::with_capacity(adapters);
    for i in 0..adapters {
        let level = if i < 2 { "gpu" } else { "cpu" };
        let _ = writeln!(
            page,
            "vllm:lora_adapter_loaded{{{LABELS},adapter_name=\"adapter-{i}\",level=\"{level}\",pinned=\"false\"}} 1.0"
        );
        cards.push(format!(
            r#"{{"id":"adapter-{i}","object":"model","created":1700000000,"owned_by":"vllm","root":"/adapters/tenant-{i}","parent":"sim-model","max_model_len":null,"permission":[{{"id":"modelperm-{i:032x}","object":"model_permission","created":1700000000,"allow_create_engine":false,"allow_sampling":true,"allow_logprobs":true,"allow_search_indices":false,"allow_view":true,"allow_fine_tuning":false,"organization":"*","group":null,"is_blocking":false}}]}}"#
        ));
    }
    (page, format!(r#"{{"object":"list","data":[{}]}}"#, cards.join(",")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_picker_reads_it_and_it_has_a_real_pages_size() {
        let page = vllm_page(4);
        let metrics = picker::metrics_text::parse_engine_metrics(&page, picker::models::DEFAULT_NAMES_PER_POD).unwrap();
        assert_eq!((metrics.waiting, metrics.num_gpu_blocks, metrics.block_size), (4.0, Some(16_384), Some(16)));
        assert!((15_000..60_000).contains(&page.len()), "{} bytes", page.len());
    }

    #[test]
    fn a_page_and_list_naming_adapters_say_the_same() {
        let (page, list) = page_naming_adapters(100);
        let metrics = picker::metrics_text::parse_engine_metrics(&page, 100).unwrap();
        let catalog = picker::models::catalog::parse_catalog(list.as_bytes(), 1 << 20, 100).unwrap();
        assert_eq!((metrics.models.adapters.len(), metrics.models.resident.len(), metrics.models.cut), (100, 2, false));
        assert_eq!((catalog.adapters, catalog.cut), (metrics.models.adapters, false));
        assert!((40_000..50_000).contains(&list.len()), "~450 bytes a card: {}", list.len());
    }
}
