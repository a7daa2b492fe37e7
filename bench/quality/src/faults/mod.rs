//! Failing pods (`--faults-only`): what the client sees when some pods answer 500 to every
//! inference request while their `/metrics` still look idle (an engine erroring, a wrong model
//! mounted).
//!
//! Such a pod holds nothing in flight and reports an empty queue, so any load-based router
//! puts it first. On one workload (c by default: unrelated prompts, 4 pods, 16 client slots)
//! two scenarios run: one pod failing, then three of four (`3/4` of the pool). For each, every
//! target runs on the same pods, restarted cold, with the faults set after the restart and
//! before the target starts, and the same requests: `wasm-epp` (outlier detection on, as
//! shipped), `wasm-epp-no-outliers` (off: the behaviour before it), Envoy least-request and
//! round robin, vllm-router power-of-two and cache-aware. Per run: requests sent, client-visible
//! failures, TTFT and E2E of the successes, and from Envoy's admin `/stats/prometheus` the
//! `pool` cluster's retries and wasm-epp's `wasm_epp_pod_ejections`. Results:
//! `faults.{json,md}`.

mod report;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use launcher::http;
use serde::Serialize;

use crate::balance::Balance;
use crate::client::StreamingClient;
use crate::driver::{replay, Replay};
use crate::options::Options;
use crate::pool::SimulatedPool;
use crate::prometheus::sum_of;
use crate::run::DimensionBench as Bench;
use crate::summary::summarize;
use crate::targets::{self, RunningTarget, TargetName};
use crate::workload::{Size, Workload};

/// What a failing pod answers to every inference request (`/sim/faults`).
const FAIL_STATUS: u16 = 500;
/// The filter flushes its stats on its tick (20 ms); this leaves it several.
const FLUSH_WAIT: Duration = Duration::from_millis(300);
const ADMIN_TIMEOUT: Duration = Duration::from_secs(10);
/// Envoy's retries of the `pool` cluster (the wasm-epp template's and the baselines' cluster).
const RETRIES: &str = "envoy_cluster_upstream_rq_retry";
/// Those of them whose answer was not a retriable failure.
const RETRIES_SUCCEEDED: &str = "envoy_cluster_upstream_rq_retry_success";
const POOL_CLUSTER_LABEL: &str = "envoy_cluster_name=\"pool\"";
/// wasm-epp's ejections, one series per pod (`{pod="<ip:port>"}`).
const EJECTIONS: &str = "wasm_epp_pod_ejections";
/// Attempts the filter judged failed (a later address of the request's list answered, or a 5xx).
const ATTEMPTS_FAILED: &str = "wasm_epp_pod_attempts_failed";
/// wasm-epp's ejections one worker took over from another.
const ADOPTED: &str = "wasm_epp_pod_ejections_adopted";

/// Some pods of the pool failing every request from the start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Scenario {
    /// `1-of-4-failing`, `3-of-4-failing`.
    pub label: String,
    /// The failing pods' indices in the pool (the first ones).
    pub failing: Vec<usize>,
}

impl Scenario {
    fn new(failing: usize, pods: usize) -> Self {
        Self { label: format!("{failing}-of-{pods}-failing"), failing: (0..failing).collect() }
    }
}

/// One pod failing; then three quarters of the pool (3 of 4, 6 of 8), if that is more than one
/// pod and leaves one healthy.
pub fn scenarios(pods: usize) -> Vec<Scenario> {
    let mut scenarios = Vec::new();
    if pods >= 2 {
        scenarios.push(Scenario::new(1, pods));
    }
    let most = pods * 3 / 4;
    if most > 1 && most < pods {
        scenarios.push(Scenario::new(most, pods));
    }
    scenarios
}

/// One target in one scenario.
#[derive(Debug, Clone, Serialize)]
pub struct FaultsRow {
    pub workload: String,
    pub scenario: String,
    pub target: String,
    /// `ip:port` of the failing pods.
    pub failing_pods: Vec<String>,
    /// Requests the client sent.
    pub requests: usize,
    /// Requests the client saw fail (non-200 status, broken stream, timeout).
    pub failed: usize,
    /// `failed / requests`.
    pub failed_share: f64,
    /// Failures by kind: `status 500`, `status 503`, ... or `other`.
    pub failures_by_kind: BTreeMap<String, usize>,
    /// Of the successes, those a failing pod served (`x-served-by`): none expected.
    pub served_by_failing: usize,
    pub ttft_p50_ms: Option<f64>,
    pub ttft_p90_ms: Option<f64>,
    pub e2e_p50_ms: Option<f64>,
    /// From the first request sent to the last answer.
    pub wall_s: f64,
    /// Envoy targets: the `pool` cluster's `envoy_cluster_upstream_rq_retry`.
    pub pool_retries: Option<f64>,
    /// Envoy targets: `envoy_cluster_upstream_rq_retry_success` of the `pool` cluster.
    pub pool_retries_succeeded: Option<f64>,
    /// wasm-epp targets: `wasm_epp_pod_ejections` summed over the pods.
    pub ejections: Option<f64>,
    /// wasm-epp targets: `wasm_epp_pod_ejections_adopted`.
    pub ejections_adopted: Option<f64>,
    /// wasm-epp targets: `wasm_epp_pod_attempts_failed`.
    pub attempts_failed: Option<f64>,
}

pub fn run(options: &Options) -> Result<(), String> {
    let started = Instant::now();
    let started_at = crate::run::utc_now();
    let (bench, out_dir) = Bench::start(options, "faults", "bench-faults")?;
    let size = if options.quick { Size::Quick } else { Size::Full };
    let mut rows = Vec::new();
    let mut failures = Vec::new();
    let mut workloads = Vec::new();
    for name in options.faults_workloads() {
        let workload = Workload::build(name, size, options.seed);
        let Some(pool) = bench.start_pool(&workload, &mut failures) else {
            workloads.push(workload);
            continue;
        };
        for scenario in scenarios(workload.pods) {
            println!(
                "-- {}: pods {:?} answer {FAIL_STATUS} to every inference request",
                scenario.label, scenario.failing
            );
            for target in &options.faults_targets {
                let target_started = Instant::now();
                let outcome = run_one(&bench, &workload, &pool, &scenario, *target);
                if let Err(reason) = pool.clear_faults() {
                    eprintln!("  warning: faults not cleared: {reason}");
                }
                match outcome {
                    Ok(row) => {
                        println!("  {}  ({:.0} s)", report::one_line(&row), target_started.elapsed().as_secs_f64());
                        rows.push(row);
                    }
                    Err(reason) => {
                        eprintln!("  {}: did not run: {reason}", target.label());
                        failures.push(format!("{} / {} / {}: {reason}", name.label(), scenario.label, target.label()));
                    }
                }
            }
        }
        workloads.push(workload);
    }
    let context = report::Context {
        started_at,
        runtime_s: started.elapsed().as_secs_f64(),
        seed: options.seed,
        quick: options.quick,
        time_scale: options.time_scale,
        fail_status: FAIL_STATUS,
        workloads,
        failures,
    };
    report::write(&rows, &context, &out_dir)
}

/// One target in one scenario: cold pods, the scenario's faults, the target, the requests,
/// then the target's own counters.
fn run_one(
    bench: &Bench,
    workload: &Workload,
    pool: &SimulatedPool,
    scenario: &Scenario,
    target: TargetName,
) -> Result<FaultsRow, String> {
    pool.restart_all()?;
    pool.clear_faults()?;
    pool.set_faults(&scenario.failing, &serde_json::json!({"fail_fraction": 1.0, "fail_status": FAIL_STATUS}))?;
    let dir = bench.dir.join(format!("{}-{}-{}", workload.name.label(), scenario.label, target.label()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let addresses = pool.addresses();
    let mut running = targets::start(target, &addresses, &dir, &bench.vllm_router)?;
    let base_url = running.base_url();
    let timeout =
        workload.name.request_timeout_floor().map_or(bench.request_timeout, |floor| floor.max(bench.request_timeout));
    let client = StreamingClient::new(timeout);
    let replayed = bench.runtime.block_on(replay(&client, &base_url, workload.jobs.clone(), workload.concurrency));
    let admin = match &running {
        RunningTarget::WasmEpp(envoy) => {
            std::thread::sleep(FLUSH_WAIT);
            Some(envoy.admin_url("/stats/prometheus"))
        }
        RunningTarget::Baseline(envoy) => Some(format!("http://127.0.0.1:{}/stats/prometheus", envoy.admin_port)),
        RunningTarget::VllmRouter { .. } => None,
    };
    let stats = match admin {
        Some(url) => {
            let text = http::get(&url, ADMIN_TIMEOUT)?.body;
            // Kept beside the run's logs, to check the figures against Envoy's own text.
            let path = dir.join("stats.prom");
            std::fs::write(&path, &text).map_err(|e| format!("{}: {e}", path.display()))?;
            Some(text)
        }
        None => None,
    };
    let crashed = running.has_exited();
    drop(running);
    if crashed {
        return Err(format!("{} exited during the run; see its log under {}", target.label(), dir.display()));
    }
    let failing_pods: Vec<String> = scenario.failing.iter().filter_map(|i| addresses.get(*i).cloned()).collect();
    let is_wasm_epp = matches!(target, TargetName::WasmEpp | TargetName::WasmEppNoOutliers);
    let run = Run { workload: workload.name.label(), scenario: &scenario.label, target: target.label() };
    Ok(run.row(&replayed, &addresses, failing_pods, stats.as_deref(), is_wasm_epp))
}

/// Names of one run, for its row.
struct Run<'a> {
    workload: &'a str,
    scenario: &'a str,
    target: &'a str,
}

impl Run<'_> {
    /// The row of `replayed`; `stats` is Envoy's `/stats/prometheus` text (none for vllm-router).
    fn row(
        &self,
        replayed: &Replay,
        pool: &[String],
        failing_pods: Vec<String>,
        stats: Option<&str>,
        is_wasm_epp: bool,
    ) -> FaultsRow {
        let (quality, notes) = summarize(self.workload, self.target, replayed, None, pool, Balance::default());
        let requests = replayed.outcomes.len();
        let mut failures_by_kind = BTreeMap::new();
        for error in replayed.outcomes.iter().filter_map(|outcome| outcome.as_ref().err()) {
            *failures_by_kind.entry(failure_kind(error)).or_insert(0) += 1;
        }
        let failed: usize = failures_by_kind.values().sum();
        let served_by_failing = replayed
            .outcomes
            .iter()
            .filter_map(|outcome| outcome.as_ref().ok())
            .filter(|success| success.served_by.as_ref().is_some_and(|pod| failing_pods.contains(pod)))
            .count();
        let wasm_epp_stat = |name: &str| stats.filter(|_| is_wasm_epp).map(|text| sum_of(text, name).unwrap_or(0.0));
        FaultsRow {
            workload: self.workload.to_string(),
            scenario: self.scenario.to_string(),
            target: self.target.to_string(),
            failing_pods,
            requests,
            failed,
            failed_share: report::round(failed as f64 / requests.max(1) as f64, 4),
            failures_by_kind,
            served_by_failing,
            ttft_p50_ms: quality.ttft_p50_ms,
            ttft_p90_ms: quality.ttft_p90_ms,
            e2e_p50_ms: quality.e2e_p50_ms,
            wall_s: notes.wall_s,
            pool_retries: stats.map(|text| pool_counter(text, RETRIES)),
            pool_retries_succeeded: stats.map(|text| pool_counter(text, RETRIES_SUCCEEDED)),
            ejections: wasm_epp_stat(EJECTIONS),
            ejections_adopted: wasm_epp_stat(ADOPTED),
            attempts_failed: wasm_epp_stat(ATTEMPTS_FAILED),
        }
    }
}

/// `status 500` for an answer with that status (the client's `status 500: <body>`), else `other`
/// (a broken stream, a timeout, a refused connection).
fn failure_kind(error: &str) -> String {
    error
        .strip_prefix("status ")
        .and_then(|rest| rest.split(':').next())
        .filter(|code| code.len() == 3 && code.bytes().all(|b| b.is_ascii_digit()))
        .map_or_else(|| "other".to_string(), |code| format!("status {code}"))
}

/// The `pool` cluster's counter `name` in Envoy's `/stats/prometheus` text (0 when Envoy lists
/// none).
fn pool_counter(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.strip_prefix(name)?.strip_prefix('{'))
        .filter_map(|rest| rest.split_once('}'))
        .filter(|(labels, _)| labels.split(',').any(|label| label == POOL_CLUSTER_LABEL))
        .filter_map(|(_, value)| value.trim().parse::<f64>().ok())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_pod_then_three_quarters_of_the_pool() {
        assert_eq!(scenarios(4), vec![Scenario::new(1, 4), Scenario::new(3, 4)]);
        assert_eq!(scenarios(4)[1].failing, vec![0, 1, 2]);
        assert_eq!(scenarios(4)[1].label, "3-of-4-failing");
        assert_eq!(scenarios(8)[1].label, "6-of-8-failing");
        // Two pods: three quarters is one, the first scenario again.
        assert_eq!(scenarios(2), vec![Scenario::new(1, 2)]);
        assert!(scenarios(1).is_empty());
    }

    #[test]
    fn failures_are_grouped_by_status() {
        assert_eq!(failure_kind("status 500: {\"error\": {}}"), "status 500");
        assert_eq!(failure_kind("status 503: no healthy upstream"), "status 503");
        assert_eq!(failure_kind("timed out after 120 s"), "other");
        assert_eq!(failure_kind("status code: weird"), "other");
    }

    #[test]
    fn retries_are_the_pool_clusters_only() {
        let text = "# TYPE envoy_cluster_upstream_rq_retry counter\n\
                    envoy_cluster_upstream_rq_retry{envoy_cluster_name=\"pool\"} 42\n\
                    envoy_cluster_upstream_rq_retry{envoy_cluster_name=\"wasm_epp_peer\"} 7\n\
                    envoy_cluster_upstream_rq_retry_overflow{envoy_cluster_name=\"pool\"} 3\n\
                    envoy_cluster_upstream_rq_retry_success{envoy_cluster_name=\"pool\"} 40\n";
        assert_eq!(pool_counter(text, RETRIES), 42.0);
        assert_eq!(pool_counter(text, RETRIES_SUCCEEDED), 40.0);
        assert_eq!(pool_counter("", RETRIES), 0.0);
    }
}
