//! A real Prometheus server (Debian's `prometheus` package, `make prometheus` installs it)
//! scraping a test's Envoy admin (`/stats/prometheus`) and pods (`/metrics`) on 127.0.0.1,
//! queried through its HTTP API. Stopped by process id when dropped.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use launcher::process::ManagedProcess;

/// Scrape every second: a test of a few tens of seconds then has enough samples for `rate`.
pub const SCRAPE_INTERVAL: &str = "1s";

pub struct Prometheus {
    pub port: u16,
    _process: ManagedProcess,
}

/// The binary: `PROMETHEUS` if set, else Debian's.
fn binary() -> String {
    std::env::var("PROMETHEUS").unwrap_or_else(|_| "/usr/bin/prometheus".to_string())
}

impl Prometheus {
    /// Starts Prometheus in `dir` scraping `envoy_admin` (`host:port`) and `pods`.
    pub fn start(dir: &Path, envoy_admin: &str, pods: &[String]) -> Result<Self, String> {
        let port = launcher::free_port().map_err(|e| e.to_string())?;
        let pod_targets: Vec<String> = pods.iter().map(|p| format!("'{p}'")).collect();
        let config = format!(
            "global: {{ scrape_interval: {SCRAPE_INTERVAL}, evaluation_interval: {SCRAPE_INTERVAL} }}\n\
             scrape_configs:\n\
             \x20 - job_name: wasm-epp-envoy\n\
             \x20   metrics_path: /stats/prometheus\n\
             \x20   static_configs: [{{ targets: ['{envoy_admin}'] }}]\n\
             \x20 - job_name: vllm-pods\n\
             \x20   static_configs: [{{ targets: [{}] }}]\n",
            pod_targets.join(", ")
        );
        let config_path = dir.join("prometheus.yml");
        std::fs::write(&config_path, config).map_err(|e| e.to_string())?;
        let data = dir.join("prometheus-data");
        let _ = std::fs::remove_dir_all(&data);
        let mut command = Command::new(binary());
        command
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!("--storage.tsdb.path={}", data.display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--log.level=warn");
        let process = ManagedProcess::spawn("prometheus", command, &dir.join("prometheus.log"))?;
        let server = Self { port, _process: process };
        let ready = launcher::wait_until(Duration::from_secs(20), || {
            launcher::http::get(&server.url("/-/ready"), Duration::from_secs(1)).is_ok_and(|r| r.status == 200)
        });
        if !ready {
            return Err(format!("prometheus not ready on {port}; see {}", dir.join("prometheus.log").display()));
        }
        Ok(server)
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// An instant query's result list (`data.result`); an error if the query fails.
    pub fn query(&self, expr: &str) -> Result<Vec<serde_json::Value>, String> {
        self.api("/api/v1/query", &[("query", expr)])
    }

    /// A range query over the last `seconds`, one point per `step` seconds.
    pub fn query_range(&self, expr: &str, seconds: u64, step: u64) -> Result<Vec<serde_json::Value>, String> {
        let end = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_err(|e| e.to_string())?;
        let start = end.as_secs().saturating_sub(seconds).to_string();
        let end = end.as_secs().to_string();
        self.api(
            "/api/v1/query_range",
            &[("query", expr), ("start", &start), ("end", &end), ("step", &step.to_string())],
        )
    }

    fn api(&self, path: &str, params: &[(&str, &str)]) -> Result<Vec<serde_json::Value>, String> {
        let mut request = ureq::get(&self.url(path)).timeout(Duration::from_secs(10));
        for (name, value) in params {
            request = request.query(name, value);
        }
        let text = match request.call() {
            Ok(reply) => reply.into_string().map_err(|e| e.to_string())?,
            Err(ureq::Error::Status(code, reply)) => {
                return Err(format!("{code}: {}", reply.into_string().unwrap_or_default()))
            }
            Err(error) => return Err(error.to_string()),
        };
        let body: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("{e}: {text}"))?;
        match body["data"]["result"].as_array() {
            Some(result) => Ok(result.clone()),
            None => Err(format!("no result in {text}")),
        }
    }

    /// Waits (at most `limit`) until `expr` returns at least one series.
    pub fn wait_for_data(&self, expr: &str, limit: Duration) -> Result<Vec<serde_json::Value>, String> {
        let deadline = Instant::now() + limit;
        loop {
            let result = self.query(expr)?;
            if !result.is_empty() || Instant::now() >= deadline {
                return Ok(result);
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}
