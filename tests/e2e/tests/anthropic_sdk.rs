//! Anthropic's official Python SDK (installed into `.venv` by `make e2e`) against Envoy with
//! wasm-epp, as Claude Code and other agents call vLLM's Messages API: an agent's four turns
//! with tool use and results on one pod, a raw stream and the SDK's stream helper, a forged
//! destination header, the gateway's 404 for an unknown model. The cases live in
//! `tests/e2e/clients/anthropic_sdk.py`; the test starts the pool and Envoy, runs the script and
//! checks what it reports.

use std::process::Command;

use e2e::Cluster;
use launcher::paths::workspace_root;

#[test]
fn the_anthropic_sdk_gets_messages_streams_and_errors_it_understands() {
    let cluster = Cluster::start_ready("anthropic-sdk", 3, &["--time-scale", "0"]);
    let root = workspace_root();
    let output = Command::new(root.join(".venv/bin/python"))
        .arg(root.join("tests/e2e/clients/anthropic_sdk.py"))
        .args(["--base-url", &cluster.envoy.url(""), "--pool", &cluster.pool().join(",")])
        .output()
        .unwrap_or_else(|e| panic!("cannot run the Anthropic SDK's cases (make e2e installs the SDK): {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "Anthropic SDK cases failed:\n{stderr}\n{stdout}\n{}", cluster.envoy.log_tail(20));
    let report: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    eprintln!("anthropic SDK report: {report}");
    let pool = cluster.pool();
    for case in ["agent_turns", "streamed", "forged_destination"] {
        let pod = report[case].as_str().unwrap_or_else(|| panic!("{case} missing: {report}"));
        assert!(pool.iter().any(|p| p == pod), "{case} served by {pod}");
    }
    assert_eq!(report["stream_helper"], "ok", "{report}");
    assert_eq!(report["unknown_model_status"], 404, "{report}");
    cluster.assert_plugin_healthy();
}
