//! Added latency and CPU per request inside Envoy, wasm-epp against its baselines.
//!
//! Sequentially, requests are interleaved one by one across the variants (the starting
//! variant rotates), so a burst of noise from another process hits all of them alike. At
//! 32 concurrent requests, variants take turns by batches, several rounds each.

use std::time::{Duration, Instant};

use crate::client::Connection;
use crate::envoys::{RunningEnvoy, Variant};
use crate::results::{Distribution, Results};
use crate::sampling::{self, Batch};
use crate::workload;

/// Distinct bodies per size; requests cycle through them.
const DISTINCT_BODIES: u64 = 64;

#[derive(Debug, Clone)]
pub struct LatencyOptions {
    /// Request body sizes, bytes.
    pub body_sizes: Vec<usize>,
    /// Measured sequential requests per variant and size.
    pub sequential: usize,
    /// Measured concurrent requests per variant, size and round.
    pub concurrent: usize,
    pub rounds: usize,
    pub concurrency: usize,
    /// Unmeasured requests per variant and size first (connections, V8 tiering).
    pub warmup: usize,
}

/// `DISTINCT_BODIES` requests to `path` for `envoy`, the bodies made by `body_of_seed`.
pub fn encoded(envoy: &RunningEnvoy, path: &str, body_of_seed: impl Fn(u64) -> String) -> Vec<Vec<u8>> {
    (0..DISTINCT_BODIES).map(|seed| envoy.encode(path, body_of_seed(seed).as_bytes(), seed as usize)).collect()
}

/// How long each Envoy's idle CPU is measured before the requests.
const IDLE_WINDOW: Duration = Duration::from_secs(3);

/// Each envoy's CPU rate with no request (printed), to subtract from CPU per request.
pub fn idle_rates(envoys: &[RunningEnvoy]) -> Vec<f64> {
    let idle = sampling::idle_rates(envoys, IDLE_WINDOW);
    for (envoy, rate) in envoys.iter().zip(&idle) {
        println!(
            "  idle CPU of {:<22} {:>6.2}% of a core (subtracted from CPU per request)",
            envoy.name(),
            rate * 100.0
        );
    }
    idle
}

/// Runs the sequential and concurrent measurements for every size, into `results`.
pub fn run(envoys: &[RunningEnvoy], options: &LatencyOptions, results: &mut Results) -> Result<(), String> {
    println!(
        "\n== added latency inside Envoy ({} pods, upstream answers at once) ==",
        envoys.first().map_or(0, |e| e.pool.len())
    );
    let idle = idle_rates(envoys);
    for &size in &options.body_sizes {
        let requests: Vec<Vec<Vec<u8>>> = envoys
            .iter()
            .map(|e| encoded(e, "/v1/completions", |seed| workload::completions_body_of_size(size, seed)))
            .collect();
        let sequential = sequential(envoys, &requests, options)?;
        report(envoys, "latency_sequential", "", size, &sequential, &idle, results);
        let concurrent = concurrent(envoys, &requests, options);
        let benchmark = format!("latency_concurrent{}", options.concurrency);
        report(envoys, &benchmark, "", size, &concurrent, &idle, results);
    }
    Ok(())
}

/// One request at a time, interleaved across `envoys` (the first rotates), after a warm-up;
/// `requests[k]` are envoy `k`'s.
pub fn sequential(
    envoys: &[RunningEnvoy],
    requests: &[Vec<Vec<u8>>],
    options: &LatencyOptions,
) -> Result<Vec<Batch>, String> {
    let mut connections: Vec<Connection> = envoys.iter().map(|e| Connection::new(e.listen_port)).collect();
    for ((envoy, connection), requests) in envoys.iter().zip(&mut connections).zip(requests) {
        for i in 0..options.warmup {
            let request = requests.get(i % requests.len()).ok_or("no request")?;
            if let Err(error) = connection.exchange(request) {
                return Err(format!("{} warm-up failed: {error}\n{}", envoy.name(), envoy.log_tail()));
            }
        }
    }
    let mut batches: Vec<Batch> = envoys.iter().map(|_| Batch::default()).collect();
    let cpu_before: Vec<Duration> = envoys.iter().map(|e| sampling::cpu(e.pid())).collect();
    let start = Instant::now();
    let count = envoys.len();
    for i in 0..options.sequential {
        for k in 0..count {
            let which = (i + k) % count;
            let (Some(connection), Some(requests), Some(batch)) =
                (connections.get_mut(which), requests.get(which), batches.get_mut(which))
            else {
                continue;
            };
            let Some(request) = requests.get(i % requests.len()) else { continue };
            batch.record(connection.exchange(request));
        }
    }
    let elapsed = start.elapsed();
    for ((batch, envoy), before) in batches.iter_mut().zip(envoys).zip(cpu_before) {
        batch.elapsed = elapsed;
        batch.envoy_cpu = sampling::cpu(envoy.pid()).saturating_sub(before);
    }
    Ok(batches)
}

/// `options.concurrency` requests at once, variants taking turns by batches for
/// `options.rounds` rounds; `requests[k]` are envoy `k`'s.
pub fn concurrent(envoys: &[RunningEnvoy], requests: &[Vec<Vec<u8>>], options: &LatencyOptions) -> Vec<Batch> {
    let mut pools: Vec<Vec<Connection>> =
        envoys.iter().map(|e| (0..options.concurrency).map(|_| Connection::new(e.listen_port)).collect()).collect();
    let per_connection = options.concurrent.div_ceil(options.concurrency.max(1));
    let warm_per_connection = options.warmup.div_ceil(options.concurrency.max(1)).max(1);
    for ((envoy, pool), requests) in envoys.iter().zip(&mut pools).zip(requests) {
        sampling::run_batch(envoy, pool, requests, warm_per_connection, None);
    }
    let mut batches: Vec<Batch> = envoys.iter().map(|_| Batch::default()).collect();
    let count = envoys.len();
    for round in 0..options.rounds {
        for k in 0..count {
            let which = (round + k) % count;
            let (Some(envoy), Some(pool), Some(requests), Some(batch)) =
                (envoys.get(which), pools.get_mut(which), requests.get(which), batches.get_mut(which))
            else {
                continue;
            };
            batch.absorb(sampling::run_batch(envoy, pool, requests, per_connection, None));
        }
    }
    batches
}

/// Prints one table of `batches` (one per envoy) and records it under `benchmark`, cases
/// `{case_prefix}{variant}/{size}B`; `idle` are the envoys' idle CPU rates.
pub fn report(
    envoys: &[RunningEnvoy],
    benchmark: &str,
    case_prefix: &str,
    size: usize,
    batches: &[Batch],
    idle: &[f64],
    results: &mut Results,
) {
    let dists: Vec<Distribution> = batches.iter().map(|b| Distribution::new(b.latencies_us.clone())).collect();
    let plain = envoys.iter().position(|e| e.variant == Variant::Plain).and_then(|i| dists.get(i));
    println!("\n{benchmark}, {case_prefix}{size} B bodies:");
    println!(
        "  {:<22} {:>9} {:>9} {:>9} {:>10} {:>10} {:>10} {:>12} {:>8}",
        "variant", "p50 µs", "p90 µs", "p99 µs", "+p50 µs", "+p90 µs", "+p99 µs", "CPU µs/req", "errors"
    );
    for (((envoy, dist), batch), rate) in envoys.iter().zip(&dists).zip(batches).zip(idle) {
        let case = format!("{case_prefix}{}/{size}B", envoy.name());
        let cpu = sampling::cpu_per_request(batch.envoy_cpu, *rate, batch.elapsed, dist.len());
        let added = |p: f64| plain.map_or(f64::NAN, |base| dist.percentile(p) - base.percentile(p));
        println!(
            "  {:<22} {:>9.1} {:>9.1} {:>9.1} {:>10.1} {:>10.1} {:>10.1} {:>12.1} {:>8}",
            envoy.name(),
            dist.percentile(50.0),
            dist.percentile(90.0),
            dist.percentile(99.0),
            added(50.0),
            added(90.0),
            added(99.0),
            cpu,
            batch.errors
        );
        if let Some(error) = &batch.first_error {
            println!("    first error: {error}");
        }
        for (metric, p) in [("p50", 50.0), ("p90", 90.0), ("p99", 99.0)] {
            results.push(benchmark, &case, metric, dist.percentile(p), "us");
            if envoy.variant != Variant::Plain {
                results.push(benchmark, &case, &format!("added_{metric}_vs_plain"), added(p), "us");
            }
        }
        results.push(benchmark, &case, "envoy_cpu_per_request", cpu, "us");
        results.push(benchmark, &case, "requests", dist.len() as f64, "count");
        results.push(benchmark, &case, "errors", batch.errors as f64, "count");
    }
}
