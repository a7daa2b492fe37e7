//! The pool service's tick, natively against the in-memory host: scrapes, publishes,
//! heartbeat, discovery, relay, handover and election.

// Test support functions unwrap too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use picker::keys;
use picker::pod_table::{decode_version, PodTable};
use picker::prefix::events::{encode_batch, RoutingEvent};
use wasm_epp_host::{Host, MockHost, SharedStore};
use wasm_epp_poller::{ElectedPoller, PoolService};

const NOW: u64 = 1_700_000_000_000;

const METRICS: &str = "# TYPE vllm:num_requests_waiting gauge\n\
vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 2.0\n\
vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 1.0\n\
vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.25\n";

fn host() -> MockHost {
    let host = MockHost::new();
    host.clock_ms.set(NOW);
    host
}

fn service(host: &MockHost, config: &str) -> PoolService {
    let mut service = PoolService::default();
    service.configure(host, config.as_bytes()).unwrap();
    service
}

fn table(host: &MockHost) -> Option<PodTable> {
    let (bytes, _) = host.get(keys::POD_TABLE).unwrap();
    bytes.map(|b| PodTable::decode(&b).unwrap())
}

/// Answers every dispatched call not answered yet with `(status, body)`.
fn answer_all(host: &MockHost, service: &mut PoolService, answered: &mut usize, status: u16, body: &str) {
    let calls = host.calls.borrow().clone();
    for call in calls.iter().skip(*answered) {
        *host.call_answer.borrow_mut() = Some((status, body.as_bytes().to_vec()));
        service.http_response(host, call.token, body.len());
    }
    *answered = calls.len();
}

const TWO_PODS: &str = r#"{"pool": ["10.0.0.1:8000", "10.0.0.2:8000"], "poll_interval_ms": 100}"#;

#[test]
fn a_round_scrapes_every_pod_through_the_metrics_cluster_then_publishes() {
    let host = host();
    let mut service = service(&host, TWO_PODS);
    assert_eq!(host.tick_period_ms.get(), Some(100));
    service.tick(&host, NOW);
    let calls = host.calls.borrow().clone();
    assert_eq!(calls.len(), 2);
    for (call, pod) in calls.iter().zip(["10.0.0.1:8000", "10.0.0.2:8000"]) {
        assert_eq!(call.cluster, "wasm_epp_metrics");
        assert!(call.headers.contains(&("x-gateway-destination-endpoint".into(), pod.into())), "{call:?}");
    }
    assert!(table(&host).is_none(), "nothing published before the round is done");
    let mut answered = 0;
    answer_all(&host, &mut service, &mut answered, 200, METRICS);
    let published = table(&host).unwrap();
    assert!(published.pods.iter().all(|p| p.healthy && p.waiting == 2.0), "{published:?}");
    let (beat, _) = host.get(keys::SERVICE_HEARTBEAT).unwrap();
    assert_eq!(decode_version(&beat.unwrap()), Some(NOW), "the tick writes the heartbeat");
    service.tick(&host, NOW + 100);
    assert_eq!(host.metric("wasm_epp.poll_success"), 2);
}

#[test]
fn failing_scrapes_take_a_pod_out_after_the_configured_count() {
    let host = host();
    let config = r#"{"pool": ["10.0.0.1:8000"], "poll_interval_ms": 100, "unhealthy_after_failures": 2}"#;
    let mut service = service(&host, config);
    let mut answered = 0;
    service.tick(&host, NOW);
    answer_all(&host, &mut service, &mut answered, 200, METRICS);
    assert!(table(&host).unwrap().pods[0].healthy);
    for round in 1..=2 {
        service.tick(&host, NOW + 100 * round);
        answer_all(&host, &mut service, &mut answered, 500, "boom");
    }
    service.tick(&host, NOW + 300);
    assert!(!table(&host).unwrap().pods[0].healthy, "two failures in a row");
    assert!(host.metric("wasm_epp.poll_failure") >= 2);
    assert_eq!(host.metric("wasm_epp.pods_turned_unhealthy"), 1, "counted once, for alerts");
    assert_eq!(host.metric("wasm_epp.pod_caches_dropped"), 0);
    // Back, with no prefix-cache counter to show it is the same engine: its cache is forgotten.
    answer_all(&host, &mut service, &mut answered, 200, METRICS);
    service.tick(&host, NOW + 400);
    assert!(table(&host).unwrap().pods[0].healthy);
    assert_eq!(host.metric("wasm_epp.pod_caches_dropped"), 1);
}

#[test]
fn a_refused_dispatch_counts_as_a_failed_scrape() {
    let host = host();
    host.refuse_calls.set(true);
    let mut service = service(&host, TWO_PODS);
    service.tick(&host, NOW);
    service.tick(&host, NOW + 100);
    assert!(host.metric("wasm_epp.poll_failure") >= 2, "one per pod and round, flushed on the tick");
}

#[test]
fn a_new_service_keeps_the_last_table_until_its_first_round_and_continues_its_versions() {
    let host = host();
    let mut old = service(&host, TWO_PODS);
    let mut answered = 0;
    for round in 0..3 {
        old.tick(&host, NOW + 100 * round);
        answer_all(&host, &mut old, &mut answered, 200, METRICS);
    }
    let before = table(&host).unwrap();
    // A new leader (or a reloaded singleton) starts from nothing known.
    let mut new = service(&host, TWO_PODS);
    new.tick(&host, NOW + 1_000);
    assert_eq!(table(&host).unwrap(), before, "workers keep routing on the last good table");
    answer_all(&host, &mut new, &mut answered, 200, METRICS);
    let after = table(&host).unwrap();
    assert!(after.version > before.version, "{} then {}", before.version, after.version);
    let epochs = |t: &PodTable| t.pods.iter().map(|p| (p.address.clone(), p.epoch)).collect::<Vec<_>>();
    assert_eq!(epochs(&after), epochs(&before), "prefix knowledge stays valid across the handover");
}

fn pod_list(ips: &[&str]) -> String {
    let items: Vec<String> = ips
        .iter()
        .map(|ip| {
            format!(
                r#"{{"metadata": {{"name": "{ip}", "namespace": "llm"}}, "status": {{"phase": "Running",
                   "podIP": "{ip}", "conditions": [{{"type": "Ready", "status": "True"}}]}}}}"#
            )
        })
        .collect();
    format!(
        r#"{{"kind": "PodList", "metadata": {{"resourceVersion": "{}"}}, "items": [{}]}}"#,
        ips.len(),
        items.join(",")
    )
}

#[test]
fn a_discovered_pool_is_scraped_before_publishing_and_a_pod_that_leaves_is_dropped_at_once() {
    let host = host();
    let config = r#"{"kubernetes": {"namespace": "llm", "label_selector": "app=vllm", "target_port": 8000,
                     "relist_interval_ms": 1000}, "poll_interval_ms": 100}"#;
    let mut service = service(&host, config);
    service.tick(&host, NOW);
    let mut answered = 0;
    answer_all(&host, &mut service, &mut answered, 200, &pod_list(&["10.1.0.1", "10.1.0.2"]));
    assert!(table(&host).is_none(), "not published before its pods were scraped");
    service.tick(&host, NOW + 100);
    answer_all(&host, &mut service, &mut answered, 200, METRICS);
    let published = table(&host).unwrap();
    assert_eq!(published.pods.len(), 2);
    assert!(published.pods.iter().all(|p| p.healthy));

    // The next list lacks a pod: published on the API server's answer, not a tick later.
    service.tick(&host, NOW + 1_100);
    let list = host.calls.borrow().iter().skip(answered).find(|c| c.cluster != "wasm_epp_metrics").cloned().unwrap();
    let body = pod_list(&["10.1.0.1"]);
    *host.call_answer.borrow_mut() = Some((200, body.as_bytes().to_vec()));
    service.http_response(&host, list.token, body.len());
    let addresses: Vec<String> = table(&host).unwrap().pods.into_iter().map(|p| p.address.to_string()).collect();
    assert_eq!(addresses, ["10.1.0.1:8000"]);
}

/// Answers every dispatched call not answered yet with what `answer` says for it.
fn answer_each(
    host: &MockHost,
    service: &mut PoolService,
    answered: &mut usize,
    answer: impl Fn(&wasm_epp_host::mock::Call) -> (u16, String),
) {
    let calls = host.calls.borrow().clone();
    for call in calls.iter().skip(*answered) {
        let (status, body) = answer(call);
        *host.call_answer.borrow_mut() = Some((status, body.clone().into_bytes()));
        service.http_response(host, call.token, body.len());
    }
    *answered = calls.len();
}

#[test]
fn a_new_leader_whose_api_server_refuses_to_list_scrapes_the_last_known_pool() {
    let host = host();
    let config = r#"{"kubernetes": {"namespace": "llm", "label_selector": "app=vllm", "target_port": 8000,
                     "relist_interval_ms": 1000}, "poll_interval_ms": 100}"#;
    let mut old = service(&host, config);
    old.tick(&host, NOW);
    let mut answered = 0;
    answer_all(&host, &mut old, &mut answered, 200, &pod_list(&["10.1.0.1", "10.1.0.2"]));
    old.tick(&host, NOW + 100);
    answer_all(&host, &mut old, &mut answered, 200, METRICS);
    let before = table(&host).unwrap();
    assert_eq!(before.pods.len(), 2);
    // A new leader (a VM reload, a configuration update) while the API server answers 403;
    // the second pod went away meanwhile.
    let refused_and_gone = |call: &wasm_epp_host::mock::Call| match call.cluster.as_str() {
        "wasm_epp_metrics" if call.headers.iter().any(|(_, v)| v == "10.1.0.2:8000") => (503, String::new()),
        "wasm_epp_metrics" => (200, METRICS.to_string()),
        _ => (403, r#"{"kind":"Status","code":403}"#.to_string()),
    };
    let mut new = service(&host, config);
    for round in 0..3 {
        let now = NOW + 1_000 + 100 * round;
        host.clock_ms.set(now);
        new.tick(&host, now);
        answer_each(&host, &mut new, &mut answered, refused_and_gone);
    }
    let after = table(&host).unwrap();
    assert!(after.version > before.version && after.published_at_ms == NOW + 1_200, "{after:?}");
    let healthy: Vec<&str> = after.pods.iter().filter(|p| p.healthy).map(|p| p.address.as_str()).collect();
    assert_eq!(healthy, ["10.1.0.1:8000"], "scraped as the old leader would have: the pod gone leaves the rotation");
    assert_eq!(
        after.pods.iter().map(|p| p.epoch).collect::<Vec<_>>(),
        before.pods.iter().map(|p| p.epoch).collect::<Vec<_>>()
    );
    assert!(host.metric("wasm_epp.discovery_failure") >= 1);
}

#[test]
fn a_pod_whose_server_cannot_filter_by_name_is_scraped_at_the_plain_path() {
    let host = host();
    let mut service = service(&host, r#"{"pool": ["10.0.0.1:30000"], "poll_interval_ms": 100}"#);
    let path = |call: &wasm_epp_host::mock::Call| {
        call.headers.iter().find(|(k, _)| k == ":path").map(|(_, v)| v.clone()).unwrap_or_default()
    };
    // SGLang's multiprocess registry answers the name[] filters with an empty page.
    let sglang = |call: &wasm_epp_host::mock::Call| match path(call).as_str() {
        "/metrics" => (200, "sglang:num_queue_reqs 3\nsglang:num_running_reqs 1\n".to_string()),
        _ => (200, String::new()),
    };
    let mut answered = 0;
    service.tick(&host, NOW);
    answer_each(&host, &mut service, &mut answered, sglang);
    answer_each(&host, &mut service, &mut answered, sglang);
    let paths: Vec<String> = host.calls.borrow().iter().map(path).collect();
    assert!(paths[0].starts_with("/metrics?name%5B%5D=") && paths[1] == "/metrics", "{paths:?}");
    let published = table(&host).expect("the first round ends with the plain page's load");
    assert!(published.pods[0].healthy && published.pods[0].waiting == 3.0, "{published:?}");
    service.tick(&host, NOW + 100);
    let scrapes: Vec<String> = host.calls.borrow().iter().map(path).filter(|p| p.starts_with("/metrics")).collect();
    assert_eq!(scrapes[2..], ["/metrics"], "remembered for the pod");
    assert_eq!(host.metric("wasm_epp.metrics_path_fallbacks"), 1);
    assert_eq!(host.metric("wasm_epp.poll_failure"), 0);
}

#[test]
fn pods_whose_page_repeats_a_series_are_counted_while_they_do() {
    let host = host();
    let mut service = service(&host, TWO_PODS);
    let repeated = format!("{METRICS}vllm:num_requests_waiting{{engine=\"0\",model_name=\"m\"}} 2.0\n");
    let fixed = std::cell::Cell::new(false);
    // The first pod's exporter gives a series twice until it is fixed; the second's is true.
    let page = |call: &wasm_epp_host::mock::Call| {
        let first = call.headers.contains(&("x-gateway-destination-endpoint".into(), "10.0.0.1:8000".into()));
        (200, if first && !fixed.get() { repeated.clone() } else { METRICS.to_string() })
    };
    let mut answered = 0;
    for round in 0..3 {
        service.tick(&host, NOW + round * 100);
        answer_each(&host, &mut service, &mut answered, page);
    }
    service.tick(&host, NOW + 300);
    assert_eq!(host.metric("wasm_epp.pods_repeating_series"), 1, "still repeating after its one warning");
    fixed.set(true);
    answer_each(&host, &mut service, &mut answered, page);
    service.tick(&host, NOW + 400);
    answer_each(&host, &mut service, &mut answered, page);
    service.tick(&host, NOW + 500);
    assert_eq!(host.metric("wasm_epp.pods_repeating_series"), 0, "fixed");
}

#[test]
fn the_relay_drains_worker_batches_into_the_ring() {
    let host = host();
    let mut service = service(&host, TWO_PODS);
    let queue = host.resolve_queue("wasm-epp", keys::EVENT_QUEUE).unwrap().expect("registered at configure");
    let event = RoutingEvent { pod: "10.0.0.1:8000".into(), epoch: 1, origin: 0, hashes: vec![1, 2, 3] };
    host.enqueue(queue, &encode_batch(&[event])).unwrap();
    service.queue_ready(&host, queue);
    let (head, _) = host.get(keys::RING_HEAD_KEY).unwrap();
    assert!(head.is_some(), "the ring has a head after the first append");
    assert!(host.dequeue(queue).unwrap().is_none(), "drained");
}

#[test]
fn exactly_one_root_is_elected_and_another_takes_over_when_it_goes() {
    let host = host();
    let config: picker::config::PollerConfig =
        picker::config::parse_json(br#"{"pool": ["10.0.0.1:8000"], "poll_interval_ms": 100}"#).unwrap();
    let mut roots: Vec<ElectedPoller> = (0..4).map(|_| ElectedPoller::new(config.clone())).collect();
    for step in 0..5 {
        for root in &mut roots {
            root.tick(&host, NOW + step * 20);
        }
    }
    assert_eq!(roots.iter().filter(|r| r.is_leader()).count(), 1);
    let leader = roots.iter().position(ElectedPoller::is_leader).unwrap();
    roots.remove(leader); // gone without releasing: the lease must expire
    for step in 0..40 {
        for root in &mut roots {
            root.tick(&host, NOW + 200 + step * 20);
        }
    }
    assert_eq!(roots.iter().filter(|r| r.is_leader()).count(), 1);
}

#[test]
fn model_lists_are_fetched_after_the_first_round_and_published_with_the_pods() {
    let host = host();
    let mut service = service(&host, TWO_PODS);
    let mut answered = 0;
    service.tick(&host, NOW);
    answer_all(&host, &mut service, &mut answered, 200, METRICS);
    assert_eq!(table(&host).unwrap().pods[0].models, ["m"], "the base model from the metrics' labels");
    service.tick(&host, NOW + 100);
    let calls = host.calls.borrow().clone();
    let lists: Vec<_> =
        calls.iter().skip(answered).filter(|c| c.headers.contains(&(":path".into(), "/v1/models".into()))).collect();
    assert_eq!(lists.len(), 2, "one model list per pod");
    let catalog = r#"{"object":"list","data":[{"id":"m","parent":null},{"id":"sql-lora","parent":"m"}]}"#;
    for call in lists {
        *host.call_answer.borrow_mut() = Some((200, catalog.as_bytes().to_vec()));
        service.http_response(&host, call.token, catalog.len());
    }
    service.tick(&host, NOW + 200);
    let published = table(&host).unwrap();
    assert!(published.pods.iter().all(|p| p.adapters == ["sql-lora"]), "{published:?}");
    service.tick(&host, NOW + 300);
    let again =
        host.calls.borrow().iter().filter(|c| c.headers.contains(&(":path".into(), "/v1/models".into()))).count();
    assert_eq!(again, 2, "not asked again before models_interval_ms");
}

#[test]
fn a_first_round_never_seen_whole_is_published_once_its_scrapes_had_their_time() {
    // Pod 1 answers; pod 2's scrape is always in flight when an answer comes (its pages are
    // slower than the poll interval): no moment with nothing in flight ever ends the round.
    let host = host();
    let config = r#"{"pool": ["10.0.0.1:8000", "10.0.0.2:8000"], "poll_interval_ms": 100, "timeout_ms": 1000}"#;
    let mut service = service(&host, config);
    service.tick(&host, NOW);
    let first = host.calls.borrow()[0].token;
    *host.call_answer.borrow_mut() = Some((200, METRICS.as_bytes().to_vec()));
    service.http_response(&host, first, METRICS.len());
    assert!(table(&host).is_none(), "a scrape of the first round still in flight");
    service.tick(&host, NOW + 1_000);
    assert!(table(&host).is_none(), "its scrape may still answer");
    service.tick(&host, NOW + 2_000);
    let published = table(&host).expect("published once every first scrape answered or timed out");
    let healthy: Vec<&str> = published.pods.iter().filter(|p| p.healthy).map(|p| p.address.as_str()).collect();
    assert_eq!(healthy, ["10.0.0.1:8000"]);
}

#[test]
fn a_clock_stepped_back_does_not_stop_the_scrapes() {
    let host = host();
    let mut service = service(&host, TWO_PODS);
    let mut answered = 0;
    service.tick(&host, NOW);
    answer_all(&host, &mut service, &mut answered, 200, METRICS);
    let scrape = |headers: &[(String, String)]| headers.iter().any(|(k, v)| k == ":path" && v.starts_with("/metrics"));
    let sent = || host.calls.borrow().iter().filter(|call| scrape(&call.headers)).count();
    assert_eq!(sent(), 2);
    // The wall clock goes back a minute: the next round is due at once, not in a minute.
    service.tick(&host, NOW - 60_000);
    assert_eq!(sent(), 4, "a new round of scrapes");
    answer_all(&host, &mut service, &mut answered, 200, METRICS);
    service.tick(&host, NOW - 59_990);
    assert_eq!(sent(), 4, "then one round per interval again");
    service.tick(&host, NOW - 59_900);
    assert_eq!(sent(), 6);
}
