//! `profile`: where wasm-epp's cost inside Envoy goes, by host call and by phase.
//!
//! Three measurements, one table each:
//! 1. **Host traffic per request**, counted natively on the shipped request path
//!    ([`crate::native::Case::host_traffic`]: the router on a `MockHost`, which tallies every
//!    call by the ABI function Envoy would serve, and the bytes each copies).
//! 2. **What each host call costs in Envoy**, timed inside the VM by the header-only filter's
//!    `probe` mode (`bench/header-filter/src/probe.rs`). Calls × cost = the request's host
//!    call time.
//! 3. **Time per phase in Envoy**: wasm-epp as shipped, its filter built with the `profile`
//!    feature (`router/src/profile.rs`), under sequential and 32-way load; beside it the
//!    Envoy CPU per request of that build and of the body-reading header-only filter, so
//!    what the VM's phases do not explain (callbacks, V8 entries, Envoy's own work for a
//!    filter that holds and resumes the stream) shows as the remainder.

use std::collections::BTreeMap;
use std::time::Duration;

use picker::request::Endpoint;

use crate::client::Connection;
use crate::envoys::{self, RunningEnvoy, Variant};
use crate::native::{Case, HostTraffic};
use crate::results::Results;
use crate::sampling;
use crate::workload;

/// Requests the native tally averages over (a tick every 32, as in the criterion bench).
const TALLY_REQUESTS: u32 = 3_200;

/// The probe's name suffix of a single cold call's cost.
const FIRST_SUFFIX: &str = "#first";

/// Probe requests. A warm loop's cost is their median. Envoy's clock ticks in whole µs, so
/// a single cold call reads 0, 1000, 2000 ns...: its cost is the mean over all requests,
/// which is exact on average because calls start at random points of a tick.
const PROBE_REQUESTS: usize = 300;

pub struct ProfileOptions {
    /// Pods behind the Envoys.
    pub pods: usize,
    /// Prompt size of the completions requests, KB.
    pub prompt_kb: usize,
    pub sequential: usize,
    pub concurrent: Duration,
    pub connections: usize,
    /// Fields merged into the profiled filter's configuration (none: the shipped one).
    pub filter_fields: Option<serde_json::Value>,
}

/// Runs the three measurements against `pool` and prints their tables.
pub fn run(pool: &[String], options: &ProfileOptions, results: &mut Results) -> Result<(), String> {
    let case = Case::new(Endpoint::Completions, options.prompt_kb, options.pods)?;
    let traffic = case.host_traffic(TALLY_REQUESTS)?;
    let body = case.body.clone();
    drop(case);
    let costs = probe_costs(body.len())?;
    let host_us = print_host_calls(&traffic, &costs, results);
    let fields = |v: Variant| options.filter_fields.clone().filter(|_| v.is_profiled());
    let mut envoys = [Variant::WasmEppProfiled, Variant::HeaderRead, Variant::WasmEppProfiledLearning]
        .iter()
        .map(|&v| RunningEnvoy::start_configured(v, pool, None, fields(v)))
        .collect::<Result<Vec<_>, _>>()?;
    // Beside the shipped sample of answers watched, every answer watched: the cost of one.
    let all_watched = serde_json::json!({"learning": {"enabled": true, "watch_share": 1.0}});
    envoys.push(RunningEnvoy::start_configured(Variant::WasmEppProfiledLearning, pool, None, Some(all_watched))?);
    let [profiled, header_read, learning, learning_all] = envoys.as_slice() else {
        return Err("four Envoys expected".into());
    };
    let sequential = phases(profiled, &body, 1, Load::Requests(options.sequential))?;
    let concurrent = phases(profiled, &body, options.connections, Load::For(options.concurrent))?;
    let baseline = phases(header_read, &body, options.connections, Load::For(options.concurrent))?;
    print_phases(&sequential, &concurrent, &baseline, host_us, options, results);
    let learning_runs = |envoy: &RunningEnvoy| -> Result<[PhaseRun; 2], String> {
        Ok([
            phases(envoy, &body, 1, Load::Requests(options.sequential))?,
            phases(envoy, &body, options.connections, Load::For(options.concurrent))?,
        ])
    };
    let (shipped, every) = (learning_runs(learning)?, learning_runs(learning_all)?);
    let off = [&sequential, &concurrent];
    print_observation(off, [&every[0], &every[1]], "every answer watched", None, options, results);
    print_observation(off, [&shipped[0], &shipped[1]], "as shipped", Some("profile_learning"), options, results);
    Ok(())
}

/// Issue 14's goal for the response observation: what learning adds per request, µs.
const OBSERVATION_GOAL_US: f64 = 10.0;

/// What `learning.enabled` adds to the response callbacks (headers, body, log: the first
/// byte, the answering pod, the `usage` scan, the release), learning off against on (`label`)
/// in the same run, sequential and at `connections` at once, by callback; and to the
/// decision's `choose` (the TTFT scoring). The answers are whole (one JSON chunk); streams are
/// the `streams` step's. The share of answers watched is learning's own count of the answers
/// it left unwatched, against the requests. Recorded under `benchmark` when given, with the goal's verdict.
fn print_observation(
    off: [&PhaseRun; 2],
    on: [&PhaseRun; 2],
    label: &str,
    benchmark: Option<&str>,
    options: &ProfileOptions,
    results: &mut Results,
) {
    const RESPONSE_PHASES: [&str; 3] = ["response_headers", "response_body", "log"];
    const ALL_THREE: &str = "all three";
    let phase_us = |run: &PhaseRun, phase: &str| {
        if phase == ALL_THREE {
            return RESPONSE_PHASES.iter().map(|p| phase_us_of(run, p)).sum();
        }
        phase_us_of(run, phase)
    };
    // Not the answering-pod check's calls: outlier detection makes that check on every
    // answer, watched or not.
    let watched = on.map(|run| 100.0 * run.answers_watched);
    println!(
        "\n== what learning adds, {label} (issue 14: the response observation ≤ {OBSERVATION_GOAL_US} µs per \
         request; whole answers; µs per request in the VM; answers watched {:.0} % / {:.0} %) ==",
        watched[0], watched[1]
    );
    println!(
        "  {:<18} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "phase",
        "seq off",
        "seq on",
        "added",
        format!("{} off", options.connections),
        format!("{} on", options.connections),
        "added"
    );
    let mut worst = 0.0_f64;
    for phase in RESPONSE_PHASES.into_iter().chain([ALL_THREE, "choose"]) {
        let figures: Vec<(f64, f64)> =
            off.iter().zip(on).map(|(off, on)| (phase_us(off, phase), phase_us(on, phase))).collect();
        let [(seq_off, seq_on), (conc_off, conc_on)] = figures.as_slice() else { continue };
        let (seq_added, conc_added) = (seq_on - seq_off, conc_on - conc_off);
        println!(
            "  {phase:<18} {seq_off:>10.2} {seq_on:>10.2} {seq_added:>+10.2} {conc_off:>10.2} {conc_on:>10.2} {conc_added:>+10.2}"
        );
        if let Some(benchmark) = benchmark {
            let case = phase.replace(' ', "_");
            results.push(benchmark, &case, "added_us_per_request_sequential", seq_added, "us");
            results.push(benchmark, &case, "added_us_per_request_concurrent", conc_added, "us");
        }
        if phase == ALL_THREE {
            worst = seq_added.max(conc_added);
        }
    }
    if let Some(benchmark) = benchmark {
        results.push(benchmark, "answers_watched", "percent_sequential", watched[0], "%");
        results.push(benchmark, "answers_watched", "percent_concurrent", watched[1], "%");
        let verdict = if worst <= OBSERVATION_GOAL_US { "met" } else { "MISSED" };
        println!("  the response observation, the larger of the two loads: {worst:+.2} µs per request: {verdict}");
    } else {
        println!("  per answer watched, the larger of the two loads: {worst:+.2} µs");
    }
}

/// µs per request of `phase` in `run` (0 when it was not timed).
fn phase_us_of(run: &PhaseRun, phase: &str) -> f64 {
    run.phases.iter().find(|(p, _, _)| p == phase).map_or(0.0, |(_, us, _)| *us)
}

/// Nanoseconds per call by probe name (`proxy_get_shared_data/1024`, ...), medians over
/// [`PROBE_REQUESTS`] requests with a `body_bytes` body.
fn probe_costs(body_bytes: usize) -> Result<BTreeMap<String, f64>, String> {
    let port = || launcher::free_port().map_err(|e| e.to_string());
    let (listen, admin) = (port()?, port()?);
    let dir = launcher::paths::run_dir("bench-cost-probe").map_err(|e| e.to_string())?;
    let template = std::fs::read_to_string(envoys::baseline_template()).map_err(|e| e.to_string())?;
    let module = envoys::header_filter_wasm().display().to_string();
    let config = envoys::render_baseline(&template, listen, admin, Some((&module, "buffer probe 127.0.0.1:1")));
    let config_path = dir.join("envoy.yaml");
    std::fs::write(&config_path, config).map_err(|e| e.to_string())?;
    let _envoy = launcher::envoy::launch(&config_path, &[], 1, "envoy probe", &dir.join("envoy.log"), admin)?;
    let body = vec![b'a'; body_bytes];
    let url = format!("http://127.0.0.1:{listen}/v1/completions");
    let mut samples: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for _ in 0..PROBE_REQUESTS {
        let reply = launcher::http::post_bytes(&url, &[], &body, Duration::from_secs(10))?;
        let figures: BTreeMap<String, f64> =
            serde_json::from_str(&reply.body).map_err(|e| format!("probe answer {:?}: {e}", reply.body))?;
        for (name, ns) in figures {
            samples.entry(name).or_default().push(ns);
        }
    }
    let summary = |name: &str, values: &[f64]| {
        if name.ends_with(FIRST_SUFFIX) {
            values.iter().sum::<f64>() / values.len().max(1) as f64
        } else {
            crate::results::median(values)
        }
    };
    Ok(samples.iter().map(|(name, values)| (name.clone(), summary(name, values))).collect())
}

/// The probe's cost for `function` at `bytes` per call: its own entry, or among its sized
/// entries (`function/size`) the one nearest in size. `first` picks the cold single call's
/// figure (`...#first`) instead of the warm loop's.
pub fn cost_of(costs: &BTreeMap<String, f64>, function: &str, bytes: f64, first: bool) -> Option<f64> {
    let suffix = if first { FIRST_SUFFIX } else { "" };
    if let Some(ns) = costs.get(&format!("{function}{suffix}")) {
        return Some(*ns);
    }
    let distance = |size: f64| (size.max(1.0).ln() - bytes.max(1.0).ln()).abs();
    costs
        .iter()
        .filter_map(|(name, ns)| {
            let sized = name.strip_prefix(function)?.strip_prefix('/')?;
            let sized = if first { sized.strip_suffix(FIRST_SUFFIX)? } else { sized };
            let size: f64 = sized.parse().ok()?;
            Some((distance(size), *ns))
        })
        .min_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, ns)| ns)
}

/// Prints host calls per request with their cost; returns the request's host-call µs (at the
/// cold single-call costs, which a request path that makes each call once pays).
fn print_host_calls(traffic: &[HostTraffic], costs: &BTreeMap<String, f64>, results: &mut Results) -> f64 {
    println!("\n== host calls per request (shipped path, native tally; cost per call timed in Envoy's V8) ==");
    println!(
        "  {:<36} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8}",
        "ABI function", "calls/req", "B in/req", "B out/req", "ns warm", "ns cold", "µs warm", "µs cold"
    );
    let (mut total_us, mut total_cold_us) = (0.0, 0.0);
    let shown = |ns: Option<f64>| ns.map_or("—".to_string(), |ns| format!("{ns:.0}"));
    for t in traffic {
        let per_call = (t.bytes_in + t.bytes_out) / t.calls.max(f64::MIN_POSITIVE);
        let ns = cost_of(costs, t.function, per_call, false);
        let cold = cost_of(costs, t.function, per_call, true).or(ns);
        let us = ns.map_or(0.0, |ns| ns * t.calls / 1000.0);
        let cold_us = cold.map_or(0.0, |ns| ns * t.calls / 1000.0);
        total_us += us;
        total_cold_us += cold_us;
        println!(
            "  {:<36} {:>9.3} {:>9.0} {:>9.0} {:>8} {:>8} {:>8.2} {:>8.2}",
            t.function,
            t.calls,
            t.bytes_in,
            t.bytes_out,
            shown(ns),
            shown(cold),
            us,
            cold_us
        );
        if let Some(cold) = cold {
            results.push("profile_host_calls", t.function, "ns_first_call", cold, "ns");
        }
        results.push("profile_host_calls", t.function, "calls_per_request", t.calls, "count");
        results.push("profile_host_calls", t.function, "bytes_in_per_request", t.bytes_in, "bytes");
        results.push("profile_host_calls", t.function, "bytes_out_per_request", t.bytes_out, "bytes");
        if let Some(ns) = ns {
            results.push("profile_host_calls", t.function, "ns_per_call", ns, "ns");
            results.push("profile_host_calls", t.function, "us_per_request", us, "us");
        }
    }
    println!("  {:<36} {:>66.2} {:>8.2}", "all host calls", total_us, total_cold_us);
    results.push("profile_host_calls", "all", "us_per_request", total_us, "us");
    results.push("profile_host_calls", "all", "us_per_request_cold", total_cold_us, "us");
    let probed: Vec<String> = costs.iter().map(|(name, ns)| format!("{name} {ns:.0}")).collect();
    println!("  probe, ns per call (#first: one cold call): {}", probed.join(", "));
    for (name, ns) in costs {
        results.push("profile_probe", name, "ns_per_call", *ns, "ns");
    }
    total_cold_us
}

enum Load {
    Requests(usize),
    For(Duration),
}

/// What one load on one Envoy measured: per request, the phases' µs and calls, and Envoy CPU.
struct PhaseRun {
    requests: usize,
    cpu_us_per_request: f64,
    /// The share of answers learning watched (`wasm_epp.learning.answers_not_watched` against
    /// the requests answered); 1 where learning is off and the counter does not grow.
    answers_watched: f64,
    /// (phase, µs per request, calls per request)
    phases: Vec<(String, f64, f64)>,
}

/// The `wasm_epp.profile.*` counters now, by counter name suffix (`parse_ns`, ...): the
/// profiled filter's `<phase>_ns` and `<phase>_calls`, every worker.
pub fn profile_counters(envoy: &RunningEnvoy) -> BTreeMap<String, f64> {
    plugin_counters(envoy, "profile")
}

/// The plugin's `wasm_epp.<group>.*` counters now, by name suffix (`chunks_read`, ...).
pub fn plugin_counters(envoy: &RunningEnvoy, group: &str) -> BTreeMap<String, f64> {
    let text = envoy.admin(&format!("/stats?filter={group}")).unwrap_or_default();
    let marker = format!(".{group}.");
    text.lines()
        .filter_map(|line| {
            let (name, value) = line.split_once(": ")?;
            let suffix = name.rsplit_once(marker.as_str())?.1;
            Some((suffix.to_string(), value.trim().parse().ok()?))
        })
        .collect()
}

fn phases(envoy: &RunningEnvoy, body: &str, connections: usize, load: Load) -> Result<PhaseRun, String> {
    let requests: Vec<Vec<u8>> =
        (0..64).map(|seed| envoy.encode(workload::path(Endpoint::Completions), body.as_bytes(), seed)).collect();
    let mut pool: Vec<Connection> = (0..connections).map(|_| Connection::new(envoy.listen_port)).collect();
    sampling::run_batch(envoy, &mut pool, &requests, 200 / connections.max(1) + 1, None);
    let idle =
        sampling::idle_rates(std::slice::from_ref(envoy), Duration::from_secs(1)).first().copied().unwrap_or(0.0);
    let (before, learning_before) = (profile_counters(envoy), plugin_counters(envoy, "learning"));
    let batch = match load {
        Load::Requests(n) => sampling::run_batch(envoy, &mut pool, &requests, n / connections.max(1), None),
        Load::For(time) => sampling::run_batch(envoy, &mut pool, &requests, 0, Some(time)),
    };
    // The ticks flush the counters every 20 ms.
    std::thread::sleep(COUNTER_FLUSH);
    let (after, learning_after) = (profile_counters(envoy), plugin_counters(envoy, "learning"));
    let answered = batch.latencies_us.len();
    if batch.errors > 0 {
        return Err(format!("{}: {} errors, first: {:?}", envoy.name(), batch.errors, batch.first_error));
    }
    let per_request = |name: &str| {
        let delta = after.get(name).copied().unwrap_or(0.0) - before.get(name).copied().unwrap_or(0.0);
        delta / answered.max(1) as f64
    };
    let phases = router_phase_names()
        .iter()
        .map(|phase| {
            (phase.to_string(), per_request(&format!("{phase}_ns")) / 1000.0, per_request(&format!("{phase}_calls")))
        })
        .collect();
    let cpu_us_per_request = sampling::cpu_per_request(batch.envoy_cpu, idle, batch.elapsed, answered);
    let not_watched = |counters: &BTreeMap<String, f64>| counters.get("answers_not_watched").copied().unwrap_or(0.0);
    let answers_watched =
        (1.0 - (not_watched(&learning_after) - not_watched(&learning_before)) / answered.max(1) as f64).clamp(0.0, 1.0);
    Ok(PhaseRun { requests: answered, cpu_us_per_request, answers_watched, phases })
}

/// How long the profiled filter takes to flush its counters (its tick, 20 ms, and margin).
pub const COUNTER_FLUSH: Duration = Duration::from_millis(200);

/// The profiled filter's time in its VM callbacks so far, every worker, from its top-level
/// phases' counters (ns): (the request's callbacks, the ticks).
pub fn in_vm_ns(envoy: &RunningEnvoy) -> (f64, f64) {
    let counters = profile_counters(envoy);
    let ns = |phase: &str| counters.get(&format!("{phase}_ns")).copied().unwrap_or(0.0);
    let requests = ENTRY_PHASES.iter().filter(|&&phase| phase != "tick").map(|phase| ns(phase)).sum();
    (requests, ns("tick"))
}

/// The phases `router/src/profile.rs` times, in its order.
fn router_phase_names() -> Vec<&'static str> {
    wasm_epp_router::profile::Phase::ALL.iter().map(|p| p.name()).collect()
}

/// Top-level phases: each VM entry from Envoy, whose sum is the VM's time per request.
const ENTRY_PHASES: [&str; 6] = ["headers", "body", "response_headers", "response_body", "log", "tick"];

fn print_phases(
    sequential: &PhaseRun,
    concurrent: &PhaseRun,
    baseline: &PhaseRun,
    host_us: f64,
    options: &ProfileOptions,
    results: &mut Results,
) {
    println!(
        "\n== time per phase inside Envoy (wasm-epp built with `profile`, {} pods, {} KB prompts; µs per request) ==",
        options.pods, options.prompt_kb
    );
    println!("  {:<18} {:>12} {:>12} {:>12}", "phase", "sequential", "32 at once", "calls/req");
    for ((phase, seq_us, _), (_, conc_us, calls)) in sequential.phases.iter().zip(&concurrent.phases) {
        let nested = !ENTRY_PHASES.contains(&phase.as_str());
        let label = if nested { format!("  {phase}") } else { phase.clone() };
        println!("  {label:<18} {seq_us:>12.2} {conc_us:>12.2} {calls:>12.3}");
        results.push("profile_phases", phase, "us_per_request_sequential", *seq_us, "us");
        results.push("profile_phases", phase, "us_per_request_concurrent", *conc_us, "us");
        results.push("profile_phases", phase, "calls_per_request", *calls, "count");
    }
    let in_vm = |run: &PhaseRun| {
        run.phases.iter().filter(|(p, _, _)| ENTRY_PHASES.contains(&p.as_str())).map(|(_, us, _)| us).sum::<f64>()
    };
    let (vm_seq, vm_conc) = (in_vm(sequential), in_vm(concurrent));
    let own_cpu = concurrent.cpu_us_per_request - baseline.cpu_us_per_request;
    println!("  {:<18} {:>12.2} {:>12.2}", "in the VM, all", vm_seq, vm_conc);
    println!(
        "  Envoy CPU per request at {} at once: wasm-epp (profiled) {:.1} µs, body-reading header-only filter {:.1} µs; \
         wasm-epp's own {:.1} µs = in its VM callbacks {:.1} (of which host calls ~{:.1}) + outside them {:.1}",
        options.connections,
        concurrent.cpu_us_per_request,
        baseline.cpu_us_per_request,
        own_cpu,
        vm_conc,
        host_us,
        own_cpu - vm_conc
    );
    println!(
        "  requests measured: {} sequential, {} + {} at once",
        sequential.requests, concurrent.requests, baseline.requests
    );
    results.push("profile_phases", "in_vm", "us_per_request_sequential", vm_seq, "us");
    results.push("profile_phases", "in_vm", "us_per_request_concurrent", vm_conc, "us");
    results.push("profile_cpu", "wasm-epp-profiled", "cpu_us_per_request", concurrent.cpu_us_per_request, "us");
    results.push("profile_cpu", "header-buffered-read", "cpu_us_per_request", baseline.cpu_us_per_request, "us");
    results.push("profile_cpu", "wasm-epp-own", "cpu_us_per_request", own_cpu, "us");
    results.push("profile_cpu", "outside_vm", "cpu_us_per_request", own_cpu - vm_conc, "us");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_calls_cost_is_its_own_or_the_nearest_sized_probe() {
        let costs: BTreeMap<String, f64> = [
            ("proxy_increment_metric", 60.0),
            ("proxy_get_shared_data/64", 600.0),
            ("proxy_get_shared_data/1024", 650.0),
            ("proxy_get_shared_data/8192", 700.0),
            ("proxy_get_shared_data/8192#first", 2100.0),
        ]
        .into_iter()
        .map(|(n, v)| (n.to_string(), v))
        .collect();
        assert_eq!(cost_of(&costs, "proxy_increment_metric", 0.0, false), Some(60.0));
        assert_eq!(cost_of(&costs, "proxy_get_shared_data", 90.0, false), Some(600.0));
        assert_eq!(cost_of(&costs, "proxy_get_shared_data", 5000.0, false), Some(700.0));
        assert_eq!(cost_of(&costs, "proxy_get_shared_data", 5000.0, true), Some(2100.0));
        assert_eq!(cost_of(&costs, "proxy_set_shared_data", 10.0, false), None);
    }
}
