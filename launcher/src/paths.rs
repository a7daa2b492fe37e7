//! Where the built artefacts are. Each can be overridden by an environment variable, so
//! the same code serves `make run`, CI and users with their own Envoy.

use std::path::PathBuf;

/// The workspace root (the folder holding the top-level Cargo.toml).
pub fn workspace_root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(PathBuf::from).unwrap_or(manifest)
}

fn from_env_or(name: &str, default: PathBuf) -> PathBuf {
    std::env::var_os(name).map(PathBuf::from).unwrap_or(default)
}

/// `ENVOY_BIN`, else the Envoy the Makefile installs into `.venv`.
pub fn envoy_binary() -> PathBuf {
    from_env_or("ENVOY_BIN", workspace_root().join(".venv/bin/envoy"))
}

/// `VLLM_SIM_BIN`, else the release build of the simulator.
pub fn simulator_binary() -> PathBuf {
    from_env_or("VLLM_SIM_BIN", workspace_root().join("target/release/vllm-sim"))
}

fn wasm_dir() -> PathBuf {
    from_env_or("WASM_DIR", workspace_root().join("target/wasm32-wasip1/release"))
}

pub fn filter_wasm() -> PathBuf {
    wasm_dir().join("wasm_epp_filter.wasm")
}

pub fn singleton_wasm() -> PathBuf {
    wasm_dir().join("wasm_epp_shared_state.wasm")
}

/// TEST ONLY: the filter that crashes on request (tests/crash-filter), built by `make e2e`.
pub fn crash_filter_wasm() -> PathBuf {
    wasm_dir().join("crash_filter.wasm")
}

pub fn envoy_template() -> PathBuf {
    workspace_root().join("envoy/envoy.yaml.template")
}

/// A fresh folder for one run's configuration and logs, kept after the run for reading.
pub fn run_dir(name: &str) -> std::io::Result<PathBuf> {
    let dir = workspace_root().join("target/runs").join(format!("{name}-{}", std::process::id()));
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
