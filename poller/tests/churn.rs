//! Days of a discovered pool in a few seconds: every relist replaces the pods with pods on
//! new addresses, each serving LoRA adapters never seen before. The pool service's output
//! (the published table, shared data, Envoy's stats) must stay the size of the pool and of
//! the documented bounds, not grow with the history.

// Test support functions unwrap too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use picker::keys;
use picker::pod_table::PodTable;
use wasm_epp_host::mock::Call;
use wasm_epp_host::{MockHost, SharedStore};
use wasm_epp_poller::PoolService;

const NOW: u64 = 1_700_000_000_000;
/// Pods in the pool at any time.
const POOL: usize = 4;
/// Relists, each replacing the whole pool: 10,000 pods and 5,000 adapters come and go.
const ROUNDS: usize = 2_500;

fn ip(i: usize) -> String {
    format!("10.{}.{}.{}", 1 + i / 65_536, (i / 256) % 256, i % 256)
}

fn pod_list(ips: &[String], version: usize) -> String {
    let items: Vec<String> = ips
        .iter()
        .map(|ip| {
            format!(
                r#"{{"metadata": {{"name": "vllm-{ip}", "namespace": "llm"}}, "status": {{"phase": "Running",
                   "podIP": "{ip}", "conditions": [{{"type": "Ready", "status": "True"}}]}}}}"#
            )
        })
        .collect();
    format!(r#"{{"kind": "PodList", "metadata": {{"resourceVersion": "{version}"}}, "items": [{}]}}"#, items.join(","))
}

/// What a pod of round `round` answers: its metrics (the round's adapters loaded) or its
/// model list (them again, with the base).
fn answer(call: &Call, round: usize) -> (u16, String) {
    let header = |name: &str| call.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
    if call.cluster != "wasm_epp_metrics" {
        let ips: Vec<String> = (0..POOL).map(|i| ip(round * POOL + i)).collect();
        return (200, pod_list(&ips, round));
    }
    let adapters = [format!("lora-{}", 2 * round), format!("lora-{}", 2 * round + 1)];
    if header(":path").as_deref() == Some("/v1/models") {
        let data: Vec<String> =
            adapters.iter().map(|a| format!(r#"{{"id":"{a}","object":"model","parent":"m"}}"#)).collect();
        return (200, format!(r#"{{"object":"list","data":[{{"id":"m","object":"model"}},{}]}}"#, data.join(",")));
    }
    let metrics = format!(
        "vllm:num_requests_waiting{{model_name=\"m\"}} 1.0\n\
         vllm:num_requests_running{{model_name=\"m\"}} 1.0\n\
         vllm:kv_cache_usage_perc{{model_name=\"m\"}} 0.25\n\
         vllm:prefix_cache_queries_total{{model_name=\"m\"}} {}\n\
         vllm:lora_requests_info{{max_lora=\"2\",running_lora_adapters=\"{}\",waiting_lora_adapters=\"\"}} 1.7e9\n",
        1_000 + round,
        adapters.join(",")
    );
    (200, metrics)
}

fn answer_all(host: &MockHost, service: &mut PoolService, answered: &mut usize, round: usize) {
    // Only the calls not answered yet are copied: the list grows by thousands per minute.
    let calls: Vec<Call> = host.calls.borrow().iter().skip(*answered).cloned().collect();
    *answered += calls.len();
    for call in &calls {
        let (status, body) = answer(call, round);
        *host.call_answer.borrow_mut() = Some((status, body.clone().into_bytes()));
        service.http_response(host, call.token, body.len());
    }
}

fn table(host: &MockHost) -> PodTable {
    PodTable::decode(&host.get(keys::POD_TABLE).unwrap().0.unwrap()).unwrap()
}

#[test]
fn a_discovered_pool_replaced_ten_thousand_times_over_stays_the_size_of_the_pool() {
    let host = MockHost::new();
    host.clock_ms.set(NOW);
    let config = r#"{"kubernetes": {"namespace": "llm", "label_selector": "app=vllm", "target_port": 8000,
                     "relist_interval_ms": 1000}, "poll_interval_ms": 100, "models_interval_ms": 100}"#;
    let mut service = PoolService::default();
    service.configure(&host, config.as_bytes()).unwrap();
    let mut answered = 0;
    let mut keys_early = 0;
    let mut now = NOW;
    for round in 0..ROUNDS {
        // A relist (new pods), then rounds of scrapes and model lists until they are known.
        for step in 0..4 {
            now += if step == 0 { 1_000 } else { 100 };
            host.clock_ms.set(now);
            service.tick(&host, now);
            answer_all(&host, &mut service, &mut answered, round);
        }
        let published = table(&host);
        let mut addresses: Vec<String> = published.pods.iter().map(|p| p.address.to_string()).collect();
        let mut expected: Vec<String> = (0..POOL).map(|i| format!("{}:8000", ip(round * POOL + i))).collect();
        addresses.sort();
        expected.sort();
        assert_eq!(addresses, expected, "round {round}: the table holds this round's pods only");
        assert!(published.pods.iter().all(|p| p.healthy), "round {round}: {published:?}");
        let adapters = [format!("lora-{}", 2 * round), format!("lora-{}", 2 * round + 1)];
        for pod in &published.pods {
            assert_eq!(pod.adapters, adapters, "round {round}: {}'s adapters are its own", pod.address);
        }
        if round == 10 {
            keys_early = host.store.key_count();
        }
    }
    assert_eq!(host.store.key_count(), keys_early, "shared data: a fixed key set, none per pod");
    let names = host.metric_names.borrow();
    let per_pod = names.iter().filter(|(n, _)| n.contains(".pod.")).count();
    assert_eq!(per_pod, 8 * wasm_epp_poller::pod_gauges::MAX_POD_SERIES_EVER, "per-pod gauges stop at their bound");
    assert!(names.len() < per_pod + 200, "no other stat per pod or adapter: {}", names.len() - per_pod);
}
