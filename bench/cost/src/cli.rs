//! The command line of `wasm-epp-bench-cost` (see bench/cost/README.md) and the options
//! each benchmark runs with: full by default, short with `--quick`.

use std::path::PathBuf;
use std::time::Duration;

use bench_cost::envoys::Variant;
use bench_cost::latency::LatencyOptions;
use bench_cost::matrix::MatrixOptions;
use bench_cost::memory::MemoryOptions;
use bench_cost::scrape::ScrapeOptions;
use bench_cost::throughput::ThroughputOptions;
use clap::{Args, Parser, Subcommand};
use picker::request::Endpoint;

#[derive(Parser)]
#[command(about = "wasm-epp cost benchmarks against plain Envoy (see bench/cost/README.md)")]
pub struct Cli {
    /// Short runs for a smoke check (also BENCH_QUICK=1).
    #[arg(long, global = true)]
    pub quick: bool,
    /// Where the figures are merged (default bench/results/cost.json; with --quick,
    /// target/bench-cost-quick.json).
    #[arg(long, global = true)]
    pub out: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Subcommand)]
pub enum Command {
    /// Every benchmark below, in order.
    All,
    /// Added latency and CPU per request, sequential and concurrent.
    Latency(LatencyArgs),
    /// Envoy CPU per request when the pods stream their answers, with and without `usage`.
    Streams(StreamsArgs),
    /// Requests per second at saturation.
    Throughput(ThroughputArgs),
    /// The singleton's scrape cost.
    Scrape(ScrapeArgs),
    /// RSS while distinct prefixes are routed.
    Memory(MemoryArgs),
    /// Which Wasm runtimes load wasm-epp, and latency and CPU on each that does.
    Runtimes(RuntimesArgs),
    /// wasm-epp against the body-reading filter at 64 and 256 pods, 4 and 32 KB, completions
    /// and chat.
    DecisionMatrix(MatrixArgs),
    /// Where the cost inside Envoy goes: host calls per request and their cost, time per
    /// phase (needs the profile build: `make profile-wasm`, which `make bench-cost` runs).
    Profile(ProfileArgs),
    /// Judges issue 17's goals on the figures in the results file, as `all` does at its end.
    Goals,
}

#[derive(Args, Default)]
pub struct ProfileArgs {
    /// Prompt size of the completions requests, KB.
    #[arg(long, default_value_t = 4)]
    pub prompt_kb: usize,
    #[arg(long)]
    pub sequential: Option<usize>,
    /// Seconds of 32-way load, on the profiled build and on the body-reading baseline.
    #[arg(long)]
    pub seconds: Option<f64>,
    /// JSON fields merged into the profiled filter's configuration (e.g.
    /// '{"learning": {"enabled": true}}'); pair it with --out, the keys are the shipped run's.
    #[arg(long)]
    pub filter_config: Option<String>,
}

/// A JSON option's value, parsed (`None` when not given); the error names `flag`.
pub fn json_option(text: Option<&str>, flag: &str) -> Result<Option<serde_json::Value>, String> {
    text.map(|text| serde_json::from_str(text).map_err(|e| format!("{flag}: {e}"))).transpose()
}

pub fn profile_options(
    args: &ProfileArgs,
    quick: bool,
    pods: usize,
) -> Result<bench_cost::profile::ProfileOptions, String> {
    let filter_fields = json_option(args.filter_config.as_deref(), "--filter-config")?;
    Ok(bench_cost::profile::ProfileOptions {
        pods,
        prompt_kb: args.prompt_kb.max(1),
        sequential: args.sequential.unwrap_or(if quick { 300 } else { 2000 }),
        concurrent: std::time::Duration::from_secs_f64(args.seconds.unwrap_or(if quick { 2.0 } else { 5.0 })),
        connections: 32,
        filter_fields,
    })
}

#[derive(Args, Default)]
pub struct LatencyArgs {
    /// Body sizes in bytes, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub sizes: Option<Vec<usize>>,
    /// Measured sequential requests per variant and size.
    #[arg(long)]
    pub sequential: Option<usize>,
    /// Measured concurrent requests per variant, size and round.
    #[arg(long)]
    pub concurrent: Option<usize>,
    #[arg(long)]
    pub rounds: Option<usize>,
    #[arg(long, default_value_t = 32)]
    pub concurrency: usize,
    /// Variants to run, comma-separated (default: all).
    #[arg(long, value_delimiter = ',')]
    pub variants: Option<Vec<String>>,
    /// Sequential requests each variant gets in a row before the next takes over (1: one by
    /// one, as shipped; more: the caches stay warm for that Envoy's run).
    #[arg(long, default_value_t = 1)]
    pub sequential_burst: usize,
    /// Put before every case name (e.g. `round3-burst1/`), so a bisection run's figures sit
    /// beside the standard ones in cost.json instead of replacing them.
    #[arg(long, default_value = "")]
    pub case_prefix: String,
}

#[derive(Args, Default)]
pub struct StreamsArgs {
    /// Measured streams per variant, kind and round.
    #[arg(long)]
    pub concurrent: Option<usize>,
    #[arg(long)]
    pub rounds: Option<usize>,
    #[arg(long, default_value_t = 32)]
    pub concurrency: usize,
    /// Variants to run, comma-separated (default: plain, header-buffered-read, wasm-epp,
    /// wasm-epp-learning, wasm-epp-learning-read-all).
    #[arg(long, value_delimiter = ',')]
    pub variants: Option<Vec<String>>,
    /// Pods behind each Envoy (at most 16): fewer pods, more streams per pod at once.
    #[arg(long)]
    pub pods: Option<usize>,
    /// JSON fields merged into `wasm-epp-profiled`'s filter configuration (e.g.
    /// '{"learning": {"enabled": true}}'): its VM time per stream is then printed by phase.
    #[arg(long)]
    pub profiled_config: Option<String>,
}

pub fn streams_options(args: &StreamsArgs, quick: bool) -> LatencyOptions {
    LatencyOptions {
        body_sizes: vec![bench_cost::streams::BODY_BYTES],
        sequential: 0,
        concurrent: args.concurrent.unwrap_or(if quick { 320 } else { 1600 }),
        rounds: args.rounds.unwrap_or(if quick { 2 } else { 3 }),
        concurrency: args.concurrency.max(1),
        warmup: if quick { 64 } else { 256 },
        sequential_burst: 1,
        case_prefix: String::new(),
    }
}

#[derive(Args, Default)]
pub struct ThroughputArgs {
    #[arg(long, default_value_t = 4096)]
    pub body_bytes: usize,
    #[arg(long)]
    pub seconds: Option<f64>,
    #[arg(long)]
    pub rounds: Option<usize>,
    #[arg(long, default_value_t = 32)]
    pub connections: usize,
    /// Variants to run, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub variants: Option<Vec<String>>,
}

#[derive(Args, Default)]
pub struct ScrapeArgs {
    /// Pod counts, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub pods: Option<Vec<usize>>,
    #[arg(long)]
    pub seconds: Option<f64>,
    #[arg(long, default_value_t = 100)]
    pub poll_interval_ms: u64,
    /// Also scrape whole pages (`/metrics`), as before `name[]` filtering.
    #[arg(long)]
    pub full_page_too: bool,
}

#[derive(Args, Default)]
pub struct MemoryArgs {
    #[arg(long)]
    pub prefixes: Option<usize>,
    #[arg(long, default_value_t = 2048)]
    pub prompt_bytes: usize,
    #[arg(long, default_value_t = 16)]
    pub connections: usize,
    /// What this build does with prefixes, for the record's case name.
    #[arg(long, default_value = "prefix_index")]
    pub label: String,
    /// The prefix-index budget in MB to judge flatness against (default: from the filter's
    /// default configuration).
    #[arg(long)]
    pub index_budget_mb: Option<f64>,
    /// JSON fields merged into the filter configuration (e.g. the index size).
    #[arg(long)]
    pub filter_config: Option<String>,
}

pub fn variants(names: Option<&Vec<String>>, default: &[Variant]) -> Result<Vec<Variant>, String> {
    match names {
        None => Ok(default.to_vec()),
        Some(names) => names.iter().map(|n| Variant::from_name(n).ok_or(format!("unknown variant '{n}'"))).collect(),
    }
}

pub fn latency_options(args: &LatencyArgs, quick: bool) -> LatencyOptions {
    LatencyOptions {
        body_sizes: args.sizes.clone().unwrap_or_else(|| vec![1024, 4096, 65_536]),
        sequential: args.sequential.unwrap_or(if quick { 300 } else { 3000 }),
        concurrent: args.concurrent.unwrap_or(if quick { 640 } else { 3200 }),
        rounds: args.rounds.unwrap_or(if quick { 2 } else { 3 }),
        concurrency: args.concurrency,
        warmup: if quick { 200 } else { 500 },
        sequential_burst: args.sequential_burst.max(1),
        case_prefix: args.case_prefix.clone(),
    }
}

pub fn throughput_options(args: &ThroughputArgs, quick: bool) -> ThroughputOptions {
    ThroughputOptions {
        body_bytes: args.body_bytes,
        duration: Duration::from_secs_f64(args.seconds.unwrap_or(if quick { 2.0 } else { 5.0 })),
        rounds: args.rounds.unwrap_or(if quick { 2 } else { 3 }),
        connections: args.connections,
    }
}

pub fn scrape_options(args: &ScrapeArgs, quick: bool) -> ScrapeOptions {
    ScrapeOptions {
        pod_counts: args.pods.clone().unwrap_or_else(|| if quick { vec![100] } else { vec![100, 500] }),
        poll_interval_ms: args.poll_interval_ms,
        full_page_too: args.full_page_too,
        window: Duration::from_secs_f64(args.seconds.unwrap_or(if quick { 6.0 } else { 11.0 })),
    }
}

pub fn memory_options(args: &MemoryArgs, quick: bool) -> Result<MemoryOptions, String> {
    let filter_config = json_option(args.filter_config.as_deref(), "--filter-config")?;
    Ok(MemoryOptions {
        prefixes: args.prefixes.unwrap_or(if quick { 30_000 } else { 1_000_000 }),
        prompt_bytes: args.prompt_bytes,
        connections: args.connections,
        label: args.label.clone(),
        index_budget_mb: args.index_budget_mb,
        filter_config,
    })
}

#[derive(Args, Default)]
pub struct RuntimesArgs {
    /// Measured sequential requests per variant on each runtime that loads.
    #[arg(long)]
    pub sequential: Option<usize>,
    /// Measured concurrent requests per variant and round.
    #[arg(long)]
    pub concurrent: Option<usize>,
}

#[derive(Args, Default)]
pub struct MatrixArgs {
    /// Pool sizes, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub pods: Option<Vec<usize>>,
    /// Prompt sizes in KB, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub prompt_kb: Option<Vec<usize>>,
    /// Measured sequential requests per variant and combination.
    #[arg(long)]
    pub sequential: Option<usize>,
    /// Measured concurrent requests per variant, combination and round.
    #[arg(long)]
    pub concurrent: Option<usize>,
}

/// The latency bench's counts for the runtime comparison (4 KB only, so it can afford as many
/// sequential requests as the main run, fewer concurrent rounds).
pub fn runtimes_options(args: &RuntimesArgs, quick: bool) -> LatencyOptions {
    LatencyOptions {
        body_sizes: vec![4096],
        sequential: args.sequential.unwrap_or(if quick { 300 } else { 2000 }),
        concurrent: args.concurrent.unwrap_or(if quick { 640 } else { 3200 }),
        rounds: 2,
        concurrency: 32,
        warmup: if quick { 200 } else { 500 },
        sequential_burst: 1,
        case_prefix: String::new(),
    }
}

pub fn matrix_options(args: &MatrixArgs, quick: bool) -> MatrixOptions {
    MatrixOptions {
        pools: args.pods.clone().unwrap_or_else(|| vec![64, 256]),
        prompt_kb: args.prompt_kb.clone().unwrap_or_else(|| vec![4, 32]),
        endpoints: vec![Endpoint::Completions, Endpoint::ChatCompletions],
        latency: LatencyOptions {
            body_sizes: Vec::new(),
            sequential: args.sequential.unwrap_or(if quick { 200 } else { 1000 }),
            concurrent: args.concurrent.unwrap_or(if quick { 640 } else { 3200 }),
            rounds: 2,
            concurrency: 32,
            warmup: if quick { 100 } else { 300 },
            sequential_burst: 1,
            case_prefix: String::new(),
        },
    }
}
