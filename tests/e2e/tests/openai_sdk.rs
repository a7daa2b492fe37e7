//! The official OpenAI Python SDK (installed into `.venv` by `make e2e`) against Envoy with
//! wasm-epp: chat and completions, whole and streamed (with the usage event), odd text, a forged
//! destination header, the gateway's 404 for an unknown model, and 24 requests at once through
//! the async client. The cases live in `tests/e2e/clients/openai_sdk.py`; this test starts the
//! pool and Envoy, runs the script and checks what it reports.

use std::process::Command;

use e2e::Cluster;
use launcher::paths::workspace_root;

#[test]
fn the_openai_sdk_gets_answers_streams_and_errors_it_understands() {
    let cluster = Cluster::start_ready("openai-sdk", 3, &["--time-scale", "0"]);
    let python = workspace_root().join(".venv/bin/python");
    let script = workspace_root().join("tests/e2e/clients/openai_sdk.py");
    let output = Command::new(&python)
        .arg(&script)
        .args(["--base-url", &cluster.envoy.url("/v1"), "--pool", &cluster.pool().join(",")])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {} (make e2e installs the SDK): {e}", python.display()));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "SDK cases failed:\n{stderr}\n{stdout}\n{}", cluster.envoy.log_tail(20));

    let report: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    eprintln!("openai SDK report: {report}");
    let pool = cluster.pool();
    for case in
        ["chat_whole", "chat_streamed", "completion_whole", "completion_streamed", "odd_text", "forged_destination"]
    {
        let pod = report[case].as_str().unwrap_or_else(|| panic!("{case} missing: {report}"));
        assert!(pool.iter().any(|p| p == pod), "{case} served by {pod}");
    }
    assert_eq!(report["unknown_model_status"], 404, "{report}");
    let concurrent: Vec<&str> = report["concurrent"].as_array().unwrap().iter().filter_map(|p| p.as_str()).collect();
    assert_eq!(concurrent.len(), 24, "{report}");
    let spread = e2e::tally(concurrent.iter().copied());
    assert!(spread.len() >= 2, "24 requests at once all went to one pod: {spread:?}");
    cluster.assert_plugin_healthy();
}
