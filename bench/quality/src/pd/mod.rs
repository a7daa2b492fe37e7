//! The prefill/decode dimension (issue 19): workload (k) on 2 prefill + 2 decode pods, with
//! wasm-epp splitting long prompts between them, against the same four pods aggregated
//! (wasm-epp without P/D, Envoy round robin and least request, vllm-router); then the
//! short-prompt check of the decider. `--pd-only`; results in `bench/results/pd/`.
//!
//! The pods are the same for every target: the simulator's role only matters to a pod that
//! receives `x-prefiller-host-port`, which only wasm-epp with a `pd` section writes.

mod paced;
mod report;
mod workload;

use std::path::Path;
use std::time::{Duration, Instant};

use launcher::envoy::{Envoy, EnvoyOptions};
use launcher::http;
use serde_json::{json, Map, Value};

use crate::client::StreamingClient;
use crate::options::Options;
use crate::pool::{PrefixCounters, SimulatedPool};
use crate::summary::summarize;
use crate::targets::{self, RunningTarget, TargetName};
use crate::workload::Size;
use report::PdRow;
use workload::{PdWorkload, DECODE_PODS, PREFILL_PODS};

/// The P/D threshold wasm-epp runs with here (its default).
const THRESHOLD_TOKENS: u64 = 1024;
const ADMIN_TIMEOUT: Duration = Duration::from_secs(10);
const SINGLETON_READY_TIMEOUT: Duration = Duration::from_secs(20);

/// One router in this dimension.
#[derive(Debug, Clone, Copy)]
enum PdTarget {
    /// wasm-epp with the `pd` section and the pods' roles.
    WasmEppPd,
    /// The same, the decider never splitting (threshold above any prompt): decode pods only.
    WasmEppPdNeverSplit,
    /// One of the aggregated targets of the quality benchmark.
    Aggregated(TargetName),
}

impl PdTarget {
    fn label(self) -> &'static str {
        match self {
            PdTarget::WasmEppPd => "wasm-epp-pd",
            PdTarget::WasmEppPdNeverSplit => "wasm-epp-pd-never-split",
            PdTarget::Aggregated(name) => name.label(),
        }
    }
}

/// The two halves of the pool.
struct PdPool {
    prefill: SimulatedPool,
    decode: SimulatedPool,
}

impl PdPool {
    fn start(workload: &PdWorkload, time_scale: f64, dir: &Path) -> Result<Self, String> {
        let with_role = |role: &str| {
            let mut args = workload.pod_args.clone();
            args.extend(["--time-scale".into(), time_scale.to_string(), "--role".into(), role.into()]);
            args
        };
        Ok(Self {
            prefill: SimulatedPool::start(PREFILL_PODS, &with_role("prefill"), dir)?,
            decode: SimulatedPool::start(DECODE_PODS, &with_role("decode"), dir)?,
        })
    }

    fn addresses(&self) -> Vec<String> {
        self.prefill.addresses().into_iter().chain(self.decode.addresses()).collect()
    }

    fn restart_all(&self) -> Result<(), String> {
        self.prefill.restart_all()?;
        self.decode.restart_all()
    }

    /// One line per pod: requests served, mean TTFT and mean queue wait as the pod measured
    /// them (a prefill pod's TTFT is the prefill hop; a decode pod's includes it).
    fn print_pod_timings(&self) {
        self.prefill.print_pod_timings("prefill");
        self.decode.print_pod_timings("decode");
    }

    /// The decode pods' `/sim/stats` P/D sections.
    fn decode_pd_stats(&self) -> Vec<Value> {
        self.decode
            .addresses()
            .iter()
            .filter_map(|address| http::get(&format!("http://{address}/sim/stats"), ADMIN_TIMEOUT).ok())
            .filter_map(|reply| serde_json::from_str::<Value>(&reply.body).ok())
            .filter_map(|stats| stats.get("pd").cloned())
            .collect()
    }

    /// Requests the decode pods had prefilled elsewhere (`/sim/stats` `pd.remote_prefills`).
    fn remote_prefills(&self) -> u64 {
        self.decode_pd_stats().iter().filter_map(|pd| pd.get("remote_prefills").and_then(Value::as_u64)).sum()
    }

    /// Where split requests' time went before their decode pod queued them, as its sidecar
    /// measured (means over the pool); `None` before any split.
    fn split_timings(&self) -> Option<SplitTimings> {
        let stats = self.decode_pd_stats();
        let sum = |field: &str| stats.iter().filter_map(|pd| pd.get(field).and_then(Value::as_u64)).sum::<u64>();
        let split = sum("remote_prefills");
        let mean_ms = |field: &str| sum(field) as f64 / split as f64 / 1000.0;
        (split > 0).then(|| SplitTimings {
            requests: split,
            prefill_wait_ms: mean_ms("prefill_wait_us"),
            transfer_ms: mean_ms("transfer_us"),
        })
    }
}

/// Split requests' means, as the decode pods' sidecars timed them.
#[derive(Debug, Clone, Copy)]
struct SplitTimings {
    requests: u64,
    /// The wait for the prefill pod's answer.
    prefill_wait_ms: f64,
    /// The KV transfer of the blocks the decode pod lacked.
    transfer_ms: f64,
}

pub fn run(options: &Options) -> Result<(), String> {
    let started = Instant::now();
    let (out_dir, runtime) = crate::run::prepare(options)?;
    let out_dir = if options.out_dir == Path::new("bench/results") { out_dir.join("pd") } else { out_dir };
    std::fs::create_dir_all(&out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
    let dir = launcher::paths::run_dir("bench-pd").map_err(|e| format!("run dir: {e}"))?;
    let vllm_router = options.vllm_router.clone().unwrap_or_else(targets::default_vllm_router);
    let size = if options.quick { Size::Quick } else { Size::Full };
    let mut aggregated: Vec<PdTarget> =
        [TargetName::WasmEpp, TargetName::EnvoyRoundRobin, TargetName::EnvoyLeastRequest]
            .into_iter()
            .map(PdTarget::Aggregated)
            .collect();
    if vllm_router.exists() {
        aggregated.push(PdTarget::Aggregated(TargetName::VllmRouterCacheAware));
        aggregated.push(PdTarget::Aggregated(TargetName::VllmRouterPowerOfTwo));
    }
    let long_targets = [vec![PdTarget::WasmEppPd], aggregated].concat();
    let plans = [
        (workload::long_prompts(size, options.seed), long_targets.clone()),
        (workload::long_prompts_busy(size, options.seed), long_targets),
        (
            workload::short_prompts(size, options.seed),
            vec![PdTarget::WasmEppPd, PdTarget::WasmEppPdNeverSplit, PdTarget::Aggregated(TargetName::WasmEpp)],
        ),
    ];
    let bench = Bench {
        runtime,
        client: StreamingClient::new(Duration::from_secs(options.request_timeout_s)),
        dir,
        vllm_router,
        time_scale: options.time_scale,
    };
    let chosen = |wanted: &[String], label: &str| wanted.is_empty() || wanted.iter().any(|w| w == label);
    let plans = plans.into_iter().filter(|(workload, _)| chosen(&options.pd_workloads, workload.label)).map(
        |(workload, plan)| {
            let plan: Vec<PdTarget> = plan.into_iter().filter(|t| chosen(&options.pd_targets, t.label())).collect();
            (workload, plan)
        },
    );
    let mut rows = Vec::new();
    let mut failures = Vec::new();
    for (workload, plan) in plans {
        println!(
            "\n== {}: {PREFILL_PODS} prefill + {DECODE_PODS} decode pods, {} requests, {} client slots",
            workload.label,
            workload.jobs.len(),
            workload.concurrency
        );
        let pool = PdPool::start(&workload, options.time_scale, &bench.dir)?;
        for target in plan {
            let outcome = run_one(&bench, &workload, &pool, target);
            let label = target.label();
            crate::report::keep_outcome(outcome, workload.label, label, report::one_line, &mut rows, &mut failures);
        }
    }
    let context = report::Context {
        time_scale: options.time_scale,
        seed: options.seed,
        quick: options.quick,
        threshold_tokens: THRESHOLD_TOKENS,
        runtime_s: started.elapsed().as_secs_f64(),
        failures,
    };
    report::write(&rows, &context, &out_dir)
}

/// What stays the same across the runs of one invocation.
struct Bench {
    runtime: tokio::runtime::Runtime,
    client: StreamingClient,
    dir: std::path::PathBuf,
    vllm_router: std::path::PathBuf,
    time_scale: f64,
}

fn run_one(bench: &Bench, workload: &PdWorkload, pool: &PdPool, target: PdTarget) -> Result<PdRow, String> {
    pool.restart_all()?;
    let target_dir = bench.dir.join(format!("{}-{}", workload.label, target.label()));
    std::fs::create_dir_all(&target_dir).map_err(|e| format!("{}: {e}", target_dir.display()))?;
    let addresses = pool.addresses();
    let mut running = match target {
        PdTarget::WasmEppPd => start_pd(pool, THRESHOLD_TOKENS, &target_dir)?,
        PdTarget::WasmEppPdNeverSplit => start_pd(pool, 1 << 24, &target_dir)?,
        PdTarget::Aggregated(name) => targets::start(name, &addresses, &target_dir, &bench.vllm_router)?,
    };
    let before = (pool.prefill.prefix_counters(), pool.decode.prefix_counters());
    let base_url = running.base_url();
    let stagger = Duration::from_secs_f64(workload.stagger.as_secs_f64() * bench.time_scale);
    let jobs = workload.jobs.clone();
    let replay = paced::replay_staggered(&bench.client, &base_url, jobs, workload.concurrency, stagger);
    let replayed = bench.runtime.block_on(replay);
    let after = (pool.prefill.prefix_counters(), pool.decode.prefix_counters());
    let split = pool.remote_prefills();
    pool.print_pod_timings();
    let split_timings = pool.split_timings();
    if let Some(SplitTimings { requests, prefill_wait_ms, transfer_ms }) = split_timings {
        println!(
            "    split   {requests:>4} requests  mean wait for the prefill pod {prefill_wait_ms:>5.0} ms  mean KV transfer {transfer_ms:>4.0} ms"
        );
    }
    if running.has_exited() {
        return Err(format!("{} exited during the run; see {}", target.label(), target_dir.display()));
    }
    drop(running);
    let rate = |before: &Result<PrefixCounters, String>, after: &Result<PrefixCounters, String>| match (before, after) {
        (Ok(before), Ok(after)) => before.hit_rate_until(after),
        _ => None,
    };
    let both = match (&before, &after) {
        ((Ok(p0), Ok(d0)), (Ok(p1), Ok(d1))) => Some((
            PrefixCounters { queries: p0.queries + d0.queries, hits: p0.hits + d0.hits },
            PrefixCounters { queries: p1.queries + d1.queries, hits: p1.hits + d1.hits },
        )),
        _ => None,
    };
    let (quality, _) = summarize(workload.label, target.label(), &replayed, both, &addresses, Default::default());
    let requests = replayed.outcomes.len().max(1) as f64;
    Ok(PdRow {
        disaggregated_share: report::round(split as f64 / requests, 4),
        prefill_pods_hit_rate: rate(&before.0, &after.0).map(|r| report::round(r, 4)),
        decode_pods_hit_rate: rate(&before.1, &after.1).map(|r| report::round(r, 4)),
        split_prefill_wait_ms: split_timings.map(|timings| report::round(timings.prefill_wait_ms, 1)),
        split_transfer_ms: split_timings.map(|timings| report::round(timings.transfer_ms, 1)),
        quality,
    })
}

/// wasm-epp with the `pd` section and the pods' roles in the singleton's configuration.
fn start_pd(pool: &PdPool, threshold_tokens: u64, dir: &Path) -> Result<RunningTarget, String> {
    let addresses = pool.addresses();
    let port = || launcher::free_port().map_err(|e| format!("no free port: {e}"));
    let mut options = EnvoyOptions::for_pool(&addresses, port()?, port()?);
    let mut roles = Map::new();
    for (pods, role) in [(&pool.prefill, "prefill"), (&pool.decode, "decode")] {
        roles.extend(pods.addresses().into_iter().map(|address| (address, json!(role))));
    }
    if let Some(filter) = options.filter_config.as_object_mut() {
        filter.insert("pd".into(), json!({ "threshold_tokens": threshold_tokens }));
    }
    if let Some(poller) = options.poller_config.as_mut().and_then(Value::as_object_mut) {
        poller.insert("roles".into(), Value::Object(roles));
    }
    let envoy = Envoy::start(&options, dir)?;
    if !envoy.wait_for_healthy_pods(addresses.len() as u64, SINGLETON_READY_TIMEOUT) {
        eprintln!("  warning: wasm-epp's singleton does not see all {} pods healthy; running anyway", addresses.len());
    }
    Ok(RunningTarget::WasmEpp(envoy))
}
