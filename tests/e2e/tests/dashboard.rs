//! The Grafana dashboard (k8s/dashboards/wasm-epp.json) against real data: Debian's
//! Prometheus scrapes a make-run-like Envoy's `/stats/prometheus` and the pods' `/metrics`
//! while traffic flows, and every query of every panel must return at least one series.
//!
//! `DASHBOARD_SERIES=path` also writes each panel's range query over the run to `path`
//! (JSON), from which `make dashboard-png` draws docs/dashboard.png.

use std::time::{Duration, Instant};

use e2e::prometheus::Prometheus;
use e2e::Cluster;

/// Traffic long enough for `rate(...[1m])` to have several samples at a 1 s scrape.
const TRAFFIC: Duration = Duration::from_secs(20);
/// Concurrent clients: enough for in-flight counts and queues above 0 on 3 pods.
const CLIENTS: usize = 6;
/// Shared system prompts: repeats make prefix-cache hits on the pods and affinity picks.
const SYSTEM_PROMPTS: usize = 4;
/// How long a query may take to show data once traffic stopped (scrape + rule lag).
const DATA_WAIT: Duration = Duration::from_secs(15);
/// What Grafana puts for `$__rate_interval` at this scrape interval: 4 scrapes, so `rate`
/// always has two samples (Grafana's own rule).
const RATE_INTERVAL: &str = "4s";

/// Every `expr` of every panel (Grafana's variables filled in, every pool), with the panel's title.
fn panel_queries() -> Vec<(String, String)> {
    let path = launcher::paths::workspace_root().join("k8s/dashboards/wasm-epp.json");
    let text = std::fs::read_to_string(&path).unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        let title = panel["title"].as_str().unwrap().to_string();
        for target in panel["targets"].as_array().unwrap() {
            let expr =
                target["expr"].as_str().unwrap().replace("$__rate_interval", RATE_INTERVAL).replace("$pool", ".*");
            queries.push((title.clone(), expr));
        }
    }
    queries
}

/// Requests from `CLIENTS` threads for `TRAFFIC`: shared prefixes, some sessions. Returns
/// (sent, failed).
fn traffic(cluster: &Cluster) -> (usize, usize) {
    let deadline = Instant::now() + TRAFFIC;
    let counts: Vec<(usize, usize)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..CLIENTS)
            .map(|client| {
                scope.spawn(move || {
                    let (mut sent, mut failed) = (0, 0);
                    while Instant::now() < deadline {
                        let system = "You are a careful assistant. ".repeat(40);
                        let prompt = format!("[{}] {system} question {sent} from {client}", sent % SYSTEM_PROMPTS);
                        // Some stream: the comparison's first-token histogram times streams.
                        let stream = client % 3 == 1;
                        let body =
                            serde_json::json!({"model": "sim-model", "prompt": prompt, "max_tokens": 16, "stream": stream});
                        let session = format!("user-{client}");
                        let headers: Vec<(&str, &str)> =
                            if client % 2 == 0 { vec![("x-session-id", session.as_str())] } else { vec![] };
                        let reply = launcher::http::post(
                            &cluster.envoy.url("/v1/completions"),
                            &headers,
                            &body.to_string(),
                            e2e::REQUEST_TIMEOUT,
                        );
                        sent += 1;
                        if !reply.is_ok_and(|r| r.status == 200) {
                            failed += 1;
                        }
                    }
                    (sent, failed)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    counts.iter().fold((0, 0), |(s, f), (sent, failed)| (s + sent, f + failed))
}

#[test]
fn every_dashboard_panel_has_data_from_a_real_prometheus() {
    // Learning on, so the prefix-index accuracy panel shows answers, and the comparison (one
    // pod of three for the baseline), so its panel does (the rest is `make run`).
    let cluster = Cluster::start("dashboard", 3, &[], |options| {
        if let Some(filter) = options.filter_config.as_object_mut() {
            filter.insert("learning".into(), serde_json::json!({"enabled": true}));
            filter.insert("comparison".into(), serde_json::json!({"baseline_share": 0.34}));
        }
    });
    assert!(
        cluster.envoy.wait_for_healthy_pods(3, Duration::from_secs(15)),
        "singleton never saw 3 healthy pods:\n{}",
        cluster.envoy.log_tail(30)
    );
    let admin = format!("127.0.0.1:{}", cluster.envoy.admin_port);
    let prometheus = Prometheus::start(&cluster.dir, &admin, &cluster.pool()).unwrap();
    let (sent, failed) = traffic(&cluster);
    println!("dashboard traffic: {sent} requests, {failed} failed, over {TRAFFIC:?} from {CLIENTS} clients");
    assert!(sent > 0 && failed == 0, "{failed} of {sent} requests failed");

    let mut empty = Vec::new();
    for (title, expr) in panel_queries() {
        let result = prometheus.wait_for_data(&expr, DATA_WAIT).unwrap_or_else(|e| panic!("{title}: {expr}: {e}"));
        println!(
            "{title}: {expr} -> {} series, e.g. {}",
            result.len(),
            result.first().map_or("-".into(), |s| s.to_string())
        );
        if result.is_empty() {
            empty.push(format!("{title}: {expr}"));
        }
    }
    assert!(empty.is_empty(), "panels without data:\n{}", empty.join("\n"));

    if let Ok(path) = std::env::var("DASHBOARD_SERIES") {
        let seconds = TRAFFIC.as_secs() + 20;
        let panels: Vec<serde_json::Value> = panel_queries()
            .into_iter()
            .map(|(title, expr)| {
                let series = prometheus.query_range(&expr, seconds, 1).unwrap();
                serde_json::json!({"title": title, "expr": expr, "series": series})
            })
            .collect();
        std::fs::write(&path, serde_json::to_string(&panels).unwrap()).unwrap();
        println!("panel series written to {path}");
    }
}
