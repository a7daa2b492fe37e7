//! `comparison.json` (rows and verdicts, for the plot script) and `comparison.md` (the table,
//! the verdict lines, the run's settings and anything odd).

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use super::{ComparisonRow, Verdict};
use crate::report::{millis as ms, percent};
use crate::workload::Workload;

/// The run's settings, for the report.
pub struct Context {
    pub started_at: String,
    pub runtime_s: f64,
    pub seed: u64,
    pub quick: bool,
    pub time_scale: f64,
    pub workloads: Vec<Workload>,
    /// Answers without an arm, failures, pods serving both arms.
    pub notes: Vec<String>,
    /// Targets or pools that did not run.
    pub failures: Vec<String>,
}

/// `comparison.json`.
#[derive(Serialize)]
struct Document<'a> {
    started_at: &'a str,
    runtime_s: f64,
    seed: u64,
    quick: bool,
    time_scale: f64,
    comparison: serde_json::Value,
    /// The upper bounds of the gateway's buckets (`first_byte_cumulative` has one more: `+Inf`).
    bucket_bounds_ms: &'a [u64],
    rows: &'a [ComparisonRow],
    verdicts: &'a [Verdict],
    notes: &'a [String],
    failures: &'a [String],
}

pub use crate::report::round;

/// The row's name in tables: the target, and its arm if any.
fn name(row: &ComparisonRow) -> String {
    match &row.arm {
        Some(arm) => format!("{} {arm} arm", row.target),
        None => format!("{} (full pool)", row.target),
    }
}

pub fn one_line(row: &ComparisonRow) -> String {
    let gateway = row.gateway.as_ref().map_or_else(String::new, |g| {
        format!(
            "  gateway: {:.0} requests, first byte p50 {} p90 {} ms",
            g.requests,
            ms(g.first_byte_p50_ms),
            ms(g.first_byte_p90_ms)
        )
    });
    format!(
        "{:<36} {} pods  hit {:>6}  TTFT p50 {:>5} p90 {:>5} p99 {:>5} ms  E2E p50 {:>5} ms  {:>5.0} out tok/s ({:.0}%)  {} requests, {} errors{gateway}",
        name(row),
        row.pods.len(),
        percent(row.hit_rate),
        ms(row.ttft_p50_ms),
        ms(row.ttft_p90_ms),
        ms(row.ttft_p99_ms),
        ms(row.e2e_p50_ms),
        row.output_tokens_per_s,
        row.output_share * 100.0,
        row.requests,
        row.errors,
    )
}

/// The table, one line per arm and reference.
pub fn table(rows: &[ComparisonRow]) -> String {
    let mut out = String::from(
        "| workload | run | pods | requests | TTFT p50 ms | TTFT p90 ms | TTFT p99 ms | E2E p50 ms | out tok/s | out tok share | hit rate | gateway requests | gateway first byte p50 ms | gateway first byte p90 ms | gateway first byte mean ms | gateway errors |\n\
         | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for row in rows {
        let gateway = row.gateway.as_ref();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {:.0} | {:.1}% | {} | {} | {} | {} | {} | {} |",
            row.workload,
            name(row),
            row.pods.len(),
            row.requests,
            ms(row.ttft_p50_ms),
            ms(row.ttft_p90_ms),
            ms(row.ttft_p99_ms),
            ms(row.e2e_p50_ms),
            row.output_tokens_per_s,
            row.output_share * 100.0,
            percent(row.hit_rate),
            gateway.map_or_else(|| "-".into(), |g| format!("{:.0}", g.requests)),
            ms(gateway.and_then(|g| g.first_byte_p50_ms)),
            ms(gateway.and_then(|g| g.first_byte_p90_ms)),
            ms(gateway.and_then(|g| g.first_byte_mean_ms)),
            gateway.map_or_else(|| "-".into(), |g| format!("{:.0}", g.errors)),
        );
    }
    out
}

/// One workload's verdict lines.
fn verdict_lines(rows: &[ComparisonRow], verdict: &Verdict) -> String {
    let find = |target: &str, arm: Option<&str>| {
        rows.iter().find(|r| r.workload == verdict.workload && r.target == target && r.arm.as_deref() == arm)
    };
    let p90 = |row: Option<&ComparisonRow>| ms(row.and_then(|r| r.ttft_p90_ms));
    let gateway_p90 =
        |row: Option<&ComparisonRow>| ms(row.and_then(|r| r.gateway.as_ref()).and_then(|g| g.first_byte_p90_ms));
    let mean = |row: Option<&ComparisonRow>| row.and_then(|r| r.gateway.as_ref()).and_then(|g| g.first_byte_mean_ms);
    let gateway_mean = |row: Option<&ComparisonRow>| ms(mean(row));
    let ratio = |value: Option<f64>| value.map_or_else(|| "-".into(), |v| format!("{v:.2}"));
    let (picker, baseline) = (find("wasm-epp-compared", Some("picker")), find("wasm-epp-compared", Some("baseline")));
    let (full, least) = (find("wasm-epp", None), find("envoy-least-request", None));
    let gateway_mean_ratio = mean(picker).zip(mean(baseline)).filter(|(_, b)| *b > 0.0).map(|(a, b)| a / b);
    let side = |value: Option<f64>| match value {
        Some(v) if v < 1.0 => "the picker is faster",
        Some(_) => "the picker is NOT faster",
        None => "no verdict",
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "- **{}, the gateway's A/B test**: TTFT p90 picker arm / baseline arm = {} / {} ms = **{}** ({}); \
         the gateway's own first-byte p90 (histogram) {} / {} ms = {}, its mean {} / {} ms = {}.",
        verdict.workload,
        p90(picker),
        p90(baseline),
        ratio(verdict.arms_ttft_p90_ratio),
        side(verdict.arms_ttft_p90_ratio),
        gateway_p90(picker),
        gateway_p90(baseline),
        ratio(verdict.arms_gateway_first_byte_p90_ratio),
        gateway_mean(picker),
        gateway_mean(baseline),
        ratio(gateway_mean_ratio),
    );
    let _ = writeln!(
        out,
        "- **{}, separate full-pool runs**: TTFT p90 wasm-epp / envoy-least-request = {} / {} ms = **{}** ({}).",
        verdict.workload,
        p90(full),
        p90(least),
        ratio(verdict.full_pool_ttft_p90_ratio),
        side(verdict.full_pool_ttft_p90_ratio),
    );
    let same = match verdict.same_verdict {
        Some(true) => "yes",
        Some(false) => "**no**",
        None => "-",
    };
    let _ = writeln!(out, "- Same verdict: {same}.");
    out
}

pub fn write(rows: &[ComparisonRow], verdicts: &[Verdict], context: &Context, out_dir: &Path) -> Result<(), String> {
    let document = Document {
        started_at: &context.started_at,
        runtime_s: round(context.runtime_s, 1),
        seed: context.seed,
        quick: context.quick,
        time_scale: context.time_scale,
        comparison: crate::targets::comparison_section(),
        bucket_bounds_ms: &super::histogram::BOUNDS_MS,
        rows,
        verdicts,
        notes: &context.notes,
        failures: &context.failures,
    };
    let json_path = out_dir.join("comparison.json");
    let text = serde_json::to_string_pretty(&document).map_err(|e| e.to_string())?;
    std::fs::write(&json_path, text + "\n").map_err(|e| format!("{}: {e}", json_path.display()))?;

    let mut md = String::from("# The gateway's own A/B test against separate runs\n\n");
    let _ = writeln!(
        md,
        "`wasm-epp-compared` is wasm-epp with `\"comparison\": {}` and the decision header on: the gateway \
         splits the pool's pods in two arms and gives each request to one, the picker arm routing with \
         wasm-epp's full logic on its pods, the baseline arm by fewest requests in flight on its own. Its \
         answers are split here by the decision header's `arm=`; an arm's pods are those that served its \
         requests (`x-served-by`), its hit rate their own prefix-cache counters summed. The gateway's \
         columns are its own per-arm stats (`wasm_epp_comparison_*` from Envoy's `/stats/prometheus`; \
         first byte = pick to first body byte of a streamed answer, quantiles interpolated within the \
         bucket as Prometheus's `histogram_quantile`). `wasm-epp` and `envoy-least-request` are separate \
         runs on the whole pool, same cold pods, same requests.\n",
        crate::targets::comparison_section()
    );
    let _ = writeln!(
        md,
        "Run {}, {:.0} s, seed {}, time scale {}, {} run. Client percentiles are nearest-rank over successful \
         requests; `out tok share` is the row's share of its run's output tokens.\n",
        context.started_at,
        context.runtime_s,
        context.seed,
        context.time_scale,
        if context.quick { "quick" } else { "full" },
    );
    md.push_str(&table(rows));
    md.push_str("\n## Verdicts (TTFT p90 ratios; below 1 = the picker faster)\n\n");
    for verdict in verdicts {
        md.push_str(&verdict_lines(rows, verdict));
    }
    md.push_str(
        "\nThe gateway's quantiles are only as fine as its buckets (10 ms apart from 20 to 100 ms, wider above: \
         `router/src/comparison_stats.rs`): a quantile \
         inside a bucket is interpolated as if that bucket's answers were spread evenly across it, so two arms whose \
         p90 fall in the same wide bucket read alike when their answers are not. Its mean (`_sum` / `_count`) is \
         exact; `comparison.json` keeps every arm's cumulative bucket counts (`first_byte_cumulative`).\n",
    );
    md.push('\n');
    md.push_str(&crate::report::workloads_as_run(&context.workloads));
    if !context.notes.is_empty() || !context.failures.is_empty() {
        md.push_str("\n## Notes and problems\n\n");
        for line in context.notes.iter().chain(&context.failures) {
            let _ = writeln!(md, "- {}", line.lines().next().unwrap_or_default());
        }
    }
    let md_path = out_dir.join("comparison.md");
    std::fs::write(&md_path, &md).map_err(|e| format!("{}: {e}", md_path.display()))?;
    println!("\n{}", table(rows));
    for verdict in verdicts {
        print!("{}", verdict_lines(rows, verdict));
    }
    println!("wrote {} and {} in {:.0} s", json_path.display(), md_path.display(), context.runtime_s);
    Ok(())
}
