//! The alerting rules (k8s/alerts/wasm-epp.rules.yaml) in a real Prometheus scraping a real
//! Envoy, labelled as Kubernetes labels it (the target's `pod` is the Envoy pod's name):
//! every rule evaluates without error on the real series, no alert is raised while the pool
//! serves, and stopping every pod raises the pool's alerts with their summaries filled in.
//! `promtool test rules` (make validate) covers each alert's thresholds and durations; this
//! covers the names and labels the rules read, which only a real Envoy shows.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use e2e::prometheus::{Extras, Prometheus};
use e2e::Cluster;

/// The Envoy pod's name as Kubernetes service discovery would label the scrape target.
const ENVOY_POD_NAME: &str = "wasm-epp-5d8f7c9b4-x2x7q";
/// Healthy traffic long enough for every rule to evaluate on a few scrapes.
const TRAFFIC: Duration = Duration::from_secs(8);
/// How long an alert may take to show as pending (scrape, table publish, evaluation: ~1 s each).
const ALERT_WAIT: Duration = Duration::from_secs(30);
/// Looks at the alerts of a serving pool, and the time between them (rules evaluate every 1 s).
const QUIET_LOOKS: usize = 3;
const QUIET_GAP: Duration = Duration::from_millis(2500);

fn rules_file() -> std::path::PathBuf {
    launcher::paths::workspace_root().join("k8s/alerts/wasm-epp.rules.yaml")
}

/// Series the rules read that this Envoy (static pool, no peers, no comparison) does not
/// have: Kubernetes discovery's, peering's messages, the live comparison's, the VM reloads of
/// a configuration without stats_tags (Istio without the singleton: this one's carry the
/// `wasm_plugin` label), and outlier detection's ejections (none on a healthy pool).
const OTHER_MODES_ONLY: [&str; 6] = [
    "wasm_epp_discovery_failing",
    "wasm_epp_comparison_requests",
    "wasm_epp_peer_messages_rejected",
    "envoy_wasm_wasm_epp_vm_reload_success",
    "envoy_wasm_wasm_epp_vm_reload_failure",
    // Labelled by pod, so no series until a pod is ejected.
    "wasm_epp_pod_ejections",
];

/// Alerts whose thresholds are wall-clock times of this machine's own decisions: on a loaded
/// 2-core machine a few preempted decisions put the p99 past its threshold in a short run.
const MACHINE_TIMED: [&str; 1] = ["WasmEppDecisionSlow"];

/// Every metric name in the loaded rules' expressions (`query` of `/api/v1/rules`).
fn metric_names(rules: &[serde_json::Value]) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for rule in rules {
        let query = rule["query"].as_str().unwrap_or_default();
        // Label matchers ({...}) and aggregation clauses (without (...)) name labels, not series;
        // strings (label_replace's label names and regexes) neither.
        let mut selectors = String::new();
        let mut depth = 0;
        let mut quoted = false;
        for c in query.replace("without (", "{").replace("by (", "{").chars() {
            match c {
                '"' => quoted = !quoted,
                _ if quoted => {}
                '{' => depth += 1,
                '}' | ')' if depth > 0 => depth -= 1,
                _ if depth == 0 => selectors.push(c),
                _ => {}
            }
        }
        for word in selectors.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            if word.starts_with("wasm_epp_") || word.starts_with("envoy_") {
                names.insert(word.to_string());
            }
        }
    }
    names
}

/// Alerts pending or firing, by name, on the job that honours the plugin's labels.
fn raised(prometheus: &Prometheus) -> Vec<serde_json::Value> {
    let alerts = prometheus.alerts().unwrap();
    alerts.into_iter().filter(|a| a["labels"]["job"] == "wasm-epp-envoy").collect()
}

fn names(alerts: &[serde_json::Value]) -> BTreeSet<String> {
    alerts.iter().filter_map(|a| a["labels"]["alertname"].as_str().map(str::to_string)).collect()
}

/// Alerts raised at each of `QUIET_LOOKS` looks a few evaluations apart. On a loaded
/// machine one scrape of a pod can time out and take it out of rotation until the next
/// (100 ms later), which raises an alert for one evaluation; a `for` of minutes is there
/// for such blips, and the test is too short to wait it out.
fn raised_steadily(prometheus: &Prometheus) -> BTreeSet<String> {
    let mut steady = names(&raised(prometheus));
    for _ in 1..QUIET_LOOKS {
        std::thread::sleep(QUIET_GAP);
        steady = steady.intersection(&names(&raised(prometheus))).cloned().collect();
    }
    steady
}

fn complete_for(cluster: &Cluster, duration: Duration) -> (usize, usize) {
    let deadline = Instant::now() + duration;
    let (mut sent, mut ok) = (0, 0);
    while Instant::now() < deadline {
        let reply = cluster.complete(&format!("[{}] a shared system prompt, question {sent}", sent % 3));
        sent += 1;
        ok += usize::from(reply.status == 200);
    }
    (sent, ok)
}

#[test]
fn the_alert_rules_stay_quiet_on_a_serving_pool_and_fire_when_every_pod_stops() {
    let cluster = Cluster::start_ready("alerts", 2, &[]);
    let admin = format!("127.0.0.1:{}", cluster.envoy.admin_port);
    let extras = Extras { rule_files: vec![rules_file()], envoy_pod_name: Some(ENVOY_POD_NAME.to_string()) };
    let prometheus = Prometheus::start_with(&cluster.dir, &admin, &cluster.pool(), &extras).unwrap();

    let (sent, ok) = complete_for(&cluster, TRAFFIC);
    assert_eq!(ok, sent, "the pool did not serve every request");

    // The plugin's per-pod series keep their own `pod` label (the vLLM pod's address) where
    // the job honours labels, as the chart's PodMonitor does; without it Prometheus renames
    // it to `exported_pod` and `pod` names the Envoy pod, which breaks the per-pod panels.
    let picks = prometheus.wait_for_data(r#"sum by (pod) (wasm_epp_picks{job="wasm-epp-envoy"})"#, ALERT_WAIT).unwrap();
    let labelled: BTreeSet<String> =
        picks.iter().filter_map(|s| s["metric"]["pod"].as_str().map(str::to_string)).collect();
    assert_eq!(labelled, cluster.pool().into_iter().collect(), "per-pod series under honor_labels: {picks:?}");
    let renamed = prometheus
        .wait_for_data(r#"sum by (pod, exported_pod) (wasm_epp_picks{job="wasm-epp-envoy-no-honor"})"#, ALERT_WAIT)
        .unwrap();
    assert!(
        !renamed.is_empty()
            && renamed.iter().all(|s| s["metric"]["pod"] == ENVOY_POD_NAME && s["metric"]["exported_pod"].is_string()),
        "without honor_labels the target's pod label should win: {renamed:?}"
    );

    // Every series the rules read is one this Envoy exports (or one of another mode's).
    let rules = prometheus.rules().unwrap();
    let exported =
        launcher::http::get(&cluster.envoy.admin_url("/stats/prometheus"), Duration::from_secs(5)).unwrap().body;
    let read = metric_names(&rules);
    println!("series the rules read: {read:?}");
    assert!(read.len() >= 15, "metric names found in the rules: {read:?}");
    let missing: Vec<String> = read
        .into_iter()
        .filter(|name| !OTHER_MODES_ONLY.contains(&name.as_str()))
        .filter(|name| !exported.lines().any(|line| line.starts_with(&format!("{name}{{"))))
        .collect();
    assert!(missing.is_empty(), "the rules read series Envoy does not export: {missing:?}");

    // Every rule of the file is loaded (counted in the file, so a new alert needs no edit
    // here), evaluates on the real series without error, and none is raised.
    let in_file = std::fs::read_to_string(rules_file()).unwrap().matches("- alert: ").count();
    assert_eq!(rules.len(), in_file, "rules loaded: {rules:?}");
    let broken: Vec<_> = rules.iter().filter(|r| r["health"] != "ok").map(|r| (&r["name"], &r["lastError"])).collect();
    assert!(broken.is_empty(), "rules that do not evaluate: {broken:?}");
    let quiet: BTreeSet<String> =
        raised_steadily(&prometheus).into_iter().filter(|name| !MACHINE_TIMED.contains(&name.as_str())).collect();
    assert!(quiet.is_empty(), "alerts on a serving pool: {quiet:?}");

    // Every pod stops: the pool's alerts are raised (pending: their `for` is minutes).
    for pod in &cluster.pods {
        pod.kill();
    }
    let expected: BTreeSet<String> =
        ["WasmEppNoPodInRotation", "WasmEppPodsOutOfRotation", "WasmEppRoutingWithoutPodData", "WasmEppGatewayErrors"]
            .map(str::to_string)
            .into();
    let deadline = Instant::now() + ALERT_WAIT;
    let mut alerts = Vec::new();
    while Instant::now() < deadline {
        // Requests keep coming: they fail now, which is what the error alerts read.
        complete_for(&cluster, Duration::from_millis(500));
        alerts = raised(&prometheus);
        if expected.is_subset(&names(&alerts)) {
            break;
        }
    }
    println!("alerts with every pod stopped: {:?}", names(&alerts));
    assert!(expected.is_subset(&names(&alerts)), "expected {expected:?}, raised {:?}", names(&alerts));
    for alert in &alerts {
        let summary = alert["annotations"]["summary"].as_str().unwrap_or_default();
        println!("  {} ({}): {summary}", alert["labels"]["alertname"], alert["state"]);
        assert!(summary.contains(&admin), "summary without the instance: {alert}");
        assert!(!summary.contains("<no value>") && !summary.contains("error"), "summary not expanded: {alert}");
        assert_eq!(alert["labels"]["pod"], ENVOY_POD_NAME, "the target's labels are kept: {alert}");
    }
}
