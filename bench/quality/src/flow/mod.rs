//! Workload j (issue 16): the pool offered twice what it can serve for a minute, three
//! priority classes and two tenants, with wasm-epp's flow control on and off and the peers.
//!
//! Steps: start the pool; on wasm-epp without flow control, measure the idle TTFT (one
//! request at a time) and the capacity (closed loop with every engine slot busy, completed
//! requests per second); then for each target replay the same open-loop schedule at
//! `--flow-load` × capacity and summarize (see [`summary`]). Results go to
//! `<out-dir>/flow-control.{json,md}`; bench/quality/plot_flow.py draws them.

mod client;
mod load;
mod replay;
mod summary;

use std::path::Path;
use std::time::{Duration, Instant};

use launcher::envoy::{Envoy, EnvoyOptions};
use serde_json::json;

use self::client::{http_client, Outcome};
use self::load::{schedule, Class};
use self::replay::{calibrate, replay_sampling};
use self::summary::{markdown_table, summarize, TargetRow};
use crate::options::Options;
use crate::pool::SimulatedPool;
use crate::targets::{self, RunningTarget, TargetName};

/// Two pods of eight engine slots: small enough for a shared 2-core machine at 2× load.
pub(crate) const PODS: usize = 2;
pub(crate) const MAX_NUM_SEQS: usize = 8;
/// Flow control's TTLs in this run: standard waits up to 10 s, sheddable 1 s.
const TTL_MS: u64 = 10_000;
const SHEDDABLE_TTL_MS: u64 = 1_000;

/// The routers compared, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FlowTarget {
    /// Flow control with `--flow-reserved` places per pod kept for critical requests.
    #[value(name = "wasm-epp-flow")]
    WasmEppFlow,
    /// Flow control without reserved places.
    #[value(name = "wasm-epp-flow-no-reserve")]
    WasmEppFlowNoReserve,
    #[value(name = "wasm-epp")]
    WasmEpp,
    #[value(name = "envoy-round-robin")]
    EnvoyRoundRobin,
    #[value(name = "envoy-least-request")]
    EnvoyLeastRequest,
    #[value(name = "vllm-router-cache-aware")]
    VllmRouterCacheAware,
}

impl FlowTarget {
    fn label(self) -> &'static str {
        match self {
            FlowTarget::WasmEppFlow => "wasm-epp-flow",
            FlowTarget::WasmEppFlowNoReserve => "wasm-epp-flow-no-reserve",
            FlowTarget::WasmEpp => "wasm-epp",
            FlowTarget::EnvoyRoundRobin => "envoy-round-robin",
            FlowTarget::EnvoyLeastRequest => "envoy-least-request",
            FlowTarget::VllmRouterCacheAware => "vllm-router-cache-aware",
        }
    }
}

pub fn run(options: &Options) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())?;
    let dir = launcher::paths::run_dir("bench-flow").map_err(|e| format!("run dir: {e}"))?;
    let out_dir = launcher::paths::workspace_root().join(&options.out_dir);
    std::fs::create_dir_all(&out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
    let mut pod_args = crate::workload::pod_args(MAX_NUM_SEQS, 8_192, 4_096);
    pod_args.extend(["--time-scale".to_string(), options.time_scale.to_string()]);
    let pool = SimulatedPool::start(PODS, &pod_args, &dir)?;
    let timeout = Duration::from_secs(options.request_timeout_s);
    let vllm_router = options.vllm_router.clone().unwrap_or_else(targets::default_vllm_router);
    let http = runtime.block_on(async { http_client() });

    let flow = FlowSettings { max_inflight: options.flow_max_inflight, reserved: options.flow_reserved };
    let calibration = start(FlowTarget::WasmEpp, &pool, &dir, &vllm_router, flow)?;
    let url = format!("{}/v1/completions", calibration.base_url());
    let (idle_ttft_p99, capacity) = runtime.block_on(calibrate(&http, &url, timeout));
    drop(calibration);
    let offered = capacity * options.flow_load;
    println!(
        "flow: idle TTFT p99 {idle_ttft_p99:.0} ms, capacity {capacity:.1} req/s, offering {offered:.1} req/s for {} s",
        options.flow_seconds
    );
    let arrivals = schedule(offered, options.flow_seconds, options.seed);

    let mut rows: Vec<TargetRow> = Vec::new();
    let mut outcomes_by_target = Vec::new();
    for target in &options.flow_targets {
        pool.restart_all()?;
        let running = match start(*target, &pool, &dir, &vllm_router, flow) {
            Ok(running) => running,
            Err(reason) => {
                eprintln!("  {}: did not start: {reason}", target.label());
                continue;
            }
        };
        let url = format!("{}/v1/completions", running.base_url());
        let envoy_pid = match &running {
            RunningTarget::WasmEpp(envoy) => Some(envoy.pid()),
            RunningTarget::Baseline(_) | RunningTarget::VllmRouter { .. } => None,
        };
        let started = Instant::now();
        let (outcomes, peak_rss) = runtime.block_on(replay_sampling(&http, &url, &arrivals, timeout, envoy_pid));
        let seconds = started.elapsed().as_secs_f64();
        let flow_on = matches!(target, FlowTarget::WasmEppFlow | FlowTarget::WasmEppFlowNoReserve);
        let ttl = flow_on.then_some(SHEDDABLE_TTL_MS);
        let window_ms = options.flow_seconds * 1000;
        let mut row = summarize(target.label(), &outcomes, idle_ttft_p99, ttl, seconds, window_ms);
        row.envoy_peak_rss_mb = peak_rss.map(|bytes| (bytes as f64 / 1e5).round() / 10.0);
        println!(
            "  {}: critical TTFT p99 / idle {}, tenants Jain {:.3}, all answered {}",
            row.target,
            row.critical_ttft_vs_idle.map_or("-".into(), |v| format!("{v:.2}")),
            row.tenant_jain,
            row.all_answered
        );
        rows.push(row);
        outcomes_by_target.push((target.label(), outcomes));
        drop(running);
    }
    let context = json!({
        "workload": "j-overload", "pods": PODS, "max_num_seqs": MAX_NUM_SEQS, "time_scale": options.time_scale,
        "seconds": options.flow_seconds, "load_factor": options.flow_load, "capacity_rps": capacity,
        "offered_rps": offered, "requests": arrivals.len(), "idle_ttft_p99_ms": idle_ttft_p99,
        "ttl_ms": TTL_MS, "sheddable_ttl_ms": SHEDDABLE_TTL_MS, "seed": options.seed,
        "max_inflight_per_pod": flow.max_inflight, "reserved_per_pod": flow.reserved,
        "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        "mix_percent": {"critical": load::CRITICAL_PERCENT, "standard": load::STANDARD_PERCENT,
            "sheddable": 100 - load::CRITICAL_PERCENT - load::STANDARD_PERCENT, "tenant_a_per_b": load::TENANT_A_PER_B},
    });
    write(&out_dir, &context, &rows, &outcomes_by_target)
}

/// wasm-epp's flow-control settings in this run.
#[derive(Debug, Clone, Copy)]
struct FlowSettings {
    max_inflight: usize,
    reserved: usize,
}

fn start(
    target: FlowTarget,
    pool: &SimulatedPool,
    dir: &Path,
    vllm_router: &Path,
    flow: FlowSettings,
) -> Result<RunningTarget, String> {
    let addresses = pool.addresses();
    let dir = dir.join(target.label());
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let peer = match target {
        FlowTarget::WasmEppFlow | FlowTarget::WasmEppFlowNoReserve | FlowTarget::WasmEpp => None,
        FlowTarget::EnvoyRoundRobin => Some(TargetName::EnvoyRoundRobin),
        FlowTarget::EnvoyLeastRequest => Some(TargetName::EnvoyLeastRequest),
        FlowTarget::VllmRouterCacheAware => Some(TargetName::VllmRouterCacheAware),
    };
    if let Some(peer) = peer {
        return targets::start(peer, &addresses, &dir, vllm_router);
    }
    let port = || launcher::free_port().map_err(|e| format!("no free port: {e}"));
    let mut options = EnvoyOptions::for_pool(&addresses, port()?, port()?);
    if target != FlowTarget::WasmEpp {
        let reserved = if target == FlowTarget::WasmEppFlow { flow.reserved } else { 0 };
        let flow_control = json!({
            "enabled": true, "max_inflight_per_pod": flow.max_inflight, "reserved_per_pod": reserved,
            "ttl_ms": TTL_MS, "sheddable_ttl_ms": SHEDDABLE_TTL_MS,
        });
        if let Some(config) = options.filter_config.as_object_mut() {
            config.insert("flow_control".into(), flow_control);
        }
    }
    let envoy = Envoy::start(&options, &dir)?;
    if !envoy.wait_for_healthy_pods(PODS as u64, Duration::from_secs(20)) {
        eprintln!("  warning: the singleton does not see every pod healthy; running anyway");
    }
    Ok(RunningTarget::WasmEpp(envoy))
}

fn write(
    out_dir: &Path,
    context: &serde_json::Value,
    rows: &[TargetRow],
    outcomes: &[(&str, Vec<Outcome>)],
) -> Result<(), String> {
    // Per request, only the sheddable class is kept (its answer-time curve is plotted); the
    // rows summarize the rest, and all of it would make a file of megabytes.
    let sheddable: serde_json::Map<String, serde_json::Value> = outcomes
        .iter()
        .map(|(target, list)| {
            let kept: Vec<&Outcome> = list.iter().filter(|o| o.class == Class::Sheddable).collect();
            ((*target).to_string(), json!(kept))
        })
        .collect();
    let document = json!({"context": context, "rows": rows, "sheddable_requests": sheddable});
    let json_path = out_dir.join("flow-control.json");
    let text = serde_json::to_string(&document).map_err(|e| e.to_string())?;
    std::fs::write(&json_path, text).map_err(|e| format!("{}: {e}", json_path.display()))?;
    let markdown = format!(
        "# Workload j: overload with flow control (issue 16)\n\nContext: `{}`\n\n{}",
        context,
        markdown_table(rows)
    );
    let md_path = out_dir.join("flow-control.md");
    std::fs::write(&md_path, &markdown).map_err(|e| format!("{}: {e}", md_path.display()))?;
    println!("\n{}\nwrote {} and {}", markdown_table(rows), json_path.display(), md_path.display());
    Ok(())
}
