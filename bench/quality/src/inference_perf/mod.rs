//! The rate ladder of issue 14's opening table, driven by a load generator that is not ours:
//! inference-perf (Kubernetes' serving working group's, which llm-d's benchmarks run;
//! installed by `make e2e` or `make bench-inference-perf` into `.venv-inference-perf`).
//! `--inference-perf-only`; results in `bench/results/inference-perf/`.
//!
//! The shape is the issue's: 50 shared prefixes of 2,048 tokens (inference-perf's
//! `shared_prefix` data), Poisson arrivals climbing 1 → 16 requests/s, 4 pods under KV
//! pressure (the prefixes fit the pool only when each stays on one pod). Every target gets the
//! same pods, emptied, and the same seeded requests; the figures are inference-perf's own
//! (TTFT, throughput, and the cached tokens the pods reported in `usage`) beside the pods'
//! counters (prefix-cache hit rate, requests per pod).

mod report;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::options::Options;
use crate::pool::SimulatedPool;
use crate::targets::{self, TargetName};
use crate::workload::{pod_args, Size};
use report::{InferencePerfRow, StageFigures};

const PODS: usize = 4;
const GROUPS: usize = 50;
const PROMPTS_PER_GROUP: usize = 10;
/// In inference-perf's tokenizer's tokens; the simulator counts ~1.1 × as many.
const SYSTEM_PROMPT_TOKENS: usize = 2048;
const QUESTION_TOKENS: usize = 256;
const OUTPUT_TOKENS: usize = 128;
const RATES: [f64; 5] = [1.0, 2.0, 4.0, 8.0, 16.0];
/// 16 sequences of ~2.6k tokens need 42k; 4,096 blocks of 16 are 65k tokens per pod, while the
/// 50 prefixes are ~113k: they fit the pool (262k) only when each stays on one pod.
const MAX_NUM_SEQS: usize = 16;
const NUM_GPU_BLOCKS: usize = 4096;
const MAX_MODEL_LEN: usize = 8192;
/// Prefill six times slower than the small preset's (a bigger model on the same GPU): at the
/// top rate a pod keeps up only when most of each prompt is cached, so the ladder ends in the
/// saturation the issue measured, and where the prompts go decides who keeps up.
const PREFILL_PER_TOKEN_MS: f64 = 0.12;
/// Past the last stage, the requests still running may take this long before the run is
/// called stuck.
const DRAIN_ALLOWANCE: Duration = Duration::from_secs(300);

/// The default targets: issue 14's table (round robin, vllm-router cache_aware, wasm-epp),
/// least request (its goals name it)
/// and wasm-epp learning from responses.
pub const DEFAULT_TARGETS: &str =
    "envoy-round-robin,envoy-least-request,vllm-router-cache-aware,wasm-epp,wasm-epp-learning";

pub fn run(options: &Options) -> Result<(), String> {
    let started = Instant::now();
    let (out_dir, _runtime) = crate::run::prepare(options)?;
    let dir = launcher::paths::run_dir("bench-inference-perf").map_err(|e| format!("run dir: {e}"))?;
    println!("logs and configurations: {}", dir.display());
    let size = if options.quick { Size::Quick } else { Size::Full };
    let stage_s = size.pick(20, 6) as u64;
    if !launcher::inference_perf::installed() {
        return Err(format!(
            "no inference-perf in {}: `make bench-inference-perf` installs it",
            launcher::inference_perf::venv().display()
        ));
    }
    let mut args = pod_args(MAX_NUM_SEQS, NUM_GPU_BLOCKS, MAX_MODEL_LEN);
    args.extend(["--prefill-per-token-ms".to_string(), PREFILL_PER_TOKEN_MS.to_string()]);
    args.extend(["--time-scale".to_string(), options.time_scale.to_string()]);
    let pool = SimulatedPool::start(PODS, &args, &dir)?;
    let vllm_router = options.vllm_router.clone().unwrap_or_else(targets::default_vllm_router);
    println!(
        "\n== issue 14's ladder through inference-perf: {PODS} pods, {GROUPS} prefixes of {SYSTEM_PROMPT_TOKENS} tokens, \
         rates {RATES:?} requests/s, {stage_s} s each"
    );
    let mut rows = Vec::new();
    let mut failures = Vec::new();
    for target in &options.inference_perf_targets {
        match run_one(&pool, *target, stage_s, &dir, &vllm_router, options.seed) {
            Ok(row) => {
                println!("  {}", row.one_line());
                rows.push(row);
            }
            Err(reason) => {
                eprintln!("  {}: did not run: {reason}", target.label());
                failures.push((target.label().to_string(), reason));
            }
        }
    }
    let context = report::Context {
        started_at: crate::run::utc_now(),
        quick: options.quick,
        stage_s,
        seed: options.seed,
        runtime_s: started.elapsed().as_secs_f64(),
        failures,
        shape: format!(
            "inference-perf 0.7.0 (`shared_prefix` data: {GROUPS} prefixes of {SYSTEM_PROMPT_TOKENS} tokens, \
             {QUESTION_TOKENS}-token questions, {OUTPUT_TOKENS} output tokens; Poisson stages of {RATES:?} requests/s) \
             against {PODS} small-preset pods ({MAX_NUM_SEQS} sequences, {NUM_GPU_BLOCKS} blocks of 16 tokens, \
             prefill {PREFILL_PER_TOKEN_MS} ms per uncached token)"
        ),
    };
    report::write(&rows, &context, &out_dir)
}

/// One target, from emptied pods to a row: inference-perf's reports and the pods' counters.
fn run_one(
    pool: &SimulatedPool,
    target: TargetName,
    stage_s: u64,
    dir: &Path,
    vllm_router: &Path,
    seed: u64,
) -> Result<InferencePerfRow, String> {
    pool.restart_all()?;
    let target_dir = dir.join(target.label());
    std::fs::create_dir_all(&target_dir).map_err(|e| format!("{}: {e}", target_dir.display()))?;
    let mut running = targets::start(target, &pool.addresses(), &target_dir, vllm_router)?;
    let deadline = Duration::from_secs(stage_s * RATES.len() as u64) + DRAIN_ALLOWANCE;
    let wall = Instant::now();
    let reports = launcher::inference_perf::run(
        &target_dir,
        config(stage_s, seed),
        &running.base_url(),
        crate::workload::MODEL,
        deadline,
    )?;
    let wall_s = wall.elapsed().as_secs_f64();
    pool.print_pod_timings("pod");
    let counters = pool.prefix_counters()?;
    let stats = pool.stats()?;
    let crashed = running.has_exited();
    drop(running);
    if crashed {
        return Err(format!("{} exited during the run; see its log under {}", target.label(), target_dir.display()));
    }
    let summary = launcher::inference_perf::read_report(&reports.join("summary_lifecycle_metrics.json"))?;
    let stages = (0..RATES.len())
        .map(|stage| {
            let path = reports.join(format!("stage_{stage}_lifecycle_metrics.json"));
            launcher::inference_perf::read_report(&path)
                .map(|report| StageFigures::of(stage, RATES.get(stage).copied().unwrap_or(0.0), &report))
        })
        .collect::<Result<Vec<_>, String>>()?;
    let requests_per_pod = stats
        .iter()
        .map(|pod| {
            pod.get("endpoints")
                .and_then(|e| e.get("/v1/completions"))
                .and_then(|c| c.get("served"))
                .and_then(Value::as_u64)
                .unwrap_or(0)
        })
        .collect();
    Ok(InferencePerfRow::of(
        target.label(),
        &summary,
        stages,
        crate::pool::PrefixCounters::default().hit_rate_until(&counters),
        requests_per_pod,
        wall_s,
    ))
}

/// inference-perf's data, load and report sections for one run.
fn config(stage_s: u64, seed: u64) -> Value {
    let stages: Vec<Value> = RATES.iter().map(|rate| json!({"rate": rate, "duration": stage_s})).collect();
    json!({
        "api": {"type": "completion", "streaming": true},
        "data": {"type": "shared_prefix", "shared_prefix": {
            "num_groups": GROUPS, "num_prompts_per_group": PROMPTS_PER_GROUP,
            "system_prompt_len": SYSTEM_PROMPT_TOKENS, "question_len": QUESTION_TOKENS,
            "output_len": OUTPUT_TOKENS, "seed": seed}},
        "load": {"type": "poisson", "stages": stages, "interval": 0, "base_seed": seed},
        "report": {"request_lifecycle": {"summary": true, "per_stage": true}},
    })
}
