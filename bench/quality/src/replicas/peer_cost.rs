//! What peering costs in CPU at a high decision rate (issue 12's goal: at most 2 % of one
//! core per replica at 1,000 decisions/s). The quality workloads make a few decisions per
//! second, too few to see the cost, so this run drives two replicas as fast as instant pods
//! allow (simulator time scale 0, short unrelated prompts, every request one decision),
//! once without peering and once with, and charges the difference in CPU per replica to
//! peering, scaled to 1,000 decisions/s. CPU time is per process, so other load on the
//! machine slows the run but hardly changes what each replica spends.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use super::{cpu_of, peer_counters, targets};
use crate::client::StreamingClient;
use crate::driver::replay;
use crate::pool::SimulatedPool;
use crate::prompts::text_of_tokens;
use crate::workload::{pod_args, Job};

const PODS: usize = 4;
/// Requests per run: several seconds of load at a few thousand decisions/s, long enough for
/// CPU times counted in 10 ms ticks.
const REQUESTS: usize = 30_000;
const QUICK_REQUESTS: usize = 8_000;
/// Runs alternate without and with peering this many times each, so a slow spell of the
/// machine does not land on one side only.
const ROUNDS: usize = 2;
const CONCURRENCY: usize = 32;
const PROMPT_TOKENS: usize = 48;

#[derive(Debug, Clone, Serialize)]
pub struct PeerCostRun {
    pub peering: bool,
    pub decisions_per_s: f64,
    pub envoy_cpu_per_replica: f64,
    pub main_thread_cpu_per_replica: f64,
    pub peer_bytes_per_s: f64,
    pub peer_events_per_s: f64,
    pub errors: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct PeerCost {
    pub runs: Vec<PeerCostRun>,
    /// Extra CPU per replica with peering, in % of one core, scaled to 1,000 decisions/s
    /// per replica: whole Envoy, and its main thread (where the exchange itself runs).
    pub percent_core_per_1000_decisions: Option<f64>,
    pub main_thread_percent_core_per_1000_decisions: Option<f64>,
}

pub fn measure(runtime: &tokio::runtime::Runtime, quick: bool, seed: u64, dir: &Path) -> Result<PeerCost, String> {
    let requests = if quick { QUICK_REQUESTS } else { REQUESTS };
    let jobs: Vec<Job> = (0..requests)
        .map(|index| Job::Completion {
            prompt: text_of_tokens(PROMPT_TOKENS, seed ^ (0xc057 << 20) ^ index as u64),
            max_tokens: 2,
        })
        .collect();
    let mut args = pod_args(64, 16_384, 4096);
    args.extend(["--time-scale".to_string(), "0".to_string()]);
    let pool = SimulatedPool::start(PODS, &args, dir)?;
    let client = StreamingClient::new(Duration::from_secs(30));
    let mut runs = Vec::new();
    let sides = [(targets::ReplicaTarget::X2NoPeering, false), (targets::ReplicaTarget::X2, true)];
    for (round, (target, peering)) in (0..ROUNDS).flat_map(|round| sides.map(|side| (round, side))) {
        let target_dir = dir.join(format!("peer-cost-{}-{round}", target.label()));
        std::fs::create_dir_all(&target_dir).map_err(|e| e.to_string())?;
        let running = targets::start(target, &pool.addresses(), &target_dir)?;
        let pids = running.replicas().map(|set| set.pids()).unwrap_or_default();
        let peers_before = peer_counters(&running);
        let cpu_before = cpu_of(&pids);
        let replayed = runtime.block_on(replay(&client, &running.base_url(), jobs.clone(), CONCURRENCY));
        let cpu_after = cpu_of(&pids);
        let peers_after = peer_counters(&running);
        let wall = replayed.wall.as_secs_f64().max(f64::MIN_POSITIVE);
        let ok = replayed.outcomes.iter().filter(|o| o.is_ok()).count();
        let replicas = pids.len().max(1) as f64;
        let mean = |pick: fn(&(Duration, Duration)) -> Duration| {
            cpu_before.iter().zip(&cpu_after).map(|(b, a)| pick(a).saturating_sub(pick(b)).as_secs_f64()).sum::<f64>()
                / wall
                / replicas
        };
        let run = PeerCostRun {
            peering,
            decisions_per_s: ok as f64 / wall / replicas,
            envoy_cpu_per_replica: mean(|c| c.0),
            main_thread_cpu_per_replica: mean(|c| c.1),
            peer_bytes_per_s: peers_after.rate_since(&peers_before, wall).bytes,
            peer_events_per_s: peers_after.rate_since(&peers_before, wall).events,
            errors: replayed.outcomes.len() - ok,
        };
        println!(
            "  peer cost, peering {:<5}: {:.0} decisions/s per replica, Envoy {:.3} cores/replica (main {:.3}), peers {:.0} B/s {:.0} events/s, errors {}",
            run.peering, run.decisions_per_s, run.envoy_cpu_per_replica, run.main_thread_cpu_per_replica,
            run.peer_bytes_per_s, run.peer_events_per_s, run.errors
        );
        runs.push(run);
    }
    // CPU per decision on each side (mean over its runs), so the sides' different rates do
    // not count as peering's cost; the difference, times 1,000 decisions/s, in % of a core.
    let per_decision = |peering: bool, pick: fn(&PeerCostRun) -> f64| {
        let side: Vec<f64> = runs
            .iter()
            .filter(|r| r.peering == peering && r.decisions_per_s > 0.0)
            .map(|r| pick(r) / r.decisions_per_s)
            .collect();
        (!side.is_empty()).then(|| side.iter().sum::<f64>() / side.len() as f64)
    };
    let scaled =
        |pick: fn(&PeerCostRun) -> f64| Some((per_decision(true, pick)? - per_decision(false, pick)?) * 1000.0 * 100.0);
    Ok(PeerCost {
        percent_core_per_1000_decisions: scaled(|r| r.envoy_cpu_per_replica),
        main_thread_percent_core_per_1000_decisions: scaled(|r| r.main_thread_cpu_per_replica),
        runs,
    })
}

impl PeerCost {
    /// The markdown section of replicas.md.
    pub fn markdown(&self) -> String {
        let mut out = String::from(
            "\n## CPU cost of peering at a high decision rate\n\n2 replicas over 4 instant pods (simulator time \
             scale 0), short unrelated prompts as fast as the machine allows, without and with peering \
             (replicas_peer_cost.json).\n\n| peering | decisions/s per replica | Envoy CPU/replica (cores) | main thread | peer B/s | peer events/s | errors |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n",
        );
        for run in &self.runs {
            let _ = writeln!(
                out,
                "| {} | {:.0} | {:.3} | {:.3} | {:.0} | {:.0} | {} |",
                if run.peering { "on" } else { "off" },
                run.decisions_per_s,
                run.envoy_cpu_per_replica,
                run.main_thread_cpu_per_replica,
                run.peer_bytes_per_s,
                run.peer_events_per_s,
                run.errors
            );
        }
        if let Some(whole) = self.percent_core_per_1000_decisions {
            let main = self.main_thread_percent_core_per_1000_decisions.unwrap_or(f64::NAN);
            let _ = writeln!(
                out,
                "\nPeering's extra CPU per decision, scaled to 1,000 decisions/s per replica: {whole:.2} % of one core for the \
                 whole Envoy ({main:.2} % on its main thread, where the exchange runs); goal <= 2 %: {}.",
                if whole <= 2.0 { "met" } else { "NOT met" }
            );
        }
        out
    }
}
