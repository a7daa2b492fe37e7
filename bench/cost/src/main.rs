//! `wasm-epp-bench-cost`: what wasm-epp costs inside the real Envoy.
//!
//! `all` (what `make bench-cost` runs) measures added latency and CPU, throughput, scrape
//! cost and memory, prints each table with the command that reproduces it, and merges every
//! figure into `bench/results/cost.json`. `BENCH_QUICK=1` (or `--quick`) runs a short
//! version of each for a smoke check; the figures are then noisier.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bench_cost::envoys::{start_all, Variant};
use bench_cost::latency::{self, LatencyOptions};
use bench_cost::memory::{self, MemoryOptions};
use bench_cost::metrics_page;
use bench_cost::profile::{self, ProfileOptions};
use bench_cost::results::{self, Results};
use bench_cost::scrape::{self, ScrapeOptions};
use bench_cost::throughput::{self, ThroughputOptions};
use bench_cost::upstream::Upstream;
use clap::{Args, Parser, Subcommand};

/// Pods behind the Envoys in the latency, throughput and memory runs.
const POOL_PODS: usize = 16;

#[derive(Parser)]
#[command(about = "wasm-epp cost benchmarks against plain Envoy (see bench/cost/README.md)")]
struct Cli {
    /// Short runs for a smoke check (also BENCH_QUICK=1).
    #[arg(long, global = true)]
    quick: bool,
    /// Where the figures are merged (default bench/results/cost.json; with --quick,
    /// target/bench-cost-quick.json).
    #[arg(long, global = true)]
    out: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Every benchmark below, in order.
    All,
    /// Added latency and CPU per request, sequential and concurrent.
    Latency(LatencyArgs),
    /// Requests per second at saturation.
    Throughput(ThroughputArgs),
    /// The singleton's scrape cost.
    Scrape(ScrapeArgs),
    /// RSS while distinct prefixes are routed.
    Memory(MemoryArgs),
    /// Where the cost inside Envoy goes: host calls per request and their cost, time per
    /// phase (needs the `profile` build: `make bench-cost` makes it).
    Profile(ProfileArgs),
}

#[derive(Args, Default)]
struct ProfileArgs {
    /// Prompt size of the completions requests, KB.
    #[arg(long, default_value_t = 4)]
    prompt_kb: usize,
    #[arg(long)]
    sequential: Option<usize>,
    /// Seconds of 32-way load, on the profiled build and on the body-reading baseline.
    #[arg(long)]
    seconds: Option<f64>,
}

#[derive(Args, Default)]
struct LatencyArgs {
    /// Body sizes in bytes, comma-separated.
    #[arg(long, value_delimiter = ',')]
    sizes: Option<Vec<usize>>,
    /// Measured sequential requests per variant and size.
    #[arg(long)]
    sequential: Option<usize>,
    /// Measured concurrent requests per variant, size and round.
    #[arg(long)]
    concurrent: Option<usize>,
    #[arg(long)]
    rounds: Option<usize>,
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Variants to run, comma-separated (default: all).
    #[arg(long, value_delimiter = ',')]
    variants: Option<Vec<String>>,
}

#[derive(Args, Default)]
struct ThroughputArgs {
    #[arg(long, default_value_t = 4096)]
    body_bytes: usize,
    #[arg(long)]
    seconds: Option<f64>,
    #[arg(long)]
    rounds: Option<usize>,
    #[arg(long, default_value_t = 32)]
    connections: usize,
    /// Variants to run, comma-separated.
    #[arg(long, value_delimiter = ',')]
    variants: Option<Vec<String>>,
}

#[derive(Args, Default)]
struct ScrapeArgs {
    /// Pod counts, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pods: Option<Vec<usize>>,
    #[arg(long)]
    seconds: Option<f64>,
    #[arg(long, default_value_t = 100)]
    poll_interval_ms: u64,
    /// Also scrape whole pages (`/metrics`), as before `name[]` filtering.
    #[arg(long)]
    full_page_too: bool,
}

#[derive(Args, Default)]
struct MemoryArgs {
    #[arg(long)]
    prefixes: Option<usize>,
    #[arg(long, default_value_t = 2048)]
    prompt_bytes: usize,
    #[arg(long, default_value_t = 16)]
    connections: usize,
    /// What this build does with prefixes, for the record's case name.
    #[arg(long, default_value = "prefix_index")]
    label: String,
    /// The prefix-index budget in MB to judge flatness against (default: from the filter's
    /// default configuration).
    #[arg(long)]
    index_budget_mb: Option<f64>,
    /// JSON fields merged into the filter configuration (e.g. the index size).
    #[arg(long)]
    filter_config: Option<String>,
}

fn variants(names: Option<&Vec<String>>, default: &[Variant]) -> Result<Vec<Variant>, String> {
    match names {
        None => Ok(default.to_vec()),
        Some(names) => names.iter().map(|n| Variant::from_name(n).ok_or(format!("unknown variant '{n}'"))).collect(),
    }
}

fn latency_options(args: &LatencyArgs, quick: bool) -> LatencyOptions {
    LatencyOptions {
        body_sizes: args.sizes.clone().unwrap_or_else(|| vec![1024, 4096, 65_536]),
        sequential: args.sequential.unwrap_or(if quick { 300 } else { 3000 }),
        concurrent: args.concurrent.unwrap_or(if quick { 640 } else { 3200 }),
        rounds: args.rounds.unwrap_or(if quick { 2 } else { 3 }),
        concurrency: args.concurrency,
        warmup: if quick { 200 } else { 500 },
    }
}

fn throughput_options(args: &ThroughputArgs, quick: bool) -> ThroughputOptions {
    ThroughputOptions {
        body_bytes: args.body_bytes,
        duration: Duration::from_secs_f64(args.seconds.unwrap_or(if quick { 2.0 } else { 5.0 })),
        rounds: args.rounds.unwrap_or(if quick { 2 } else { 3 }),
        connections: args.connections,
    }
}

fn scrape_options(args: &ScrapeArgs, quick: bool) -> ScrapeOptions {
    ScrapeOptions {
        pod_counts: args.pods.clone().unwrap_or_else(|| if quick { vec![100] } else { vec![100, 500] }),
        poll_interval_ms: args.poll_interval_ms,
        full_page_too: args.full_page_too,
        window: Duration::from_secs_f64(args.seconds.unwrap_or(if quick { 6.0 } else { 11.0 })),
    }
}

fn memory_options(args: &MemoryArgs, quick: bool) -> Result<MemoryOptions, String> {
    let filter_config = match &args.filter_config {
        Some(text) => Some(serde_json::from_str(text).map_err(|e| format!("--filter-config: {e}"))?),
        None => None,
    };
    Ok(MemoryOptions {
        prefixes: args.prefixes.unwrap_or(if quick { 30_000 } else { 1_000_000 }),
        prompt_bytes: args.prompt_bytes,
        connections: args.connections,
        label: args.label.clone(),
        index_budget_mb: args.index_budget_mb,
        filter_config,
    })
}

fn run_profile(args: &ProfileArgs, quick: bool, results: &mut Results) -> Result<(), String> {
    let pods = upstream()?;
    let options = ProfileOptions {
        pods: POOL_PODS,
        prompt_kb: args.prompt_kb,
        sequential: args.sequential.unwrap_or(if quick { 300 } else { 2000 }),
        concurrent: Duration::from_secs_f64(args.seconds.unwrap_or(if quick { 2.0 } else { 5.0 })),
        connections: 32,
    };
    profile::run(&pods.addresses(), &options, results)
}

fn upstream() -> Result<Upstream, String> {
    Upstream::start(POOL_PODS, metrics_page::vllm_page(0))
}

fn run_latency(args: &LatencyArgs, quick: bool, results: &mut Results) -> Result<(), String> {
    let pods = upstream()?;
    let envoys = start_all(&variants(args.variants.as_ref(), &Variant::ALL)?, &pods.addresses())?;
    latency::run(&envoys, &latency_options(args, quick), results)
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
    let envoys = start_all(&variants(args.variants.as_ref(), &default)?, &pods.addresses())?;
    throughput::run(&envoys, &throughput_options(args, quick), results)
}

fn run_memory(args: &MemoryArgs, quick: bool, results: &mut Results) -> Result<(), String> {
    let pods = upstream()?;
    memory::run(&pods.addresses(), &memory_options(args, quick)?, results)
}

/// Runs one benchmark, merges its figures, and prints how to run it again.
fn step(
    name: &str,
    quick: bool,
    out: &Path,
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
    outcome
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
    match cli.command.unwrap_or(Command::All) {
        Command::All => {
            step("latency", quick, &out, |r| {
                run_latency(&LatencyArgs { concurrency: 32, ..Default::default() }, quick, r)
            })?;
            let throughput = ThroughputArgs { body_bytes: 4096, connections: 32, ..Default::default() };
            step("throughput", quick, &out, |r| run_throughput(&throughput, quick, r))?;
            let scrape = ScrapeArgs { poll_interval_ms: 100, full_page_too: true, ..Default::default() };
            step("scrape", quick, &out, |r| scrape::run(&scrape_options(&scrape, quick), r))?;
            // Issue 17's second case: 1,000 pods every second.
            let thousand = ScrapeArgs { poll_interval_ms: 1000, pods: Some(vec![1000]), ..Default::default() };
            step("scrape", quick, &out, |r| scrape::run(&scrape_options(&thousand, quick), r))?;
            let memory =
                MemoryArgs { prompt_bytes: 2048, connections: 16, label: "prefix_index".into(), ..Default::default() };
            step("memory", quick, &out, |r| run_memory(&memory, quick, r))
        }
        Command::Latency(args) => step("latency", quick, &out, |r| run_latency(&args, quick, r)),
        Command::Throughput(args) => step("throughput", quick, &out, |r| run_throughput(&args, quick, r)),
        Command::Scrape(args) => step("scrape", quick, &out, |r| scrape::run(&scrape_options(&args, quick), r)),
        Command::Memory(args) => step("memory", quick, &out, |r| run_memory(&args, quick, r)),
        Command::Profile(args) => step("profile", quick, &out, |r| run_profile(&args, quick, r)),
    }
}

fn main() {
    if let Err(error) = run() {
        eprintln!("wasm-epp-bench-cost: {error}");
        std::process::exit(1);
    }
}
