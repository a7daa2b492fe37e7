//! The Envoys under test, one process each, all at once on their own ports.
//!
//! Running them side by side lets a benchmark interleave the same requests across them, so
//! machine noise (other builds on the 2 cores) lands on every variant alike.

use std::path::PathBuf;
use std::time::Duration;

use launcher::envoy::{EnvoyOptions, ServedPool};
use launcher::process::ManagedProcess;

use crate::client::{self, DESTINATION_HEADER};

/// `learning.usage_chunks_per_stream` of `wasm-epp-learning-read-all`: a budget no stream
/// exhausts, so every stream that asks for `usage` is read to its end.
const READ_ALL_CHUNKS_PER_STREAM: f64 = 1_000_000.0;

/// How long an Envoy may take to say it is ready.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// Lines of Envoy's log quoted in an error: the failure and what led to it.
const LOG_TAIL_LINES: usize = 20;

pub use crate::variant::Variant;

/// The Wasm runtime every shipped and baseline configuration names.
pub const V8_RUNTIME: &str = "envoy.wasm.runtime.v8";

/// The header-only filter's module.
pub fn header_filter_wasm() -> PathBuf {
    let dir = std::env::var_os("WASM_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| launcher::paths::workspace_root().join("target/wasm32-wasip1/release"));
    dir.join("header_only_filter.wasm")
}

/// The filter module built with the `profile` feature, beside the shipped build: `make
/// profile-wasm` builds it with `--target-dir target/profile` so the shipped module stays as is.
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

/// How to start one Envoy, beyond its variant and pool.
#[derive(Debug, Clone, Default)]
pub struct Setup {
    /// Replaces wasm-epp's singleton configuration.
    pub poller: Option<serde_json::Value>,
    /// Merged into wasm-epp's filter configuration.
    pub filter_fields: Option<serde_json::Value>,
    /// The Wasm runtime of every VM (`envoy.wasm.runtime.*`); `None` is V8, as shipped.
    pub runtime: Option<String>,
}

impl Setup {
    /// The configuration with every VM on this setup's runtime.
    fn with_runtime(&self, config: String) -> String {
        match &self.runtime {
            Some(runtime) => config.replace(V8_RUNTIME, runtime),
            None => config,
        }
    }
}

/// Where the header-only filter's plain-text configuration goes in a configuration rendered
/// from wasm-epp's template (replaced after rendering).
const HEADER_CONFIG_SLOT: &str = "__HEADER_FILTER_CONFIG__";

/// The worker tick of `wasm-epp-slow-tick` (shipped: 20 ms).
const SLOW_TICK_MS: u64 = 1_000;

/// The singleton's poll interval in `wasm-epp-slow-poll` (shipped: 100 ms); below the
/// filter's `stale_after_ms` (5 s), so the table stays fresh.
const SLOW_POLL_MS: u64 = 1_000;

/// `wasm-epp-two-pools`: the benchmarked pool's name, and the other pool's (whose route
/// matches only requests carrying `OTHER_POOL_HEADER`, which the benchmark never sends).
pub(crate) const BENCHED_POOL: &str = "bench";
const OTHER_POOL: &str = "other";
const OTHER_POOL_HEADER: &str = "x-pool";

/// `options` (one pool, fully configured) as the second of two pools behind one Envoy.
fn as_second_of_two_pools(mut options: EnvoyOptions) -> EnvoyOptions {
    let benched = ServedPool::new(
        BENCHED_POOL,
        &options.pool,
        serde_json::json!({ "prefix": "/" }),
        options.filter_config.clone(),
        options.poller_config.clone().unwrap_or_default(),
    );
    options.pools = vec![ServedPool::by_header(OTHER_POOL, &options.pool, OTHER_POOL_HEADER), benched];
    options
}

/// The launcher's options for a variant rendered from wasm-epp's template.
fn wasm_epp_options(
    variant: Variant,
    pool: &[String],
    listen_port: u16,
    admin_port: u16,
    setup: &Setup,
) -> EnvoyOptions {
    let mut options = EnvoyOptions::for_pool(pool, listen_port, admin_port);
    if variant == Variant::WasmEppOriginalDst {
        options = options.with_original_dst();
    }
    if variant.is_profiled() {
        options.filter_wasm = profile_filter_wasm();
    }
    if let Some(poller) = &setup.poller {
        options.poller_config = Some(poller.clone());
    }
    if variant == Variant::WasmEppAccessLog {
        // A real file, as `make run` writes it (the lines are formatted and written either way).
        options.access_log = Some(std::env::temp_dir().join(format!("wasm-epp-bench-access-{listen_port}.log")));
    }
    if variant == Variant::WasmEppSlowPoll {
        if let Some(poller) = options.poller_config.as_mut().and_then(|p| p.as_object_mut()) {
            poller.insert("poll_interval_ms".into(), SLOW_POLL_MS.into());
        }
    }
    if variant.header_filter_config().is_some() {
        // The body-reading filter in wasm-epp's place; its plain-text configuration goes in
        // after rendering (the launcher writes the filter's configuration as JSON).
        options.filter_wasm = header_filter_wasm();
        options.filter_config = serde_json::Value::String(HEADER_CONFIG_SLOT.into());
        if variant != Variant::HeaderReadShippedSingleton {
            options.poller_config = None;
        }
    }
    let mut fields = setup.filter_fields.as_ref().and_then(|f| f.as_object().cloned()).unwrap_or_default();
    if variant == Variant::WasmEppNoPrefix {
        fields.insert("prefix".into(), serde_json::json!({ "enabled": false }));
    }
    if matches!(variant, Variant::WasmEppLearning | Variant::WasmEppProfiledLearning) {
        // Learning's own settings, when given, go with it (they say `enabled` themselves).
        fields.entry("learning").or_insert_with(|| serde_json::json!({ "enabled": true }));
    }
    if variant == Variant::WasmEppLearningReadAll {
        let all = picker::config::MAX_USAGE_STREAMS_PER_POD;
        let learning = serde_json::json!({
            "enabled": true, "watch_share": 1.0,
            "usage_streams_per_pod": all, "usage_chunks_per_stream": READ_ALL_CHUNKS_PER_STREAM
        });
        fields.insert("learning".into(), learning);
    }
    if variant == Variant::WasmEppSlowTick {
        fields.insert("prefix".into(), serde_json::json!({ "sync_interval_ms": SLOW_TICK_MS }));
    }
    if variant == Variant::WasmEppCompared {
        fields.insert("comparison".into(), serde_json::json!({ "baseline_share": 0.5 }));
    }
    if variant == Variant::WasmEppNoOutliers {
        fields.insert("outlier_detection".into(), serde_json::json!({ "enabled": false }));
    }
    if let Some(config) = options.filter_config.as_object_mut() {
        config.extend(fields);
    }
    if variant == Variant::WasmEppTwoPools {
        return as_second_of_two_pools(options);
    }
    options
}

/// The Envoy configuration of `variant` in front of `pool`: wasm-epp from the project's own
/// template (as the launcher renders it), the baselines from `envoy/baseline.yaml.template`.
pub fn render(
    variant: Variant,
    pool: &[String],
    listen_port: u16,
    admin_port: u16,
    setup: &Setup,
) -> Result<String, String> {
    let module = header_filter_wasm();
    if variant.header_filter_config().is_some() && !module.exists() {
        return Err(format!(
            "{} is missing: run `make bench-cost` (or build -p header-only-filter for wasm32-wasip1)",
            module.display()
        ));
    }
    let wasm_config = variant.header_filter_config().map(|words| format!("{words} {}", pool.join(" ")));
    if variant.uses_shipped_template() {
        let template =
            std::fs::read_to_string(launcher::paths::envoy_template()).map_err(|e| format!("template: {e}"))?;
        let options = wasm_epp_options(variant, pool, listen_port, admin_port, setup);
        let rendered = launcher::envoy::render(&template, &options);
        let slot = serde_json::Value::String(HEADER_CONFIG_SLOT.into()).to_string();
        let mut rendered = rendered.replace(&slot, wasm_config.as_deref().unwrap_or_default());
        if let Some(feature) = variant.left_out() {
            rendered = crate::template_cut::without(&rendered, feature);
        }
        return Ok(setup.with_runtime(rendered));
    }
    let template = std::fs::read_to_string(baseline_template()).map_err(|e| format!("baseline template: {e}"))?;
    let module = module.display().to_string();
    let wasm = wasm_config.as_deref().map(|config| (module.as_str(), config));
    Ok(setup.with_runtime(render_baseline(&template, listen_port, admin_port, wasm)))
}

/// Envoy's worker threads in every variant (as the launcher runs wasm-epp).
const WORKER_THREADS: u32 = 2;

/// One running Envoy of one variant.
pub struct RunningEnvoy {
    pub variant: Variant,
    pub listen_port: u16,
    pub admin_port: u16,
    pub pool: Vec<String>,
    process: ManagedProcess,
}

fn port() -> Result<u16, String> {
    launcher::free_port().map_err(|e| format!("free port: {e}"))
}

impl RunningEnvoy {
    /// Starts `variant` in front of `pool`; a wasm-epp variant also waits until its singleton
    /// reports every pod healthy, so requests are routed from a real table.
    pub fn start(variant: Variant, pool: &[String]) -> Result<Self, String> {
        Self::start_with(variant, pool, &Setup::default())
    }

    /// As [`Self::start`], with wasm-epp's fields changed: `poller` replaces the singleton's
    /// configuration, `filter_fields` are merged into the filter's.
    pub fn start_configured(
        variant: Variant,
        pool: &[String],
        poller: Option<serde_json::Value>,
        filter_fields: Option<serde_json::Value>,
    ) -> Result<Self, String> {
        Self::start_with(variant, pool, &Setup { poller, filter_fields, runtime: None })
    }

    /// As [`Self::start`], set up by `setup` (configuration fields, Wasm runtime).
    pub fn start_with(variant: Variant, pool: &[String], setup: &Setup) -> Result<Self, String> {
        let (listen_port, admin_port) = (port()?, port()?);
        let runtime = setup.runtime.as_deref().and_then(|r| r.rsplit('.').next()).unwrap_or("v8");
        // Numbered: one run may start a variant twice (differently configured) at once.
        static STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = launcher::paths::run_dir(&format!("bench-cost-{}-{runtime}-{n}", variant.name()))
            .map_err(|e| e.to_string())?;
        let config_path = dir.join("envoy.yaml");
        std::fs::write(&config_path, render(variant, pool, listen_port, admin_port, setup)?)
            .map_err(|e| format!("{}: {e}", config_path.display()))?;
        let name = format!("envoy {}", variant.name());
        let process =
            launcher::envoy::launch(&config_path, &[], WORKER_THREADS, &name, &dir.join("envoy.log"), admin_port)?;
        let envoy = Self { variant, listen_port, admin_port, pool: pool.to_vec(), process };
        if variant.runs_singleton() && !envoy.wait_for_healthy_pods() {
            return Err(format!(
                "{}: singleton never saw {} healthy pods:\n{}",
                variant.name(),
                pool.len(),
                envoy.log_tail()
            ));
        }
        Ok(envoy)
    }

    /// Waits until the singleton reports every pod of the pool healthy.
    fn wait_for_healthy_pods(&self) -> bool {
        let healthy = Some(self.pool.len() as f64);
        let series = match self.variant.pool_label() {
            Some(pool) => format!("wasm_epp_pods_healthy{{pool=\"{pool}\"}}"),
            None => "wasm_epp_pods_healthy".to_string(),
        };
        launcher::wait_until(READY_TIMEOUT, || self.stat(&series) == healthy)
    }

    pub fn pid(&self) -> u32 {
        self.process.pid()
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
        self.process.log_tail(LOG_TAIL_LINES)
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
    fn the_body_reading_filter_renders_into_the_shipped_template() {
        let pool = vec!["127.0.0.1:9".to_owned(), "127.0.0.1:10".to_owned()];
        let Ok(config) = render(Variant::HeaderReadShippedConfig, &pool, 1, 2, &Setup::default()) else {
            return; // the header-only filter is not built: `make bench-cost` builds it
        };
        assert!(config.contains("value: 'buffer read 127.0.0.1:9 127.0.0.1:10'"), "{config}");
        assert!(config.contains("header_only_filter.wasm") && !config.contains("wasm_epp_filter.wasm"));
        assert!(config.contains("envoy.filters.http.header_mutation") && config.contains("overload_manager"));
        assert!(!config.contains("bootstrap_extensions") && !config.contains(HEADER_CONFIG_SLOT));
        let with_singleton = render(Variant::HeaderReadShippedSingleton, &pool, 1, 2, &Setup::default()).unwrap();
        assert!(
            with_singleton.contains("bootstrap_extensions") && with_singleton.contains("wasm_epp_shared_state.wasm")
        );
    }

    #[test]
    fn slowed_variants_change_only_their_interval() {
        let pool = vec!["127.0.0.1:9".to_owned()];
        let tick = render(Variant::WasmEppSlowTick, &pool, 1, 2, &Setup::default()).unwrap();
        assert!(tick.contains(r#""sync_interval_ms":1000"#), "{tick}");
        let poll = render(Variant::WasmEppSlowPoll, &pool, 1, 2, &Setup::default()).unwrap();
        assert!(poll.contains(r#""poll_interval_ms":1000"#) && !poll.contains("sync_interval_ms"), "{poll}");
    }

    #[test]
    fn a_runtime_replaces_v8_in_every_vm() {
        let pool = vec!["127.0.0.1:9".to_owned()];
        let shipped = render(Variant::WasmEpp, &pool, 1, 2, &Setup::default()).unwrap();
        let vms = shipped.matches(V8_RUNTIME).count();
        assert!(vms >= 2, "filter and singleton name their runtime: {vms}");
        let wamr = Setup { runtime: Some("envoy.wasm.runtime.wamr".into()), ..Setup::default() };
        let other = render(Variant::WasmEpp, &pool, 1, 2, &wamr).unwrap();
        assert_eq!((other.matches(V8_RUNTIME).count(), other.matches("envoy.wasm.runtime.wamr").count()), (0, vms));
    }
}
