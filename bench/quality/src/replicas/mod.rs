//! The replicas dimension of `make bench` (issue 12): the same pool routed by 1, 2 and 4
//! wasm-epp Envoys behind a round-robin front Envoy, with peering on and off. Besides what
//! clients see (hit rate from the pods' own counters, TTFT, output tokens/s), each run reads
//! the peer traffic from the replicas' stats and their CPU from `/proc`, so the cost of
//! peering is measured beside what it wins. Results: bench/results/replicas.{json,md}.

mod peer_cost;
mod report;
pub mod targets;

use std::path::Path;
use std::time::{Duration, Instant};

use launcher::proc_stats::{process_cpu, thread_cpu};

use crate::balance::Balance;
use crate::client::StreamingClient;
use crate::driver::{replay, Replay};
use crate::options::Options;
use crate::pool::SimulatedPool;
use crate::summary::{percentile, summarize};
use crate::workload::{Size, Workload};
pub use report::ReplicaRow;
use targets::{ReplicaTarget, Running};

/// What the replicas sent their peers so far (summed over the replicas).
#[derive(Debug, Clone, Copy, Default)]
struct PeerCounters {
    bytes: f64,
    events: f64,
    messages: f64,
    failed: f64,
}

impl PeerCounters {
    /// `self - before`, per second of `wall_s`.
    fn rate_since(&self, before: &PeerCounters, wall_s: f64) -> PeerCounters {
        let rate = |now: f64, then: f64| (now - then).max(0.0) / wall_s;
        PeerCounters {
            bytes: rate(self.bytes, before.bytes),
            events: rate(self.events, before.events),
            messages: rate(self.messages, before.messages),
            failed: rate(self.failed, before.failed),
        }
    }
}

/// Runs every replica target on every replica workload and writes the report.
pub fn run(options: &Options) -> Result<(), String> {
    let started = Instant::now();
    let (out_dir, runtime) = crate::run::prepare(options)?;
    let dir = launcher::paths::run_dir("bench-replicas").map_err(|e| format!("run dir: {e}"))?;
    println!("\n== replicas dimension; logs and configurations: {}", dir.display());
    let size = if options.quick { Size::Quick } else { Size::Full };
    let client = StreamingClient::new(Duration::from_secs(options.request_timeout_s));
    // --peer-cost-only keeps the table of the last run and measures the cost alone.
    let mut rows = if options.peer_cost_only { report::read_rows(&out_dir) } else { Vec::new() };
    let workloads = if options.peer_cost_only { &[][..] } else { options.replica_workloads.as_slice() };
    let mut failures = Vec::new();
    for name in workloads {
        let workload = Workload::build(*name, size, options.seed);
        // Each pod with its own flags, as the quality run starts them: (f)'s slow pods, the
        // models workloads' adapters.
        let pool = match crate::run::start_workload_pool(&workload, options.time_scale, &dir) {
            Ok(pool) => pool,
            Err(reason) => {
                failures.push(format!("{}: pool did not start: {reason}", name.label()));
                continue;
            }
        };
        for target in &options.replica_targets {
            let target_dir = dir.join(format!("{}-{}", name.label(), target.label()));
            let outcome = std::fs::create_dir_all(&target_dir)
                .map_err(|e| e.to_string())
                .and_then(|()| run_one(&runtime, &client, &workload, &pool, *target, &target_dir));
            let label = target.label();
            crate::report::keep_outcome(outcome, name.label(), label, report::one_line, &mut rows, &mut failures);
        }
    }
    let cost = if options.no_peer_cost {
        None
    } else {
        println!("\n== CPU cost of peering at a high decision rate (2 replicas, instant pods)");
        match peer_cost::measure(&runtime, options.quick, options.seed, &dir) {
            Ok(cost) => Some(cost),
            Err(reason) => {
                failures.push(format!("peer cost: {reason}"));
                None
            }
        }
    };
    report::write(&rows, cost.as_ref(), &failures, options, started.elapsed(), &out_dir)
}

/// Per-replica CPU time: whole process and main thread (where the pool service and its
/// peer exchange run).
fn cpu_of(pids: &[u32]) -> Vec<(Duration, Duration)> {
    pids.iter().map(|&pid| (process_cpu(pid).unwrap_or_default(), thread_cpu(pid, pid).unwrap_or_default())).collect()
}

fn peer_counters(running: &Running) -> PeerCounters {
    let Some(set) = running.replicas() else { return PeerCounters::default() };
    PeerCounters {
        bytes: set.stat_sum("wasm_epp_peer_bytes_sent"),
        events: set.stat_sum("wasm_epp_peer_events_sent"),
        messages: set.stat_sum("wasm_epp_peer_messages_sent"),
        failed: set.stat_sum("wasm_epp_peer_send_failed"),
    }
}

/// One target on one workload, from cold pods to a row.
fn run_one(
    runtime: &tokio::runtime::Runtime,
    client: &StreamingClient,
    workload: &Workload,
    pool: &SimulatedPool,
    target: ReplicaTarget,
    dir: &Path,
) -> Result<ReplicaRow, String> {
    pool.restart_all()?;
    let mut running = targets::start(target, &pool.addresses(), dir)?;
    let pids = running.replicas().map(|set| set.pids()).unwrap_or_default();
    let peers_before = peer_counters(&running);
    let counters_before = pool.prefix_counters();
    let cpu_before = cpu_of(&pids);
    let base_url = running.base_url();
    let replay: Replay = runtime.block_on(replay(client, &base_url, workload.jobs.clone(), workload.concurrency));
    let cpu_after = cpu_of(&pids);
    let counters_after = pool.prefix_counters();
    let peers_after = peer_counters(&running);
    if running.has_exited() {
        return Err(format!("a process exited during the run; see the logs under {}", dir.display()));
    }
    drop(running);
    let counters = counters_before.and_then(|before| Ok((before, counters_after?))).ok();
    let (row, notes) =
        summarize(workload.name.label(), target.label(), &replay, counters, &pool.addresses(), Balance::default());
    let mut ttft: Vec<f64> =
        replay.outcomes.iter().filter_map(|o| o.as_ref().ok()).map(|s| s.ttft.as_secs_f64() * 1000.0).collect();
    ttft.sort_by(f64::total_cmp);
    let wall = notes.wall_s.max(f64::MIN_POSITIVE);
    let peers = peers_after.rate_since(&peers_before, wall);
    let cores = |pick: fn(&(Duration, Duration)) -> Duration| {
        let spent: Vec<f64> = cpu_before
            .iter()
            .zip(&cpu_after)
            .map(|(before, after)| pick(after).saturating_sub(pick(before)).as_secs_f64() / wall)
            .collect();
        (!spent.is_empty()).then(|| spent.iter().sum::<f64>() / spent.len() as f64)
    };
    let (replicas, peering) = target.shape();
    Ok(ReplicaRow {
        workload: row.workload,
        target: row.target,
        replicas,
        peering,
        hit_rate: row.hit_rate,
        ttft_p50_ms: row.ttft_p50_ms,
        ttft_p90_ms: percentile(&ttft, 0.90).map(|ms| (ms * 10.0).round() / 10.0),
        ttft_p99_ms: row.ttft_p99_ms,
        output_tokens_per_s: row.output_tokens_per_s,
        requests_per_s: row.requests_per_s,
        errors: row.errors,
        peer_bytes_per_s: peers.bytes,
        peer_events_per_s: peers.events,
        peer_messages_per_s: peers.messages,
        peer_send_failed: peers.failed * wall,
        envoy_cpu_per_replica: cores(|c| c.0),
        main_thread_cpu_per_replica: cores(|c| c.1),
        wall_s: wall,
    })
}
