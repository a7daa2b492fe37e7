//! A real Prometheus server (Debian's `prometheus` package, `make prometheus` installs it)
//! scraping a test's Envoy admin (`/stats/prometheus`) and pods (`/metrics`) on 127.0.0.1,
//! queried through its HTTP API. Stopped by process id when dropped.

use std::path::{Path, PathBuf};
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

/// What a test adds to the plain scrape configuration.
#[derive(Debug, Default)]
pub struct Extras {
    /// Rule files to load (evaluated every [`SCRAPE_INTERVAL`]).
    pub rule_files: Vec<PathBuf>,
    /// Scrape Envoy as in Kubernetes: the target carries a `pod` label, this Envoy pod's name,
    /// as the Prometheus Operator's PodMonitor and the usual `kubernetes-pods` relabeling add
    /// it. The job `wasm-epp-envoy` then keeps the scraped series' own labels
    /// (`honor_labels`, as the chart's PodMonitor sets), and a second job,
    /// `wasm-epp-envoy-no-honor`, scrapes the same Envoy without it.
    pub envoy_pod_name: Option<String>,
}

impl Prometheus {
    /// Starts Prometheus in `dir` scraping `envoy_admin` (`host:port`) and `pods`.
    pub fn start(dir: &Path, envoy_admin: &str, pods: &[String]) -> Result<Self, String> {
        Self::start_with(dir, envoy_admin, pods, &Extras::default())
    }

    /// [`Self::start`], with `extras`.
    pub fn start_with(dir: &Path, envoy_admin: &str, pods: &[String], extras: &Extras) -> Result<Self, String> {
        let port = launcher::free_port().map_err(|e| e.to_string())?;
        let pod_targets: Vec<String> = pods.iter().map(|p| format!("'{p}'")).collect();
        let rule_files: Vec<String> = extras.rule_files.iter().map(|p| format!("'{}'", p.display())).collect();
        let envoy_jobs = match &extras.envoy_pod_name {
            None => envoy_job("wasm-epp-envoy", envoy_admin, None, false),
            Some(name) => {
                envoy_job("wasm-epp-envoy", envoy_admin, Some(name), true)
                    + &envoy_job("wasm-epp-envoy-no-honor", envoy_admin, Some(name), false)
            }
        };
        let config = format!(
            "global: {{ scrape_interval: {SCRAPE_INTERVAL}, evaluation_interval: {SCRAPE_INTERVAL} }}\n\
             rule_files: [{}]\n\
             scrape_configs:\n\
             {envoy_jobs}\
             \x20 - job_name: vllm-pods\n\
             \x20   static_configs: [{{ targets: [{}] }}]\n",
            rule_files.join(", "),
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

    /// Every alert pending or firing now (`/api/v1/alerts`): its labels, annotations, state.
    pub fn alerts(&self) -> Result<Vec<serde_json::Value>, String> {
        let body = self.get_json("/api/v1/alerts")?;
        body["data"]["alerts"].as_array().cloned().ok_or_else(|| format!("no alerts in {body}"))
    }

    /// Rule groups as loaded, with each rule's health and last error (`/api/v1/rules`).
    pub fn rules(&self) -> Result<Vec<serde_json::Value>, String> {
        let body = self.get_json("/api/v1/rules")?;
        let groups = body["data"]["groups"].as_array().ok_or_else(|| format!("no groups in {body}"))?;
        Ok(groups.iter().flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default()).collect())
    }

    /// A GET of the HTTP API without parameters, its JSON answer.
    fn get_json(&self, path: &str) -> Result<serde_json::Value, String> {
        let text = ureq::get(&self.url(path))
            .timeout(Duration::from_secs(10))
            .call()
            .map_err(|e| e.to_string())?
            .into_string()
            .map_err(|e| e.to_string())?;
        serde_json::from_str(&text).map_err(|e| format!("{e}: {text}"))
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

/// One scrape job for Envoy's `/stats/prometheus`, as YAML lines of `scrape_configs`.
fn envoy_job(name: &str, envoy_admin: &str, pod_label: Option<&String>, honor_labels: bool) -> String {
    let labels = pod_label.map_or(String::new(), |pod| format!(", labels: {{ pod: '{pod}' }}"));
    format!(
        "\x20 - job_name: {name}\n\
         \x20   metrics_path: /stats/prometheus\n\
         \x20   honor_labels: {honor_labels}\n\
         \x20   static_configs: [{{ targets: ['{envoy_admin}']{labels} }}]\n"
    )
}
