//! 256 slow clients (headers, then a body trickled a few KB at a time) against the shipped
//! bounds: each is cut by `request_timeout` (408), and Envoy's memory stays bounded by what
//! the caps allow (printed as a series; asserted only against a generous bound).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use e2e::slow_clients::{run_slow_clients, TRICKLE_BYTES, TRICKLE_PAUSE};
use e2e::Cluster;
use launcher::proc_stats::rss_bytes;

const CLIENTS: usize = 256;
/// Shorter than the shipped 60 s so each client is cut several times within the run.
const REQUEST_TIMEOUT_SECONDS: u64 = 6;
const RUN: Duration = Duration::from_secs(20);
/// Generous per-connection cost on top of the buffered body: Envoy's connection, stream
/// and header structures and the filter's per-request context.
const PER_CONNECTION_OVERHEAD: u64 = 256 * 1024;
/// Slack for allocator behaviour and the pods' and singleton's own traffic.
const SLACK: u64 = 64 << 20;
const MIB: f64 = 1024.0 * 1024.0;

#[test]
fn slow_clients_are_cut_and_envoy_memory_stays_bounded() {
    let cluster = Cluster::start("slow-clients", 2, &["--time-scale", "0"], |options| {
        options.request_timeout = format!("{REQUEST_TIMEOUT_SECONDS}s");
    });
    assert!(cluster.envoy.wait_for_healthy_pods(2, Duration::from_secs(15)));
    for i in 0..20 {
        cluster.complete(&format!("warm {i}"));
    }
    let pid = cluster.envoy.pid();
    let baseline = rss_bytes(pid).unwrap();
    let samples = Arc::new(Mutex::new(Vec::new()));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (samples, done) = (samples.clone(), done.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::SeqCst) {
                if let Ok(rss) = rss_bytes(pid) {
                    samples.lock().unwrap().push(rss);
                }
                std::thread::sleep(Duration::from_millis(500));
            }
        })
    };
    let outcome = run_slow_clients(cluster.envoy.listen_port, CLIENTS, RUN);
    done.store(true, Ordering::SeqCst);
    sampler.join().unwrap();
    let samples = samples.lock().unwrap().clone();
    let peak = samples.iter().copied().max().unwrap_or(baseline);

    // What the caps allow each client to have buffered when it is cut: request_timeout x rate.
    let per_client_body = REQUEST_TIMEOUT_SECONDS * 1000 / TRICKLE_PAUSE.as_millis() as u64 * TRICKLE_BYTES as u64;
    let bound = baseline + CLIENTS as u64 * (per_client_body + PER_CONNECTION_OVERHEAD) + SLACK;
    let series: Vec<String> = samples.iter().map(|s| format!("{:.0}", *s as f64 / MIB)).collect();
    println!(
        "{CLIENTS} slow clients for {RUN:?} ({} B every {TRICKLE_PAUSE:?}, request_timeout {REQUEST_TIMEOUT_SECONDS} s): \
         {} cut with 408, {} other endings, {:.1} MiB sent",
        TRICKLE_BYTES,
        outcome.timed_out,
        outcome.other,
        outcome.bytes_sent as f64 / MIB
    );
    println!(
        "Envoy RSS MiB: baseline {:.0}, peak {:.0}, bound {:.0}; every 0.5 s: [{}]",
        baseline as f64 / MIB,
        peak as f64 / MIB,
        bound as f64 / MIB,
        series.join(", ")
    );
    let heap = e2e::hostile::admin_stat(&cluster.envoy, "overload.envoy.resource_monitors.fixed_heap.pressure");
    println!(
        "overload manager fixed-heap pressure after the run: {heap:?} (of {} B)",
        launcher::envoy::DEFAULT_MAX_HEAP_BYTES
    );
    assert!(outcome.timed_out >= CLIENTS, "request_timeout did not cut every slow client: {outcome:?}");
    assert!(peak <= bound, "Envoy RSS {peak} over the bound {bound}");
    for i in 0..20 {
        let reply = cluster.complete(&format!("after the slow clients {i}"));
        assert_eq!(reply.status, 200, "{}", reply.body);
        cluster.served_by_pool(&reply);
    }
}

/// The plugin's own bound: bodies held by all streams of a worker together stay under
/// `max_buffered_bytes`; past it a request goes on by load, unread, and is counted.
#[test]
fn the_plugin_stops_buffering_past_its_per_worker_cap() {
    let cluster = Cluster::start("buffer-cap", 2, &["--time-scale", "0"], |options| {
        // Each client declares a 1 MiB body: under max_body_bytes, so it is buffered.
        let cap = e2e::slow_clients::DECLARED_BODY_BYTES as u64 + 1024;
        options.filter_config["max_body_bytes"] = cap.into();
        options.filter_config["max_buffered_bytes"] = cap.into();
    });
    assert!(cluster.envoy.wait_for_healthy_pods(2, Duration::from_secs(15)));
    // 64 clients trickling 16 KB/s for 5 s hold ~5 MB: past the cap on both workers.
    run_slow_clients(cluster.envoy.listen_port, 64, Duration::from_secs(5));
    let capped = cluster.envoy.stat("wasm_epp_buffer_cap_reached").unwrap_or(0.0);
    assert!(capped >= 1.0, "no stream was let go unread");
    cluster.assert_plugin_healthy();
}
