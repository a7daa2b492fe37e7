//! inference-perf, the load generator llm-d's benchmarks run (installed by `make e2e` into
//! `.venv-inference-perf` with a tokenizer built offline), against Envoy with wasm-epp: its own
//! request shapes, its own streaming parser and its own reports, not ours. Two runs:
//! - a shared-prefix ladder (llm-d's benchmark shape, small): 4 system prompts of 1,024 tokens
//!   with short questions, streamed completions, 4 then 8 requests/s. Every request must be
//!   answered, and after each group's first request its prompts must go to a pod that holds
//!   the prefix;
//! - streamed chat split between two LoRA adapters (`load.lora_traffic_split`): every request
//!   answered, each by a pod serving the adapter it named.
//!
//! The configuration is written as JSON, which inference-perf's YAML loader reads as it is.

use std::path::{Path, PathBuf};
use std::time::Duration;

use e2e::Cluster;
use serde_json::{json, Value};

/// A run's requests must all be in well before this.
const RUN_DEADLINE: Duration = Duration::from_secs(180);

#[test]
fn inference_perfs_shared_prefix_ladder_is_answered_and_each_prefix_stays_on_a_pod_holding_it() {
    let cluster = Cluster::start_ready("inference-perf-prefix", 4, &[]);
    let groups = 4;
    let config = json!({
        "api": {"type": "completion", "streaming": true},
        "data": {"type": "shared_prefix", "shared_prefix": {
            "num_groups": groups, "num_prompts_per_group": 6,
            "system_prompt_len": 1024, "question_len": 64, "output_len": 24, "seed": 7}},
        "load": {"type": "constant", "stages": [{"rate": 4, "duration": 4}, {"rate": 8, "duration": 4}]},
    });
    let before = PoolCounts::read(&cluster);
    let report = run_inference_perf(&cluster, "prefix", config);
    let after = PoolCounts::read(&cluster);

    let summary = &report.summary;
    let sent = summary["load_summary"]["count"].as_f64().unwrap_or(0.0);
    assert_eq!(sent, 48.0, "4 s at 4/s and 4 s at 8/s: {summary}");
    assert_eq!(summary["successes"]["count"].as_f64(), Some(sent), "every request answered: {summary}");
    assert_eq!(summary["failures"]["count"].as_f64(), Some(0.0), "{summary}");
    let streamed_ttft = summary["successes"]["latency"]["time_to_first_token"]["median"].as_f64();
    assert!(streamed_ttft.is_some_and(|s| s > 0.0), "inference-perf timed the streams' first tokens: {summary}");

    let routed = after.routed - before.routed;
    let matched = after.matched_picks - before.matched_picks;
    let (hits, queries) = (after.pod_hits - before.pod_hits, after.pod_queries - before.pod_queries);
    eprintln!(
        "inference-perf shared prefix: {sent} sent, {routed} routed, {matched} to a pod holding the prefix; \
         pods' prefix cache {hits} / {queries} tokens; picks per pod {:?}",
        after.picks
    );
    assert_eq!(routed, sent, "every request given a destination by the picker");
    // Each group's first request finds no pod with its prefix; allow as many again for a
    // group's second request arriving on the other worker before it learned the first.
    let at_least = sent - 2.0 * groups as f64;
    assert!(matched >= at_least, "{matched} of {sent} went to a pod holding their prefix, expected ≥ {at_least}");
    // The pods agree: the prompts are ~95 % shared prefix, and each group paid its prefix once
    // or twice, not once per pod.
    assert!(hits >= 0.75 * queries, "pods' prefix cache hit {hits} of {queries} prompt tokens");
    cluster.assert_plugin_healthy();
}

#[test]
fn inference_perfs_chat_streams_split_between_two_lora_adapters_reach_pods_serving_each() {
    // Each adapter on two of the three pods: inference-perf first checks both in the gateway's
    // `GET /v1/models`, which a pod would answer with its own adapters only.
    let pod = |adapters| vec!["--lora-adapters", adapters, "--max-loras", "2", "--time-scale", "0.5"];
    let pods = [pod("sql-lora"), pod("chat-lora"), pod("sql-lora,chat-lora")];
    let cluster = Cluster::start_mixed("inference-perf-lora", &pods, |_| {});
    let lists_asked = std::cell::Cell::new(0.0);
    let listed = || {
        lists_asked.set(lists_asked.get() + 1.0);
        launcher::http::get(&cluster.envoy.url("/v1/models"), Duration::from_secs(5)).map(|r| r.body)
    };
    let both_listed = || listed().is_ok_and(|list| list.contains("\"sql-lora\"") && list.contains("\"chat-lora\""));
    assert!(launcher::wait_until(Duration::from_secs(10), both_listed), "adapters never listed: {:?}", listed());
    let config = json!({
        "api": {"type": "chat", "streaming": true},
        "data": {"type": "mock"},
        "load": {"type": "constant", "stages": [{"rate": 8, "duration": 5}],
                 "lora_traffic_split": [{"name": "sql-lora", "split": 0.5}, {"name": "chat-lora", "split": 0.5}]},
    });
    let report = run_inference_perf(&cluster, "lora", config);

    let summary = &report.summary;
    let sent = summary["load_summary"]["count"].as_f64().unwrap_or(0.0);
    assert_eq!(sent, 40.0, "5 s at 8/s: {summary}");
    assert_eq!(summary["successes"]["count"].as_f64(), Some(sent), "every request answered: {summary}");
    assert_eq!(summary["failures"]["count"].as_f64(), Some(0.0), "{summary}");
    let mut per_adapter = 0.0;
    for adapter in ["sql-lora", "chat-lora"] {
        let file = report.dir.join(format!("adapter_{adapter}_lifecycle_metrics.json"));
        let answered = read_json(&file)["successes"]["count"].as_f64().unwrap_or(0.0);
        assert!(answered >= 8.0, "{adapter}: {answered} of {sent} answered, the split is half each");
        per_adapter += answered;
    }
    assert_eq!(per_adapter, sent, "each request went to one adapter");
    // A pod asked for an adapter it does not serve answers 404 and counts it.
    assert_eq!(cluster.pods_stat("model_not_found"), 0, "no request reached a pod without its adapter");
    // With adapters named, inference-perf first checks them in the gateway's `GET /v1/models`
    // (it refuses to start otherwise), which the gateway answers with the pool's models.
    assert_eq!(cluster.envoy.stat("wasm_epp_requests_routed"), Some(sent));
    let lists = || cluster.envoy.stat("wasm_epp_model_lists_answered").unwrap_or(0.0);
    launcher::wait_until(Duration::from_secs(2), || lists() > lists_asked.get());
    assert_eq!(lists(), lists_asked.get() + 1.0, "inference-perf's check and ours, all answered by the gateway");
    cluster.assert_plugin_healthy();
}

/// What inference-perf wrote: its summary, and the directory of its other reports.
struct Report {
    summary: Value,
    dir: PathBuf,
}

/// Runs inference-perf with `config` (data and load; the launcher fills in the server, the
/// tokenizer and the storage) against the cluster's Envoy, and reads its summary report.
fn run_inference_perf(cluster: &Cluster, name: &str, mut config: Value) -> Report {
    let dir = cluster.dir.join(format!("inference-perf-{name}"));
    config["report"] = json!({"request_lifecycle": {"summary": true, "per_stage": true, "per_adapter": true}});
    let reports = launcher::inference_perf::run(&dir, config, &cluster.envoy.url(""), "sim-model", RUN_DEADLINE)
        .unwrap_or_else(|e| panic!("{e}\n{}", cluster.envoy.log_tail(20)));
    Report { summary: read_json(&reports.join("summary_lifecycle_metrics.json")), dir: reports }
}

fn read_json(path: &Path) -> Value {
    launcher::inference_perf::read_report(path).unwrap_or_else(|e| panic!("{e}"))
}

/// The picker's and the pods' counters a run is judged by, read before and after it.
struct PoolCounts {
    routed: f64,
    matched_picks: f64,
    pod_hits: f64,
    pod_queries: f64,
    picks: Vec<f64>,
}

impl PoolCounts {
    fn read(cluster: &Cluster) -> Self {
        let stat = |name: &str| cluster.envoy.stat(name).unwrap_or(0.0);
        Self {
            routed: stat("wasm_epp_requests_routed"),
            matched_picks: stat("wasm_epp_prefix_matched_picks"),
            pod_hits: cluster.pods_stat("prefix_cache_hits") as f64,
            pod_queries: cluster.pods_stat("prefix_cache_queries") as f64,
            picks: cluster
                .pool()
                .iter()
                .map(|pod| cluster.envoy.stat(&format!("wasm_epp_picks{{pod=\"{pod}\"}}")).unwrap_or(0.0))
                .collect(),
        }
    }
}
