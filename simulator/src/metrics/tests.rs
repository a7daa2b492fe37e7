//! Exposition output: parseable, with the names, types and labels real engines use.

use std::collections::HashMap;

use super::*;

fn snapshot(style: MetricsStyle) -> MetricsSnapshot {
    let mut metrics = PodMetrics::new(1_700_000_000.0);
    metrics.prompt_tokens = 640;
    metrics.generation_tokens = 128;
    metrics.record_finish(FinishReason::Length);
    metrics.ttft.observe(0.05);
    metrics.inter_token.observe(0.015);
    metrics.e2e.observe(2.0);
    metrics.record_lora_state(&["a".to_owned()], &[], 1_700_000_100.0);
    MetricsSnapshot {
        style,
        model: "sim-model".to_owned(),
        running: 3.0,
        waiting: 1.0,
        kv_usage: 0.25,
        prefix_queries: 1280.0,
        prefix_hits: 512.0,
        preemptions: 0.0,
        metrics,
        block_size: 16,
        num_gpu_blocks: 1000,
        max_loras: Some(2),
        lora: LoraResidency {
            registered: vec!["a".to_owned(), "b".to_owned()],
            resident: vec!["a".to_owned()],
            loads: 3,
            evictions: 1,
        },
        model_not_found: 4,
    }
}

/// A sample line: name, labels, value. Panics on anything a Prometheus parser would reject.
fn parse_line(line: &str) -> (String, HashMap<String, String>, f64) {
    let (series, value) = line.rsplit_once(' ').expect("value separated by a space");
    let value: f64 = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        other => other.parse().expect("numeric value"),
    };
    let Some((name, rest)) = series.split_once('{') else { return (series.to_owned(), HashMap::new(), value) };
    let body = rest.strip_suffix('}').expect("closing brace");
    let labels = body
        .split("\",")
        .map(|pair| {
            let (key, quoted) = pair.split_once("=\"").expect("key=\"value\"");
            (key.to_owned(), quoted.trim_end_matches('"').to_owned())
        })
        .collect();
    (name.to_owned(), labels, value)
}

/// Every sample, checking each belongs to a family declared with HELP and TYPE before it.
fn parse(text: &str) -> Vec<(String, HashMap<String, String>, f64)> {
    let mut declared: Vec<String> = Vec::new();
    let mut samples = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            declared.push(rest.split(' ').next().unwrap().to_owned());
        } else if !line.starts_with('#') && !line.is_empty() {
            let sample = parse_line(line);
            let family_known = declared.iter().any(|family| {
                let base = family.trim_end_matches("_total");
                sample.0 == *family || sample.0.starts_with(base)
            });
            assert!(family_known, "sample before its TYPE line: {line}");
            samples.push(sample);
        }
    }
    samples
}

fn value_of(samples: &[(String, HashMap<String, String>, f64)], name: &str) -> f64 {
    samples.iter().find(|(sample, _, _)| sample == name).map(|(_, _, value)| *value).expect(name)
}

#[test]
fn vllm_style_has_v1_names_types_and_labels() {
    let text = snapshot(MetricsStyle::Vllm).render();
    let samples = parse(&text);
    for (name, expected) in [
        ("vllm:num_requests_running", 3.0),
        ("vllm:num_requests_waiting", 1.0),
        ("vllm:kv_cache_usage_perc", 0.25),
        ("vllm:prefix_cache_queries_total", 1280.0),
        ("vllm:prefix_cache_hits_total", 512.0),
        ("vllm:prompt_tokens_total", 640.0),
        ("vllm:generation_tokens_total", 128.0),
        ("vllm:time_to_first_token_seconds_count", 1.0),
        ("vllm:inter_token_latency_seconds_count", 1.0),
        ("vllm:e2e_request_latency_seconds_sum", 2.0),
        ("vllm:cache_config_info", 1.0),
        ("vllm:lora_requests_info", 1_700_000_100.0),
        ("vllm:max_gpu_lora_adapters", 2.0),
        ("vllm:num_gpu_loaded_lora_adapters", 1.0),
        ("vllm:num_cpu_loaded_lora_adapters", 2.0),
        ("vllm_sim:lora_adapter_loads_total", 3.0),
        ("vllm_sim:lora_adapter_evictions_total", 1.0),
        ("vllm_sim:model_not_found_total", 4.0),
    ] {
        assert_eq!(value_of(&samples, name), expected, "{name}");
    }
    assert!(text.contains("# TYPE vllm:kv_cache_usage_perc gauge"));
    assert!(text.contains("# TYPE vllm:prefix_cache_hits_total counter"));
    assert!(text.contains("# TYPE vllm:time_to_first_token_seconds histogram"));
    let running = samples.iter().find(|(name, _, _)| name == "vllm:num_requests_running").unwrap();
    assert_eq!(running.1.get("model_name").map(String::as_str), Some("sim-model"));
    assert_eq!(running.1.get("engine").map(String::as_str), Some("0"));
    let cache_info = samples.iter().find(|(name, _, _)| name == "vllm:cache_config_info").unwrap();
    assert_eq!(cache_info.1.get("block_size").map(String::as_str), Some("16"));
    assert_eq!(cache_info.1.get("num_gpu_blocks").map(String::as_str), Some("1000"));
    let lora = samples.iter().find(|(name, _, _)| name == "vllm:lora_requests_info").unwrap();
    assert_eq!(lora.1.get("max_lora").map(String::as_str), Some("2"));
    assert_eq!(lora.1.get("running_lora_adapters").map(String::as_str), Some("a"));
    assert_eq!(lora.1.get("waiting_lora_adapters").map(String::as_str), Some(""));
    let levels: Vec<(&str, &str, &str)> = samples
        .iter()
        .filter(|(name, _, _)| name == "vllm:lora_adapter_loaded")
        .map(|(_, labels, _)| (labels["adapter_name"].as_str(), labels["level"].as_str(), labels["pinned"].as_str()))
        .collect();
    assert_eq!(
        levels,
        [("a", "gpu", "false"), ("b", "cpu", "false")],
        "the proposal's labels: resident on the GPU, or in CPU memory"
    );
    assert!(!text.contains("lora_name=\""), "no label the proposal lacks");
    let success = samples
        .iter()
        .find(|(name, labels, _)| name == "vllm:request_success_total" && labels["finished_reason"] == "length")
        .unwrap();
    assert_eq!(success.2, 1.0);
    assert!(!text.contains("gpu_cache_usage_perc"));
}

#[test]
fn legacy_style_uses_pre_v1_names() {
    let samples = parse(&snapshot(MetricsStyle::VllmLegacy).render());
    assert_eq!(value_of(&samples, "vllm:gpu_cache_usage_perc"), 0.25);
    assert_eq!(value_of(&samples, "vllm:gpu_prefix_cache_queries_total"), 1280.0);
    assert_eq!(value_of(&samples, "vllm:gpu_prefix_cache_hits_total"), 512.0);
    assert_eq!(value_of(&samples, "vllm:time_per_output_token_seconds_count"), 1.0);
}

#[test]
fn sglang_style_uses_sglang_names_and_labels() {
    let samples = parse(&snapshot(MetricsStyle::Sglang).render());
    assert_eq!(value_of(&samples, "sglang:num_running_reqs"), 3.0);
    assert_eq!(value_of(&samples, "sglang:num_queue_reqs"), 1.0);
    assert_eq!(value_of(&samples, "sglang:token_usage"), 0.25);
    assert_eq!(value_of(&samples, "sglang:cache_hit_rate"), 0.4);
    let running = samples.iter().find(|(name, _, _)| name == "sglang:num_running_reqs").unwrap();
    assert_eq!(running.1.get("model_name").map(String::as_str), Some("sim-model"));
    assert!(samples.iter().all(|(name, _, _)| name.starts_with("sglang:")));
}

#[test]
fn lora_info_is_hidden_without_lora_and_its_series_are_bounded() {
    let mut plain = snapshot(MetricsStyle::Vllm);
    plain.max_loras = None;
    assert!(!plain.render().contains("lora_requests_info"));
    let mut metrics = PodMetrics::new(0.0);
    for index in 0..(MAX_LORA_INFO_SERIES + 10) {
        metrics.record_lora_state(&[format!("adapter-{index}")], &[], index as f64);
    }
    assert_eq!(metrics.lora_series.len(), MAX_LORA_INFO_SERIES);
    assert!(metrics.lora_series.iter().all(|series| series.timestamp >= 10.0), "oldest dropped first");
}

#[test]
fn lying_variants_stay_parseable() {
    let mut nan = snapshot(MetricsStyle::Vllm);
    nan.poison_with_nan();
    let samples = parse(&nan.render());
    assert!(value_of(&samples, "vllm:num_requests_waiting").is_nan());
    let mut negative = snapshot(MetricsStyle::Vllm);
    negative.make_negative();
    let samples = parse(&negative.render());
    assert!(value_of(&samples, "vllm:kv_cache_usage_perc") < 0.0);
    assert!(value_of(&samples, "vllm:prefix_cache_hits_total") < 0.0);
}
