//! `faults.json` (rows, for the plot script) and `faults.md` (the table per scenario, the
//! run's settings and what did not run).

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use super::FaultsRow;
use crate::report::millis as ms;
use crate::workload::Workload;

/// The run's settings, for the report.
pub struct Context {
    pub started_at: String,
    pub runtime_s: f64,
    pub seed: u64,
    pub quick: bool,
    pub time_scale: f64,
    /// What the failing pods answer.
    pub fail_status: u16,
    pub workloads: Vec<Workload>,
    /// Targets or pools that did not run.
    pub failures: Vec<String>,
}

/// `faults.json`.
#[derive(Serialize)]
struct Document<'a> {
    started_at: &'a str,
    runtime_s: f64,
    seed: u64,
    quick: bool,
    time_scale: f64,
    fail_status: u16,
    rows: &'a [FaultsRow],
    failures: &'a [String],
}

pub use crate::report::round;

fn count(value: Option<f64>) -> String {
    value.map_or_else(|| "-".into(), |v| format!("{v:.0}"))
}

fn kinds(row: &FaultsRow) -> String {
    if row.failures_by_kind.is_empty() {
        return "-".into();
    }
    let parts: Vec<String> = row.failures_by_kind.iter().map(|(kind, n)| format!("{n} × {kind}")).collect();
    parts.join(", ")
}

pub fn one_line(row: &FaultsRow) -> String {
    format!(
        "{:<26} {:>4} requests, {:>4} failed ({:>5.1}%)  TTFT p50 {:>5} p90 {:>5} ms  E2E p50 {:>5} ms  retries {} ({} succeeded)  ejections {} (adopted {})  {:.1} s",
        row.target,
        row.requests,
        row.failed,
        row.failed_share * 100.0,
        ms(row.ttft_p50_ms),
        ms(row.ttft_p90_ms),
        ms(row.e2e_p50_ms),
        count(row.pool_retries),
        count(row.pool_retries_succeeded),
        count(row.ejections),
        count(row.ejections_adopted),
        row.wall_s,
    )
}

/// The table, one line per scenario and target.
pub fn table(rows: &[FaultsRow]) -> String {
    let mut out = String::from(
        "| workload | scenario | target | requests | failed | failed share | TTFT p50 ms | TTFT p90 ms | E2E p50 ms | pool retries (succeeded) | ejections (adopted) | attempts judged failed | failures | wall s |\n\
         | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |\n",
    );
    for row in rows {
        let retries = match row.pool_retries {
            Some(retries) => format!("{retries:.0} ({})", count(row.pool_retries_succeeded)),
            None => "-".into(),
        };
        let ejections = match row.ejections {
            Some(ejections) => format!("{ejections:.0} ({})", count(row.ejections_adopted)),
            None => "-".into(),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {:.1}% | {} | {} | {} | {} | {} | {} | {} | {:.1} |",
            row.workload,
            row.scenario,
            row.target,
            row.requests,
            row.failed,
            row.failed_share * 100.0,
            ms(row.ttft_p50_ms),
            ms(row.ttft_p90_ms),
            ms(row.e2e_p50_ms),
            retries,
            ejections,
            count(row.attempts_failed),
            kinds(row),
            row.wall_s,
        );
    }
    out
}

pub fn write(rows: &[FaultsRow], context: &Context, out_dir: &Path) -> Result<(), String> {
    let document = Document {
        started_at: &context.started_at,
        runtime_s: round(context.runtime_s, 1),
        seed: context.seed,
        quick: context.quick,
        time_scale: context.time_scale,
        fail_status: context.fail_status,
        rows,
        failures: &context.failures,
    };
    let json_path = out_dir.join("faults.json");
    let text = serde_json::to_string_pretty(&document).map_err(|e| e.to_string())?;
    std::fs::write(&json_path, text + "\n").map_err(|e| format!("{}: {e}", json_path.display()))?;

    let mut md = String::from("# Pods that fail every request\n\n");
    let _ = writeln!(
        md,
        "In each scenario the first pods of the pool answer {} to every inference request (`/sim/faults` \
         `{{\"fail_fraction\": 1.0}}`, set after the pods' restart and before the target starts) while \
         their `/metrics` look idle. Every target runs on the same pods, restarted cold, with the same \
         requests. `failed` = requests the client saw fail (non-200, broken stream, timeout); TTFT and E2E \
         are nearest-rank over the successes. `pool retries` = Envoy's `envoy_cluster_upstream_rq_retry` of \
         the `pool` cluster (succeeded: `_retry_success`); `ejections` = wasm-epp's `wasm_epp_pod_ejections` \
         summed over the pods (adopted: `wasm_epp_pod_ejections_adopted`, ejections a worker took over \
         from another worker of its Envoy); `attempts judged failed` = `wasm_epp_pod_attempts_failed` (`-`: not \
         counted by this target). `wasm-epp-no-outliers` is the same build with \
         `\"outlier_detection\": {{\"enabled\": false}}`.\n",
        context.fail_status
    );
    let _ = writeln!(
        md,
        "Run {}, {:.0} s, seed {}, time scale {}, {} run.\n",
        context.started_at,
        context.runtime_s,
        context.seed,
        context.time_scale,
        if context.quick { "quick" } else { "full" },
    );
    md.push_str(&table(rows));
    md.push('\n');
    let failing: Vec<String> = rows
        .iter()
        .filter(|row| row.served_by_failing > 0)
        .map(|row| {
            format!("{} / {}: {} successes served by a failing pod", row.scenario, row.target, row.served_by_failing)
        })
        .collect();
    md.push_str(&crate::report::workloads_as_run(&context.workloads));
    if !failing.is_empty() || !context.failures.is_empty() {
        md.push_str("\n## Notes and problems\n\n");
        for line in failing.iter().chain(&context.failures) {
            let _ = writeln!(md, "- {}", line.lines().next().unwrap_or_default());
        }
    }
    let md_path = out_dir.join("faults.md");
    std::fs::write(&md_path, &md).map_err(|e| format!("{}: {e}", md_path.display()))?;
    println!("\n{}", table(rows));
    println!("wrote {} and {} in {:.0} s", json_path.display(), md_path.display(), context.runtime_s);
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn the_table_names_failures_by_kind_and_leaves_unmeasured_counters_out() {
        let row = FaultsRow {
            workload: "c-no-prefix".into(),
            scenario: "3-of-4-failing".into(),
            target: "vllm-router-power-of-two".into(),
            failing_pods: vec!["127.0.0.1:1".into()],
            requests: 48,
            failed: 36,
            failed_share: 0.75,
            failures_by_kind: BTreeMap::from([("status 500".to_string(), 35), ("other".to_string(), 1)]),
            served_by_failing: 0,
            ttft_p50_ms: Some(70.0),
            ttft_p90_ms: Some(130.0),
            e2e_p50_ms: None,
            wall_s: 4.2,
            pool_retries: None,
            pool_retries_succeeded: None,
            ejections: None,
            ejections_adopted: None,
            attempts_failed: None,
        };
        let table = table(&[row]);
        assert!(table.contains(
            "| c-no-prefix | 3-of-4-failing | vllm-router-power-of-two | 48 | 36 | 75.0% | 70 | 130 | - | - | - | - | 1 × other, 35 × status 500 | 4.2 |"
        ));
    }
}
