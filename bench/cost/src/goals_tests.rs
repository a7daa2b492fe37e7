//! The goals judged on synthetic records: every formula, both bounds, absent and stale
//! figures, and what is written to `cost.json`.

use super::*;

/// A run where every goal is met except the added p50 (2.5×) and the 1,000-pod scrape.
fn synthetic_run() -> Vec<Record> {
    let mut results = Results::default();
    results.push("throughput", "plain/4096B", "requests_per_second", 20_000.0, "req/s");
    results.push("throughput", "wasm-epp/4096B", "requests_per_second", 17_000.0, "req/s");
    results.push("latency_sequential", "wasm-epp/4096B", "added_p50_vs_plain", 100.0, "us");
    results.push("latency_sequential", "header-buffered-read/4096B", "added_p50_vs_plain", 40.0, "us");
    results.push("latency_concurrent32", "wasm-epp/4096B", "envoy_cpu_per_request", 100.0, "us");
    results.push("latency_concurrent32", "header-buffered-read/4096B", "envoy_cpu_per_request", 70.0, "us");
    results.push("native_decision", "filter_path/completions/4KB/16pods", "median_time", 7.5, "us");
    results.push("scrape", "100_pods/100ms/filtered", "main_thread_cpu_share", 4.9, "percent_of_core");
    results.push("scrape", "1000_pods/1000ms/filtered", "main_thread_cpu_share", 5.1, "percent_of_core");
    results.push("native_decision", "decision/chat/32KB/64pods", "median_time", 20.0, "us");
    results.records
}

fn outcome<'a>(outcomes: &'a [Outcome], name: &str) -> &'a Outcome {
    outcomes.iter().find(|o| o.goal.name == name).unwrap()
}

#[test]
fn every_goal_is_judged_from_its_records() {
    let outcomes = evaluate(&synthetic_run());
    let judged: Vec<(&str, Option<f64>, bool)> =
        outcomes.iter().map(|o| (o.goal.name, o.measured.map(|m| (m * 1000.0).round() / 1000.0), o.met())).collect();
    assert_eq!(
        judged,
        vec![
            ("throughput_wasm_epp_vs_plain", Some(0.85), true),
            ("added_p50_4KB_16pods_vs_body_reading_filter", Some(2.5), false),
            ("plugin_envoy_cpu_vs_native_filter_path", Some(4.0), true),
            ("scrape_100_pods_every_100ms", Some(4.9), true),
            ("scrape_1000_pods_every_1s", Some(5.1), false),
            ("native_decision_chat_32KB_64pods", Some(20.0), true),
        ]
    );
}

#[test]
fn an_at_least_goal_fails_below_its_target() {
    let mut records = synthetic_run();
    let mut slower = Results::default();
    slower.push("throughput", "wasm-epp/4096B", "requests_per_second", 15_000.0, "req/s");
    records.extend(slower.records);
    let throughput = outcome(&evaluate(&records), "throughput_wasm_epp_vs_plain").clone();
    assert_eq!((throughput.measured, throughput.met()), (Some(0.75), false), "the later record wins");
}

#[test]
fn absent_figures_and_non_positive_baselines_are_not_met() {
    let records: Vec<Record> = synthetic_run().into_iter().filter(|r| r.case != "decision/chat/32KB/64pods").collect();
    let outcomes = evaluate(&records);
    let native = outcome(&outcomes, "native_decision_chat_32KB_64pods");
    assert_eq!((native.measured, native.met(), native.missing()), (None, false, 1));

    let mut records = synthetic_run();
    let mut noise = Results::default();
    noise.push("latency_sequential", "header-buffered-read/4096B", "added_p50_vs_plain", -3.0, "us");
    records.extend(noise.records);
    let added = outcome(&evaluate(&records), "added_p50_4KB_16pods_vs_body_reading_filter").clone();
    assert_eq!((added.measured, added.met(), added.missing()), (None, false, 0));
}

#[test]
fn recorded_as_benchmark_goals() {
    let outcomes = evaluate(&synthetic_run());
    let mut results = Results::default();
    record(&outcomes, &mut results);
    let find = |case: &str, metric: &str| {
        results.records.iter().find(|r| r.benchmark == "goals" && r.case == case && r.metric == metric).map(|r| r.value)
    };
    assert_eq!(find("scrape_1000_pods_every_1s", "measured"), Some(5.1));
    assert_eq!(find("scrape_1000_pods_every_1s", "target"), Some(5.0));
    assert_eq!(find("scrape_1000_pods_every_1s", "met"), Some(0.0));
    assert_eq!(find("throughput_wasm_epp_vs_plain", "met"), Some(1.0));
    assert_eq!(find("throughput_wasm_epp_vs_plain", "missing_sources"), Some(0.0));
    assert_eq!(results.records.len(), GOALS.len() * 4);
}
