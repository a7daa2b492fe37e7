//! `sim-calibrate`: runs the reference shared-prefix workload against two small-preset pods
//! (started in-process on free loopback ports, or given with `--url`) and prints measured
//! figures next to what real vLLM measured.

use clap::Parser;
use vllm_sim::calibration::run_calibration;

/// Compare the simulator (or any vLLM-compatible pods) with the real-vLLM reference run.
#[derive(Debug, Parser)]
#[command(name = "sim-calibrate", version, about)]
struct Arguments {
    /// Base URL of a pod (repeat for several); without it, two pods start in-process.
    #[arg(long = "url")]
    urls: Vec<String>,
    /// Model name to request.
    #[arg(long, default_value = "sim-model")]
    model: String,
    /// Seed of the prompts and their order.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let arguments = Arguments::parse();
    let urls = (!arguments.urls.is_empty()).then_some(arguments.urls);
    match run_calibration(urls, &arguments.model, arguments.seed).await {
        Ok(report) => {
            print!("{}", report.table());
            for error in report.result.errors.iter().take(5) {
                eprintln!("request failed: {error}");
            }
            std::process::ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("sim-calibrate: {message}");
            std::process::ExitCode::FAILURE
        }
    }
}
