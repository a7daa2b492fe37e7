//! How much CPU one `vllm-sim` process needs to serve many concurrent streams on several pods.
//!
//! Starts the release binary as a child process (`--ports`, time scale 1), opens `STREAMS`
//! concurrent streams spread over the pods, and prints the child's CPU use (from
//! `/proc/<pid>/stat`, so the client's own work is not counted) and the streams' mean TPOT.
//!
//! ```sh
//! cargo build --release -p vllm-sim
//! cargo run --release -p vllm-sim --example serve_load -- 400 200            # streams, tokens
//! cargo run --release -p vllm-sim --example serve_load -- 400 200 0 path/to/vllm-sim  # time scale, binary
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use vllm_sim::SimClient;

/// Pods in the process (the benchmarks' usual pool).
const PODS: u16 = 4;
/// First port; pods use `BASE_PORT..BASE_PORT + PODS`.
const BASE_PORT: u16 = 18_301;
/// Linux reports CPU time in clock ticks of 1/100 s (USER_HZ).
const TICKS_PER_SECOND: f64 = 100.0;

fn cpu_ticks(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name (which ends with ')'): utime and stime are 14th and 15th.
    let after_name = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after_name.split(' ').collect();
    fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap()
}

#[tokio::main]
async fn main() {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    let number = |index: usize, default: usize| arguments.get(index).map_or(default, |a| a.parse().unwrap());
    let streams = number(0, 400);
    let tokens = number(1, 200);
    let time_scale = arguments.get(2).cloned().unwrap_or_else(|| "1".to_owned());
    let binary = arguments.get(3).cloned().unwrap_or_else(|| "target/release/vllm-sim".to_owned());
    let ports: Vec<String> = (0..PODS).map(|index| (BASE_PORT + index).to_string()).collect();
    let mut child = Command::new(&binary)
        .args(["--ports", &ports.join(","), "--max-num-seqs", "1024", "--time-scale", &time_scale])
        .stdout(Stdio::null())
        .spawn()
        .expect("build the release binary first: cargo build --release -p vllm-sim");
    let client = SimClient::new();
    for port in &ports {
        for _ in 0..100 {
            if client.get_text(&format!("http://127.0.0.1:{port}/health")).await.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let ticks_before = cpu_ticks(child.id());
    let started = Instant::now();
    let tasks: Vec<_> = (0..streams)
        .map(|index| {
            let client = client.clone();
            let url = format!("http://127.0.0.1:{}/v1/completions", ports[index % ports.len()]);
            let body = json!({"model": "sim-model", "prompt": format!("stream {index} of the load probe"), "max_tokens": tokens});
            tokio::spawn(async move { client.stream_completion(&url, &body).await })
        })
        .collect();
    let mut tpot_total = Duration::ZERO;
    for task in tasks {
        tpot_total += task.await.unwrap().unwrap().tpot().unwrap();
    }
    let wall = started.elapsed();
    let cpu_seconds = (cpu_ticks(child.id()) - ticks_before) / TICKS_PER_SECOND;
    child.kill().unwrap();
    let _ = child.wait();
    println!(
        "{streams} concurrent streams × {tokens} tokens on {PODS} pods, time scale {time_scale}: wall {:.2} s ({:.0} tokens/s), simulator CPU {:.2} s = {:.0} % of one core, mean TPOT {:.2} ms",
        wall.as_secs_f64(),
        (streams * tokens) as f64 / wall.as_secs_f64(),
        cpu_seconds,
        100.0 * cpu_seconds / wall.as_secs_f64(),
        tpot_total.as_secs_f64() * 1000.0 / streams as f64
    );
}
