//! `replicas.json` (one row per workload and target) and `replicas.md`: the table, the
//! issue's goals judged on this run's numbers, and what peering costs.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::peer_cost::PeerCost;
use crate::options::Options;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ReplicaRow {
    pub workload: String,
    pub target: String,
    /// wasm-epp Envoys behind the front (0: round robin straight over the pods).
    pub replicas: usize,
    pub peering: bool,
    /// Prefix-cache hits / queries over the run, from the pods' own counters; 0..1.
    pub hit_rate: Option<f64>,
    pub ttft_p50_ms: Option<f64>,
    pub ttft_p90_ms: Option<f64>,
    pub ttft_p99_ms: Option<f64>,
    pub output_tokens_per_s: f64,
    pub requests_per_s: f64,
    pub errors: u64,
    /// Sent by all replicas together, per second of the run.
    pub peer_bytes_per_s: f64,
    pub peer_events_per_s: f64,
    pub peer_messages_per_s: f64,
    pub peer_send_failed: f64,
    /// CPU of one replica's Envoy over the run, in cores (mean over replicas).
    pub envoy_cpu_per_replica: Option<f64>,
    /// Of which its main thread (the pool service: scrapes, peer exchange).
    pub main_thread_cpu_per_replica: Option<f64>,
    pub wall_s: f64,
}

fn cell(value: Option<f64>, scale: f64, decimals: usize) -> String {
    value.map(|v| format!("{:.*}", decimals, v * scale)).unwrap_or_else(|| "-".into())
}

/// A row's measured fields as text, in column order (shared by the console line and the table).
fn cells(row: &ReplicaRow) -> [String; 9] {
    [
        cell(row.hit_rate, 100.0, 1),
        cell(row.ttft_p50_ms, 1.0, 0),
        cell(row.ttft_p90_ms, 1.0, 0),
        format!("{:.0}", row.output_tokens_per_s),
        row.errors.to_string(),
        format!("{:.0}", row.peer_bytes_per_s),
        format!("{:.1}", row.peer_events_per_s),
        cell(row.envoy_cpu_per_replica, 1.0, 3),
        cell(row.main_thread_cpu_per_replica, 1.0, 3),
    ]
}

pub fn one_line(row: &ReplicaRow) -> String {
    let [hit, p50, p90, tokens, errors, bytes, events, cpu, main] = cells(row);
    format!(
        "{:<26} hit {hit:>5}%  TTFT p50 {p50:>5} p90 {p90:>5} ms  {tokens:>5} tok/s  errors {errors}  peers {bytes:>7} B/s {events:>5} ev/s  CPU/replica {cpu} (main {main})",
        row.target,
    )
}

fn table(rows: &[ReplicaRow]) -> String {
    let mut out = String::from("| workload | target | hit rate % | TTFT p50 ms | TTFT p90 ms | out tok/s | errors | peer B/s | peer events/s | Envoy CPU/replica (cores) | main thread |\n");
    out.push_str("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for row in rows {
        let _ = writeln!(out, "| {} | {} | {} |", row.workload, row.target, cells(row).join(" | "));
    }
    out
}

fn find<'a>(rows: &'a [ReplicaRow], workload: &str, target: &str) -> Option<&'a ReplicaRow> {
    rows.iter().find(|r| r.workload == workload && r.target == target)
}

fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "NOT met"
    }
}

/// The goals, judged per workload on this run's rows (only where both rows exist).
fn goals(rows: &[ReplicaRow]) -> String {
    let mut out = String::new();
    let mut workloads: Vec<&str> = rows.iter().map(|r| r.workload.as_str()).collect();
    workloads.dedup();
    for workload in workloads {
        let _ = writeln!(out, "\n**{workload}**\n");
        let one = find(rows, workload, "wasm-epp-x1");
        for target in ["wasm-epp-x2", "wasm-epp-x4"] {
            let (Some(one), Some(many)) = (one, find(rows, workload, target)) else { continue };
            if let (Some(a), Some(b)) = (one.hit_rate, many.hit_rate) {
                let points = (b - a) * 100.0;
                let _ = writeln!(
                    out,
                    "- {target}: hit rate {points:+.1} points vs x1 (goal >= -3): {}",
                    verdict(points >= -3.0)
                );
            }
            if let (Some(a), Some(b)) = (one.ttft_p90_ms, many.ttft_p90_ms) {
                let ratio = b / a.max(f64::MIN_POSITIVE);
                let _ = writeln!(
                    out,
                    "- {target}: TTFT p90 {ratio:.2} x that of x1 (goal <= 1.2): {}",
                    verdict(ratio <= 1.2)
                );
            }
            let ratio = many.output_tokens_per_s / one.output_tokens_per_s.max(f64::MIN_POSITIVE);
            let _ = writeln!(
                out,
                "- {target}: output tokens/s {ratio:.2} x that of x1 (goal >= 0.95): {}",
                verdict(ratio >= 0.95)
            );
        }
        for (name, label) in [
            ("wasm-epp-x4-no-peering", "x4 without peering"),
            ("wasm-epp-x4-no-peering-prior", "x4 without peering, reuse_prior 1"),
        ] {
            let recovery = (one, find(rows, workload, "wasm-epp-x4-least-recent"), find(rows, workload, name));
            let (Some(one), Some(before), Some(now)) = recovery else { continue };
            if let (Some(a), Some(b), Some(c)) = (one.hit_rate, before.hit_rate, now.hit_rate) {
                let loss = a - b;
                let share = if loss > 0.0 { (c - b) / loss } else { f64::NAN };
                let _ = writeln!(
                    out,
                    "- {label}: {:.1} % hit vs {:.1} % with least-recent placement and {:.1} % at x1: {:.0} % of the loss recovered (goal >= 50 %): {}",
                    c * 100.0, b * 100.0, a * 100.0, share * 100.0, verdict(share >= 0.5)
                );
            }
        }
        for (with_name, without_name) in
            [("wasm-epp-x2", "wasm-epp-x2-no-peering"), ("wasm-epp-x4", "wasm-epp-x4-no-peering")]
        {
            let (Some(with), Some(without)) = (find(rows, workload, with_name), find(rows, workload, without_name))
            else {
                continue;
            };
            let decisions = with.requests_per_s / with.replicas.max(1) as f64;
            let delta = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| a - b);
            let main = delta(with.main_thread_cpu_per_replica, without.main_thread_cpu_per_replica);
            let whole = delta(with.envoy_cpu_per_replica, without.envoy_cpu_per_replica);
            // At a few decisions per second this is mostly the fixed cost of sending every
            // send interval; the per-decision cost is measured at a high rate below.
            let _ = writeln!(
                out,
                "- {with_name} vs {without_name}: peering adds {} % of a core per replica on the main thread ({} % whole Envoy; single runs on 2 shared cores, noisy) at {decisions:.1} decisions/s per replica",
                cell(main, 100.0, 2),
                cell(whole, 100.0, 2)
            );
        }
    }
    out
}

pub fn write(
    rows: &[ReplicaRow],
    cost: Option<&PeerCost>,
    failures: &[String],
    options: &Options,
    runtime: Duration,
    out_dir: &Path,
) -> Result<(), String> {
    let json_path = out_dir.join("replicas.json");
    let text = serde_json::to_string_pretty(rows).map_err(|e| e.to_string())?;
    std::fs::write(&json_path, text + "\n").map_err(|e| format!("{}: {e}", json_path.display()))?;
    let mut md = String::from("# Gateway replicas: routing quality with 1, 2 and 4 wasm-epp Envoys\n\n");
    let _ = writeln!(
        md,
        "Generated by `make bench` (bench/quality/src/replicas), finished {}; {} run, seed {}, time scale {}, {} cores, {:.0} s. \
         Each target: pods emptied, N wasm-epp Envoys (2 workers each) behind a round-robin front Envoy, \
         the workload replayed through the front. Hit rate from the pods' own counters; peer traffic from the \
         replicas' `wasm_epp_peer_*` stats (each replica lists every replica, itself included, as a \
         Kubernetes label selector would; the first answer from its own listener names it, and it sends there no more); CPU from /proc (mean per replica, in cores).\n",
        crate::run::utc_now(),
        if options.quick { "quick" } else { "full" },
        options.seed,
        options.time_scale,
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        runtime.as_secs_f64()
    );
    if options.peer_cost_only {
        md.push_str("The table below is the previous run's (replicas.json); this run (--peer-cost-only) measured the CPU cost of peering alone.\n\n");
    }
    md.push_str(&table(rows));
    md.push_str("\n## Goals (issue 12), this run\n");
    md.push_str(&goals(rows));
    if let Some(cost) = cost {
        md.push_str(&cost.markdown());
        let cost_path = out_dir.join("replicas_peer_cost.json");
        let text = serde_json::to_string_pretty(cost).map_err(|e| e.to_string())?;
        std::fs::write(&cost_path, text + "\n").map_err(|e| format!("{}: {e}", cost_path.display()))?;
    }
    if !failures.is_empty() {
        md.push_str("\n## Did not run\n\n");
        for failure in failures {
            let _ = writeln!(md, "- {failure}");
        }
    }
    let md_path = out_dir.join("replicas.md");
    std::fs::write(&md_path, &md).map_err(|e| format!("{}: {e}", md_path.display()))?;
    println!("\n{}", table(rows));
    println!("wrote {} and {}", json_path.display(), md_path.display());
    Ok(())
}

/// The rows of the last run's replicas.json (none if absent or unreadable).
pub fn read_rows(out_dir: &Path) -> Vec<ReplicaRow> {
    std::fs::read_to_string(out_dir.join("replicas.json"))
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or_default()
}
