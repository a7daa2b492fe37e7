//! The Envoys under test, one process each, all at once on their own ports.
//!
//! Running them side by side lets a benchmark interleave the same requests across them, so
//! machine noise (other builds on the 2 cores) lands on every variant alike.

use std::path::PathBuf;
use std::time::Duration;

use launcher::envoy::{Envoy, EnvoyOptions};
use launcher::process::ManagedProcess;

use crate::client::{self, DESTINATION_HEADER};

/// How long an Envoy may take to say it is ready.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// One way of putting Envoy in front of the pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// (a) No filter; the client names the pod; ORIGINAL_DST cluster.
    Plain,
    /// (b0) Header-only Wasm filter writing the header in `on_http_request_headers`.
    HeaderOnly,
    /// (b) Header-only filter that holds headers and buffers the body to end of stream first.
    HeaderBuffered,
    /// (b+read) As `HeaderBuffered`, plus copying the whole body into the VM.
    HeaderRead,
    /// (c) wasm-epp, filter + singleton, ORIGINAL_DST cluster (as plain Envoy).
    WasmEppOriginalDst,
    /// (c') wasm-epp as shipped: override_host cluster, two fallback destinations.
    WasmEpp,
    /// wasm-epp as shipped but with prefix affinity off: what hashing, the index and its
    /// cross-worker sync cost.
    WasmEppNoPrefix,
    /// wasm-epp as shipped with `learning.enabled` (issue 14): what watching each answer
    /// (first byte, status, usage scan) and the token accounting cost. Named explicitly
    /// (`--variants wasm-epp,wasm-epp-learning`); not in the default runs.
    WasmEppLearning,
    /// wasm-epp as shipped, its filter built with the `profile` feature
    /// ([`profile_filter_wasm`]): the same code, timing its phases into counters. For the
    /// `profile` benchmark only (`--variants` never needs it).
    WasmEppProfiled,
}

impl Variant {
    /// Every variant, in the order reports list them.
    pub const ALL: [Variant; 7] = [
        Variant::Plain,
        Variant::HeaderOnly,
        Variant::HeaderBuffered,
        Variant::HeaderRead,
        Variant::WasmEppOriginalDst,
        Variant::WasmEpp,
        Variant::WasmEppNoPrefix,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Variant::Plain => "plain",
            Variant::HeaderOnly => "header-only",
            Variant::HeaderBuffered => "header-buffered",
            Variant::HeaderRead => "header-buffered-read",
            Variant::WasmEppOriginalDst => "wasm-epp-odst",
            Variant::WasmEpp => "wasm-epp",
            Variant::WasmEppNoPrefix => "wasm-epp-noprefix",
            Variant::WasmEppLearning => "wasm-epp-learning",
            Variant::WasmEppProfiled => "wasm-epp-profiled",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().chain([Variant::WasmEppLearning, Variant::WasmEppProfiled]).find(|v| v.name() == name)
    }

    /// The client names the pod only for plain Envoy; every filter overwrites the header.
    fn client_names_pod(self) -> bool {
        self == Variant::Plain
    }

    fn header_filter_config(self) -> Option<&'static str> {
        match self {
            Variant::HeaderOnly => Some(""),
            Variant::HeaderBuffered => Some("buffer"),
            Variant::HeaderRead => Some("buffer read"),
            _ => None,
        }
    }

    /// wasm-epp itself, in either cluster mode.
    pub fn is_wasm_epp(self) -> bool {
        matches!(
            self,
            Variant::WasmEpp
                | Variant::WasmEppOriginalDst
                | Variant::WasmEppNoPrefix
                | Variant::WasmEppLearning
                | Variant::WasmEppProfiled
        )
    }
}

/// The header-only filter's module.
pub fn header_filter_wasm() -> PathBuf {
    let dir = std::env::var_os("WASM_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| launcher::paths::workspace_root().join("target/wasm32-wasip1/release"));
    dir.join("header_only_filter.wasm")
}

/// The filter module built with the `profile` feature, beside the shipped build: `make
/// bench-cost` builds it with `--target-dir target/profile` so the shipped module stays as is.
pub fn profile_filter_wasm() -> PathBuf {
    launcher::paths::workspace_root().join("target/profile/wasm32-wasip1/release/wasm_epp_filter.wasm")
}

pub fn baseline_template() -> PathBuf {
    launcher::paths::workspace_root().join("bench/cost/envoy/baseline.yaml.template")
}

/// Fills the baseline template; `wasm` is the filter's module and configuration, or `None`
/// for plain Envoy.
pub fn render_baseline(template: &str, listen_port: u16, admin_port: u16, wasm: Option<(&str, &str)>) -> String {
    let mut kept = String::with_capacity(template.len());
    let mut skipping = false;
    for line in template.lines() {
        match line.trim() {
            "# BEGIN wasm" => skipping = wasm.is_none(),
            "# END wasm" => skipping = false,
            _ if !skipping => {
                kept.push_str(line);
                kept.push('\n');
            }
            _ => {}
        }
    }
    let (module, config) = wasm.unwrap_or_default();
    kept.replace("{{ADMIN_PORT}}", &admin_port.to_string())
        .replace("{{LISTEN_PORT}}", &listen_port.to_string())
        .replace("{{WASM}}", module)
        .replace("{{WASM_CONFIG}}", config)
}

enum Handle {
    WasmEpp(Envoy),
    Baseline(ManagedProcess),
}

/// One running Envoy of one variant.
pub struct RunningEnvoy {
    pub variant: Variant,
    pub listen_port: u16,
    pub admin_port: u16,
    pub pool: Vec<String>,
    handle: Handle,
}

fn port() -> Result<u16, String> {
    launcher::free_port().map_err(|e| format!("free port: {e}"))
}

impl RunningEnvoy {
    /// Starts `variant` in front of `pool`; a wasm-epp variant also waits until its singleton
    /// reports every pod healthy, so requests are routed from a real table.
    pub fn start(variant: Variant, pool: &[String]) -> Result<Self, String> {
        Self::start_configured(variant, pool, None, None)
    }

    /// As [`Self::start`], with wasm-epp's fields changed: `poller` replaces the singleton's
    /// configuration, `filter_fields` are merged into the filter's.
    pub fn start_configured(
        variant: Variant,
        pool: &[String],
        poller: Option<serde_json::Value>,
        filter_fields: Option<serde_json::Value>,
    ) -> Result<Self, String> {
        let (listen_port, admin_port) = (port()?, port()?);
        let dir = launcher::paths::run_dir(&format!("bench-cost-{}", variant.name())).map_err(|e| e.to_string())?;
        let handle = if variant.is_wasm_epp() {
            let mut options = EnvoyOptions::for_pool(pool, listen_port, admin_port);
            if variant == Variant::WasmEppOriginalDst {
                options = options.with_original_dst();
            }
            if variant == Variant::WasmEppProfiled {
                options.filter_wasm = profile_filter_wasm();
            }
            if let Some(poller) = poller {
                options.poller_config = Some(poller);
            }
            let mut fields = filter_fields.and_then(|f| f.as_object().cloned()).unwrap_or_default();
            if variant == Variant::WasmEppNoPrefix {
                fields.insert("prefix".into(), serde_json::json!({ "enabled": false }));
            }
            if variant == Variant::WasmEppLearning {
                fields.insert("learning".into(), serde_json::json!({ "enabled": true }));
            }
            if let Some(config) = options.filter_config.as_object_mut() {
                config.extend(fields);
            }
            let envoy = Envoy::start(&options, &dir)?;
            if !envoy.wait_for_healthy_pods(pool.len() as u64, READY_TIMEOUT) {
                return Err(format!(
                    "{}: singleton never saw {} healthy pods:\n{}",
                    variant.name(),
                    pool.len(),
                    envoy.log_tail(20)
                ));
            }
            Handle::WasmEpp(envoy)
        } else {
            let template =
                std::fs::read_to_string(baseline_template()).map_err(|e| format!("baseline template: {e}"))?;
            let module = header_filter_wasm();
            if variant.header_filter_config().is_some() && !module.exists() {
                return Err(format!(
                    "{} is missing: run `make bench-cost` (or build -p header-only-filter for wasm32-wasip1)",
                    module.display()
                ));
            }
            let module = module.display().to_string();
            let wasm_config = variant.header_filter_config().map(|words| format!("{words} {}", pool.join(" ")));
            let wasm = wasm_config.as_deref().map(|config| (module.as_str(), config));
            let config_path = dir.join("envoy.yaml");
            std::fs::write(&config_path, render_baseline(&template, listen_port, admin_port, wasm))
                .map_err(|e| e.to_string())?;
            let name = format!("envoy {}", variant.name());
            let process = launcher::envoy::launch(&config_path, &[], 2, &name, &dir.join("envoy.log"), admin_port)?;
            Handle::Baseline(process)
        };
        Ok(Self { variant, listen_port, admin_port, pool: pool.to_vec(), handle })
    }

    pub fn pid(&self) -> u32 {
        match &self.handle {
            Handle::WasmEpp(envoy) => envoy.pid(),
            Handle::Baseline(process) => process.pid(),
        }
    }

    pub fn name(&self) -> &'static str {
        self.variant.name()
    }

    /// The encoded request for this variant: plain Envoy gets the destination from the
    /// client (pods taken in turn by `sequence`), the others pick it themselves.
    pub fn encode(&self, path: &str, body: &[u8], sequence: usize) -> Vec<u8> {
        let pod = self.pool.get(sequence % self.pool.len().max(1));
        match pod {
            Some(pod) if self.variant.client_names_pod() => {
                client::encode_post(path, &[(DESTINATION_HEADER, pod)], body)
            }
            _ => client::encode_post(path, &[], body),
        }
    }

    /// A GET on the admin port.
    pub fn admin(&self, path: &str) -> Result<String, String> {
        let reply =
            launcher::http::get(&format!("http://127.0.0.1:{}{path}", self.admin_port), Duration::from_secs(10))?;
        if reply.status != 200 {
            return Err(format!("admin {path}: {}", reply.status));
        }
        Ok(reply.body)
    }

    /// One value from `/stats/prometheus` (exact series name, labels included if any).
    pub fn stat(&self, series: &str) -> Option<f64> {
        let text = self.admin("/stats/prometheus").ok()?;
        vllm_sim::client::series(&text, series)
    }

    /// wasm-epp's own counters and gauges (per-pod series left out), for the report: they say
    /// whether requests failed open, CAS updates were dropped, and so on.
    pub fn wasm_epp_stats(&self) -> Vec<String> {
        let text = self.admin("/stats/prometheus").unwrap_or_default();
        text.lines()
            .filter(|l| l.starts_with("wasm_epp_") && !l.contains("pod=\""))
            .filter(|l| !l.ends_with(" 0"))
            .map(str::to_string)
            .collect()
    }

    /// The end of Envoy's log, for error messages.
    pub fn log_tail(&self) -> String {
        match &self.handle {
            Handle::WasmEpp(envoy) => envoy.log_tail(20),
            Handle::Baseline(process) => process.log_tail(20),
        }
    }
}

/// Starts every variant in `variants` in front of `pool`.
pub fn start_all(variants: &[Variant], pool: &[String]) -> Result<Vec<RunningEnvoy>, String> {
    variants.iter().map(|&v| RunningEnvoy::start(v, pool)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_render_drops_the_filter() {
        let template = std::fs::read_to_string(baseline_template()).unwrap();
        let plain = render_baseline(&template, 1, 2, None);
        assert!(!plain.contains("envoy.filters.http.wasm") && !plain.contains("{{"));
        let wasm = render_baseline(&template, 1, 2, Some(("/x.wasm", "buffer 127.0.0.1:9")));
        assert!(wasm.contains("filename: /x.wasm") && wasm.contains("value: 'buffer 127.0.0.1:9'"));
        assert!(wasm.contains("allow_on_headers_stop_iteration: true"));
    }

    #[test]
    fn variants_round_trip_by_name() {
        for variant in Variant::ALL {
            assert_eq!(Variant::from_name(variant.name()), Some(variant));
        }
    }
}
