//! What watching a streamed answer costs: Envoy CPU per request when the pods stream.
//!
//! The latency benchmark's answers are one JSON chunk each. A streamed answer reaches Envoy as
//! one body chunk per token, and with learning on (issue 14) the filter may read chunks into
//! its VM for the final `usage` event; a stream that did not ask for `usage` is read no further
//! than its first chunk. Here the pods stream [`STREAM_EVENTS`] token events [`EVENT_GAP`]
//! apart (then `usage` when asked, then `[DONE]`), the variants take turns by batches of
//! concurrent requests as in [`crate::latency`], and the streams run twice: with
//! `stream_options.include_usage` and without. What learning adds is its CPU per request over
//! wasm-epp's in the same run, as shipped (a few streams per pod read for `usage` at once) and
//! reading every stream (`wasm-epp-learning-read-all`); `--pods` sets how many streams each
//! pod has at once (32 over 16 pods and 2 workers: one per pod and worker, under the bound).

use crate::envoys::{RunningEnvoy, Variant};
use crate::latency::{self, LatencyOptions};
use crate::results::Results;
use crate::sampling;
use crate::upstream::{EVENT_GAP, STREAM_EVENTS};
use crate::workload;

/// Request body size of the streamed requests (the latency benchmark's middle size).
pub const BODY_BYTES: usize = 4096;

/// The two kinds of stream, as case prefixes in the records (followed by the pool size).
const KINDS: [(&str, bool); 2] = [("stream-usage", true), ("stream-no-usage", false)];

/// The learning counters that say how much of each stream was read.
#[derive(Debug, Default, Clone, Copy)]
struct LearningCounts {
    chunks_read: f64,
    usage_reports: f64,
    streams_not_read: f64,
}

impl LearningCounts {
    /// Each Envoy's values now (zero for an Envoy without learning). The plugin flushes its
    /// counters on its tick: waits for one first.
    fn read_all(envoys: &[RunningEnvoy]) -> Vec<Self> {
        std::thread::sleep(crate::profile::COUNTER_FLUSH);
        envoys.iter().map(Self::read).collect()
    }

    fn read(envoy: &RunningEnvoy) -> Self {
        let text = envoy.admin("/stats?filter=wasm_epp.learning").unwrap_or_default();
        let value = |suffix: &str| {
            text.lines()
                .filter_map(|line| line.split_once(": "))
                .filter(|(name, _)| name.ends_with(suffix))
                .filter_map(|(_, value)| value.trim().parse::<f64>().ok())
                .sum()
        };
        Self {
            chunks_read: value("learning.chunks_read"),
            usage_reports: value("learning.usage_reports"),
            streams_not_read: value("learning.usage_streams_not_read"),
        }
    }
}

/// The profiled build's phase counters, `None` for the other variants.
fn profiled_phases(envoy: &RunningEnvoy) -> Option<std::collections::BTreeMap<String, f64>> {
    (envoy.variant == Variant::WasmEppProfiled).then(|| {
        std::thread::sleep(crate::profile::COUNTER_FLUSH);
        crate::profile::profile_counters(envoy)
    })
}

/// Streams each Envoy gets as warm-up inside a measured kind (see [`latency::concurrent`]).
fn warmup_streams(options: &LatencyOptions) -> usize {
    options.warmup.div_ceil(options.concurrency.max(1)).max(1) * options.concurrency
}

/// Runs both kinds of stream on `envoys` (pods from [`crate::upstream::Upstream`]) into
/// `results`, benchmark `streams_concurrent{concurrency}`.
pub fn run(envoys: &[RunningEnvoy], options: &LatencyOptions, results: &mut Results) -> Result<(), String> {
    println!(
        "\n== streamed answers: {STREAM_EVENTS} token events {} ms apart, {} at once, {} pods ==",
        EVENT_GAP.as_millis(),
        options.concurrency,
        envoys.first().map_or(0, |e| e.pool.len())
    );
    let idle = latency::idle_rates(envoys);
    let benchmark = format!("streams_concurrent{}", options.concurrency);
    let pods = envoys.first().map_or(0, |e| e.pool.len());
    for (kind, with_usage) in KINDS {
        let prefix = format!("{kind}/{pods}pods/");
        let prefix = prefix.as_str();
        let requests: Vec<Vec<Vec<u8>>> = envoys
            .iter()
            .map(|e| {
                latency::encoded(e, "/v1/completions", |seed| workload::streamed_body(BODY_BYTES, seed, with_usage))
            })
            .collect();
        let counts_before = LearningCounts::read_all(envoys);
        let phases_before: Vec<_> = envoys.iter().map(profiled_phases).collect();
        let batches = latency::concurrent(envoys, &requests, options);
        let counts_after = LearningCounts::read_all(envoys);
        let phases_after: Vec<_> = envoys.iter().map(profiled_phases).collect();
        latency::report(envoys, &benchmark, prefix, BODY_BYTES, &batches, &idle, results);
        let cpu_of = |variant: Variant| {
            let k = envoys.iter().position(|e| e.variant == variant)?;
            let (batch, rate) = (batches.get(k)?, idle.get(k)?);
            Some(sampling::cpu_per_request(batch.envoy_cpu, *rate, batch.elapsed, batch.latencies_us.len()))
        };
        for (((envoy, before), after), batch) in envoys.iter().zip(&counts_before).zip(&counts_after).zip(&batches) {
            if !matches!(envoy.variant, Variant::WasmEppLearning | Variant::WasmEppLearningReadAll) {
                continue;
            }
            // The warm-up's streams are between the readings too.
            let streams = (batch.latencies_us.len() + batch.errors + warmup_streams(options)) as f64;
            let per_stream = |after: f64, before: f64| (after - before) / streams;
            let chunks = per_stream(after.chunks_read, before.chunks_read);
            let reports = per_stream(after.usage_reports, before.usage_reports);
            let not_read = per_stream(after.streams_not_read, before.streams_not_read);
            println!(
                "  {}, {prefix}: {chunks:.2} chunks read per stream, {reports:.2} usage reports per stream, \
                 {:.0} % of streams not read past their first chunk",
                envoy.name(),
                not_read * 100.0
            );
            let case = format!("{prefix}{}/{BODY_BYTES}B", envoy.name());
            results.push(&benchmark, &case, "chunks_read_per_stream", chunks, "count");
            results.push(&benchmark, &case, "usage_reports_per_stream", reports, "count");
        }
        for (((envoy, before), after), batch) in envoys.iter().zip(&phases_before).zip(&phases_after).zip(&batches) {
            let (Some(before), Some(after)) = (before, after) else { continue };
            let streams = (batch.latencies_us.len() + batch.errors + warmup_streams(options)) as f64;
            let per_stream = |name: &str| {
                let at =
                    |counters: &std::collections::BTreeMap<String, f64>| counters.get(name).copied().unwrap_or(0.0);
                (at(after) - at(before)) / streams
            };
            let (body_us, scan_us) = (per_stream("response_body_ns") / 1000.0, per_stream("observe_scan_ns") / 1000.0);
            let (calls, scans) = (per_stream("response_body_calls"), per_stream("observe_scan_calls"));
            println!(
                "  {}, {prefix}: in its VM per stream (wall clock) {body_us:.1} µs over {calls:.1} body \
                 callbacks, of which copying and scanning {scan_us:.1} µs over {scans:.1} chunks \
                 ({:.2} µs per chunk read)",
                envoy.name(),
                scan_us / scans.max(1e-9)
            );
            let case = format!("{prefix}{}/{BODY_BYTES}B", envoy.name());
            results.push(&benchmark, &case, "in_vm_response_body_us_per_stream", body_us, "us");
            results.push(&benchmark, &case, "in_vm_observe_scan_us_per_stream", scan_us, "us");
        }
        let Some(shipped) = cpu_of(Variant::WasmEpp) else { continue };
        for learning in [Variant::WasmEppLearning, Variant::WasmEppLearningReadAll] {
            let Some(cpu) = cpu_of(learning) else { continue };
            let added = cpu - shipped;
            let chunks = STREAM_EVENTS + 1 + usize::from(with_usage);
            println!(
                "  {}'s observation, {prefix}: {added:+.1} µs of Envoy CPU per stream over wasm-epp \
                 ({:+.2} µs per chunk of {chunks})",
                learning.name(),
                added / chunks as f64
            );
            let case = format!("{prefix}{}/{BODY_BYTES}B", learning.name());
            results.push(&benchmark, &case, "observation_cpu_per_stream_us", added, "us");
        }
    }
    Ok(())
}
