//! Renders `envoy/envoy.yaml.template` and runs the real Envoy binary with wasm-epp.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::http;
use crate::process::ManagedProcess;

/// How the `pool` cluster follows the filter's choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClusterMode {
    /// A STATIC cluster of the pool with the override_host policy (the default).
    OverrideHost,
    /// An ORIGINAL_DST cluster that connects to whatever the header names.
    OriginalDst,
}

/// Everything that differs between one local Envoy and another.
#[derive(Debug, Clone)]
pub struct EnvoyOptions {
    pub admin_address: String,
    pub cluster_mode: ClusterMode,
    /// The pool's pods, for the override_host cluster's endpoints.
    pub pool: Vec<String>,
    pub listen_address: String,
    pub listen_port: u16,
    pub admin_port: u16,
    /// The filter's JSON configuration (see docs/configuration.md).
    pub filter_config: serde_json::Value,
    /// The singleton's JSON configuration; `None` runs Envoy without the singleton.
    pub poller_config: Option<serde_json::Value>,
    /// Envoy duration string for the route's `per_try_idle_timeout` (`0s` = off).
    pub per_try_idle_timeout: String,
    /// Worker threads; 2 exercises the cross-worker paths on every machine.
    pub concurrency: u32,
    pub filter_wasm: PathBuf,
    pub singleton_wasm: PathBuf,
    /// The filter's `failure_policy` (`FAIL_RELOAD`, `FAIL_CLOSED`, `FAIL_OPEN`).
    pub failure_policy: String,
    /// The header the filter writes and the `pool` cluster follows (the filter's
    /// `destination_header`; set both with [`EnvoyOptions::with_destination_header`]).
    pub destination_header: String,
    /// Envoy duration string: the whole request must arrive within it.
    pub request_timeout: String,
    /// The overload manager's fixed heap size (its actions trigger at 85-98 % of it).
    pub max_heap_bytes: u64,
    /// Downstream connections open at once, over all listeners.
    pub max_connections: u64,
    /// `http.async_response_buffer_limit`: the most a scrape's answer may buffer in Envoy.
    pub async_response_limit_bytes: u64,
}

/// The shipped bounds (docs/configuration.md, "Resource bounds").
pub const DEFAULT_REQUEST_TIMEOUT: &str = "60s";
/// 1 GiB of Envoy heap (buffers, headers, connections) before overload actions start.
pub const DEFAULT_MAX_HEAP_BYTES: u64 = 1 << 30;
/// Enough for 256 slow clients many times over; each costs tens of KB when idle.
pub const DEFAULT_MAX_CONNECTIONS: u64 = 10_000;
/// The singleton's default `max_metrics_bytes` (4 MiB): a larger /metrics answer is cut
/// by Envoy while it streams in, not after it has been buffered whole.
pub const DEFAULT_ASYNC_RESPONSE_LIMIT_BYTES: u64 = 4 << 20;
/// The failure policy the shipped configurations use (docs/configuration.md).
pub const DEFAULT_FAILURE_POLICY: &str = "FAIL_RELOAD";
/// The filter's default `destination_header`.
pub const DEFAULT_DESTINATION_HEADER: &str = "x-gateway-destination-endpoint";

impl EnvoyOptions {
    /// A setup where both the filter and the singleton know `pool` statically.
    pub fn for_pool(pool: &[String], listen_port: u16, admin_port: u16) -> Self {
        Self {
            admin_address: "127.0.0.1".into(),
            cluster_mode: ClusterMode::OverrideHost,
            pool: pool.to_vec(),
            listen_address: "127.0.0.1".into(),
            listen_port,
            admin_port,
            filter_config: serde_json::json!({ "pool": pool }),
            poller_config: Some(serde_json::json!({ "pool": pool, "poll_interval_ms": 100 })),
            concurrency: 2,
            per_try_idle_timeout: "0s".into(),
            filter_wasm: crate::paths::filter_wasm(),
            singleton_wasm: crate::paths::singleton_wasm(),
            failure_policy: DEFAULT_FAILURE_POLICY.into(),
            destination_header: DEFAULT_DESTINATION_HEADER.into(),
            request_timeout: DEFAULT_REQUEST_TIMEOUT.into(),
            max_heap_bytes: DEFAULT_MAX_HEAP_BYTES,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            async_response_limit_bytes: DEFAULT_ASYNC_RESPONSE_LIMIT_BYTES,
        }
    }

    /// The filter writes `header` and the `pool` cluster follows it; client copies of it
    /// and of the default header are removed before the filter runs.
    pub fn with_destination_header(mut self, header: &str) -> Self {
        self.destination_header = header.to_string();
        if let Some(config) = self.filter_config.as_object_mut() {
            config.insert("destination_header".into(), header.into());
        }
        self
    }

    /// Switches to the ORIGINAL_DST cluster, which follows one address only.
    pub fn with_original_dst(mut self) -> Self {
        self.cluster_mode = ClusterMode::OriginalDst;
        if let Some(config) = self.filter_config.as_object_mut() {
            config.insert("fallback_destinations".into(), 0.into());
        }
        self
    }
}

/// Returns the name of a `# BEGIN name` / `# END name` marker line.
fn marker<'a>(line: &'a str, kind: &str) -> Option<&'a str> {
    line.trim().strip_prefix("# ")?.strip_prefix(kind)?.strip_prefix(' ')
}

/// Fills the template's placeholders and drops the sections this setup does not use.
pub fn render(template: &str, options: &EnvoyOptions) -> String {
    let section_on = |name: &str| match name {
        "singleton" => options.poller_config.is_some(),
        "override_host" => options.cluster_mode == ClusterMode::OverrideHost,
        "original_dst" => options.cluster_mode == ClusterMode::OriginalDst,
        _ => true,
    };
    let mut kept = String::with_capacity(template.len());
    let mut skipping = false;
    for line in template.lines() {
        if let Some(name) = marker(line, "BEGIN") {
            skipping = !section_on(name);
            continue;
        }
        if marker(line, "END").is_some() {
            skipping = false;
            continue;
        }
        if !skipping {
            kept.push_str(line);
            kept.push('\n');
        }
    }
    let endpoints: Vec<String> = options
        .pool
        .iter()
        .filter_map(|address| address.rsplit_once(':'))
        .map(|(host, port)| {
            let host = host.trim_start_matches('[').trim_end_matches(']');
            format!("              - endpoint: {{ address: {{ socket_address: {{ address: \"{host}\", port_value: {port} }} }} }}")
        })
        .collect();
    let poller = options.poller_config.as_ref().map(|c| c.to_string()).unwrap_or_default();
    kept.replace("{{POOL_ENDPOINTS}}", &endpoints.join("\n"))
        .replace("{{PER_TRY_IDLE_TIMEOUT}}", &options.per_try_idle_timeout)
        .replace("{{ADMIN_ADDRESS}}", &options.admin_address)
        .replace("{{ADMIN_PORT}}", &options.admin_port.to_string())
        .replace("{{LISTEN_ADDRESS}}", &options.listen_address)
        .replace("{{LISTEN_PORT}}", &options.listen_port.to_string())
        .replace("{{FILTER_WASM}}", &options.filter_wasm.display().to_string())
        .replace("{{SINGLETON_WASM}}", &options.singleton_wasm.display().to_string())
        .replace("{{FILTER_CONFIG}}", &options.filter_config.to_string())
        .replace("{{POLLER_CONFIG}}", &poller)
        .replace("{{FAILURE_POLICY}}", &options.failure_policy)
        .replace("{{DESTINATION_HEADER}}", &options.destination_header)
        .replace("{{REQUEST_TIMEOUT}}", &options.request_timeout)
        .replace("{{MAX_HEAP_BYTES}}", &options.max_heap_bytes.to_string())
        .replace("{{MAX_CONNECTIONS}}", &options.max_connections.to_string())
        .replace("{{ASYNC_RESPONSE_LIMIT_BYTES}}", &options.async_response_limit_bytes.to_string())
}

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

    /// As [`Envoy::start`], with extra command-line arguments (e.g. `--config-yaml` overlays).
    pub fn start_with(options: &EnvoyOptions, extra_args: &[String], dir: &Path) -> Result<Self, String> {
        let template = std::fs::read_to_string(crate::paths::envoy_template()).map_err(|e| format!("template: {e}"))?;
        let config_path = dir.join("envoy.yaml");
        std::fs::write(&config_path, render(&template, options)).map_err(|e| format!("write config: {e}"))?;
        let process =
            launch(&config_path, extra_args, options.concurrency, "envoy", &dir.join("envoy.log"), options.admin_port)?;
        Ok(Self { process, listen_port: options.listen_port, admin_port: options.admin_port, config_path })
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.listen_port)
    }

    pub fn admin_url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.admin_port)
    }

    /// One value from `/stats/prometheus`: `name` with an optional `{labels}` selector,
    /// e.g. `wasm_epp_picks{pod="127_0_0_1_8001"}`. Absent stats read as `None`.
    pub fn stat(&self, name: &str) -> Option<f64> {
        let reply = http::get(&self.admin_url("/stats/prometheus"), Duration::from_secs(5)).ok()?;
        reply.body.lines().find_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let matches = series == name || (!name.contains('{') && series == format!("{name}{{}}"));
            if matches {
                value.parse().ok()
            } else {
                None
            }
        })
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
}
