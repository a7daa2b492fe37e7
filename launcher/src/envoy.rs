//! Renders `envoy/envoy.yaml.template` and runs the real Envoy binary with wasm-epp.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

pub use crate::envoy_options::*;
use crate::http;
use crate::process::ManagedProcess;
pub use crate::render::render;

/// Longer than the plugin's stat flush periods (filter tick 20 ms, default poll 100 ms).
const PLUGIN_STATS_FLUSH: Duration = Duration::from_millis(150);

/// Starts Envoy on `config_path` and waits until its admin endpoint on `admin_port` says it
/// is ready. Every Envoy the launcher starts (wasm-epp, baselines, Kubernetes mode) goes here.
pub fn launch(
    config_path: &Path,
    extra_args: &[String],
    concurrency: u32,
    name: &str,
    log: &Path,
    admin_port: u16,
) -> Result<ManagedProcess, String> {
    let mut command = Command::new(crate::paths::envoy_binary());
    command
        .arg("-c")
        .arg(config_path)
        .args(extra_args)
        .arg("--concurrency")
        .arg(concurrency.to_string())
        .arg("--disable-hot-restart")
        .arg("--log-level")
        .arg("info");
    let mut process = ManagedProcess::spawn(name, command, log)?;
    let ready_url = format!("http://127.0.0.1:{admin_port}/ready");
    let ready = crate::wait_until(Duration::from_secs(30), || {
        process.has_exited() || http::get(&ready_url, Duration::from_secs(1)).is_ok_and(|r| r.status == 200)
    });
    if !ready || process.has_exited() {
        return Err(format!("{name} did not become ready:\n{}", process.log_tail(40)));
    }
    Ok(process)
}

pub struct Envoy {
    process: ManagedProcess,
    pub listen_port: u16,
    pub admin_port: u16,
    pub config_path: PathBuf,
}

impl Envoy {
    /// Writes the rendered configuration into `dir`, starts Envoy, and waits until the
    /// admin endpoint says it is live.
    pub fn start(options: &EnvoyOptions, dir: &Path) -> Result<Self, String> {
        Self::start_with(options, &[], dir)
    }

    /// As [`Envoy::start`], with extra command-line arguments (e.g. `--config-yaml` overlays)
    /// after the options' own (`EnvoyOptions::extra_args`).
    pub fn start_with(options: &EnvoyOptions, extra_args: &[String], dir: &Path) -> Result<Self, String> {
        let template = std::fs::read_to_string(crate::paths::envoy_template()).map_err(|e| format!("template: {e}"))?;
        Self::start_rendered(&render(&template, options), options, extra_args, dir)
    }

    /// As [`Envoy::start_with`], on `config`: the template rendered for `options`, then changed
    /// where no option reaches (a test's cluster setting).
    pub fn start_rendered(
        config: &str,
        options: &EnvoyOptions,
        extra_args: &[String],
        dir: &Path,
    ) -> Result<Self, String> {
        if !options.pools.is_empty() && options.live_filter_dir.is_some() {
            return Err(
                "the live (ECDS) filter configuration serves one pool; several pools are configured inline".into()
            );
        }
        let config_path = dir.join("envoy.yaml");
        std::fs::write(&config_path, config).map_err(|e| format!("write config: {e}"))?;
        if let Some(live_dir) = &options.live_filter_dir {
            crate::live_config::write_filter_config(options, live_dir, &options.filter_config)?;
        }
        let args: Vec<String> = options.extra_args.iter().chain(extra_args).cloned().collect();
        let process =
            launch(&config_path, &args, options.concurrency, "envoy", &dir.join("envoy.log"), options.admin_port)?;
        Ok(Self { process, listen_port: options.listen_port, admin_port: options.admin_port, config_path })
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.listen_port)
    }

    pub fn admin_url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.admin_port)
    }

    /// One value from `/stats/prometheus`: `name` with an optional `{labels}` selector,
    /// e.g. `wasm_epp_picks{pod="127.0.0.1:8001"}`. Absent stats read as `None`.
    pub fn stat(&self, name: &str) -> Option<f64> {
        if name.starts_with("wasm_epp") {
            // The plugin counts in Wasm memory and flushes on its tick (20 ms in the filter,
            // the poll interval in the singleton): let what just happened reach Envoy.
            std::thread::sleep(PLUGIN_STATS_FLUSH);
        }
        let reply = http::get(&self.admin_url("/stats/prometheus"), Duration::from_secs(5)).ok()?;
        vllm_sim::client::series(&reply.body, name)
    }

    /// Waits until the singleton reports `count` healthy pods.
    pub fn wait_for_healthy_pods(&self, count: u64, timeout: Duration) -> bool {
        crate::wait_until(timeout, || self.stat("wasm_epp_pods_healthy") == Some(count as f64))
    }

    pub fn has_exited(&mut self) -> bool {
        self.process.has_exited()
    }

    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    pub fn log_tail(&self, lines: usize) -> String {
        self.process.log_tail(lines)
    }

    /// Reads the whole Envoy log (for checks such as "the VM never crashed").
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.process.log_path()).unwrap_or_default()
    }

    pub fn stop(&mut self) {
        self.process.stop();
    }

    /// SIGKILL, as a crashed node would stop.
    pub fn kill(&mut self) {
        self.process.kill();
    }
}
