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

use std::collections::BTreeMap;

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

/// What the Envoys' counters say at one moment: the learning counters of every Envoy (empty
/// for one without learning) and the profiled build's phase counters (`None` for the others).
struct Counters {
    learning: Vec<BTreeMap<String, f64>>,
    phases: Vec<Option<BTreeMap<String, f64>>>,
}

impl Counters {
    /// Every Envoy's counters now. The plugin flushes them on its tick: waits for one first.
    fn read(envoys: &[RunningEnvoy]) -> Self {
        std::thread::sleep(crate::profile::COUNTER_FLUSH);
        Self {
            learning: envoys.iter().map(|e| crate::profile::plugin_counters(e, "learning")).collect(),
            phases: envoys
                .iter()
                .map(|e| (e.variant == Variant::WasmEppProfiled).then(|| crate::profile::profile_counters(e)))
                .collect(),
        }
    }
}

/// How much `name` grew from `before` to `after`.
fn growth(before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>, name: &str) -> f64 {
    after.get(name).copied().unwrap_or(0.0) - before.get(name).copied().unwrap_or(0.0)
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
        let before = Counters::read(envoys);
        let batches = latency::concurrent(envoys, &requests, options);
        let after = Counters::read(envoys);
        latency::report(envoys, &benchmark, prefix, BODY_BYTES, &batches, &idle, results);
        let cpu_of = |variant: Variant| {
            let k = envoys.iter().position(|e| e.variant == variant)?;
            let (batch, rate) = (batches.get(k)?, idle.get(k)?);
            Some(sampling::cpu_per_request(batch.envoy_cpu, *rate, batch.elapsed, batch.latencies_us.len()))
        };
        // The warm-up's streams ran between the readings too.
        let warmed = latency::concurrent_warmup(options) * options.concurrency;
        for (k, (envoy, batch)) in envoys.iter().zip(&batches).enumerate() {
            let streams = (batch.latencies_us.len() + batch.errors + warmed) as f64;
            let case = format!("{prefix}{}/{BODY_BYTES}B", envoy.name());
            if matches!(envoy.variant, Variant::WasmEppLearning | Variant::WasmEppLearningReadAll) {
                let (Some(before), Some(after)) = (before.learning.get(k), after.learning.get(k)) else { continue };
                let per_stream = |name: &str| growth(before, after, name) / streams;
                let (chunks, reports) = (per_stream("chunks_read"), per_stream("usage_reports"));
                println!(
                    "  {}, {prefix}: {chunks:.2} chunks read per stream, {reports:.2} usage reports per stream, \
                     {:.0} % of streams not read past their first chunk, {:.0} % not watched at all",
                    envoy.name(),
                    per_stream("usage_streams_not_read") * 100.0,
                    per_stream("answers_not_watched") * 100.0
                );
                results.push(&benchmark, &case, "chunks_read_per_stream", chunks, "count");
                results.push(&benchmark, &case, "usage_reports_per_stream", reports, "count");
            }
            if let (Some(Some(before)), Some(Some(after))) = (before.phases.get(k), after.phases.get(k)) {
                let per_stream = |name: &str| growth(before, after, name) / streams;
                let (body_us, scan_us) =
                    (per_stream("response_body_ns") / 1000.0, per_stream("observe_scan_ns") / 1000.0);
                let (calls, scans) = (per_stream("response_body_calls"), per_stream("observe_scan_calls"));
                println!(
                    "  {}, {prefix}: in its VM per stream (wall clock) {body_us:.1} µs over {calls:.1} body \
                     callbacks, of which copying and scanning {scan_us:.1} µs over {scans:.1} chunks \
                     ({:.2} µs per chunk read)",
                    envoy.name(),
                    scan_us / scans.max(1e-9)
                );
                results.push(&benchmark, &case, "in_vm_response_body_us_per_stream", body_us, "us");
                results.push(&benchmark, &case, "in_vm_observe_scan_us_per_stream", scan_us, "us");
            }
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
