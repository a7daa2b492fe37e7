//! The `probe` mode: what each host call costs inside Envoy, timed in the VM.
//!
//! Native benchmarks cannot see what crossing into Envoy costs; this mode can. On a request's
//! last body chunk it calls each host function [`REPEATS`] times in a row, times the run with
//! Envoy's clock (`proxy_get_current_time_nanoseconds`, whose own cost is measured first and
//! subtracted), and answers locally with one JSON object: nanoseconds per call by name (and
//! under `name#first`, the first call of the run alone, closer to a request path's single
//! cold call than the loop's average), the
//! names being the ABI functions `wasm_epp_host::HostCallTally` counts on wasm-epp's request
//! path. Every call goes through `wasm_epp_host::ProxyHost`, the seam wasm-epp uses, so the
//! figures include its copies and checks too.

use wasm_epp_host::{abi, Host, MetricKind, ProxyHost, SharedStore};

/// Calls per measured function: enough that the clock's resolution and its own cost vanish.
const REPEATS: u32 = 200;

/// Shared-data value sizes probed (bytes): an in-flight slot of a small pool, a slot of a
/// large pool, and a pod table.
const SHARED_SIZES: [usize; 3] = [64, 1024, 8192];

/// One prefix-event batch as the router enqueues it (bytes).
const QUEUE_MESSAGE_BYTES: usize = 540;

/// The queue the probe fills and drains itself.
const QUEUE_NAME: &str = "header-only-probe";

fn now_ns() -> u64 {
    abi::current_time_ns().unwrap_or(0)
}

/// Nanoseconds of one call of `call` made cold (the first after other work, as the request
/// path makes most calls), and per call in a warm loop of [`REPEATS`]; both less the
/// clock's own cost (`clock_ns`, per reading pair).
fn time_per_call(clock_ns: f64, mut call: impl FnMut()) -> (f64, f64) {
    let start = now_ns();
    call();
    // Not clamped at 0: the clock ticks in whole µs, and only the mean over many requests
    // is the cost (a clamp would bias it up).
    let first = now_ns().saturating_sub(start) as f64 - clock_ns;
    let start = now_ns();
    for _ in 0..REPEATS {
        call();
    }
    let elapsed = now_ns().saturating_sub(start) as f64;
    (first, ((elapsed - clock_ns) / f64::from(REPEATS)).max(0.0))
}

/// Runs every probe on the current request (whose body is `body_size` bytes, all buffered)
/// and answers it with the figures.
pub fn run(body_size: usize) {
    let host = ProxyHost;
    let mut figures: Vec<(String, f64)> = Vec::new();
    let (_, clock) = time_per_call(0.0, || {
        std::hint::black_box(now_ns());
    });
    figures.push(("proxy_get_current_time_nanoseconds".into(), clock));
    let mut record = |name: &str, (first, warm): (f64, f64)| {
        figures.push((name.to_string(), warm));
        figures.push((format!("{name}#first"), first));
    };

    record(
        "proxy_get_header_map_pairs",
        time_per_call(clock, || {
            std::hint::black_box(host.request_headers().ok());
        }),
    );
    record(
        "proxy_replace_header_map_value",
        time_per_call(clock, || {
            let _ = host.set_request_header("x-gateway-destination-endpoint", b"10.0.0.1:8000,10.0.0.2:8000");
        }),
    );
    record(
        "proxy_remove_header_map_value",
        time_per_call(clock, || {
            let _ = host.remove_request_header("x-probe-absent");
        }),
    );
    record(
        &format!("proxy_get_buffer_bytes/{body_size}"),
        time_per_call(clock, || {
            std::hint::black_box(host.request_body(0, body_size).ok());
        }),
    );
    record(
        "proxy_get_property",
        time_per_call(clock, || {
            std::hint::black_box(host.property(&["request", "path"]).ok());
        }),
    );
    for size in SHARED_SIZES {
        let key = format!("header-only-probe/{size}");
        let value = vec![b'x'; size];
        let _ = host.set(&key, &value, None);
        record(
            &format!("proxy_get_shared_data/{size}"),
            time_per_call(clock, || {
                std::hint::black_box(host.get(&key).ok());
            }),
        );
        record(
            &format!("proxy_set_shared_data/{size}"),
            time_per_call(clock, || {
                let _ = host.set(&key, &value, None);
            }),
        );
    }
    if let Ok(metric) = host.define_metric(MetricKind::Counter, "header_only_probe.counter") {
        record(
            "proxy_increment_metric",
            time_per_call(clock, || {
                let _ = host.increment_metric(metric, 1);
            }),
        );
    }
    if let Ok(queue) = host.register_queue(QUEUE_NAME) {
        let message = vec![b'q'; QUEUE_MESSAGE_BYTES];
        record(
            &format!("proxy_enqueue_shared_queue/{QUEUE_MESSAGE_BYTES}"),
            time_per_call(clock, || {
                let _ = host.enqueue(queue, &message);
            }),
        );
        record(
            &format!("proxy_dequeue_shared_queue/{QUEUE_MESSAGE_BYTES}"),
            time_per_call(clock, || {
                std::hint::black_box(host.dequeue(queue).ok());
            }),
        );
    }
    let fields: Vec<String> = figures.iter().map(|(name, ns)| format!("\"{name}\":{ns:.1}")).collect();
    let body = format!("{{{}}}", fields.join(","));
    let _ = host.send_reply(200, &[("content-type", "application/json")], body.as_bytes());
}
