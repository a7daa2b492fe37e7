//! `make bench`: how well does wasm-epp route, compared with the alternatives, on the same pool?
//!
//! For each workload the tool starts a pool of simulated vLLM pods, then for each target
//! (wasm-epp, Envoy round robin, Envoy least-request, vllm-router cache-aware and
//! power-of-two) empties the pods, starts the target, replays the workload's fixed requests,
//! and reads the pods' prefix-cache counters. Results go to bench/results/quality.{json,md};
//! bench/quality/plot.py draws them. See bench/README.md.

#![forbid(unsafe_code)]

mod balance;
mod client;
mod comparison;
mod driver;
mod faults;
mod flow;
mod index_accuracy;
mod inference_perf;
mod models;
mod options;
mod pd;
mod pool;
mod prometheus;
mod prompts;
mod replicas;
mod report;
mod run;
mod stages;
mod summary;
mod targets;
mod workload;

use clap::Parser;

fn main() {
    let options = options::Options::parse();
    if let Err(error) = run::run(&options) {
        eprintln!("wasm-epp-bench-quality: {error}");
        std::process::exit(1);
    }
}
