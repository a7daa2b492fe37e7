//! The decision's cost inside Envoy across pool sizes, body sizes and endpoints (issue 17,
//! item 4): for 64 and 256 pods, 4 and 32 KB prompts, completions and chat, wasm-epp as
//! shipped against the body-reading do-nothing filter with the same body and pool.
//!
//! Per pool size one upstream serves N pods and plain Envoy, the body-reading filter and
//! wasm-epp run side by side in front of it; each body is sent through all three with the
//! latency bench's machinery (sequential interleaved, then 32 concurrent by turns). The
//! plugin's own cost is wasm-epp's minus the body-reading filter's: added p50 (sequential)
//! and Envoy CPU per request (concurrent), next to the native `decision` median of the same
//! case when criterion measured it.

use crate::envoys::{start_all, RunningEnvoy, Variant};
use crate::latency::{self, LatencyOptions};
use crate::metrics_page;
use crate::results::{Distribution, Record, Results};
use crate::sampling::{self, Batch};
use crate::upstream::Upstream;
use crate::workload;
use picker::request::Endpoint;

/// The variants side by side: plain Envoy for the added p50, the body-reading filter as the
/// baseline, wasm-epp as shipped.
const COMPARED: [Variant; 3] = [Variant::Plain, Variant::HeaderRead, Variant::WasmEpp];

#[derive(Debug, Clone)]
pub struct MatrixOptions {
    pub pools: Vec<usize>,
    /// Prompt sizes in KB (as the native `decision/...` cases: prompt text, not whole body).
    pub prompt_kb: Vec<usize>,
    pub endpoints: Vec<Endpoint>,
    /// Counts per combination (sizes unused).
    pub latency: LatencyOptions,
}

/// One combination's figures (µs).
#[derive(Debug, Clone, Copy, Default)]
struct Cell {
    added_p50_body_reading: f64,
    added_p50_wasm_epp: f64,
    cpu_body_reading: f64,
    cpu_wasm_epp: f64,
    errors: usize,
}

fn endpoint_name(endpoint: Endpoint) -> &'static str {
    match endpoint {
        Endpoint::ChatCompletions => "chat",
        _ => "completions",
    }
}

/// Runs every combination, prints one table, and adds benchmark `decision_matrix` to `results`;
/// `native` are records holding criterion's `decision` medians (cost.json), for comparison.
pub fn run(options: &MatrixOptions, native: &[Record], results: &mut Results) -> Result<(), String> {
    println!(
        "\n== decision cost inside Envoy: wasm-epp as shipped minus the body-reading filter (µs; sequential p50, CPU at {} concurrent) ==",
        options.latency.concurrency
    );
    let mut rows = Vec::new();
    for &pods in &options.pools {
        let upstream = Upstream::start(pods, metrics_page::vllm_page(0))?;
        let envoys = start_all(&COMPARED, &upstream.addresses())?;
        let idle = latency::idle_rates(&envoys);
        for &endpoint in &options.endpoints {
            for &kb in &options.prompt_kb {
                let cell = measure(&envoys, endpoint, kb, &idle, &options.latency)?;
                rows.push((format!("{}/{kb}KB/{pods}pods", endpoint_name(endpoint)), cell));
            }
        }
    }
    println!(
        "\n  {:<24} {:>10} {:>10} {:>10}   {:>10} {:>10} {:>10}   {:>9} {:>9} {:>6}",
        "case", "+p50 read", "+p50 epp", "plugin", "CPU read", "CPU epp", "plugin", "native", "× native", "errors"
    );
    for (case, cell) in rows {
        let plugin_p50 = cell.added_p50_wasm_epp - cell.added_p50_body_reading;
        let plugin_cpu = cell.cpu_wasm_epp - cell.cpu_body_reading;
        let native_case = format!("decision/{case}");
        let native_us = native
            .iter()
            .rev()
            .find(|r| r.benchmark == "native_decision" && r.case == native_case && r.metric == "median_time")
            .map(|r| r.value);
        let times_native = native_us.filter(|n| *n > 0.0).map(|n| plugin_cpu / n);
        let shown = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.1}"));
        println!(
            "  {case:<24} {:>10.1} {:>10.1} {:>10.1}   {:>10.1} {:>10.1} {:>10.1}   {:>9} {:>9} {:>6}",
            cell.added_p50_body_reading,
            cell.added_p50_wasm_epp,
            plugin_p50,
            cell.cpu_body_reading,
            cell.cpu_wasm_epp,
            plugin_cpu,
            shown(native_us),
            shown(times_native),
            cell.errors
        );
        let push = |results: &mut Results, metric: &str, value: f64| {
            results.push("decision_matrix", &case, metric, value, "us");
        };
        push(results, "header-buffered-read/added_p50_vs_plain", cell.added_p50_body_reading);
        push(results, "wasm-epp/added_p50_vs_plain", cell.added_p50_wasm_epp);
        push(results, "plugin_added_p50", plugin_p50);
        push(results, "header-buffered-read/envoy_cpu_per_request", cell.cpu_body_reading);
        push(results, "wasm-epp/envoy_cpu_per_request", cell.cpu_wasm_epp);
        push(results, "plugin_envoy_cpu_per_request", plugin_cpu);
        if let Some(ratio) = times_native {
            results.push("decision_matrix", &case, "plugin_cpu_vs_native_decision", ratio, "ratio");
        }
        results.push("decision_matrix", &case, "errors", cell.errors as f64, "count");
    }
    println!("  (read = the body-reading filter, epp = wasm-epp as shipped, plugin = epp − read;");
    println!("   + = added p50 over plain Envoy, sequential; CPU = Envoy CPU per request at 32 concurrent;");
    println!("   native = criterion's decision/<case> median from cost.json, × native = plugin CPU / native)");
    Ok(())
}

/// One endpoint and prompt size through every envoy: sequential, then concurrent.
fn measure(
    envoys: &[RunningEnvoy],
    endpoint: Endpoint,
    kb: usize,
    idle: &[f64],
    options: &LatencyOptions,
) -> Result<Cell, String> {
    let path = workload::path(endpoint);
    let requests: Vec<Vec<Vec<u8>>> =
        envoys.iter().map(|e| latency::encoded(e, path, |seed| workload::body(endpoint, kb * 1024, seed))).collect();
    let sequential = latency::sequential(envoys, &requests, options)?;
    let concurrent = latency::concurrent(envoys, &requests, options);
    let p50 = |variant: Variant| {
        let at = envoys.iter().position(|e| e.variant == variant);
        at.and_then(|i| sequential.get(i))
            .map_or(f64::NAN, |b| Distribution::new(b.latencies_us.clone()).percentile(50.0))
    };
    let cpu = |variant: Variant| {
        let at = envoys.iter().position(|e| e.variant == variant);
        let batch: Option<&Batch> = at.and_then(|i| concurrent.get(i));
        let rate = at.and_then(|i| idle.get(i)).copied().unwrap_or(0.0);
        batch.map_or(f64::NAN, |b| sampling::cpu_per_request(b.envoy_cpu, rate, b.elapsed, b.latencies_us.len()))
    };
    let plain = p50(Variant::Plain);
    let errors = sequential.iter().chain(&concurrent).map(|b| b.errors).sum();
    Ok(Cell {
        added_p50_body_reading: p50(Variant::HeaderRead) - plain,
        added_p50_wasm_epp: p50(Variant::WasmEpp) - plain,
        cpu_body_reading: cpu(Variant::HeaderRead),
        cpu_wasm_epp: cpu(Variant::WasmEpp),
        errors,
    })
}
