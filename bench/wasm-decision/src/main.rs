//! Times the cases of the native decision benchmark (`bench/cost/src/native`, the same files,
//! not a copy) in whatever runs this binary: natively, or built for `wasm32-wasip1` and run
//! by `bench/wasm-decision/run.mjs` in node's V8, the engine Envoy embeds. The MockHost
//! answers the host calls in Wasm memory, so the gap between the two runs is the VM's cost on
//! the plugin's own compute; Envoy's host calls come on top (`wasm-epp-bench-cost profile`).
//!
//!     wasm-decision [SECONDS_PER_CASE] [cold]  # prints one line per case: µs per call
//!
//! `cold` sweeps a buffer larger than the last-level cache between calls (untimed), so each
//! call starts with the index, tables and code out of cache, as in Envoy, where a request's
//! callbacks come between the proxy's own work on other requests.
//!
//! `make profile-wasm-decision` builds both and prints them side by side; with `perf` and
//! node's `--perf-basic-prof` the Wasm functions show by name (docs/performance.md).

// The bench crate's modules as files of this binary: it uses only some of their items.
#[path = "../../cost/src/native/mod.rs"]
#[allow(dead_code, unused_imports)]
mod native;
#[path = "../../cost/src/workload.rs"]
#[allow(dead_code)]
mod workload;

use std::hint::black_box;
use std::time::{Duration, Instant};

use native::Case;
use picker::request::Endpoint;

/// Each case runs at least this long (timing and a profile both want many calls).
const DEFAULT_SECONDS: f64 = 2.0;
/// Bytes swept between calls in `cold` mode: above any L3 share a 2-core VM gets.
const SWEEP_BYTES: usize = 64 << 20;
/// A cache line: one write per line evicts as well as touching every byte.
const LINE_BYTES: usize = 64;

fn main() {
    let seconds = std::env::args().nth(1).and_then(|s| s.parse::<f64>().ok()).unwrap_or(DEFAULT_SECONDS);
    let budget = Duration::from_secs_f64(seconds.clamp(0.01, 600.0));
    let mut sweep = (std::env::args().nth(2).as_deref() == Some("cold")).then(|| vec![0u8; SWEEP_BYTES]);
    let cases = [
        ("filter_path/completions/4KB/16pods", Endpoint::Completions, 4, 16, true),
        ("decision/completions/4KB/64pods", Endpoint::Completions, 4, 64, false),
        ("decision/completions/32KB/64pods", Endpoint::Completions, 32, 64, false),
        ("decision/chat/32KB/64pods", Endpoint::ChatCompletions, 32, 64, false),
    ];
    for (name, answer) in USAGE_CASES {
        let per_call = time_usage_scan(answer.as_bytes(), budget, sweep.as_deref_mut());
        println!("{name:40} {:9.2} us per call", per_call * 1e6);
    }
    for (name, endpoint, kb, pods, whole_path) in cases {
        match run(endpoint, kb, pods, whole_path, budget, sweep.as_deref_mut()) {
            Ok((calls, per_call)) => println!("{name:40} {:9.2} us per call ({calls} calls)", per_call * 1e6),
            Err(reason) => {
                eprintln!("{name}: {reason}");
                std::process::exit(1);
            }
        }
    }
}

/// Answers learning scans for `usage` (the observation's compute, `router/src/response.rs`):
/// the shape of `wasm-epp-bench-cost`'s upstream answer, and a stream's final usage event.
const USAGE_CASES: [(&str, &str); 2] = [
    (
        "usage_scan/json_answer",
        r#"{"id":"cmpl-bench","object":"text_completion","created":1700000000,"model":"sim-model","choices":[{"index":0,"text":" answered at once","logprobs":null,"finish_reason":"length","stop_reason":null}],"usage":{"prompt_tokens":256,"total_tokens":260,"completion_tokens":4}}"#,
    ),
    (
        "usage_scan/sse_usage_event",
        "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"sim-model\",\"choices\":[],\"usage\":{\"prompt_tokens\":4096,\"total_tokens\":4608,\"completion_tokens\":512,\"prompt_tokens_details\":{\"cached_tokens\":3072}}}\n\ndata: [DONE]\n\n",
    ),
];

/// Seconds per scan of `answer` (a fresh scanner, one chunk, the usage read). A scan takes
/// about as long as reading the clock, so warm scans are timed in batches; a cold one (the
/// sweep between scans) alone.
fn time_usage_scan(answer: &[u8], budget: Duration, mut sweep: Option<&mut [u8]>) -> f64 {
    let batch = if sweep.is_some() { 1 } else { 1_000 };
    let (mut calls, mut timed) = (0u64, Duration::ZERO);
    while timed < budget {
        if let Some(buffer) = sweep.as_deref_mut() {
            buffer.iter_mut().step_by(LINE_BYTES).for_each(|byte| *byte = byte.wrapping_add(1));
            black_box(&buffer);
        }
        let started = Instant::now();
        for _ in 0..batch {
            let mut scanner = picker::learn::UsageScanner::default();
            scanner.feed(black_box(answer));
            black_box(scanner.usage());
        }
        timed += started.elapsed();
        calls += batch;
    }
    timed.as_secs_f64() / calls as f64
}

/// Calls made and seconds per call of one case; the untimed step between calls (and the
/// sweep) is outside the clock.
fn run(
    endpoint: Endpoint,
    kb: usize,
    pods: usize,
    whole_path: bool,
    budget: Duration,
    mut sweep: Option<&mut [u8]>,
) -> Result<(u64, f64), String> {
    let case = Case::new(endpoint, kb, pods)?;
    let (mut calls, mut timed) = (0u64, Duration::ZERO);
    while timed < budget {
        if let Some(buffer) = sweep.as_deref_mut() {
            buffer.iter_mut().step_by(LINE_BYTES).for_each(|byte| *byte = byte.wrapping_add(1));
            black_box(&buffer);
        }
        if whole_path {
            case.next_request();
        }
        let started = Instant::now();
        if whole_path {
            black_box(case.request())?;
        } else {
            black_box(case.decide()).ok_or("the decision chose nothing")?;
        }
        timed += started.elapsed();
        if !whole_path {
            case.settle_decision();
        }
        calls += 1;
    }
    Ok((calls, timed.as_secs_f64() / calls as f64))
}
