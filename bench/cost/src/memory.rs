//! Envoy's resident memory while N distinct prompt prefixes are routed through wasm-epp.
//!
//! A prefix index must be bounded: after it fills, RSS must stop growing. Every request here
//! starts with a prefix never sent before; RSS is sampled from `/proc/<pid>/status` as they
//! go. The index budget is the filter's `prefix.max_index_entries` × [`BYTES_PER_ENTRY`] for
//! each replica (one per worker VM plus the filter's main-thread VM), plus the shared ring.
//! Flat means: from the point the index is full to the end, RSS grows by less than 20% of
//! that budget.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use launcher::proc_stats;

use crate::client::{encode_post, Connection};
use crate::envoys::{RunningEnvoy, Variant};
use crate::results::Results;
use crate::workload;

/// How often RSS is sampled.
const SAMPLE_EVERY: Duration = Duration::from_millis(500);

/// Requests sent before the baseline RSS is read (V8 tiering, connection pools).
const WARMUP_REQUESTS: usize = 2_000;

/// Bytes per index entry, as `picker::prefix` documents it (slab slot plus table bucket).
pub const BYTES_PER_ENTRY: f64 = 56.0;

/// Index replicas in one Envoy: one per worker VM (2) plus the filter's main-thread VM.
pub const INDEX_REPLICAS: f64 = 3.0;

/// Worst-case bytes of the shared ring (64 segments of 64 KiB).
pub const RING_BYTES: f64 = 64.0 * 65536.0;

/// The default configuration's index budget, MB, and how many requests fill one replica.
pub fn default_index_budget(prompt_bytes: usize) -> (f64, usize) {
    let config = picker::config::FilterConfig::default();
    let entries = config.prefix.max_index_entries;
    let budget = (entries as f64 * BYTES_PER_ENTRY * INDEX_REPLICAS + RING_BYTES) / 1e6;
    let block_bytes = (config.prefix.block_tokens * config.prefix.bytes_per_token).max(1);
    let blocks = (prompt_bytes / block_bytes).clamp(1, config.prefix.max_blocks);
    (budget, entries.div_ceil(blocks))
}

#[derive(Debug, Clone)]
pub struct MemoryOptions {
    pub prefixes: usize,
    pub prompt_bytes: usize,
    pub connections: usize,
    /// Label of the case (what the filter does with prefixes in this build).
    pub label: String,
    /// The configured index budget, MB, when the filter has one: judges "flat".
    pub index_budget_mb: Option<f64>,
    /// Extra fields merged into the filter's configuration (e.g. the index budget).
    pub filter_config: Option<serde_json::Value>,
}

/// One RSS sample: requests done so far and RSS.
#[derive(Debug, Clone, Copy)]
struct Sample {
    done: usize,
    rss: u64,
}

fn rss_near(samples: &[Sample], done: usize) -> f64 {
    samples.iter().min_by_key(|s| s.done.abs_diff(done)).map_or(f64::NAN, |s| s.rss as f64 / 1e6)
}

/// Drives the prefixes and reports RSS, into `results`.
pub fn run(pool: &[String], options: &MemoryOptions, results: &mut Results) -> Result<(), String> {
    println!(
        "\n== memory: {} distinct prefixes ({} B prompts) through wasm-epp, {} connections [{}] ==",
        options.prefixes, options.prompt_bytes, options.connections, options.label
    );
    let envoy = RunningEnvoy::start_configured(Variant::WasmEpp, pool, None, options.filter_config.clone())?;
    let pid = envoy.pid();
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let errors = AtomicUsize::new(0);
    let finished = AtomicBool::new(false);
    let send = |limit: usize, seed_base: u64| {
        std::thread::scope(|scope| {
            for _ in 0..options.connections {
                scope.spawn(|| {
                    let mut connection = Connection::new(envoy.listen_port);
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= limit {
                            break;
                        }
                        let body = workload::completions_body(options.prompt_bytes, seed_base + i as u64);
                        let request = encode_post("/v1/completions", &[], body.as_bytes());
                        match connection.exchange(&request) {
                            Ok((200, _)) => {}
                            _ => {
                                errors.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
        });
    };
    send(WARMUP_REQUESTS, 1 << 40);
    let baseline = proc_stats::rss_bytes(pid).unwrap_or(0);
    next.store(0, Ordering::Relaxed);
    done.store(0, Ordering::Relaxed);
    let start = Instant::now();
    let mut samples = vec![Sample { done: 0, rss: baseline }];
    std::thread::scope(|scope| {
        let sampler = scope.spawn(|| {
            let mut taken = Vec::new();
            while !finished.load(Ordering::Relaxed) {
                std::thread::sleep(SAMPLE_EVERY);
                let rss = proc_stats::rss_bytes(pid).unwrap_or(0);
                taken.push(Sample { done: done.load(Ordering::Relaxed), rss });
            }
            taken
        });
        send(options.prefixes, 0);
        finished.store(true, Ordering::Relaxed);
        if let Ok(taken) = sampler.join() {
            samples.extend(taken);
        }
    });
    let elapsed = start.elapsed().as_secs_f64();
    samples.push(Sample { done: options.prefixes, rss: proc_stats::rss_bytes(pid).unwrap_or(0) });
    let n = options.prefixes;
    let max = samples.iter().map(|s| s.rss).max().unwrap_or(0) as f64 / 1e6;
    let (start_mb, half, end) = (baseline as f64 / 1e6, rss_near(&samples, n / 2), rss_near(&samples, n));
    println!("  {:>12} {:>10}", "prefixes", "RSS MB");
    for fraction in [0, 10, 25, 50, 75, 100] {
        let at = n * fraction / 100;
        println!("  {:>12} {:>10.1}", at, rss_near(&samples, at));
    }
    println!(
        "  baseline {start_mb:.1} MB, max {max:.1} MB, growth {:.1} MB in all, {:.1} MB over the second half; {:.0} req/s, {} errors",
        end - start_mb,
        end - half,
        n as f64 / elapsed,
        errors.load(Ordering::Relaxed)
    );
    let case = format!("{}/{n}_prefixes/{}B", options.label, options.prompt_bytes);
    results.push("memory", &case, "rss_baseline", start_mb, "MB");
    for fraction in [25, 50, 75, 100] {
        results.push("memory", &case, &format!("rss_at_{fraction}pct"), rss_near(&samples, n * fraction / 100), "MB");
    }
    results.push("memory", &case, "rss_max", max, "MB");
    results.push("memory", &case, "rss_growth_total", end - start_mb, "MB");
    results.push("memory", &case, "rss_growth_second_half", end - half, "MB");
    results.push("memory", &case, "requests_per_second", n as f64 / elapsed, "req/s");
    results.push("memory", &case, "errors", errors.load(Ordering::Relaxed) as f64, "count");
    let (default_budget, fill_requests) = default_index_budget(options.prompt_bytes);
    let budget = options.index_budget_mb.unwrap_or(default_budget);
    // The index is full once every replica has seen `fill_requests` distinct prompts; leave
    // a margin of 2× (and at least 10% of the run) for the ring to catch up, and judge at
    // least the second half of the run.
    let full_at = (fill_requests * 2).max(n / 10).min(n / 2);
    let after_full = end - rss_near(&samples, full_at);
    let flat = after_full <= 0.2 * budget;
    println!(
        "  index budget {budget:.1} MB (3 replicas + ring); full after ~{fill_requests} prompts; growth from {full_at} prompts to the end {after_full:.1} MB: flat = {flat}"
    );
    results.push("memory", &case, "index_budget", budget, "MB");
    results.push("memory", &case, "rss_growth_after_index_full", after_full, "MB");
    results.push("memory", &case, "flat_within_20pct_of_budget", if flat { 1.0 } else { 0.0 }, "bool");
    for line in envoy.admin("/stats/prometheus").unwrap_or_default().lines() {
        if line.starts_with("wasm_epp") && line.contains("prefix") && !line.starts_with('#') {
            println!("  {line}");
        }
    }
    Ok(())
}
