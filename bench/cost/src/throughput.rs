//! Requests per second at saturation, plain Envoy against wasm-epp.
//!
//! Closed loop: each of `connections` client threads sends its next request as soon as the
//! last one is answered, for a fixed time. Client, upstream and Envoy share the machine's
//! cores, as they would on a 2-core node; variants take turns, several rounds, and the median
//! round counts.

use std::time::Duration;

use crate::client::Connection;
use crate::envoys::{RunningEnvoy, Variant};
use crate::results::{median, Results};
use crate::sampling;
use crate::workload;

#[derive(Debug, Clone)]
pub struct ThroughputOptions {
    pub body_bytes: usize,
    pub duration: Duration,
    pub rounds: usize,
    pub connections: usize,
}

/// Measures every envoy in `envoys`, into `results`.
pub fn run(envoys: &[RunningEnvoy], options: &ThroughputOptions, results: &mut Results) -> Result<(), String> {
    println!(
        "\n== throughput at saturation: {} connections, {} B bodies, {} s × {} rounds per variant ==",
        options.connections,
        options.body_bytes,
        options.duration.as_secs_f64(),
        options.rounds
    );
    let requests: Vec<Vec<Vec<u8>>> = envoys
        .iter()
        .map(|e| {
            (0..64u64)
                .map(|seed| {
                    e.encode(
                        "/v1/completions",
                        workload::completions_body_of_size(options.body_bytes, seed).as_bytes(),
                        seed as usize,
                    )
                })
                .collect()
        })
        .collect();
    let mut pools: Vec<Vec<Connection>> =
        envoys.iter().map(|e| (0..options.connections).map(|_| Connection::new(e.listen_port)).collect()).collect();
    let mut rates: Vec<Vec<f64>> = envoys.iter().map(|_| Vec::new()).collect();
    let mut cores: Vec<Vec<f64>> = envoys.iter().map(|_| Vec::new()).collect();
    let mut errors = vec![0usize; envoys.len()];
    for round in 0..options.rounds {
        for k in 0..envoys.len() {
            let which = (round + k) % envoys.len();
            let (Some(envoy), Some(pool), Some(requests)) =
                (envoys.get(which), pools.get_mut(which), requests.get(which))
            else {
                continue;
            };
            let batch = sampling::run_batch(envoy, pool, requests, 0, Some(options.duration));
            let seconds = batch.elapsed.as_secs_f64();
            if let Some(r) = rates.get_mut(which) {
                r.push(batch.latencies_us.len() as f64 / seconds);
            }
            if let Some(c) = cores.get_mut(which) {
                c.push(batch.envoy_cpu.as_secs_f64() / seconds);
            }
            if let Some(e) = errors.get_mut(which) {
                *e += batch.errors;
            }
        }
    }
    let plain = envoys.iter().position(|e| e.variant == Variant::Plain).and_then(|i| rates.get(i)).map(|r| median(r));
    println!(
        "  {:<22} {:>10} {:>14} {:>12} {:>8}   rounds",
        "variant", "req/s", "ratio vs plain", "Envoy cores", "errors"
    );
    for (((envoy, rate), core), error) in envoys.iter().zip(&rates).zip(&cores).zip(&errors) {
        let rps = median(rate);
        let ratio = plain.map_or(f64::NAN, |p| rps / p);
        let rounds: Vec<String> = rate.iter().map(|r| format!("{r:.0}")).collect();
        println!(
            "  {:<22} {:>10.0} {:>14.3} {:>12.2} {:>8}   {}",
            envoy.name(),
            rps,
            ratio,
            median(core),
            error,
            rounds.join(" ")
        );
        let case = format!("{}/{}B", envoy.name(), options.body_bytes);
        results.push("throughput", &case, "requests_per_second", rps, "req/s");
        results.push("throughput", &case, "envoy_cores", median(core), "cores");
        results.push("throughput", &case, "errors", *error as f64, "count");
        if envoy.variant != Variant::Plain {
            results.push("throughput", &case, "ratio_vs_plain", ratio, "ratio");
        }
    }
    for envoy in envoys.iter().filter(|e| e.variant.is_wasm_epp()) {
        println!("  {} counters after the run: {}", envoy.name(), envoy.wasm_epp_stats().join(", "));
    }
    Ok(())
}
