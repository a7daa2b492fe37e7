//! The default `name[]`-filtered path, against servers that cannot filter (an empty page), and
//! pods that never enter the rotation.

use super::*;

fn addr(text: &str) -> PodAddress {
    PodAddress::parse(text).unwrap()
}

const PAGE: &[u8] = b"sglang:num_queue_reqs 1\nsglang:num_running_reqs 2\n";

/// Scrapes `pod` once, answered 200 with `body`.
fn scrape(p: &mut PoolPoller, pod: &PodAddress, token: u32, body: &[u8]) -> ScrapeOutcome {
    p.scrape_started(pod, token, 100 + u64::from(token));
    p.on_scrape(token, ScrapeResult::Answered { status: 200, body }, 100 + u64::from(token))
}

#[test]
fn a_pod_answering_the_filtered_path_with_an_empty_page_is_scraped_at_the_plain_path() {
    let a = addr("10.0.0.1:30000");
    let mut p = PoolPoller::new(PollerConfig::default(), vec![a.clone()]);
    assert_eq!(p.metrics_path(&a), crate::metrics_text::filtered_metrics_path());
    // A multiprocess registry (SGLang) describes no collector by name: an empty 200.
    assert_eq!(scrape(&mut p, &a, 1, b""), ScrapeOutcome::PlainPathNext(a.clone()));
    assert_eq!(p.metrics_path(&a), PLAIN_METRICS_PATH);
    assert_eq!(p.pods().next().unwrap().consecutive_failures, 0, "not a failed scrape");
    assert_eq!(scrape(&mut p, &a, 2, PAGE), ScrapeOutcome::Success);
    assert!(p.take_table(200).unwrap().pods[0].healthy);
    // Kept through a change of pool; an empty page at the plain path is a failure.
    p.set_pool(vec![addr("10.0.0.2:30000"), a.clone()], 200);
    assert_eq!(p.metrics_path(&a), PLAIN_METRICS_PATH);
    assert!(matches!(scrape(&mut p, &a, 3, b""), ScrapeOutcome::Failure(_)));
}

#[test]
fn a_metrics_path_the_operator_chose_is_kept() {
    let a = addr("10.0.0.1:8000");
    let config =
        PollerConfig { metrics_path: "/metrics?name[]=vllm:num_requests_waiting".into(), ..Default::default() };
    let mut p = PoolPoller::new(config, vec![a.clone()]);
    assert!(matches!(scrape(&mut p, &a, 1, b""), ScrapeOutcome::Failure(_)));
    assert_eq!(p.metrics_path(&a), "/metrics?name[]=vllm:num_requests_waiting");
}

#[test]
fn a_pod_that_never_answers_a_usable_page_is_reported_once() {
    let a = addr("10.0.0.1:8000");
    let config = PollerConfig { unhealthy_after_failures: 2, ..PollerConfig::default() };
    let mut p = PoolPoller::new(config, vec![a.clone()]);
    scrape(&mut p, &a, 1, b""); // to the plain path
    for token in 2..6 {
        scrape(&mut p, &a, token, b"<html>a login page</html>");
    }
    let reason = "no queue or running-request metric in the scrape".to_string();
    assert_eq!(p.take_events(), [PodEvent::NeverHealthy { address: a.clone(), failures: 2, reason }]);
    // Once it has answered, leaving the rotation is the usual news.
    scrape(&mut p, &a, 6, PAGE);
    scrape(&mut p, &a, 7, b"");
    scrape(&mut p, &a, 8, b"");
    assert_eq!(p.take_events(), [PodEvent::Unhealthy { address: a, failures: 2 }]);
}

#[test]
fn a_pod_reporting_a_load_past_any_engines_is_told_once() {
    let a = addr("10.0.0.1:8000");
    let mut p = PoolPoller::new(PollerConfig::default(), vec![a.clone()]);
    let percent = b"vllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc 87\n";
    assert_eq!(scrape(&mut p, &a, 1, percent), ScrapeOutcome::Success);
    let reading = "vllm:kv_cache_usage_perc 87".to_string();
    assert_eq!(p.take_events(), [PodEvent::Implausible { address: a.clone(), reading }]);
    assert_eq!(p.take_table(200).unwrap().pods[0].kv_usage, Some(1.0), "read as full");
    scrape(&mut p, &a, 2, percent);
    scrape(&mut p, &a, 3, b"vllm:num_requests_waiting +Inf\n");
    assert_eq!(p.take_events(), [], "once per pod");
}

#[test]
fn a_pod_repeating_a_series_is_told_once() {
    let a = addr("10.0.0.1:8000");
    let mut p = PoolPoller::new(PollerConfig::default(), vec![a.clone()]);
    let repeated = b"vllm:num_requests_waiting 3\nvllm:num_requests_running 1\nvllm:num_requests_waiting 3\n";
    assert_eq!(scrape(&mut p, &a, 1, repeated), ScrapeOutcome::Success);
    let event = PodEvent::RepeatedSeries { address: a.clone(), metric: "vllm:num_requests_waiting", samples: 1 };
    assert_eq!(p.take_events(), [event]);
    assert_eq!(p.take_table(200).unwrap().pods[0].waiting, 3.0, "read once");
    scrape(&mut p, &a, 2, repeated);
    scrape(&mut p, &a, 3, b"vllm:num_requests_running 1\nvllm:num_requests_running 1\n");
    assert_eq!(p.take_events(), [], "once per pod");
}
