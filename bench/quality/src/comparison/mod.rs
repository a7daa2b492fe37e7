//! The gateway's own A/B test (`--comparison-only`): does wasm-epp's `comparison` section,
//! which splits the pool's pods between the picker and a least-request baseline and gives
//! each request to one arm, reach the verdict separate benchmark runs reach?
//!
//! On each workload (b by default: multi-turn chats on 8 pods under KV pressure) it runs
//! `wasm-epp-compared` (`comparison.baseline_share` 0.5, the decision header on), then the
//! full-pool references `wasm-epp` and `envoy-least-request` on the same cold pods and the
//! same requests. The compared run's answers are split by the decision header's `arm=`; each
//! arm's pods are those that served its requests (`x-served-by`), and its hit rate is their
//! own prefix-cache counters summed. The gateway's per-arm stats are read from Envoy's admin
//! `/stats/prometheus` after the run (`histogram`). Results: `comparison.{json,md}`.

mod histogram;
mod report;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use launcher::http;
use serde::Serialize;

use crate::balance::Balance;
use crate::client::{StreamingClient, Success};
use crate::driver::{replay, Replay};
use crate::options::Options;
use crate::pool::{PrefixCounters, SimulatedPool};
use crate::run::DimensionBench as Bench;
use crate::summary::summarize;
use crate::targets::{self, RunningTarget, TargetName};
use crate::workload::{Size, Workload};
use histogram::GatewayArm;

/// The compared run, then the full-pool references, in this order.
const TARGETS: [TargetName; 3] = [TargetName::WasmEppCompared, TargetName::WasmEpp, TargetName::EnvoyLeastRequest];
/// The arms, as the decision header and the stats name them.
const ARMS: [&str; 2] = ["picker", "baseline"];
/// The filter flushes its stats on its tick (20 ms); this leaves it several.
const FLUSH_WAIT: Duration = Duration::from_millis(300);
const ADMIN_TIMEOUT: Duration = Duration::from_secs(10);

/// One line of the table: an arm of the compared run, or a full-pool reference.
#[derive(Debug, Clone, Serialize)]
pub struct ComparisonRow {
    pub workload: String,
    pub target: String,
    /// `picker` or `baseline` for the compared run's arms; `null` for a full-pool reference.
    pub arm: Option<String>,
    /// Pods that served these requests (`x-served-by`), in address order.
    pub pods: Vec<String>,
    /// Successful requests.
    pub requests: usize,
    /// Failed requests (client side). A failed request's arm is unknown, so the compared run's
    /// failures are counted in the notes, not per arm; the gateway's `errors` are per arm.
    pub errors: u64,
    pub ttft_p50_ms: Option<f64>,
    pub ttft_p90_ms: Option<f64>,
    pub ttft_p99_ms: Option<f64>,
    pub e2e_p50_ms: Option<f64>,
    /// Output tokens of these requests over the run's wall time.
    pub output_tokens_per_s: f64,
    /// Share of the run's output tokens (1 for a reference).
    pub output_share: f64,
    /// Prefix-cache hits / queries (tokens) of `pods`, from their own counters.
    pub hit_rate: Option<f64>,
    /// The gateway's own figures for this arm (compared run only).
    pub gateway: Option<GatewayArm>,
}

/// The two verdicts of one workload: picker arm against baseline arm, and wasm-epp against
/// Envoy least-request on the full pool (each a TTFT p90 ratio; below 1 = the picker faster).
#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    pub workload: String,
    /// Client TTFT p90, picker arm / baseline arm.
    pub arms_ttft_p90_ratio: Option<f64>,
    /// The gateway's first-byte p90 (from its histogram), picker arm / baseline arm.
    pub arms_gateway_first_byte_p90_ratio: Option<f64>,
    /// Client TTFT p90, wasm-epp / envoy-least-request, each on the whole pool.
    pub full_pool_ttft_p90_ratio: Option<f64>,
    /// Both client ratios on the same side of 1.
    pub same_verdict: Option<bool>,
}

pub fn run(options: &Options) -> Result<(), String> {
    let started = Instant::now();
    let started_at = crate::run::utc_now();
    let (bench, out_dir) = Bench::start(options, "comparison", "bench-comparison")?;
    let size = if options.quick { Size::Quick } else { Size::Full };
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    let mut failures = Vec::new();
    let mut workloads = Vec::new();
    for name in options.comparison_workloads() {
        let workload = Workload::build(name, size, options.seed);
        let Some(pool) = bench.start_pool(&workload, &mut failures) else {
            workloads.push(workload);
            continue;
        };
        for target in TARGETS {
            let target_started = Instant::now();
            match run_one(&bench, &workload, &pool, target) {
                Ok((mut target_rows, mut target_notes)) => {
                    for row in &target_rows {
                        println!("  {}", report::one_line(row));
                    }
                    println!("  ({} in {:.0} s)", target.label(), target_started.elapsed().as_secs_f64());
                    rows.append(&mut target_rows);
                    notes.append(&mut target_notes);
                }
                Err(reason) => {
                    eprintln!("  {}: did not run: {reason}", target.label());
                    failures.push(format!("{} / {}: {reason}", name.label(), target.label()));
                }
            }
        }
        workloads.push(workload);
    }
    let verdicts: Vec<Verdict> = workloads.iter().map(|workload| verdict(&rows, workload.name.label())).collect();
    let context = report::Context {
        started_at,
        runtime_s: started.elapsed().as_secs_f64(),
        seed: options.seed,
        quick: options.quick,
        time_scale: options.time_scale,
        workloads,
        notes,
        failures,
    };
    report::write(&rows, &verdicts, &context, &out_dir)
}

/// One target on one workload, from cold pods to its rows (two for the compared run, one per
/// arm) and anything odd worth a note.
fn run_one(
    bench: &Bench,
    workload: &Workload,
    pool: &SimulatedPool,
    target: TargetName,
) -> Result<(Vec<ComparisonRow>, Vec<String>), String> {
    pool.restart_all()?;
    let dir = crate::run::target_dir(&bench.dir, workload, target)?;
    let addresses = pool.addresses();
    let mut running = targets::start(target, &addresses, &dir, &bench.vllm_router)?;
    let before = pool.prefix_counters_per_pod();
    let base_url = running.base_url();
    let timeout =
        workload.name.request_timeout_floor().map_or(bench.request_timeout, |floor| floor.max(bench.request_timeout));
    let client = StreamingClient::new(timeout);
    let replayed = bench.runtime.block_on(replay(&client, &base_url, workload.jobs.clone(), workload.concurrency));
    let after = pool.prefix_counters_per_pod();
    crate::index_accuracy::print(&running);
    let gateway_stats = match &running {
        RunningTarget::WasmEpp(envoy) => {
            std::thread::sleep(FLUSH_WAIT);
            let text = http::get(&envoy.admin_url("/stats/prometheus"), ADMIN_TIMEOUT)?.body;
            // Kept beside the run's logs, to check the figures against Envoy's own text.
            let path = dir.join("stats.prom");
            std::fs::write(&path, &text).map_err(|e| format!("{}: {e}", path.display()))?;
            Some(text)
        }
        _ => None,
    };
    let crashed = running.has_exited();
    drop(running);
    if crashed {
        return Err(format!("{} exited during the run; see its log under {}", target.label(), dir.display()));
    }
    crate::run::write_decisions(&replayed, &dir)?;
    let counters = match (before, after) {
        (Ok(before), Ok(after)) => {
            Some(PodCounters { before: before.into_iter().collect(), after: after.into_iter().collect() })
        }
        (Err(reason), _) | (_, Err(reason)) => {
            eprintln!("  warning: no prefix-cache counters: {reason}");
            None
        }
    };
    let run =
        Run { workload: workload.name.label(), target: target.label(), replay: &replayed, counters: counters.as_ref() };
    if target != TargetName::WasmEppCompared {
        let successes: Vec<&Success> = replayed.outcomes.iter().filter_map(|o| o.as_ref().ok()).collect();
        let errors = (replayed.outcomes.len() - successes.len()) as u64;
        return Ok((vec![run.row(None, &successes, &addresses, errors, None)], Vec::new()));
    }
    split_by_arm(&run, gateway_stats.as_deref().unwrap_or_default())
}

/// Every pod's prefix-cache counters before and after a run, by address.
struct PodCounters {
    before: BTreeMap<String, PrefixCounters>,
    after: BTreeMap<String, PrefixCounters>,
}

impl PodCounters {
    /// The hit rate of `pods` together over the run.
    fn hit_rate(&self, pods: &[String]) -> Option<f64> {
        let sum = |counters: &BTreeMap<String, PrefixCounters>| {
            pods.iter().filter_map(|pod| counters.get(pod)).fold(PrefixCounters::default(), |total, c| PrefixCounters {
                queries: total.queries + c.queries,
                hits: total.hits + c.hits,
            })
        };
        sum(&self.before).hit_rate_until(&sum(&self.after))
    }
}

/// One finished run, ready to be cut into rows.
struct Run<'a> {
    workload: &'a str,
    target: &'a str,
    replay: &'a Replay,
    counters: Option<&'a PodCounters>,
}

impl Run<'_> {
    /// The row of `successes` (all the run's, or one arm's), served by `pods`.
    fn row(
        &self,
        arm: Option<&str>,
        successes: &[&Success],
        pods: &[String],
        errors: u64,
        gateway: Option<GatewayArm>,
    ) -> ComparisonRow {
        let part = Replay {
            outcomes: successes.iter().map(|success| Ok((*success).clone())).collect(),
            started: self.replay.started,
            wall: self.replay.wall,
        };
        let (quality, _) = summarize(self.workload, self.target, &part, None, pods, Balance::default());
        let tokens = |successes: &mut dyn Iterator<Item = &Success>| successes.map(|s| s.output_tokens).sum::<u64>();
        let all_tokens = tokens(&mut self.replay.outcomes.iter().filter_map(|o| o.as_ref().ok()));
        let own_tokens = tokens(&mut successes.iter().copied());
        ComparisonRow {
            workload: self.workload.to_string(),
            target: self.target.to_string(),
            arm: arm.map(str::to_string),
            pods: pods.to_vec(),
            requests: successes.len(),
            errors,
            ttft_p50_ms: quality.ttft_p50_ms,
            ttft_p90_ms: quality.ttft_p90_ms,
            ttft_p99_ms: quality.ttft_p99_ms,
            e2e_p50_ms: quality.e2e_p50_ms,
            output_tokens_per_s: quality.output_tokens_per_s,
            output_share: report::round(own_tokens as f64 / all_tokens.max(1) as f64, 4),
            hit_rate: self.counters.and_then(|counters| counters.hit_rate(pods)).map(|rate| report::round(rate, 4)),
            gateway,
        }
    }
}

/// The arm a successful answer names at the end of its decision header (`...; arm=picker`).
fn arm_of(success: &Success) -> Option<&str> {
    let decision = success.decision.as_deref()?;
    let (_, arm) = decision.rsplit_once("arm=")?;
    arm.split(';').next().map(str::trim)
}

/// The compared run's two rows, one per arm, and notes on what did not fit: answers without an
/// arm, failures (whose arm is unknown), pods that served both arms.
fn split_by_arm(run: &Run<'_>, gateway_stats: &str) -> Result<(Vec<ComparisonRow>, Vec<String>), String> {
    let successes: Vec<&Success> = run.replay.outcomes.iter().filter_map(|o| o.as_ref().ok()).collect();
    let failed = run.replay.outcomes.len() - successes.len();
    let mut notes = Vec::new();
    let mut rows = Vec::new();
    let mut pods_of: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for arm in ARMS {
        let mine: Vec<&Success> = successes.iter().copied().filter(|s| arm_of(s) == Some(arm)).collect();
        let pods: BTreeSet<String> = mine.iter().filter_map(|s| s.served_by.clone()).collect();
        let pod_list: Vec<String> = pods.iter().cloned().collect();
        let gateway = histogram::read_arm(gateway_stats, arm);
        if gateway.is_none() {
            notes.push(format!("{} / {arm}: the gateway exported no comparison stats", run.workload));
        }
        rows.push(run.row(Some(arm), &mine, &pod_list, 0, gateway));
        pods_of.insert(arm, pods);
    }
    let unassigned = successes.iter().filter(|s| !arm_of(s).is_some_and(|arm| ARMS.contains(&arm))).count();
    if unassigned > 0 {
        notes.push(format!("{}: {unassigned} answers named no arm (not compared, e.g. fail-open)", run.workload));
    }
    if failed > 0 {
        notes.push(format!("{}: {failed} requests failed (their arm is unknown to the client)", run.workload));
    }
    if let (Some(picker), Some(baseline)) = (pods_of.get("picker"), pods_of.get("baseline")) {
        let shared: Vec<&String> = picker.intersection(baseline).collect();
        if !shared.is_empty() {
            notes.push(format!("{}: pods serving both arms: {shared:?}", run.workload));
        }
    }
    if rows.iter().all(|row| row.requests == 0) {
        return Err("no answer named an arm: is the comparison on (decision header and `comparison` section)?".into());
    }
    Ok((rows, notes))
}

/// The verdicts of `workload` from its rows.
fn verdict(rows: &[ComparisonRow], workload: &str) -> Verdict {
    let find = |target: &str, arm: Option<&str>| {
        rows.iter().find(|r| r.workload == workload && r.target == target && r.arm.as_deref() == arm)
    };
    let compared = TargetName::WasmEppCompared.label();
    let (picker, baseline) = (find(compared, Some("picker")), find(compared, Some("baseline")));
    let (full, least) = (find(TargetName::WasmEpp.label(), None), find(TargetName::EnvoyLeastRequest.label(), None));
    let ratio =
        |a: Option<f64>, b: Option<f64>| a.zip(b).filter(|(_, b)| *b > 0.0).map(|(a, b)| report::round(a / b, 3));
    let p90 = |row: Option<&ComparisonRow>| row.and_then(|r| r.ttft_p90_ms);
    let gateway_p90 =
        |row: Option<&ComparisonRow>| row.and_then(|r| r.gateway.as_ref()).and_then(|g| g.first_byte_p90_ms);
    let arms = ratio(p90(picker), p90(baseline));
    let full_pool = ratio(p90(full), p90(least));
    Verdict {
        workload: workload.to_string(),
        arms_ttft_p90_ratio: arms,
        arms_gateway_first_byte_p90_ratio: ratio(gateway_p90(picker), gateway_p90(baseline)),
        full_pool_ttft_p90_ratio: full_pool,
        same_verdict: arms.zip(full_pool).map(|(a, f)| (a < 1.0) == (f < 1.0)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(decision: Option<&str>) -> Success {
        Success {
            started: Instant::now(),
            ttft: Duration::from_millis(50),
            e2e: Duration::from_millis(500),
            output_tokens: 10,
            served_by: Some("p1".into()),
            text: String::new(),
            token_gaps_ms: Vec::new(),
            decision: decision.map(str::to_string),
            cached_tokens: None,
            prompt_tokens: None,
            prompt_key: None,
        }
    }

    #[test]
    fn the_arm_is_the_decision_headers_last_field() {
        let picker = answer(Some("pod=127.0.0.1:1; reason=affinity; prefix=0.9; arm=picker"));
        assert_eq!(arm_of(&picker), Some("picker"));
        assert_eq!(arm_of(&answer(Some("pod=127.0.0.1:1; reason=load; arm=baseline"))), Some("baseline"));
        assert_eq!(arm_of(&answer(Some("pod=127.0.0.1:1; reason=load"))), None);
        assert_eq!(arm_of(&answer(None)), None);
    }

    #[test]
    fn verdicts_compare_the_arms_and_the_full_pool_runs() {
        let row = |target: &str, arm: Option<&str>, p90: f64| ComparisonRow {
            workload: "b".into(),
            target: target.into(),
            arm: arm.map(str::to_string),
            pods: Vec::new(),
            requests: 1,
            errors: 0,
            ttft_p50_ms: None,
            ttft_p90_ms: Some(p90),
            ttft_p99_ms: None,
            e2e_p50_ms: None,
            output_tokens_per_s: 0.0,
            output_share: 0.0,
            hit_rate: None,
            gateway: None,
        };
        let rows = [
            row("wasm-epp-compared", Some("picker"), 60.0),
            row("wasm-epp-compared", Some("baseline"), 120.0),
            row("wasm-epp", None, 100.0),
            row("envoy-least-request", None, 125.0),
        ];
        let verdict = verdict(&rows, "b");
        assert_eq!(verdict.arms_ttft_p90_ratio, Some(0.5));
        assert_eq!(verdict.full_pool_ttft_p90_ratio, Some(0.8));
        assert_eq!(verdict.arms_gateway_first_byte_p90_ratio, None);
        assert_eq!(verdict.same_verdict, Some(true));
    }
}
