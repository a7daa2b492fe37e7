//! The inference-perf ladder's rows: `inference-perf.json`, `inference-perf.md` (the table
//! issue 14 opened with, and one per stage), and what `plot_inference_perf.py` draws.

use std::path::Path;

use serde::Serialize;
use serde_json::Value;

use crate::report::{millis as ms, percent};

/// One stage of one target, from inference-perf's `stage_N_lifecycle_metrics.json`.
#[derive(Debug, Clone, Serialize)]
pub struct StageFigures {
    pub stage: usize,
    pub rate_per_s: f64,
    pub successes: u64,
    pub failures: u64,
    pub ttft_p50_ms: Option<f64>,
    pub ttft_p90_ms: Option<f64>,
    pub output_tokens_per_s: Option<f64>,
    /// Cached prompt tokens over prompt tokens, as the pods reported them in `usage`.
    pub usage_hit_rate: Option<f64>,
}

impl StageFigures {
    pub fn of(stage: usize, rate_per_s: f64, report: &Value) -> Self {
        Self {
            stage: stage + 1,
            rate_per_s,
            successes: report.pointer("/successes/count").and_then(Value::as_u64).unwrap_or(0),
            failures: report.pointer("/failures/count").and_then(Value::as_u64).unwrap_or(0),
            ttft_p50_ms: seconds_as_ms(report.pointer("/successes/latency/time_to_first_token/median")),
            ttft_p90_ms: seconds_as_ms(report.pointer("/successes/latency/time_to_first_token/p90")),
            output_tokens_per_s: report.pointer("/successes/throughput/output_tokens_per_sec").and_then(Value::as_f64),
            usage_hit_rate: usage_hit_rate(report.pointer("/successes/prompt_tokens")),
        }
    }
}

/// One target over the whole ladder.
#[derive(Debug, Clone, Serialize)]
pub struct InferencePerfRow {
    pub target: String,
    pub sent: u64,
    pub successes: u64,
    pub failures: u64,
    /// The pods' own counters (`vllm:prefix_cache_hits` / `_queries`), whole run.
    pub pod_hit_rate: Option<f64>,
    pub usage_hit_rate: Option<f64>,
    pub ttft_p50_ms: Option<f64>,
    pub ttft_p90_ms: Option<f64>,
    pub output_tokens_per_s: Option<f64>,
    pub requests_per_pod: Vec<u64>,
    pub wall_s: f64,
    pub stages: Vec<StageFigures>,
}

impl InferencePerfRow {
    pub fn of(
        target: &str,
        summary: &Value,
        stages: Vec<StageFigures>,
        pod_hit_rate: Option<f64>,
        requests_per_pod: Vec<u64>,
        wall_s: f64,
    ) -> Self {
        let successes = summary.get("successes").unwrap_or(&Value::Null);
        Self {
            target: target.to_string(),
            sent: summary.pointer("/load_summary/count").and_then(Value::as_u64).unwrap_or(0),
            successes: successes.pointer("/count").and_then(Value::as_u64).unwrap_or(0),
            failures: summary.pointer("/failures/count").and_then(Value::as_u64).unwrap_or(0),
            pod_hit_rate,
            usage_hit_rate: usage_hit_rate(successes.pointer("/prompt_tokens")),
            ttft_p50_ms: seconds_as_ms(successes.pointer("/latency/time_to_first_token/median")),
            ttft_p90_ms: seconds_as_ms(successes.pointer("/latency/time_to_first_token/p90")),
            output_tokens_per_s: successes.pointer("/throughput/output_tokens_per_sec").and_then(Value::as_f64),
            requests_per_pod,
            wall_s,
            stages,
        }
    }

    pub fn one_line(&self) -> String {
        format!(
            "{:<26} pods' hit {:>6}  usage hit {:>6}  TTFT p50 {:>7} p90 {:>7} ms  {:>6} out tok/s  {}/{} answered  per pod {:?}  ({:.0} s)",
            self.target,
            percent(self.pod_hit_rate),
            percent(self.usage_hit_rate),
            ms(self.ttft_p50_ms),
            ms(self.ttft_p90_ms),
            ms(self.output_tokens_per_s),
            self.successes,
            self.sent,
            self.requests_per_pod,
            self.wall_s
        )
    }
}

/// What the report says of the run itself.
pub struct Context {
    pub started_at: String,
    pub quick: bool,
    pub stage_s: u64,
    pub seed: u64,
    pub runtime_s: f64,
    /// The workload and the pods, in a sentence.
    pub shape: String,
    pub failures: Vec<(String, String)>,
}

pub fn write(rows: &[InferencePerfRow], context: &Context, out_dir: &Path) -> Result<(), String> {
    let json_path = out_dir.join("inference-perf.json");
    let text = serde_json::to_string_pretty(rows).map_err(|e| e.to_string())?;
    std::fs::write(&json_path, text + "\n").map_err(|e| format!("{}: {e}", json_path.display()))?;
    let markdown_path = out_dir.join("inference-perf.md");
    let markdown = markdown(rows, context);
    std::fs::write(&markdown_path, &markdown).map_err(|e| format!("{}: {e}", markdown_path.display()))?;
    println!("\n{markdown}\nwrote {} and {}", json_path.display(), markdown_path.display());
    Ok(())
}

fn markdown(rows: &[InferencePerfRow], context: &Context) -> String {
    let mut out = String::from("# Issue 14's ladder, driven by inference-perf\n\n");
    out.push_str(&format!(
        "Run {}; {} s per stage{}, seed {}, {:.0} s in all. {}. TTFT and tokens/s are inference-perf's; \
         *usage hit* is the cached share of prompt tokens the pods reported to it; *pods' hit* is their own \
         prefix-cache counters. Reproduce: `make bench-inference-perf`.\n\n",
        context.started_at,
        context.stage_s,
        if context.quick { " (--quick)" } else { "" },
        context.seed,
        context.runtime_s,
        context.shape
    ));
    out.push_str(
        "| target | pods' hit | usage hit | TTFT p50 ms | TTFT p90 ms | out tok/s | answered | requests per pod |\n",
    );
    out.push_str("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n");
    for row in rows {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} / {} | {} |\n",
            row.target,
            percent(row.pod_hit_rate),
            percent(row.usage_hit_rate),
            ms(row.ttft_p50_ms),
            ms(row.ttft_p90_ms),
            ms(row.output_tokens_per_s),
            row.successes,
            row.sent,
            row.requests_per_pod.iter().map(u64::to_string).collect::<Vec<_>>().join(" / ")
        ));
    }
    out.push_str(&top_stage(rows));
    out.push_str("\n## Per stage\n\n| target | stage | rate/s | usage hit | TTFT p50 ms | TTFT p90 ms | out tok/s | answered | failed |\n");
    out.push_str("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for row in rows {
        for stage in &row.stages {
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                row.target,
                stage.stage,
                stage.rate_per_s,
                percent(stage.usage_hit_rate),
                ms(stage.ttft_p50_ms),
                ms(stage.ttft_p90_ms),
                ms(stage.output_tokens_per_s),
                stage.successes,
                stage.failures
            ));
        }
    }
    for (target, reason) in &context.failures {
        out.push_str(&format!("\n{target} did not run: {reason}\n"));
    }
    out
}

/// The top stage against round robin's, in the terms of issue 14's goal (g): output tokens/s
/// as a multiple of round robin's, and round robin's TTFT p90 as a multiple of each target's.
fn top_stage(rows: &[InferencePerfRow]) -> String {
    let top = |row: &InferencePerfRow| row.stages.last().cloned();
    let baseline = rows.iter().find(|row| row.target == "envoy-round-robin").and_then(top);
    let mut out = String::from(
        "\n## Top stage against round robin\n\n| target | rate/s | TTFT p90 ms | round robin's p90 / this | out tok/s | × round robin's |\n\
         | --- | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for row in rows {
        let Some(stage) = top(row) else { continue };
        let ratio = |num: Option<f64>, den: Option<f64>| match (num, den) {
            (Some(n), Some(d)) if d > 0.0 => format!("{:.2}", n / d),
            _ => "-".to_string(),
        };
        let rr_p90 = baseline.as_ref().and_then(|b| b.ttft_p90_ms);
        let rr_tokens = baseline.as_ref().and_then(|b| b.output_tokens_per_s);
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            row.target,
            stage.rate_per_s,
            ms(stage.ttft_p90_ms),
            ratio(rr_p90, stage.ttft_p90_ms),
            ms(stage.output_tokens_per_s),
            ratio(stage.output_tokens_per_s, rr_tokens)
        ));
    }
    out
}

fn seconds_as_ms(value: Option<&Value>) -> Option<f64> {
    value?.as_f64().map(|seconds| seconds * 1000.0)
}

fn usage_hit_rate(prompt_tokens: Option<&Value>) -> Option<f64> {
    let total = prompt_tokens?.get("total")?.as_f64()?;
    let cached = prompt_tokens?.get("cached")?.as_f64()?;
    (total > 0.0).then(|| cached / total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_stage_reads_inference_perfs_seconds_as_milliseconds_and_the_cached_share() {
        let report = json!({
            "successes": {"count": 40, "latency": {"time_to_first_token": {"median": 0.25, "p90": 1.5}},
                          "throughput": {"output_tokens_per_sec": 512.0},
                          "prompt_tokens": {"total": 1000.0, "cached": 600.0}},
            "failures": {"count": 2}});
        let stage = StageFigures::of(0, 4.0, &report);
        assert_eq!((stage.stage, stage.successes, stage.failures), (1, 40, 2));
        assert_eq!((stage.ttft_p50_ms, stage.ttft_p90_ms), (Some(250.0), Some(1500.0)));
        assert_eq!(stage.usage_hit_rate, Some(0.6));
    }

    #[test]
    fn a_report_without_answers_gives_no_figures_rather_than_zeros() {
        let stage = StageFigures::of(2, 16.0, &json!({"successes": {"count": 0}, "failures": {"count": 5}}));
        assert_eq!((stage.ttft_p90_ms, stage.usage_hit_rate, stage.output_tokens_per_s), (None, None, None));
    }

    #[test]
    fn the_top_stage_is_judged_against_round_robins_top_stage() {
        let stage = |p90: f64, tokens: f64| StageFigures {
            stage: 5,
            rate_per_s: 16.0,
            successes: 320,
            failures: 0,
            ttft_p50_ms: None,
            ttft_p90_ms: Some(p90),
            output_tokens_per_s: Some(tokens),
            usage_hit_rate: None,
        };
        let row =
            |target: &str, top: StageFigures| InferencePerfRow::of(target, &json!({}), vec![top], None, vec![], 0.0);
        let rows = [row("envoy-round-robin", stage(6000.0, 1200.0)), row("wasm-epp-learning", stage(150.0, 1800.0))];
        let table = top_stage(&rows);
        assert!(table.contains("| wasm-epp-learning | 16 | 150 | 40.00 | 1800 | 1.50 |"), "{table}");
        assert!(table.contains("| envoy-round-robin | 16 | 6000 | 1.00 | 1200 | 1.00 |"), "{table}");
    }
}
