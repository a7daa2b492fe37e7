//! Envoy CPU per request and the batches of requests it is measured over.
//!
//! CPU comes from `/proc/<pid>/stat` (utime + stime of all threads). An Envoy with wasm-epp
//! also works when idle (its singleton scrapes the pods), so that idle rate is measured first
//! and subtracted: what remains is the CPU the requests cost.

use std::time::{Duration, Instant};

use launcher::proc_stats;

use crate::client::Connection;
use crate::envoys::RunningEnvoy;

/// Process CPU time; an unreadable `/proc` reads as zero (the figure is then clearly 0).
pub fn cpu(pid: u32) -> Duration {
    proc_stats::process_cpu(pid).unwrap_or_default()
}

/// CPU seconds each Envoy burns per second while no request is sent, over `window`.
pub fn idle_rates(envoys: &[RunningEnvoy], window: Duration) -> Vec<f64> {
    let before: Vec<Duration> = envoys.iter().map(|e| cpu(e.pid())).collect();
    let start = Instant::now();
    std::thread::sleep(window);
    let elapsed = start.elapsed().as_secs_f64();
    envoys.iter().zip(before).map(|(e, b)| cpu(e.pid()).saturating_sub(b).as_secs_f64() / elapsed).collect()
}

/// CPU microseconds per request: the CPU spent over `elapsed`, less the idle rate.
pub fn cpu_per_request(cpu_spent: Duration, idle_rate: f64, elapsed: Duration, requests: usize) -> f64 {
    let busy = cpu_spent.as_secs_f64() - idle_rate * elapsed.as_secs_f64();
    busy.max(0.0) * 1e6 / requests.max(1) as f64
}

/// What one batch of requests measured.
#[derive(Debug, Default)]
pub struct Batch {
    /// Latency of every successful request, µs.
    pub latencies_us: Vec<f64>,
    pub errors: usize,
    /// First error text, for the report.
    pub first_error: Option<String>,
    pub elapsed: Duration,
    pub envoy_cpu: Duration,
}

impl Batch {
    pub fn absorb(&mut self, other: Batch) {
        self.latencies_us.extend(other.latencies_us);
        self.errors += other.errors;
        self.first_error = self.first_error.take().or(other.first_error);
        self.elapsed += other.elapsed;
        self.envoy_cpu += other.envoy_cpu;
    }

    /// Adds one exchange's outcome.
    pub fn record(&mut self, outcome: Result<(u16, Duration), String>) {
        match outcome {
            Ok((200, took)) => self.latencies_us.push(took.as_secs_f64() * 1e6),
            Ok((status, _)) => {
                self.errors += 1;
                self.first_error.get_or_insert_with(|| format!("status {status}"));
            }
            Err(error) => {
                self.errors += 1;
                self.first_error.get_or_insert(error);
            }
        }
    }
}

/// Sends `per_connection` requests on each of `connections` at once (one thread each),
/// cycling through `requests`, and measures the batch; `until` stops it early instead when
/// given (a throughput run).
pub fn run_batch(
    envoy: &RunningEnvoy,
    connections: &mut [Connection],
    requests: &[Vec<u8>],
    per_connection: usize,
    until: Option<Duration>,
) -> Batch {
    let cpu_before = cpu(envoy.pid());
    let start = Instant::now();
    let deadline = until.map(|d| start + d);
    let batches: Vec<Batch> = std::thread::scope(|scope| {
        let handles: Vec<_> = connections
            .iter_mut()
            .enumerate()
            .map(|(lane, connection)| {
                scope.spawn(move || {
                    let mut batch = Batch::default();
                    let mut sent = 0;
                    while deadline.map_or(sent < per_connection, |d| Instant::now() < d) {
                        let Some(request) = requests.get((lane * 7 + sent) % requests.len().max(1)) else { break };
                        batch.record(connection.exchange(request));
                        sent += 1;
                    }
                    batch
                })
            })
            .collect();
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    let elapsed = start.elapsed();
    let mut total = Batch::default();
    for batch in batches {
        total.absorb(batch);
    }
    total.elapsed = elapsed;
    total.envoy_cpu = cpu(envoy.pid()).saturating_sub(cpu_before);
    total
}
