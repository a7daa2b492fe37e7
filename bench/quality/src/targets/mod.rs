//! The routers under comparison, each started fresh in front of the same pool.
//!
//! wasm-epp runs from the normal Envoy template (filter + singleton, as `make run`); the
//! Envoy baselines use the same Envoy binary with a STATIC cluster and a built-in policy
//! (`launcher::baseline`); vllm-router runs from its own virtual environment.

mod vllm_router;

use std::path::{Path, PathBuf};
use std::time::Duration;

use launcher::baseline::{BaselineEnvoy, BaselineOptions, LbPolicy};
use launcher::envoy::{Envoy, EnvoyOptions};
use launcher::process::ManagedProcess;

/// How long wasm-epp's singleton may take to see every pod before the run starts anyway
/// (the filter fails open meanwhile, which would blur the first requests).
const SINGLETON_READY_TIMEOUT: Duration = Duration::from_secs(20);

/// Which router; the names are the `--targets` values and the names in results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TargetName {
    /// Envoy with the wasm-epp filter and singleton (the current build).
    #[value(name = "wasm-epp")]
    WasmEpp,
    /// Envoy, STATIC cluster, `lb_policy: ROUND_ROBIN`.
    #[value(name = "envoy-round-robin")]
    EnvoyRoundRobin,
    /// Envoy, STATIC cluster, `lb_policy: LEAST_REQUEST`.
    #[value(name = "envoy-least-request")]
    EnvoyLeastRequest,
    /// vllm-router `--policy cache_aware`.
    #[value(name = "vllm-router-cache-aware")]
    VllmRouterCacheAware,
    /// vllm-router `--policy power_of_two`.
    #[value(name = "vllm-router-power-of-two")]
    VllmRouterPowerOfTwo,
    /// The same wasm-epp build with `learning.enabled` (issue 14); `wasm-epp` is it off.
    #[value(name = "wasm-epp-learning")]
    WasmEppLearning,
    /// The same wasm-epp build running its own A/B test (`comparison.baseline_share` 0.5,
    /// baseline `least_request`) with `debug_decision_header` on, so each answer names its arm
    /// (`--comparison-only`).
    #[value(name = "wasm-epp-compared")]
    WasmEppCompared,
    /// The same wasm-epp build with `outlier_detection.enabled` false: how it routed before
    /// it learnt which pods fail requests (`--faults-only`).
    #[value(name = "wasm-epp-no-outliers")]
    WasmEppNoOutliers,
}

impl TargetName {
    pub fn label(self) -> &'static str {
        match self {
            TargetName::WasmEpp => "wasm-epp",
            TargetName::EnvoyRoundRobin => "envoy-round-robin",
            TargetName::EnvoyLeastRequest => "envoy-least-request",
            TargetName::VllmRouterCacheAware => "vllm-router-cache-aware",
            TargetName::VllmRouterPowerOfTwo => "vllm-router-power-of-two",
            TargetName::WasmEppLearning => "wasm-epp-learning",
            TargetName::WasmEppCompared => "wasm-epp-compared",
            TargetName::WasmEppNoOutliers => "wasm-epp-no-outliers",
        }
    }
}

/// A started router; its processes stop when it is dropped.
pub enum RunningTarget {
    WasmEpp(Envoy),
    Baseline(BaselineEnvoy),
    VllmRouter { process: ManagedProcess, port: u16 },
}

impl RunningTarget {
    /// Where clients send requests, without a trailing slash.
    pub fn base_url(&self) -> String {
        match self {
            RunningTarget::WasmEpp(envoy) => envoy.url(""),
            RunningTarget::Baseline(envoy) => envoy.url(""),
            RunningTarget::VllmRouter { port, .. } => format!("http://127.0.0.1:{port}"),
        }
    }

    /// The router's process is gone (it crashed during the run, or never stayed up).
    pub fn has_exited(&mut self) -> bool {
        match self {
            RunningTarget::WasmEpp(envoy) => envoy.has_exited(),
            RunningTarget::Baseline(envoy) => envoy.has_exited(),
            RunningTarget::VllmRouter { process, .. } => process.has_exited(),
        }
    }
}

/// `WASM_EPP_FILTER_CONFIG`, a JSON object, is merged over wasm-epp's filter configuration
/// (top-level fields replace), to measure a tuning without editing code; the replicas
/// dimension applies it to every replica too.
pub fn merge_filter_overrides(options: &mut EnvoyOptions) -> Result<(), String> {
    let Ok(text) = std::env::var("WASM_EPP_FILTER_CONFIG") else { return Ok(()) };
    let overrides: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("WASM_EPP_FILTER_CONFIG is not JSON: {e}"))?;
    let (Some(config), Some(overrides)) = (options.filter_config.as_object_mut(), overrides.as_object()) else {
        return Err("WASM_EPP_FILTER_CONFIG must be a JSON object".into());
    };
    config.extend(overrides.clone());
    Ok(())
}

/// `WASM_EPP_CONCURRENCY`, wasm-epp's Envoy worker threads (`--concurrency`; 2 when unset), to
/// measure what depends on the number of workers (each learns from its own answers) without
/// editing code.
fn worker_count() -> Result<Option<u32>, String> {
    let Ok(text) = std::env::var("WASM_EPP_CONCURRENCY") else { return Ok(None) };
    match text.trim().parse::<u32>() {
        Ok(workers @ 1..=64) => Ok(Some(workers)),
        _ => Err(format!("WASM_EPP_CONCURRENCY: '{text}' is not a worker count (1 to 64)")),
    }
}

/// `wasm-epp-compared`'s `comparison` section: half the pods to a least-request baseline.
pub fn comparison_section() -> serde_json::Value {
    serde_json::json!({"baseline_share": 0.5, "baseline": "least_request"})
}

fn free_port() -> Result<u16, String> {
    launcher::free_port().map_err(|e| format!("no free port: {e}"))
}

/// Starts `name` in front of `pool`, writing configuration and logs into `dir`.
pub fn start(name: TargetName, pool: &[String], dir: &Path, vllm_router: &Path) -> Result<RunningTarget, String> {
    match name {
        TargetName::WasmEpp
        | TargetName::WasmEppLearning
        | TargetName::WasmEppCompared
        | TargetName::WasmEppNoOutliers => {
            let mut options = EnvoyOptions::for_pool(pool, free_port()?, free_port()?);
            if let Some(config) = options.filter_config.as_object_mut() {
                match name {
                    TargetName::WasmEppLearning => {
                        config.insert("learning".into(), serde_json::json!({"enabled": true}));
                    }
                    TargetName::WasmEppCompared => {
                        config.insert("comparison".into(), comparison_section());
                        config.insert("debug_decision_header".into(), serde_json::json!(true));
                    }
                    TargetName::WasmEppNoOutliers => {
                        config.insert("outlier_detection".into(), serde_json::json!({"enabled": false}));
                    }
                    _ => {}
                }
            }
            merge_filter_overrides(&mut options)?;
            options.concurrency = worker_count()?.unwrap_or(options.concurrency);
            let envoy = Envoy::start(&options, dir)?;
            if !envoy.wait_for_healthy_pods(pool.len() as u64, SINGLETON_READY_TIMEOUT) {
                eprintln!(
                    "  warning: wasm-epp's singleton does not see all {} pods healthy; running anyway",
                    pool.len()
                );
            }
            Ok(RunningTarget::WasmEpp(envoy))
        }
        TargetName::EnvoyRoundRobin => start_baseline(LbPolicy::RoundRobin, pool, dir),
        TargetName::EnvoyLeastRequest => start_baseline(LbPolicy::LeastRequest, pool, dir),
        TargetName::VllmRouterCacheAware => vllm_router::start(vllm_router, "cache_aware", pool, dir),
        TargetName::VllmRouterPowerOfTwo => vllm_router::start(vllm_router, "power_of_two", pool, dir),
    }
}

fn start_baseline(policy: LbPolicy, pool: &[String], dir: &Path) -> Result<RunningTarget, String> {
    let options = BaselineOptions::new(pool, policy, free_port()?, free_port()?);
    Ok(RunningTarget::Baseline(BaselineEnvoy::start(&options, dir)?))
}

/// `VLLM_ROUTER_BIN`, else the virtual environment `make bench` installs it into.
pub fn default_vllm_router() -> PathBuf {
    std::env::var_os("VLLM_ROUTER_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| launcher::paths::workspace_root().join(".venv-vllm-router/bin/vllm-router"))
}
