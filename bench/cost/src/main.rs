//! `wasm-epp-bench-cost`: what wasm-epp costs inside the real Envoy.
//!
//! `all` (what `make bench-cost` runs, after criterion's native cases) measures added latency
//! and CPU, throughput, scrape cost, memory, the Wasm runtimes and the decision matrix,
//! prints each table with the command that reproduces it, merges every figure into
//! `bench/results/cost.json`, and ends with issue 17's goals judged on this run's figures.
//! `BENCH_QUICK=1` (or `--quick`) runs a short version of each for a smoke check; the figures
//! are then noisier.

mod cli;

use std::path::Path;
use std::time::Instant;

use bench_cost::envoys::{start_all, Variant};
use bench_cost::goals;
use bench_cost::latency;
use bench_cost::matrix;
use bench_cost::memory;
use bench_cost::metrics_page;
use bench_cost::results::{self, Record, Results};
use bench_cost::runtimes;
use bench_cost::scrape;
use bench_cost::throughput;
use bench_cost::upstream::Upstream;
use clap::Parser;
use cli::{
    Cli, Command, LatencyArgs, MatrixArgs, MemoryArgs, ProfileArgs, RuntimesArgs, ScrapeArgs, StreamsArgs,
    ThroughputArgs,
};

/// Pods behind the Envoys in the latency, throughput, memory and runtime runs.
const POOL_PODS: usize = 16;

fn upstream() -> Result<Upstream, String> {
    Upstream::start(POOL_PODS, metrics_page::vllm_page(0))
}

fn run_latency(args: &LatencyArgs, quick: bool, results: &mut Results) -> Result<(), String> {
    let pods = upstream()?;
    let envoys = start_all(&cli::variants(args.variants.as_ref(), &Variant::ALL)?, &pods.addresses())?;
    latency::run(&envoys, &cli::latency_options(args, quick), results)
}

fn run_streams(args: &StreamsArgs, quick: bool, results: &mut Results) -> Result<(), String> {
    let pods = upstream()?;
    let default = [
        Variant::Plain,
        Variant::HeaderRead,
        Variant::WasmEpp,
        Variant::WasmEppLearning,
        Variant::WasmEppLearningReadAll,
    ];
    let mut addresses = pods.addresses();
    addresses.truncate(args.pods.unwrap_or(POOL_PODS).clamp(1, POOL_PODS));
    let profiled_fields = cli::json_option(args.profiled_config.as_deref(), "--profiled-config")?;
    let envoys = cli::variants(args.variants.as_ref(), &default)?
        .into_iter()
        .map(|v| {
            let fields = profiled_fields.clone().filter(|_| v == Variant::WasmEppProfiled);
            bench_cost::envoys::RunningEnvoy::start_configured(v, &addresses, None, fields)
        })
        .collect::<Result<Vec<_>, _>>()?;
    bench_cost::streams::run(&envoys, &cli::streams_options(args, quick), results)
}

fn run_throughput(args: &ThroughputArgs, quick: bool, results: &mut Results) -> Result<(), String> {
    let pods = upstream()?;
    let default = [
        Variant::Plain,
        Variant::HeaderBuffered,
        Variant::WasmEppOriginalDst,
        Variant::WasmEpp,
        Variant::WasmEppNoPrefix,
    ];
    let envoys = start_all(&cli::variants(args.variants.as_ref(), &default)?, &pods.addresses())?;
    throughput::run(&envoys, &cli::throughput_options(args, quick), results)
}

fn run_profile(args: &ProfileArgs, quick: bool, results: &mut Results) -> Result<(), String> {
    let pods = upstream()?;
    bench_cost::profile::run(&pods.addresses(), &cli::profile_options(args, quick, POOL_PODS)?, results)
}

fn run_memory(args: &MemoryArgs, quick: bool, results: &mut Results) -> Result<(), String> {
    let pods = upstream()?;
    memory::run(&pods.addresses(), &cli::memory_options(args, quick)?, results)
}

fn run_runtimes(args: &RuntimesArgs, quick: bool, results: &mut Results) -> Result<(), String> {
    let pods = upstream()?;
    runtimes::run(&pods.addresses(), &cli::runtimes_options(args, quick), results)
}

/// The records already in `out`, and criterion's (always in the repository's file), for the
/// figures this run does not measure itself.
fn stored_records(out: &Path) -> Vec<Record> {
    let read = |path: &Path| -> Vec<Record> {
        std::fs::read_to_string(path).ok().and_then(|text| serde_json::from_str(&text).ok()).unwrap_or_default()
    };
    let mut records = read(&results::default_path());
    if out != results::default_path() {
        records.extend(read(out));
    }
    records
}

fn run_matrix(args: &MatrixArgs, quick: bool, out: &Path, results: &mut Results) -> Result<(), String> {
    matrix::run(&cli::matrix_options(args, quick), &stored_records(out), results)
}

/// Judges the goals on the stored records followed by `measured` (this run's, which win).
fn judge_goals(out: &Path, measured: &[Record], results: &mut Results) {
    let mut records = stored_records(out);
    records.extend(measured.iter().cloned());
    let outcomes = goals::evaluate(&records);
    goals::print(&outcomes);
    println!("  (native figures: criterion's, as `make bench-cost` ran it just before; Envoy figures: this run's when it measured them)");
    goals::record(&outcomes, results);
}

/// Runs one benchmark, merges its figures, keeps them in `measured`, and prints how to run it
/// again.
fn step(
    name: &str,
    quick: bool,
    out: &Path,
    measured: &mut Vec<Record>,
    body: impl FnOnce(&mut Results) -> Result<(), String>,
) -> Result<(), String> {
    let start = Instant::now();
    let mut results = Results::default();
    let outcome = body(&mut results);
    results.merge_into(out)?;
    let quick_flag = if quick { " --quick" } else { "" };
    println!(
        "  [{name}: {:.0} s, {} figures merged into {}; reproduce: ./target/release/wasm-epp-bench-cost{quick_flag} {name}]",
        start.elapsed().as_secs_f64(),
        results.records.len(),
        out.display()
    );
    measured.extend(results.records);
    outcome
}

fn all(quick: bool, out: &Path) -> Result<(), String> {
    let mut measured = Vec::new();
    let m = &mut measured;
    step("latency", quick, out, m, |r| run_latency(&LatencyArgs { concurrency: 32, ..Default::default() }, quick, r))?;
    // 32 streams over 16 pods is one per pod and worker, under the reading bound; on one pod, 16.
    for pods in [POOL_PODS, 1] {
        let streams = StreamsArgs { concurrency: 32, pods: Some(pods), ..Default::default() };
        step("streams", quick, out, m, |r| run_streams(&streams, quick, r))?;
    }
    let throughput = ThroughputArgs { body_bytes: 4096, connections: 32, ..Default::default() };
    step("throughput", quick, out, m, |r| run_throughput(&throughput, quick, r))?;
    let scrape = ScrapeArgs { poll_interval_ms: 100, full_page_too: true, ..Default::default() };
    step("scrape", quick, out, m, |r| scrape::run(&cli::scrape_options(&scrape, quick), r))?;
    // Issue 17's second case: 1,000 pods every second.
    let thousand = ScrapeArgs { poll_interval_ms: 1000, pods: Some(vec![1000]), ..Default::default() };
    step("scrape", quick, out, m, |r| scrape::run(&cli::scrape_options(&thousand, quick), r))?;
    let memory = MemoryArgs { prompt_bytes: 2048, connections: 16, label: "prefix_index".into(), ..Default::default() };
    step("memory", quick, out, m, |r| run_memory(&memory, quick, r))?;
    step("runtimes", quick, out, m, |r| run_runtimes(&RuntimesArgs::default(), quick, r))?;
    step("decision-matrix", quick, out, m, |r| run_matrix(&MatrixArgs::default(), quick, out, r))?;
    let profile = ProfileArgs { prompt_kb: 4, ..Default::default() };
    step("profile", quick, out, m, |r| run_profile(&profile, quick, r))?;
    let judged = measured.clone();
    step("goals", quick, out, &mut measured, |r| {
        judge_goals(out, &judged, r);
        Ok(())
    })
}

fn run() -> Result<(), String> {
    let cli = Cli::parse();
    let quick = cli.quick || std::env::var("BENCH_QUICK").is_ok_and(|v| v == "1");
    // Quick figures are for smoke checks: they never replace the full ones in the repository.
    let out = cli.out.clone().unwrap_or_else(|| {
        if quick {
            launcher::paths::workspace_root().join("target/bench-cost-quick.json")
        } else {
            results::default_path()
        }
    });
    let mut measured = Vec::new();
    let m = &mut measured;
    match cli.command.unwrap_or(Command::All) {
        Command::All => all(quick, &out),
        Command::Latency(args) => step("latency", quick, &out, m, |r| run_latency(&args, quick, r)),
        Command::Streams(args) => step("streams", quick, &out, m, |r| run_streams(&args, quick, r)),
        Command::Throughput(args) => step("throughput", quick, &out, m, |r| run_throughput(&args, quick, r)),
        Command::Scrape(args) => step("scrape", quick, &out, m, |r| scrape::run(&cli::scrape_options(&args, quick), r)),
        Command::Memory(args) => step("memory", quick, &out, m, |r| run_memory(&args, quick, r)),
        Command::Runtimes(args) => step("runtimes", quick, &out, m, |r| run_runtimes(&args, quick, r)),
        Command::DecisionMatrix(args) => step("decision-matrix", quick, &out, m, |r| run_matrix(&args, quick, &out, r)),
        Command::Profile(args) => step("profile", quick, &out, m, |r| run_profile(&args, quick, r)),
        Command::Goals => step("goals", quick, &out, m, |r| {
            judge_goals(&out, &[], r);
            Ok(())
        }),
    }
}

fn main() {
    if let Err(error) = run() {
        eprintln!("wasm-epp-bench-cost: {error}");
        std::process::exit(1);
    }
}
