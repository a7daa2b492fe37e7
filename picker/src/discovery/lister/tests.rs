//! The list cycle against API answers in real Kubernetes shapes.

use super::*;
use crate::config::parse_json;
use crate::discovery::health::HealthChange;

const INTERVAL: u64 = 1_000;

fn selector_discovery() -> PoolDiscovery {
    let config: KubernetesConfig = parse_json(
        br#"{"namespace": "llm", "label_selector": "app=vllm", "target_port": 8000,
             "relist_interval_ms": 1000, "timeout_ms": 500, "page_size": 2}"#,
    )
    .unwrap();
    PoolDiscovery::new(config).unwrap()
}

/// A pod object as the API server sends it (abridged: the parser skips what is missing).
fn pod(name: &str, ip: &str, ready: bool) -> String {
    format!(
        r#"{{"metadata": {{"name": "{name}", "namespace": "llm", "labels": {{"app": "vllm"}}, "resourceVersion": "1"}},
            "spec": {{"containers": [{{"name": "vllm", "ports": [{{"containerPort": 8000}}]}}]}},
            "status": {{"phase": "Running", "podIP": "{ip}", "podIPs": [{{"ip": "{ip}"}}],
              "conditions": [{{"type": "Initialized", "status": "True"}},
                             {{"type": "Ready", "status": "{}"}},
                             {{"type": "ContainersReady", "status": "{}"}}]}}}}"#,
        if ready { "True" } else { "False" },
        if ready { "True" } else { "False" },
    )
}

fn page(resource_version: &str, continue_token: Option<&str>, pods: &[String]) -> Vec<u8> {
    let meta = match continue_token {
        Some(token) => {
            format!(r#"{{"resourceVersion": "{resource_version}", "continue": "{token}", "remainingItemCount": 1}}"#)
        }
        None => format!(r#"{{"resourceVersion": "{resource_version}"}}"#),
    };
    format!(r#"{{"kind": "PodList", "apiVersion": "v1", "metadata": {meta}, "items": [{}]}}"#, pods.join(","))
        .into_bytes()
}

fn addresses(pool: &[PodAddress]) -> Vec<&str> {
    pool.iter().map(PodAddress::as_str).collect()
}

/// Expects a fetch, marks it sent with `token`, and returns its path.
fn fetch(progress: Progress, discovery: &mut PoolDiscovery, token: u32) -> String {
    let Progress::Fetch(request) = progress else { panic!("expected a fetch, got {progress:?}") };
    discovery.sent(token);
    request.path
}

fn answer(discovery: &mut PoolDiscovery, token: u32, status: u16, body: &[u8], now: u64) -> Progress {
    discovery.on_response(token, ApiResponse::Answered { status, body }, now)
}

#[test]
fn lists_ready_pods_and_reports_only_changes() {
    let mut d = selector_discovery();
    let path = fetch(d.tick(0), &mut d, 1);
    assert_eq!(
        path,
        "/api/v1/namespaces/llm/pods?labelSelector=app%3Dvllm&fieldSelector=status.phase%3DRunning&limit=2"
    );
    let body =
        page("100", None, &[pod("b", "10.0.0.2", true), pod("a", "10.0.0.1", true), pod("c", "10.0.0.3", false)]);
    let Progress::Listed { changed: Some(pool) } = answer(&mut d, 1, 200, &body, 5) else { panic!() };
    assert_eq!(addresses(&pool), ["10.0.0.1:8000", "10.0.0.2:8000"], "ready only, sorted");
    assert_eq!(d.take_health_change(), Some(HealthChange::Up { failures: 0 }));

    assert_eq!(d.tick(500), Progress::Idle, "not due before the interval");
    fetch(d.tick(INTERVAL), &mut d, 2);
    let body = page("101", None, &[pod("a", "10.0.0.1", true), pod("b", "10.0.0.2", true)]);
    assert_eq!(answer(&mut d, 2, 200, &body, INTERVAL), Progress::Listed { changed: None }, "new version, same pool");

    fetch(d.tick(2 * INTERVAL), &mut d, 3);
    let body = page("102", None, &[pod("a", "10.0.0.1", true), pod("b", "10.0.0.9", true), pod("c", "10.0.0.3", true)]);
    let Progress::Listed { changed: Some(pool) } = answer(&mut d, 3, 200, &body, 2 * INTERVAL) else { panic!() };
    assert_eq!(addresses(&pool), ["10.0.0.1:8000", "10.0.0.3:8000", "10.0.0.9:8000"], "IP change, pod became ready");
    assert_eq!(d.take_health_change(), None, "success after success is not news");
}

#[test]
fn follows_continue_and_skips_the_rest_of_an_unchanged_snapshot() {
    let mut d = selector_discovery();
    fetch(d.tick(0), &mut d, 1);
    let first = page(
        "500",
        Some("eyJydiI6NTAwLCJzdGFydCI6ImIifQ=="),
        &[pod("a", "10.0.0.1", true), pod("b", "10.0.0.2", true)],
    );
    let path = fetch(answer(&mut d, 1, 200, &first, 1), &mut d, 2);
    assert!(path.ends_with("&limit=2&continue=eyJydiI6NTAwLCJzdGFydCI6ImIifQ%3D%3D"), "{path}");
    let last = page("500", None, &[pod("c", "10.0.0.3", true)]);
    let Progress::Listed { changed: Some(pool) } = answer(&mut d, 2, 200, &last, 2) else { panic!() };
    assert_eq!(pool.len(), 3);

    // Same resourceVersion on the first page: the snapshot is the one already published.
    fetch(d.tick(INTERVAL), &mut d, 3);
    assert_eq!(answer(&mut d, 3, 200, &first, INTERVAL), Progress::Listed { changed: None });
    assert_eq!(d.tick(INTERVAL + 1), Progress::Idle, "no second page was asked for");
    assert_eq!(d.pool().len(), 3);
}

#[test]
fn an_expired_continue_restarts_the_list_a_bounded_number_of_times() {
    let mut d = selector_discovery();
    fetch(d.tick(0), &mut d, 1);
    let first = page("7", Some("token-1"), &[pod("a", "10.0.0.1", true), pod("b", "10.0.0.2", true)]);
    fetch(answer(&mut d, 1, 200, &first, 1), &mut d, 2);
    let gone = br#"{"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "The provided continue parameter is too old to display a consistent list result.",
        "reason": "Expired", "code": 410}"#;
    let path = fetch(answer(&mut d, 2, 410, gone, 2), &mut d, 3);
    assert!(!path.contains("continue="), "restarted from the first page: {path}");
    let fresh = page("9", None, &[pod("a", "10.0.0.1", true)]);
    assert!(matches!(answer(&mut d, 3, 200, &fresh, 3), Progress::Listed { changed: Some(_) }));

    fetch(d.tick(INTERVAL), &mut d, 10);
    let mut token = 10;
    let mut last = Progress::Idle;
    for round in 0..=MAX_LIST_RESTARTS {
        let first = page(&format!("2{round}"), Some("t"), &[pod("a", "10.0.0.1", true)]);
        fetch(answer(&mut d, token, 200, &first, INTERVAL), &mut d, token + 1);
        last = answer(&mut d, token + 1, 410, gone, INTERVAL);
        if let Progress::Fetch(_) = last {
            d.sent(token + 2);
        }
        token += 2;
    }
    assert_eq!(last, Progress::Failed(DiscoveryError::Expired));
    assert_eq!(addresses(d.pool()), ["10.0.0.1:8000"], "the last known pool stays");
}

#[test]
fn failures_keep_the_last_pool_and_log_once_per_kind() {
    let mut d = selector_discovery();
    fetch(d.tick(0), &mut d, 1);
    answer(&mut d, 1, 200, &page("1", None, &[pod("a", "10.0.0.1", true)]), 0);
    d.take_health_change();
    let unauthorized = br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}"#;
    let cases: [(u16, &[u8], DiscoveryError); 5] = [
        (503, b"upstream connect error or disconnect/reset before headers", DiscoveryError::Status(503)),
        (503, b"", DiscoveryError::Status(503)),
        (401, unauthorized, DiscoveryError::Unauthorized),
        (403, b"{}", DiscoveryError::Forbidden),
        (200, b"<html>login</html>", DiscoveryError::Invalid(String::new())),
    ];
    let mut logged = Vec::new();
    for (i, (status, body, expected)) in cases.into_iter().enumerate() {
        let now = (i as u64 + 1) * INTERVAL;
        fetch(d.tick(now), &mut d, 10 + i as u32);
        let progress = answer(&mut d, 10 + i as u32, status, body, now);
        let Progress::Failed(error) = progress else { panic!("{status} did not fail") };
        assert_eq!(error.kind(), expected.kind());
        assert!(d.is_failing());
        assert_eq!(addresses(d.pool()), ["10.0.0.1:8000"]);
        if let Some(change) = d.take_health_change() {
            logged.push(change);
        }
    }
    assert_eq!(logged.len(), 4, "503 twice is one state: {logged:?}");
    fetch(d.tick(6 * INTERVAL), &mut d, 20);
    assert_eq!(d.on_response(20, ApiResponse::NoAnswer, 6 * INTERVAL), Progress::Failed(DiscoveryError::NoAnswer));
    fetch(d.tick(7 * INTERVAL), &mut d, 21);
    assert_eq!(
        d.on_response(21, ApiResponse::TooLarge(99_000_000), 7 * INTERVAL),
        Progress::Failed(DiscoveryError::ResponseTooLarge(99_000_000))
    );
    fetch(d.tick(8 * INTERVAL), &mut d, 22);
    answer(&mut d, 22, 200, &page("2", None, &[pod("a", "10.0.0.1", true)]), 8 * INTERVAL);
    assert_eq!(d.take_health_change(), Some(HealthChange::Up { failures: 7 }));
}

#[test]
fn an_unanswered_call_is_abandoned_and_its_late_answer_ignored() {
    let mut d = selector_discovery();
    fetch(d.tick(0), &mut d, 1);
    assert_eq!(d.tick(900), Progress::Idle, "within twice the timeout");
    assert_eq!(d.tick(1_001), Progress::Failed(DiscoveryError::NoAnswer));
    assert_eq!(answer(&mut d, 1, 200, &page("1", None, &[pod("a", "10.0.0.1", true)]), 1_002), Progress::Idle);
    assert!(d.pool().is_empty());
    assert!(matches!(d.tick(1_003), Progress::Fetch(_)), "the next cycle is already due");
}

#[test]
fn a_clock_stepped_back_neither_stops_the_lists_nor_keeps_a_call_waited_for() {
    const HOUR: u64 = 3_600_000;
    let mut d = selector_discovery();
    fetch(d.tick(2 * HOUR), &mut d, 1);
    answer(&mut d, 1, 200, &page("1", None, &[pod("a", "10.0.0.1", true)]), 2 * HOUR);
    // The wall clock goes back an hour: the next list is due at once, not in an hour.
    fetch(d.tick(HOUR + 10_000), &mut d, 2);
    answer(&mut d, 2, 200, &page("2", None, &[pod("a", "10.0.0.1", true)]), HOUR + 10_000);
    assert_eq!(d.tick(HOUR + 10_500), Progress::Idle, "then one list per interval again");
    fetch(d.tick(HOUR + 11_000), &mut d, 3);
    // A call sent before a step back is not waited for until the clock catches up.
    assert_eq!(d.tick(HOUR / 2), Progress::Failed(DiscoveryError::NoAnswer));
    assert!(matches!(d.tick(HOUR / 2 + 10), Progress::Fetch(_)), "and the next cycle starts");
}

#[test]
fn a_call_that_cannot_be_sent_fails_the_cycle() {
    let mut d = selector_discovery();
    assert!(matches!(d.tick(0), Progress::Fetch(_)));
    let progress = d.not_sent("BadArgument".into());
    assert_eq!(progress, Progress::Failed(DiscoveryError::NotSent("BadArgument".into())));
    assert_eq!(d.tick(10), Progress::Idle);
}

#[test]
fn reads_the_inference_pool_first() {
    let config: KubernetesConfig =
        parse_json(br#"{"namespace": "llm", "inference_pool": "qwen", "relist_interval_ms": 1000}"#).unwrap();
    let mut d = PoolDiscovery::new(config).unwrap();
    let path = fetch(d.tick(0), &mut d, 1);
    assert_eq!(path, "/apis/inference.networking.k8s.io/v1/namespaces/llm/inferencepools/qwen");
    let pool = br#"{"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
        "metadata": {"name": "qwen", "namespace": "llm"},
        "spec": {"selector": {"matchLabels": {"app": "qwen"}}, "targetPorts": [{"number": 8200}],
                 "endpointPickerRef": {"name": "epp", "portNumber": 9002}}}"#;
    let path = fetch(answer(&mut d, 1, 200, pool, 1), &mut d, 2);
    assert!(path.starts_with("/api/v1/namespaces/llm/pods?labelSelector=app%3Dqwen&"), "{path}");
    let Progress::Listed { changed: Some(found) } =
        answer(&mut d, 2, 200, &page("3", None, &[pod("q", "10.1.0.1", true)]), 2)
    else {
        panic!()
    };
    assert_eq!(addresses(&found), ["10.1.0.1:8200"], "the pool's target port");

    fetch(d.tick(INTERVAL), &mut d, 3);
    let missing = br#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}"#;
    assert_eq!(answer(&mut d, 3, 404, missing, INTERVAL), Progress::Failed(DiscoveryError::NotFound));
    assert_eq!(d.pool().len(), 1);
}

#[test]
fn refuses_a_pool_larger_than_the_pod_table() {
    let config: KubernetesConfig =
        parse_json(br#"{"namespace": "llm", "label_selector": "app=vllm", "target_port": 80}"#).unwrap();
    let mut d = PoolDiscovery::new(config).unwrap();
    fetch(d.tick(0), &mut d, 1);
    let pods: Vec<String> =
        (0..=MAX_PODS).map(|i| pod(&format!("p{i}"), &format!("10.{}.{}.1", i / 256, i % 256), true)).collect();
    let Progress::Failed(DiscoveryError::PoolTooLarge(_)) = answer(&mut d, 1, 200, &page("1", None, &pods), 1) else {
        panic!()
    };
}
