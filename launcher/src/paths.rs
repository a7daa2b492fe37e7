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

/// Where cargo puts what it builds: `CARGO_TARGET_DIR` when set (as cargo reads it, relative
/// to where the Makefile runs it, the workspace root), else the workspace's `target`. With the
/// variable set, `make wasm native` builds there, and the e2e tests (and `make run`) took the
/// modules and the simulator from `target/` all the same: a stale build, or none.
fn target_dir() -> PathBuf {
    target_dir_from(std::env::var_os("CARGO_TARGET_DIR"))
}

fn target_dir_from(variable: Option<std::ffi::OsString>) -> PathBuf {
    match variable.filter(|dir| !dir.is_empty()) {
        // An absolute path replaces the root in `join`.
        Some(dir) => workspace_root().join(dir),
        None => workspace_root().join("target"),
    }
}

/// `ENVOY_BIN`, else the Envoy the Makefile installs into `.venv`.
pub fn envoy_binary() -> PathBuf {
    from_env_or("ENVOY_BIN", workspace_root().join(".venv/bin/envoy"))
}

/// `VLLM_SIM_BIN`, else the release build of the simulator.
pub fn simulator_binary() -> PathBuf {
    from_env_or("VLLM_SIM_BIN", target_dir().join("release/vllm-sim"))
}

fn wasm_dir() -> PathBuf {
    from_env_or("WASM_DIR", target_dir().join("wasm32-wasip1/release"))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_are_looked_for_where_cargo_target_dir_puts_them() {
        let root = workspace_root();
        assert_eq!(target_dir_from(None), root.join("target"));
        assert_eq!(target_dir_from(Some("".into())), root.join("target"));
        assert_eq!(target_dir_from(Some("/tmp/elsewhere".into())), PathBuf::from("/tmp/elsewhere"));
        assert_eq!(target_dir_from(Some("build/out".into())), root.join("build/out"));
    }
}
