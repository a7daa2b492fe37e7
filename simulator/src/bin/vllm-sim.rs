//! `vllm-sim`: serve one or more simulated vLLM pods until SIGTERM or SIGINT.

use clap::Parser;
use vllm_sim::cli::Cli;
use vllm_sim::spawn_pod;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let configs = match cli.pod_configs() {
        Ok(configs) => configs,
        Err(message) => {
            eprintln!("vllm-sim: {message}");
            return std::process::ExitCode::from(2);
        }
    };
    let mut pods = Vec::with_capacity(configs.len());
    for config in configs {
        let (model, preset) = (config.model.clone(), config.preset.name());
        // Pods of one pool may differ in speed (`--prefill-slowdown`): the log says which is which.
        let prefill_ms = config.latency.prefill_per_token_ms;
        match spawn_pod(config).await {
            Ok(pod) => {
                println!(
                    "vllm-sim listening on {} model={model} preset={preset} prefill_ms_per_token={prefill_ms}",
                    pod.addr
                );
                pods.push(pod);
            }
            Err(message) => {
                eprintln!("vllm-sim: {message}");
                return std::process::ExitCode::from(1);
            }
        }
    }
    wait_for_termination().await;
    for pod in pods {
        pod.shutdown().await;
    }
    std::process::ExitCode::SUCCESS
}

/// Resolves on SIGINT (Ctrl-C) or, on Unix, SIGTERM.
async fn wait_for_termination() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut terminate) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = terminate.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
