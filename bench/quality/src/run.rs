//! The benchmark's outer loop: workloads, then targets on each workload's pool, then the report.
//!
//! Orchestration is blocking (processes, admin calls); only the replay itself runs on the
//! tokio runtime. A target that cannot start, or a pool that cannot, is recorded in the
//! report and skipped: the other results are still worth having.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tokio::runtime::Runtime;
use tokio::sync::watch;

use crate::balance::sample_until;
use crate::client::StreamingClient;
use crate::driver::replay;
use crate::options::Options;
use crate::pool::SimulatedPool;
use crate::report::{markdown, table, write_json, RunContext};
use crate::stages::StageRow;
use crate::summary::{summarize, QualityRow, RunNotes};
use crate::targets::{self, TargetName};
use crate::workload::{Size, Workload};

/// The balance sampler's scrapes must not hang a run; a pod that slow is skipped for a round.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// What stays the same across all runs of one invocation.
struct Bench {
    runtime: Runtime,
    request_timeout: Duration,
    vllm_router: PathBuf,
    dir: PathBuf,
}

pub fn run(options: &Options) -> Result<(), String> {
    if options.replicas_only {
        return crate::replicas::run(options);
    }
    if options.flow_only {
        return crate::flow::run(options);
    }
    if options.pd_only {
        return crate::pd::run(options);
    }
    if options.inference_perf_only {
        return crate::inference_perf::run(options);
    }
    if options.comparison_only {
        return crate::comparison::run(options);
    }
    if options.faults_only {
        return crate::faults::run(options);
    }
    let started = Instant::now();
    let started_at = utc_now();
    let (out_dir, runtime) = prepare(options)?;
    let bench = Bench {
        runtime,
        request_timeout: Duration::from_secs(options.request_timeout_s),
        vllm_router: options.vllm_router.clone().unwrap_or_else(targets::default_vllm_router),
        dir: launcher::paths::run_dir("bench-quality").map_err(|e| format!("run dir: {e}"))?,
    };
    println!("logs and configurations: {}", bench.dir.display());
    let size = if options.quick { Size::Quick } else { Size::Full };

    let mut rows: Vec<(QualityRow, RunNotes)> = Vec::new();
    let mut failures = Vec::new();
    let mut workloads = Vec::new();
    let mut names = options.workloads.clone();
    names.dedup();
    for name in names {
        let mut workload = Workload::build(name, size, options.seed);
        if options.saturate {
            workload.concurrency = workload.jobs.len().max(1);
        }
        let pool = match start_workload_pool(&workload, options.time_scale, &bench.dir) {
            Ok(pool) => pool,
            Err(reason) => {
                eprintln!("  pool did not start: {reason}");
                for target in &options.targets {
                    failures.push((name.label().to_string(), target.label().to_string(), reason.clone()));
                }
                workloads.push(workload);
                continue;
            }
        };
        for target in &options.targets {
            match run_one(&bench, &workload, &pool, *target) {
                Ok((row, notes)) => {
                    println!("  {}", one_line(&row, &notes));
                    rows.push((row, notes));
                }
                Err(reason) => {
                    eprintln!("  {}: did not run: {reason}", target.label());
                    failures.push((name.label().to_string(), target.label().to_string(), reason));
                }
            }
        }
        workloads.push(workload);
    }

    let context = RunContext {
        started_at,
        quick: options.quick,
        saturate: options.saturate,
        time_scale: options.time_scale,
        seed: options.seed,
        cores: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        runtime_s: started.elapsed().as_secs_f64(),
        workloads,
        failures,
    };
    let plain_rows: Vec<QualityRow> = rows.iter().map(|(row, _)| row.clone()).collect();
    write_json(&plain_rows, &out_dir.join("quality.json"))?;
    let markdown_path = out_dir.join("quality.md");
    std::fs::write(&markdown_path, markdown(&rows, &context))
        .map_err(|e| format!("{}: {e}", markdown_path.display()))?;
    println!("\n{}", table(&rows));
    let stage_rows: Vec<StageRow> = rows.iter().flat_map(|(_, notes)| notes.stages.iter().cloned()).collect();
    if !stage_rows.is_empty() {
        let path = out_dir.join("stages.json");
        let text = serde_json::to_string_pretty(&stage_rows).map_err(|e| e.to_string())?;
        std::fs::write(&path, text + "\n").map_err(|e| format!("{}: {e}", path.display()))?;
        println!("{}", crate::stages::table(&stage_rows));
    }
    if let Some(models_table) = crate::models::report::write(&rows, &out_dir)? {
        println!("{models_table}");
    }
    println!(
        "wrote {} and {} in {:.0} s",
        out_dir.join("quality.json").display(),
        markdown_path.display(),
        context.runtime_s
    );
    if options.no_replicas {
        return Ok(());
    }
    crate::replicas::run(options)
}

/// One target on one workload, from cold pods to a summarized row.
fn run_one(
    bench: &Bench,
    workload: &Workload,
    pool: &SimulatedPool,
    target: TargetName,
) -> Result<(QualityRow, RunNotes), String> {
    pool.restart_all()?;
    let mut running =
        targets::start(target, &pool.addresses(), &target_dir(&bench.dir, workload, target)?, &bench.vllm_router)?;
    let before = pool.prefix_counters();
    let base_url = running.base_url();
    let timeout =
        workload.name.request_timeout_floor().map_or(bench.request_timeout, |floor| floor.max(bench.request_timeout));
    let client = StreamingClient::new(timeout);
    let probe = StreamingClient::new(PROBE_TIMEOUT);
    let (replay, balance) = bench.runtime.block_on(async {
        let (stop, stopped) = watch::channel(false);
        let sampler = tokio::spawn(sample_until(probe, pool.metrics_urls(), stopped));
        let replay = replay(&client, &base_url, workload.jobs.clone(), workload.concurrency).await;
        let _ = stop.send(true);
        let balance = sampler.await.unwrap_or_default();
        (replay, balance)
    });
    let after = pool.prefix_counters();
    crate::index_accuracy::print(&running);
    let crashed = running.has_exited();
    drop(running);
    if crashed {
        return Err(format!("{} exited during the run; see its log under {}", target.label(), bench.dir.display()));
    }
    let models = crate::models::is_models_workload(workload.name).then(|| crate::models::notes(pool, &replay));
    let counters = match (before, after) {
        (Ok(before), Ok(after)) => Some((before, after)),
        (Err(reason), _) | (_, Err(reason)) => {
            eprintln!("  warning: no prefix-cache counters: {reason}");
            None
        }
    };
    write_decisions(&replay, &target_dir(&bench.dir, workload, target)?)?;
    let (row, mut notes) =
        summarize(workload.name.label(), target.label(), &replay, counters, &pool.addresses(), balance);
    notes.models = models.transpose()?;
    notes.stages = crate::stages::summarize(workload, target.label(), &replay);
    Ok((row, notes))
}

/// Every request's decision header, with its send time, TTFT, prompt and cached prompt tokens and prompt
/// key, one per line, into
/// `decisions.txt` beside the target's logs (only when the run turned the header on, e.g.
/// `WASM_EPP_FILTER_CONFIG='{"debug_decision_header": true}'`): the data to read when a
/// router's choices need explaining.
pub(crate) fn write_decisions(replay: &crate::driver::Replay, dir: &Path) -> Result<(), String> {
    let mut lines = String::new();
    for success in replay.outcomes.iter().filter_map(|outcome| outcome.as_ref().ok()) {
        let Some(decision) = &success.decision else { continue };
        let sent_ms = success.started.saturating_duration_since(replay.started).as_millis();
        let ttft_ms = success.ttft.as_millis();
        let cached = success.cached_tokens.map_or_else(|| "-".to_string(), |c| c.to_string());
        let prompt_tokens = success.prompt_tokens.map_or_else(|| "-".to_string(), |c| c.to_string());
        let prompt = success.prompt_key.map_or_else(|| "-".to_string(), |k| format!("{k:016x}"));
        lines
            .push_str(&format!(
            "sent_ms={sent_ms}; ttft_ms={ttft_ms}; prompt_tokens={prompt_tokens}; cached={cached}; prompt={prompt}; {decision}\n"
        ));
    }
    if lines.is_empty() {
        return Ok(());
    }
    let path = dir.join("decisions.txt");
    std::fs::write(&path, lines).map_err(|e| format!("{}: {e}", path.display()))
}

/// A folder per workload and target, so every Envoy and router log is kept apart.
pub(crate) fn target_dir(dir: &Path, workload: &Workload, target: TargetName) -> Result<PathBuf, String> {
    let path = dir.join(format!("{}-{}", workload.name.label(), target.label()));
    std::fs::create_dir_all(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

fn one_line(row: &QualityRow, notes: &RunNotes) -> String {
    let ms = |value: Option<f64>| value.map(|v| format!("{v:.0}")).unwrap_or_else(|| "-".into());
    format!(
        "{:<26} hit {:>6}  TTFT p50 {:>6} p99 {:>6} ms  E2E p50 {:>6} p99 {:>6} ms  ITL p50 {:>4} p99 {:>5} ms  {:>6.0} out tok/s  {:>5.2} req/s  errors {}  ({} requests, {:.1} s)",
        row.target,
        row.hit_rate.map(|rate| format!("{:.1}%", rate * 100.0)).unwrap_or_else(|| "-".into()),
        ms(row.ttft_p50_ms),
        ms(row.ttft_p99_ms),
        ms(row.e2e_p50_ms),
        ms(row.e2e_p99_ms),
        ms(row.itl_p50_ms),
        ms(row.itl_p99_ms),
        row.output_tokens_per_s,
        row.requests_per_s,
        row.errors,
        notes.requests,
        notes.wall_s,
    )
}

/// Announces `workload` and starts its simulated pods (each with its own flags, at
/// `time_scale`).
pub(crate) fn start_workload_pool(workload: &Workload, time_scale: f64, dir: &Path) -> Result<SimulatedPool, String> {
    println!(
        "\n== workload {}: {} pods, {} requests, {} client slots",
        workload.name.label(),
        workload.pods,
        workload.request_count(),
        workload.concurrency
    );
    let time_scale = ["--time-scale".to_string(), time_scale.to_string()];
    let pod_args: Vec<Vec<String>> =
        (0..workload.pods).map(|i| [workload.pod_args_of(i), time_scale.to_vec()].concat()).collect();
    SimulatedPool::start_each(&pod_args, dir)
}

/// The current UTC time for the report (`date` is on every machine this runs on).
pub(crate) fn utc_now() -> String {
    std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .ok()
        .map(|output| String::from_utf8_lossy(&output.stdout).trim().to_string())
        .filter(|text| !text.is_empty())
        .unwrap_or_else(|| "at an unknown time".to_string())
}

/// What stays the same across the runs of a dimension with its own results folder
/// (`--comparison-only`, `--faults-only`).
pub struct DimensionBench {
    pub runtime: Runtime,
    pub request_timeout: Duration,
    /// This run's folder of logs and configurations.
    pub dir: PathBuf,
    pub vllm_router: PathBuf,
    pub time_scale: f64,
}

impl DimensionBench {
    /// Prepares the results folder (`folder` under the default `bench/results`, else the
    /// given one) and this run's folder of logs (`run_name`). Returns both.
    pub fn start(options: &Options, folder: &str, run_name: &str) -> Result<(Self, PathBuf), String> {
        let (out_dir, runtime) = prepare(options)?;
        let out_dir = if options.out_dir == Path::new("bench/results") { out_dir.join(folder) } else { out_dir };
        std::fs::create_dir_all(&out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
        let bench = Self {
            runtime,
            request_timeout: Duration::from_secs(options.request_timeout_s),
            dir: launcher::paths::run_dir(run_name).map_err(|e| format!("run dir: {e}"))?,
            vllm_router: options.vllm_router.clone().unwrap_or_else(targets::default_vllm_router),
            time_scale: options.time_scale,
        };
        println!("logs and configurations: {}", bench.dir.display());
        Ok((bench, out_dir))
    }

    /// Starts `workload`'s pods; `None`, with the reason in `failures`, if they did not start.
    pub fn start_pool(&self, workload: &Workload, failures: &mut Vec<String>) -> Option<SimulatedPool> {
        match start_workload_pool(workload, self.time_scale, &self.dir) {
            Ok(pool) => Some(pool),
            Err(reason) => {
                eprintln!("  pool did not start: {reason}");
                failures.push(format!("{}: pool did not start: {reason}", workload.name.label()));
                None
            }
        }
    }
}

/// The results folder (created; relative to the workspace) and the client runtime every
/// run uses.
pub fn prepare(options: &Options) -> Result<(std::path::PathBuf, tokio::runtime::Runtime), String> {
    let root = launcher::paths::workspace_root();
    let out_dir = if options.out_dir.is_absolute() { options.out_dir.clone() } else { root.join(&options.out_dir) };
    std::fs::create_dir_all(&out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    Ok((out_dir, runtime))
}
