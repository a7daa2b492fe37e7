//! vllm-router (PyPI `vllm-router`, the vLLM project's Rust router) as a target.
//!
//! It health-checks its workers before it serves, so it is ready only when its own `/health`
//! answers 200. Retries are off: a retried request would be counted as one request but do
//! the work twice, which no other target does.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use launcher::http;
use launcher::process::ManagedProcess;

use super::{free_port, RunningTarget};

/// The router waits for its workers and starts its server; a few seconds on this machine.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

pub fn start(binary: &Path, policy: &str, pool: &[String], dir: &Path) -> Result<RunningTarget, String> {
    if !binary.exists() {
        return Err(format!("{} not found: `make bench` installs it (pip install vllm-router)", binary.display()));
    }
    let port = free_port()?;
    let mut command = Command::new(binary);
    command
        .args(["--host", "127.0.0.1", "--port", &port.to_string(), "--policy", policy])
        .arg("--worker-urls")
        .args(pool.iter().map(|address| format!("http://{address}")))
        .args(["--worker-startup-check-interval", "1", "--worker-startup-timeout-secs", "30"])
        .args(["--prometheus-port", &free_port()?.to_string()])
        .args(["--disable-retries", "--log-level", "warning"]);
    let log = dir.join(format!("vllm-router-{policy}.log"));
    let mut process = ManagedProcess::spawn(&format!("vllm-router {policy}"), command, &log)?;
    let health = format!("http://127.0.0.1:{port}/health");
    let ready = launcher::wait_until(READY_TIMEOUT, || {
        process.has_exited() || http::get(&health, Duration::from_secs(1)).is_ok_and(|reply| reply.status == 200)
    });
    if !ready || process.has_exited() {
        return Err(format!("vllm-router ({policy}) did not become ready:\n{}", process.log_tail(30)));
    }
    Ok(RunningTarget::VllmRouter { process, port })
}
