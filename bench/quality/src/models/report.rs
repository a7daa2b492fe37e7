//! `models.json` and `models.md`: per workload and target, the requests that reached a pod
//! not serving their model, adapter loads and swaps, and TTFT, beside the quality rows.

use std::path::Path;

use serde::Serialize;

use super::ModelNotes;
use crate::summary::{QualityRow, RunNotes};

#[derive(Serialize)]
struct ModelRow<'a> {
    workload: &'a str,
    target: &'a str,
    requests: usize,
    errors: u64,
    #[serde(flatten)]
    notes: &'a ModelNotes,
    ttft_p50_ms: Option<f64>,
    ttft_p99_ms: Option<f64>,
    output_tokens_per_s: f64,
}

/// Writes both files into `out_dir` when any run has model notes; returns the markdown table.
pub fn write(rows: &[(QualityRow, RunNotes)], out_dir: &Path) -> Result<Option<String>, String> {
    let model_rows: Vec<ModelRow<'_>> = rows
        .iter()
        .filter_map(|(row, notes)| {
            notes.models.as_ref().map(|models| ModelRow {
                workload: &row.workload,
                target: &row.target,
                requests: notes.requests,
                errors: row.errors,
                notes: models,
                ttft_p50_ms: row.ttft_p50_ms,
                ttft_p99_ms: row.ttft_p99_ms,
                output_tokens_per_s: row.output_tokens_per_s,
            })
        })
        .collect();
    if model_rows.is_empty() {
        return Ok(None);
    }
    let json = serde_json::to_string_pretty(&model_rows).map_err(|e| e.to_string())?;
    let json_path = out_dir.join("models.json");
    std::fs::write(&json_path, json + "\n").map_err(|e| format!("{}: {e}", json_path.display()))?;
    let ms = |v: Option<f64>| v.map(|v| format!("{v:.0}")).unwrap_or_else(|| "-".into());
    let mut table = String::from(
        "| workload | target | requests | errors | to a pod without the model | adapter loads | adapter swaps | TTFT p50 ms | TTFT p90 ms | TTFT p99 ms | out tok/s |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for row in &model_rows {
        table.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.0} |\n",
            row.workload,
            row.target,
            row.requests,
            row.errors,
            row.notes.wrong_pod_requests,
            row.notes.adapter_loads,
            row.notes.adapter_swaps,
            ms(row.ttft_p50_ms),
            ms(row.notes.ttft_p90_ms),
            ms(row.ttft_p99_ms),
            row.output_tokens_per_s,
        ));
    }
    let md_path = out_dir.join("models.md");
    std::fs::write(&md_path, format!("# Many models and LoRA adapters (workloads h, i)\n\n{table}"))
        .map_err(|e| format!("{}: {e}", md_path.display()))?;
    Ok(Some(table))
}
