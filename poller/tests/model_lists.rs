//! Each pod's `/v1/models`, natively against the in-memory host: a list that cannot be had
//! is counted and told of once per pod and kind; pods started with an API key get it.

// Test support functions unwrap too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use picker::keys;
use picker::pod_table::PodTable;
use wasm_epp_host::mock::Call;
use wasm_epp_host::warnings::logged_warnings;
use wasm_epp_host::{MockHost, SharedStore};
use wasm_epp_poller::PoolService;

const NOW: u64 = 1_700_000_000_000;

const METRICS: &str = "vllm:num_requests_waiting{model_name=\"m\"} 2.0\n\
vllm:num_requests_running{model_name=\"m\"} 1.0\n\
vllm:kv_cache_usage_perc{model_name=\"m\"} 0.25\n";

const CATALOG: &str = r#"{"object":"list","data":[{"id":"m","parent":null},{"id":"sql-lora","parent":"m"}]}"#;

const TWO_PODS: &str = r#"{"pool": ["10.0.0.1:8000", "10.0.0.2:8000"], "poll_interval_ms": 100}"#;

/// The warnings logged on this thread so far (the logger is installed on first use).
fn warnings() -> Vec<String> {
    logged_warnings()
}

fn host() -> MockHost {
    let host = MockHost::new();
    host.clock_ms.set(NOW);
    host
}

fn service(host: &MockHost, config: &str) -> PoolService {
    warnings();
    let mut service = PoolService::default();
    service.configure(host, config.as_bytes()).unwrap();
    service
}

fn table(host: &MockHost) -> PodTable {
    let (bytes, _) = host.get(keys::POD_TABLE).unwrap();
    PodTable::decode(&bytes.unwrap()).unwrap()
}

fn is_model_list(call: &Call) -> bool {
    call.headers.contains(&(":path".into(), "/v1/models".into()))
}

/// Answers every call dispatched since `answered`: scrapes with the metrics page, model
/// lists with `(status, body)`.
fn answer(host: &MockHost, service: &mut PoolService, answered: &mut usize, status: u16, body: &str) {
    let calls = host.calls.borrow().clone();
    for call in calls.iter().skip(*answered) {
        let (status, body) = if is_model_list(call) { (status, body) } else { (200, METRICS) };
        *host.call_answer.borrow_mut() = Some((status, body.as_bytes().to_vec()));
        service.http_response(host, call.token, body.len());
    }
    *answered = calls.len();
}

/// Runs `rounds` model-list rounds (`models_interval_ms` apart) answered with `(status, body)`.
fn model_list_rounds(host: &MockHost, service: &mut PoolService, rounds: u64, status: u16, body: &str) {
    let mut answered = 0;
    service.tick(host, NOW);
    answer(host, service, &mut answered, 200, METRICS);
    for round in 0..rounds {
        service.tick(host, NOW + 100 + round * 5_000);
        answer(host, service, &mut answered, status, body);
    }
    // Publishes what the last round learned, before the next round is due.
    service.tick(host, NOW + 200 + rounds.saturating_sub(1) * 5_000);
}

#[test]
fn a_pod_refusing_its_model_list_is_counted_and_told_of_once() {
    let host = host();
    let mut service = service(&host, TWO_PODS);
    let refused = r#"{"error":"Unauthorized"}"#;
    model_list_rounds(&host, &mut service, 3, 401, refused);
    assert_eq!(host.calls.borrow().iter().filter(|c| is_model_list(c)).count(), 6, "two pods, three rounds");
    assert_eq!(host.metric("wasm_epp.model_list_failures"), 6);
    let told = warnings();
    assert_eq!(told.len(), 2, "once per pod, not once per fetch: {told:?}");
    for (warning, pod) in told.iter().zip(["10.0.0.1:8000", "10.0.0.2:8000"]) {
        assert!(warning.contains(pod) && warning.contains("401"), "{warning}");
        assert!(warning.contains("--api-key") && warning.contains("pods_api_key_env"), "says what to do: {warning}");
    }
    assert!(table(&host).pods.iter().all(|p| p.adapters.is_empty()), "nothing learned from a refusal");
}

#[test]
fn another_failure_of_the_same_pod_is_told_of_too() {
    let host = host();
    let mut service = service(&host, TWO_PODS);
    model_list_rounds(&host, &mut service, 1, 401, "");
    let mut answered = host.calls.borrow().len();
    service.tick(&host, NOW + 10_100);
    answer(&host, &mut service, &mut answered, 503, "");
    service.tick(&host, NOW + 10_200); // stats are flushed on ticks
    assert_eq!(host.metric("wasm_epp.model_list_failures"), 4);
    let told = warnings();
    assert_eq!(told.len(), 4, "401 and 503 for each pod: {told:?}");
    assert!(told[2].contains("503") && told[2].contains("models_interval_ms to 0"), "{}", told[2]);
}

#[test]
fn good_model_lists_are_not_failures() {
    let host = host();
    let mut service = service(&host, TWO_PODS);
    model_list_rounds(&host, &mut service, 2, 200, CATALOG);
    assert_eq!(host.metric("wasm_epp.model_list_failures"), 0);
    assert!(warnings().is_empty());
    assert!(table(&host).pods.iter().all(|p| p.adapters == ["sql-lora"]));
}

#[test]
fn a_model_list_over_max_models_bytes_marks_its_pod_as_naming_more_and_keeps_its_earlier_names() {
    let host = host();
    let config = r#"{"pool": ["10.0.0.1:8000"], "poll_interval_ms": 100, "max_models_bytes": 1024}"#;
    let mut service = service(&host, config);
    model_list_rounds(&host, &mut service, 1, 200, CATALOG);
    let pod = table(&host).pods.remove(0);
    assert_eq!((pod.adapters.as_slice(), pod.names_cut), (&["sql-lora".to_owned()][..], false));
    // The pod registered many more adapters since: its list no longer fits.
    let cards: Vec<String> = (0..100).map(|i| format!(r#"{{"id":"tenant-{i}","parent":"m"}}"#)).collect();
    let big = format!(r#"{{"object":"list","data":[{}]}}"#, cards.join(","));
    let mut answered = host.calls.borrow().len();
    service.tick(&host, NOW + 5_100);
    answer(&host, &mut service, &mut answered, 200, &big);
    service.tick(&host, NOW + 5_200);
    let pod = table(&host).pods.remove(0);
    assert!(pod.names_cut, "a request for tenant-70 goes to it, not to the gateway's 404");
    assert_eq!(pod.adapters, ["sql-lora"], "what its earlier list said is kept");
    assert_eq!(host.metric("wasm_epp.model_list_failures"), 1);
    let told = warnings();
    assert!(told.iter().any(|w| w.contains("max_models_bytes") && w.contains("by load")), "{told:?}");
    // Each scrape merges the kept list: the mark stays until a list that fits comes.
    let mut answered = host.calls.borrow().len();
    service.tick(&host, NOW + 5_300);
    answer(&host, &mut service, &mut answered, 200, &big);
    service.tick(&host, NOW + 5_400);
    assert!(table(&host).pods[0].names_cut);
}

const POD_KEY: &str = "sk-pool-key";

fn authorization(call: &Call) -> Option<&str> {
    call.headers.iter().find(|(name, _)| name == "authorization").map(|(_, value)| value.as_str())
}

/// Answers every call since `answered` as vLLM started with `--api-key key` does: `/v1`
/// paths only with `Authorization: Bearer key` (401 without), `/metrics` open.
fn answer_as_vllm_with_key(host: &MockHost, service: &mut PoolService, answered: &mut usize, key: &str) {
    let calls = host.calls.borrow().clone();
    for call in calls.iter().skip(*answered) {
        let (status, body) = match is_model_list(call) {
            true if authorization(call) == Some(format!("Bearer {key}").as_str()) => (200, CATALOG),
            true => (401, r#"{"error":"Unauthorized"}"#),
            false => (200, METRICS),
        };
        *host.call_answer.borrow_mut() = Some((status, body.as_bytes().to_vec()));
        service.http_response(host, call.token, body.len());
    }
    *answered = calls.len();
}

/// Two rounds of scrapes and model lists against pods that want `POD_KEY`, then a publish.
fn rounds_against_pods_with_a_key(host: &MockHost, service: &mut PoolService) {
    let mut answered = 0;
    for round in 0..2 {
        service.tick(host, NOW + round * 5_000);
        answer_as_vllm_with_key(host, service, &mut answered, POD_KEY);
        service.tick(host, NOW + 100 + round * 5_000);
        answer_as_vllm_with_key(host, service, &mut answered, POD_KEY);
    }
    service.tick(host, NOW + 5_200);
}

fn with_key(config: &str, key: &str) -> (MockHost, PoolService) {
    let host = host();
    host.env.borrow_mut().insert("VLLM_API_KEY".into(), format!("{key}\n"));
    let service = service(&host, config);
    (host, service)
}

const TWO_PODS_WITH_KEY: &str =
    r#"{"pool": ["10.0.0.1:8000", "10.0.0.2:8000"], "poll_interval_ms": 100, "pods_api_key_env": "VLLM_API_KEY"}"#;

#[test]
fn pods_started_with_an_api_key_list_their_adapters_to_the_key_sent() {
    // Without the key, such pods refuse their lists and their adapters stay unknown.
    let host = host();
    let mut service = service(&host, TWO_PODS);
    rounds_against_pods_with_a_key(&host, &mut service);
    assert!(table(&host).pods.iter().all(|p| p.adapters.is_empty()));
    assert_eq!(host.metric("wasm_epp.model_list_failures"), 4);

    let (host, mut service) = with_key(TWO_PODS_WITH_KEY, POD_KEY);
    rounds_against_pods_with_a_key(&host, &mut service);
    let published = table(&host);
    assert!(published.pods.iter().all(|p| p.adapters == ["sql-lora"]), "{published:?}");
    assert_eq!(host.metric("wasm_epp.model_list_failures"), 0);
    let calls = host.calls.borrow();
    let (lists, scrapes): (Vec<&Call>, Vec<&Call>) = calls.iter().partition(|c| is_model_list(c));
    assert!(lists.len() == 4 && lists.iter().all(|c| authorization(c) == Some("Bearer sk-pool-key")), "{lists:?}");
    assert!(scrapes.iter().all(|c| authorization(c).is_none()), "/metrics is open: no key sent there");
}

#[test]
fn the_key_goes_with_scrapes_only_when_asked() {
    let config = r#"{"pool": ["10.0.0.1:8000"], "pods_api_key_env": "VLLM_API_KEY", "pods_api_key_on_metrics": true}"#;
    let (host, mut service) = with_key(config, POD_KEY);
    rounds_against_pods_with_a_key(&host, &mut service);
    let calls = host.calls.borrow();
    assert!(calls.iter().any(|c| !is_model_list(c)), "scrapes were sent");
    assert!(calls.iter().all(|c| authorization(c) == Some("Bearer sk-pool-key")), "{calls:?}");
}

#[test]
fn a_key_the_pods_refuse_is_told_of_as_such() {
    let (host, mut service) = with_key(TWO_PODS_WITH_KEY, "sk-stale-key");
    rounds_against_pods_with_a_key(&host, &mut service);
    assert_eq!(host.metric("wasm_epp.model_list_failures"), 4);
    let told = warnings();
    assert_eq!(told.len(), 2, "{told:?}");
    assert!(told.iter().all(|w| w.contains("the key in VLLM_API_KEY") && !w.contains("sk-stale")), "{told:?}");
}

#[test]
fn a_key_variable_the_vm_lacks_stops_the_service() {
    let host = host();
    let mut service = PoolService::default();
    let refused = service.configure(&host, TWO_PODS_WITH_KEY.as_bytes()).unwrap_err();
    assert!(refused.contains("VLLM_API_KEY") && refused.contains("host_env_keys"), "{refused}");
}

/// A scrape of a pod with `running` and `waiting` adapters in its requests and `registered`
/// adapters held (all on the GPU, `t-0`...), and its `/v1/models` listing `listed` of them.
fn pod_naming(running: usize, waiting: usize, registered: usize, listed: usize) -> (String, String) {
    let names = |count: usize| (0..count).map(|i| format!("t-{i}")).collect::<Vec<_>>();
    let mut page = format!(
        "{METRICS}vllm:lora_requests_info{{max_lora=\"4\",running_lora_adapters=\"{}\",waiting_lora_adapters=\"{}\"}} 1.8e9\n",
        names(running).join(","),
        names(waiting).join(",")
    );
    for name in names(registered) {
        page += &format!("vllm:lora_adapter_loaded{{adapter_name=\"{name}\",level=\"gpu\"}} 1\n");
    }
    let cards = names(listed).into_iter().map(|name| format!(r#"{{"id":"{name}","parent":"m"}}"#));
    let cards: Vec<String> = std::iter::once(r#"{"id":"m","parent":null}"#.to_owned()).chain(cards).collect();
    (page, format!(r#"{{"object":"list","data":[{}]}}"#, cards.join(",")))
}

#[test]
fn every_name_list_keeps_max_names_per_pod_from_every_source_and_a_pod_naming_more_is_marked() {
    let with_bound = r#"{"pool": ["10.0.0.1:8000"], "poll_interval_ms": 100, "max_names_per_pod": 300}"#;
    let default = r#"{"pool": ["10.0.0.1:8000"], "poll_interval_ms": 100}"#;
    // (config, running, waiting, registered, listed) → lengths of (running, waiting, adapters,
    // resident) in the published table, and whether the pod is marked as naming more.
    let cases = [
        (with_bound, (300, 300, 300, 300), (300, 300, 300, 300), false),
        (with_bound, (301, 0, 10, 10), (300, 0, 10, 10), true),
        (with_bound, (0, 301, 10, 10), (0, 300, 10, 10), true),
        (with_bound, (0, 0, 301, 10), (0, 0, 300, 300), true),
        (with_bound, (0, 0, 10, 301), (0, 0, 300, 10), true),
        (default, (100, 100, 100, 100), (64, 64, 64, 64), true),
        (default, (64, 64, 64, 64), (64, 64, 64, 64), false),
    ];
    for (config, (running, waiting, registered, listed), expected, cut) in cases {
        let host = host();
        let mut service = service(&host, config);
        let (page, catalog) = pod_naming(running, waiting, registered, listed);
        let mut answered = 0;
        for at in [NOW, NOW + 100, NOW + 200] {
            service.tick(&host, at);
            let calls = host.calls.borrow().clone();
            for call in calls.iter().skip(answered) {
                let body = if is_model_list(call) { &catalog } else { &page };
                *host.call_answer.borrow_mut() = Some((200, body.as_bytes().to_vec()));
                service.http_response(&host, call.token, body.len());
            }
            answered = calls.len();
        }
        let pod = table(&host).pods.remove(0);
        let lengths = (pod.running_loras.len(), pod.waiting_loras.len(), pod.adapters.len(), pod.resident_loras.len());
        let case = format!("{config}: {running} running, {waiting} waiting, {registered} registered, {listed} listed");
        assert_eq!((lengths, pod.names_cut), (expected, cut), "{case}");
        assert_eq!(host.metric("wasm_epp.pods_names_cut"), u64::from(cut), "{case}");
        assert_eq!(pod.models, ["m"], "{case}");
    }
}
