//! `parse_engine_metrics` on arbitrary scrapes: never panics, and what it returns is
//! believable: loads finite and non-negative, KV usage within 0..1. A pod that lies must not
//! get a non-finite number into the pod table (JSON has no NaN or infinity: serde_json
//! writes them as `null`, which the pod table then fails to decode).

#![no_main]

use libfuzzer_sys::fuzz_target;
use picker::metrics_text::parse_engine_metrics;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Ok(metrics) = parse_engine_metrics(&text, picker::models::MAX_NAMES_PER_POD) else { return };
    for (name, value) in [("waiting", metrics.waiting), ("running", metrics.running)] {
        assert!(value.is_finite() && value >= 0.0, "{name} = {value}");
    }
    if let Some(kv) = metrics.kv_usage {
        assert!((0.0..=1.0).contains(&kv), "kv_usage = {kv}");
    }
    for (name, value) in [("prefix_queries", metrics.prefix_queries), ("prefix_hits", metrics.prefix_hits)] {
        if let Some(value) = value {
            assert!(value.is_finite() && value >= 0.0, "{name} = {value}");
        }
    }
    if let Some(lora) = &metrics.lora {
        assert!(lora.running.iter().chain(&lora.waiting).all(|name| !name.is_empty() && name.trim() == name));
    }
});
