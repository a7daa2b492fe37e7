//! `pd.json` (rows for the plot script) and `pd.md` (the table, settings and the goals).

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use crate::summary::QualityRow;

/// One workload on one target: the quality row plus what P/D adds.
#[derive(Debug, Clone, Serialize)]
pub struct PdRow {
    #[serde(flatten)]
    pub quality: QualityRow,
    /// Requests a prefill pod prefilled for a decode pod (the decode pods' own count) over all.
    pub disaggregated_share: f64,
    /// Prefix-cache hit rate (tokens) of the prefill pods, and of the decode pods.
    pub prefill_pods_hit_rate: Option<f64>,
    pub decode_pods_hit_rate: Option<f64>,
    /// Split requests only: the decode sidecars' mean wait for the prefill pod's answer and
    /// mean KV transfer, in ms (what a split adds before the decode pod's own queue and step).
    pub split_prefill_wait_ms: Option<f64>,
    pub split_transfer_ms: Option<f64>,
}

/// The run's settings, for the report.
pub struct Context {
    pub time_scale: f64,
    pub seed: u64,
    pub quick: bool,
    pub threshold_tokens: u64,
    pub runtime_s: f64,
    pub failures: Vec<String>,
}

pub fn round(value: f64, decimals: i32) -> f64 {
    let scale = 10f64.powi(decimals);
    (value * scale).round() / scale
}

fn ms(value: Option<f64>) -> String {
    value.map(|v| format!("{v:.0}")).unwrap_or_else(|| "-".into())
}

fn percent(value: Option<f64>) -> String {
    value.map(|v| format!("{:.1}%", v * 100.0)).unwrap_or_else(|| "-".into())
}

pub fn one_line(row: &PdRow) -> String {
    let q = &row.quality;
    format!(
        "{:<26} TTFT p50 {:>6} p99 {:>6} ms  ITL p50 {:>4} p99 {:>5} ms  {:>6.0} out tok/s  split {:>6}  prefill hit {:>6}  errors {}",
        q.target,
        ms(q.ttft_p50_ms),
        ms(q.ttft_p99_ms),
        ms(q.itl_p50_ms),
        ms(q.itl_p99_ms),
        q.output_tokens_per_s,
        percent(Some(row.disaggregated_share)),
        percent(row.prefill_pods_hit_rate),
        q.errors,
    )
}

/// The goals of issue 19 on each (k) variant, against its best aggregated target (lowest ITL p99).
fn goals(rows: &[PdRow]) -> String {
    let mut out = String::new();
    for workload in ["k-long-prompts", "k-long-prompts-busy"] {
        out.push_str(&long_goals(rows, workload));
    }
    let short: Vec<&PdRow> = rows.iter().filter(|r| r.quality.workload == "k-short-prompts").collect();
    if let Some(pd) = short.iter().find(|r| r.quality.target == "wasm-epp-pd") {
        let _ = writeln!(out, "- Short prompts disaggregated: {:.1}% (goal < 5%)", pd.disaggregated_share * 100.0);
    }
    out
}

fn long_goals(rows: &[PdRow], workload: &str) -> String {
    let long: Vec<&PdRow> = rows.iter().filter(|r| r.quality.workload == workload).collect();
    let pd = long.iter().find(|r| r.quality.target == "wasm-epp-pd");
    let best =
        long.iter().filter(|r| r.quality.target != "wasm-epp-pd").filter(|r| r.quality.itl_p99_ms.is_some()).min_by(
            |a, b| a.quality.itl_p99_ms.unwrap_or(f64::MAX).total_cmp(&b.quality.itl_p99_ms.unwrap_or(f64::MAX)),
        );
    let mut out = String::new();
    if let (Some(pd), Some(best)) = (pd, best) {
        let ratio = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| a / b.max(f64::MIN_POSITIVE));
        let itl = ratio(pd.quality.itl_p99_ms, best.quality.itl_p99_ms);
        let ttft = ratio(pd.quality.ttft_p50_ms, best.quality.ttft_p50_ms);
        let _ = writeln!(out, "{workload}: best aggregated target by ITL p99 **{}**.\n", best.quality.target);
        let verdict = |value: Option<f64>, limit: f64| match value {
            Some(v) if v <= limit => format!("{v:.2} (met, goal ≤ {limit})"),
            Some(v) => format!("{v:.2} (NOT met, goal ≤ {limit})"),
            None => "-".into(),
        };
        let _ = writeln!(out, "- ITL p99, wasm-epp-pd / best aggregated: {}", verdict(itl, 0.6));
        let _ = writeln!(out, "- TTFT p50, wasm-epp-pd / best aggregated: {}\n", verdict(ttft, 1.2));
    }
    out
}

pub fn write(rows: &[PdRow], context: &Context, out_dir: &Path) -> Result<(), String> {
    let json_path = out_dir.join("pd.json");
    let text = serde_json::to_string_pretty(rows).map_err(|e| e.to_string())?;
    std::fs::write(&json_path, text + "\n").map_err(|e| format!("{}: {e}", json_path.display()))?;
    let mut md = String::from("# Prefill/decode disaggregation (issue 19)\n\n");
    let _ = writeln!(
        md,
        "2 prefill + 2 decode simulated pods (large preset, `--kv-transfer-per-token-ms 0.005`); wasm-epp-pd \
         splits prompts whose decode pod lacks ≥ {} estimated tokens. Aggregated targets use the same four pods \
         alike. Time scale {}, seed {}, {} run, {:.0} s. `decode pods hit` counts the blocks transferred from \
         prefill pods as hits (so does `pool hit` for wasm-epp-pd). `prefill wait` and `transfer` are split \
         requests' means as the decode pods' sidecars timed them; README.md breaks a split request's TTFT down.\n",
        context.threshold_tokens,
        context.time_scale,
        context.seed,
        if context.quick { "quick" } else { "full" },
        context.runtime_s
    );
    md.push_str("| workload | target | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms | E2E p50 ms | out tok/s | split | prefill pods hit | decode pods hit | pool hit | prefill wait ms | transfer ms | errors |\n");
    md.push_str(
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for row in rows {
        let q = &row.quality;
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {:.0} | {} | {} | {} | {} | {} | {} | {} |",
            q.workload,
            q.target,
            ms(q.ttft_p50_ms),
            ms(q.ttft_p99_ms),
            ms(q.itl_p50_ms),
            ms(q.itl_p99_ms),
            ms(q.e2e_p50_ms),
            q.output_tokens_per_s,
            percent(Some(row.disaggregated_share)),
            percent(row.prefill_pods_hit_rate),
            percent(row.decode_pods_hit_rate),
            percent(q.hit_rate),
            ms(row.split_prefill_wait_ms),
            ms(row.split_transfer_ms),
            q.errors
        );
    }
    md.push_str("\n## Goals\n\n");
    md.push_str(&goals(rows));
    if !context.failures.is_empty() {
        md.push_str("\n## Did not run\n\n");
        for failure in &context.failures {
            let _ = writeln!(md, "- {failure}");
        }
    }
    let md_path = out_dir.join("pd.md");
    std::fs::write(&md_path, md).map_err(|e| format!("{}: {e}", md_path.display()))?;
    println!("\nwrote {} and {}", json_path.display(), md_path.display());
    Ok(())
}
