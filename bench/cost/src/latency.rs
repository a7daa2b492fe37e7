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
    /// Sequential requests a variant gets in a row before the next one's turn: 1 interleaves
    /// one by one (every Envoy's caches cold from the others' work); more keeps them warm.
    pub sequential_burst: usize,
    /// Put before every case name in the records (empty for the standard cases).
    pub case_prefix: String,
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
        let vm_before = in_vm_ns(envoys);
        let sequential = sequential(envoys, &requests, options)?;
        let vm_sequential = in_vm_ns(envoys);
        let prefix = options.case_prefix.as_str();
        report(envoys, "latency_sequential", prefix, size, &sequential, &idle, results);
        let readings = (vm_before.as_slice(), vm_sequential.as_slice());
        let measured = (sequential.as_slice(), options.warmup);
        report_in_vm(envoys, "latency_sequential", prefix, size, readings, measured, results);
        let concurrent = concurrent(envoys, &requests, options);
        let vm_concurrent = in_vm_ns(envoys);
        let benchmark = format!("latency_concurrent{}", options.concurrency);
        report(envoys, &benchmark, prefix, size, &concurrent, &idle, results);
        let readings = (vm_sequential.as_slice(), vm_concurrent.as_slice());
        let warmed = concurrent_warmup(options) * options.concurrency;
        report_in_vm(envoys, &benchmark, prefix, size, readings, (concurrent.as_slice(), warmed), results);
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
    let burst = options.sequential_burst.max(1);
    for turn in 0..options.sequential.div_ceil(burst) {
        for k in 0..count {
            let which = (turn + k) % count;
            let (Some(connection), Some(requests), Some(batch)) =
                (connections.get_mut(which), requests.get(which), batches.get_mut(which))
            else {
                continue;
            };
            for i in turn * burst..((turn + 1) * burst).min(options.sequential) {
                let Some(request) = requests.get(i % requests.len()) else { continue };
                batch.record(connection.exchange(request));
            }
        }
    }
    let elapsed = start.elapsed();
    for ((batch, envoy), before) in batches.iter_mut().zip(envoys).zip(cpu_before) {
        batch.elapsed = elapsed;
        batch.envoy_cpu = sampling::cpu(envoy.pid()).saturating_sub(before);
    }
    Ok(batches)
}

/// Unmeasured requests per connection before the concurrent batches.
pub fn concurrent_warmup(options: &LatencyOptions) -> usize {
    options.warmup.div_ceil(options.concurrency.max(1)).max(1)
}

/// `options.concurrency` requests at once, variants taking turns by batches for
/// `options.rounds` rounds; `requests[k]` are envoy `k`'s.
pub fn concurrent(envoys: &[RunningEnvoy], requests: &[Vec<Vec<u8>>], options: &LatencyOptions) -> Vec<Batch> {
    let mut pools: Vec<Vec<Connection>> =
        envoys.iter().map(|e| (0..options.concurrency).map(|_| Connection::new(e.listen_port)).collect()).collect();
    let per_connection = options.concurrent.div_ceil(options.concurrency.max(1));
    let warm_per_connection = concurrent_warmup(options);
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

/// The profiled build's VM time so far, ns: (request callbacks, ticks); `None` for the other
/// variants.
type VmReading = Option<(f64, f64)>;

/// Per envoy, the profiled build's time in its VM callbacks so far (ns), `None` for the
/// others. The ticks flush the counters every 20 ms: waits that long first.
fn in_vm_ns(envoys: &[RunningEnvoy]) -> Vec<VmReading> {
    if !envoys.iter().any(|e| e.variant == Variant::WasmEppProfiled) {
        return envoys.iter().map(|_| None).collect();
    }
    std::thread::sleep(crate::profile::COUNTER_FLUSH);
    envoys.iter().map(|e| (e.variant == Variant::WasmEppProfiled).then(|| crate::profile::in_vm_ns(e))).collect()
}

/// Prints and records the profiled build's VM time per request between two readings
/// (before, after), over the batches' requests and the `warmed` ones before them: in the same
/// run as the latencies, so the remainder outside the VM compares like with like.
fn report_in_vm(
    envoys: &[RunningEnvoy],
    benchmark: &str,
    case_prefix: &str,
    size: usize,
    (before, after): (&[VmReading], &[VmReading]),
    (batches, warmed): (&[Batch], usize),
    results: &mut Results,
) {
    for (((envoy, before), after), batch) in envoys.iter().zip(before).zip(after).zip(batches) {
        let (Some(before), Some(after)) = (before, after) else { continue };
        // The warm-up requests ran between the readings too.
        let requests = (batch.latencies_us.len() + warmed).max(1) as f64;
        let per_request = |after: f64, before: f64| (after - before) / requests / 1000.0;
        let (callbacks, ticks) = (per_request(after.0, before.0), per_request(after.1, before.1));
        println!(
            "  {}, this run, µs per request in its VM (wall clock): request callbacks {callbacks:.1}, \
             ticks {ticks:.1} (both workers)",
            envoy.name()
        );
        let case = format!("{case_prefix}{}/{size}B", envoy.name());
        results.push(benchmark, &case, "in_vm_callbacks_us_per_request", callbacks, "us");
        results.push(benchmark, &case, "in_vm_ticks_us_per_request", ticks, "us");
    }
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
