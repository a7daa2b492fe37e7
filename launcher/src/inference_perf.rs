//! inference-perf (the serving working group's load generator, which llm-d's benchmarks use)
//! as a child process: the end-to-end tests and `wasm-epp-bench-quality --inference-perf-only`
//! both run it this way. `make e2e` and `make bench-inference-perf` install it, pinned, into
//! `.venv-inference-perf`, with a tokenizer built offline in its `tokenizer/` folder.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

use crate::process::ManagedProcess;

/// The virtual environment inference-perf is installed in.
pub fn venv() -> PathBuf {
    crate::paths::workspace_root().join(".venv-inference-perf")
}

/// Whether `make` has installed it.
pub fn installed() -> bool {
    venv().join("bin/inference-perf").exists()
}

/// Runs inference-perf to its end in `dir` against `base_url` (the vLLM API, model `model`) and
/// returns the folder of its reports. `config` gives the data, load and report sections; the
/// server, the offline tokenizer and the storage are filled in here, and the whole is written
/// to `dir/inference-perf.yml` (JSON is YAML: inference-perf's loader reads it as it is).
/// An error if it outlives `deadline` or writes no summary report, with its log's tail.
pub fn run(dir: &Path, mut config: Value, base_url: &str, model: &str, deadline: Duration) -> Result<PathBuf, String> {
    let reports = dir.join("reports");
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let sections = config.as_object_mut().ok_or("an inference-perf configuration is a JSON object")?;
    sections.insert(
        "server".into(),
        json!({"type": "vllm", "model_name": model, "base_url": base_url, "ignore_eos": true}),
    );
    sections.insert("tokenizer".into(), json!({"pretrained_model_name_or_path": venv().join("tokenizer")}));
    sections.insert("storage".into(), json!({"local_storage": {"path": reports}}));
    let config_path = dir.join("inference-perf.yml");
    std::fs::write(&config_path, config.to_string()).map_err(|e| format!("{}: {e}", config_path.display()))?;

    let mut command = Command::new(venv().join("bin/inference-perf"));
    command.arg("--config_file").arg(&config_path).current_dir(dir);
    // No Hugging Face Hub here: the tokenizer is a local directory.
    command.env("HF_HUB_OFFLINE", "1").env("TRANSFORMERS_OFFLINE", "1");
    let log = dir.join("inference-perf.log");
    let mut process = ManagedProcess::spawn("inference-perf", command, &log)
        .map_err(|e| format!("{e} (`make e2e` or `make bench-inference-perf` installs inference-perf)"))?;
    if !crate::wait_until(deadline, || process.has_exited()) {
        return Err(format!("inference-perf still running after {deadline:?}:\n{}", process.log_tail(30)));
    }
    if !reports.join("summary_lifecycle_metrics.json").exists() {
        return Err(format!("inference-perf wrote no summary report:\n{}", process.log_tail(40)));
    }
    Ok(reports)
}

/// One of inference-perf's JSON reports.
pub fn read_report(path: &Path) -> Result<Value, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}
