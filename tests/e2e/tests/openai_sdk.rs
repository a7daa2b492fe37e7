//! The official OpenAI SDKs for Python (installed into `.venv` by `make e2e`) and Node.js (into
//! `.node-openai`) against Envoy with wasm-epp: chat and completions, whole and streamed (with
//! the usage event), odd text, a forged destination header, the gateway's model list and its
//! 404 for an unknown model, and 24 requests at once through one client. The cases live in
//! `tests/e2e/clients/openai_sdk.py` and `openai_sdk_node.cjs`, alike (the Python script also
//! asks for `n=2` choices, whole and streamed); each test starts the pool
//! and Envoy, runs a script and checks what it reports: the Python SDK as shipped and with
//! learning on (which reads the SDK's answers as they pass), the Node SDK as shipped.

use std::process::Command;
use std::time::Duration;

use e2e::Cluster;
use launcher::envoy::EnvoyOptions;
use launcher::paths::workspace_root;

/// The script's answers that learning reads: whole ones (chat, completion, odd text, forged
/// destination, chat with `n=2` and the 24 concurrent completions) and streams (chat with
/// `include_usage`, completion without, chat with `n=2` and usage), then its Responses API
/// answers, one whole and one streamed (whose `response.completed` always carries usage).
const WHOLE_ANSWERS: f64 = 29.0;
const STREAMS: f64 = 3.0;
/// The streams that ask for usage (the two chats).
const STREAMS_WITH_USAGE: f64 = 2.0;
const RESPONSES_WHOLE: f64 = 1.0;
const RESPONSES_STREAMS: f64 = 1.0;

#[test]
fn the_openai_sdk_gets_answers_streams_and_errors_it_understands() {
    let cluster = Cluster::start_ready("openai-sdk", 3, &["--time-scale", "0"]);
    run_sdk_cases(&cluster, Sdk::Python);
    cluster.assert_plugin_healthy();
}

#[test]
fn the_openai_node_sdk_gets_the_same_answers_streams_and_errors() {
    let cluster = Cluster::start_ready("openai-sdk-node", 3, &["--time-scale", "0"]);
    run_sdk_cases(&cluster, Sdk::Node);
    cluster.assert_plugin_healthy();
}

#[test]
fn with_learning_on_the_sdks_answers_are_learned_from_and_pass_unchanged() {
    // Every stream read for its usage (the default chunk budget reads a sample of them).
    let learning_on = |options: &mut EnvoyOptions| {
        options.filter_config["learning"] = serde_json::json!({"enabled": true, "usage_chunks_per_stream": 100_000})
    };
    let cluster = Cluster::start_ready_with("openai-sdk-learning", 3, &["--time-scale", "0"], learning_on);
    run_sdk_cases(&cluster, Sdk::Python);
    // Every whole answer, the chat streams that asked for it and both Responses answers carry
    // usage; every stream opens as an event stream and gives one TTFT sample (the Responses
    // stream's at its first output event); no answer came from another pod. A pick that gave
    // way to its runner-up (two workers' decisions crossing in their first seconds, as the
    // SDK's concurrent requests can) is not learned from: it is counted instead.
    let stat = |name: &str| cluster.envoy.stat(&format!("wasm_epp_learning_{name}")).unwrap_or(0.0);
    let yielded = cluster.envoy.stat("wasm_epp_inflight_picks_yielded").unwrap_or(0.0);
    let answers = WHOLE_ANSWERS + STREAMS + RESPONSES_WHOLE + RESPONSES_STREAMS;
    launcher::wait_until(Duration::from_secs(5), || stat("first_bytes") + yielded >= answers);
    assert_eq!(stat("first_bytes") + yielded, answers, "every answer noted or its pick given way");
    let usage = WHOLE_ANSWERS + STREAMS_WITH_USAGE + RESPONSES_WHOLE + RESPONSES_STREAMS;
    launcher::wait_until(Duration::from_secs(5), || stat("usage_reports") + yielded >= usage);
    let (reports, samples) = (stat("usage_reports"), stat("ttft_samples"));
    assert!(reports <= usage && reports + yielded >= usage, "{reports} usage reports of {usage}, {yielded} given way");
    let streams = STREAMS + RESPONSES_STREAMS;
    assert!(samples <= streams && samples + yielded >= streams, "{samples} TTFT samples, {yielded} given way");
    assert_eq!(stat("other_upstream"), 0.0);
    cluster.assert_plugin_healthy();
}

/// Which SDK runs the cases.
#[derive(Debug, Clone, Copy)]
enum Sdk {
    Python,
    Node,
}

impl Sdk {
    /// The command that runs this SDK's case script (installed by `make e2e`).
    fn command(self) -> Command {
        let root = workspace_root();
        match self {
            Sdk::Python => {
                let mut command = Command::new(root.join(".venv/bin/python"));
                command.arg(root.join("tests/e2e/clients/openai_sdk.py"));
                command
            }
            Sdk::Node => {
                let mut command = Command::new("node");
                command.env("NODE_PATH", root.join(".node-openai/node_modules"));
                command.arg(root.join("tests/e2e/clients/openai_sdk_node.cjs"));
                command
            }
        }
    }
}

/// Runs the SDK's script against the cluster and checks what it reports.
fn run_sdk_cases(cluster: &Cluster, sdk: Sdk) {
    let output = sdk
        .command()
        .args(["--base-url", &cluster.envoy.url("/v1"), "--pool", &cluster.pool().join(",")])
        .output()
        .unwrap_or_else(|e| panic!("cannot run the {sdk:?} SDK's cases (make e2e installs the SDK): {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{sdk:?} SDK cases failed:\n{stderr}\n{stdout}\n{}", cluster.envoy.log_tail(20));

    let report: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    eprintln!("openai {sdk:?} SDK report: {report}");
    let pool = cluster.pool();
    let cases = ["chat_whole", "chat_streamed", "completion_whole", "completion_streamed", "responses_whole"];
    // `n` > 1 (two choices, whole and streamed): the Python script's cases.
    let n_cases: &[&str] = match sdk {
        Sdk::Python => &["chat_n_whole", "chat_n_streamed"],
        Sdk::Node => &[],
    };
    let more = ["responses_streamed", "odd_text", "forged_destination"];
    for case in cases.into_iter().chain(more).chain(n_cases.iter().copied()) {
        let pod = report[case].as_str().unwrap_or_else(|| panic!("{case} missing: {report}"));
        assert!(pool.iter().any(|p| p == pod), "{case} served by {pod}");
    }
    assert_eq!(report["model_list"], serde_json::json!(["sim-model"]), "the pool's one model, listed by the gateway");
    assert_eq!(report["unknown_model_status"], 404, "{report}");
    let concurrent: Vec<&str> = report["concurrent"].as_array().unwrap().iter().filter_map(|p| p.as_str()).collect();
    assert_eq!(concurrent.len(), 24, "{report}");
    let spread = e2e::tally(concurrent.iter().copied());
    assert!(spread.len() >= 2, "24 requests at once all went to one pod: {spread:?}");
}
