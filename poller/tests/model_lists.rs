//! Each pod's `/v1/models`, natively against the in-memory host: a list that cannot be had
//! is counted and told of once per pod and kind.

// Test support functions unwrap too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::cell::RefCell;

use picker::keys;
use picker::pod_table::PodTable;
use wasm_epp_host::mock::Call;
use wasm_epp_host::{MockHost, SharedStore};
use wasm_epp_poller::PoolService;

const NOW: u64 = 1_700_000_000_000;

const METRICS: &str = "vllm:num_requests_waiting{model_name=\"m\"} 2.0\n\
vllm:num_requests_running{model_name=\"m\"} 1.0\n\
vllm:kv_cache_usage_perc{model_name=\"m\"} 0.25\n";

const CATALOG: &str = r#"{"object":"list","data":[{"id":"m","parent":null},{"id":"sql-lora","parent":"m"}]}"#;

const TWO_PODS: &str = r#"{"pool": ["10.0.0.1:8000", "10.0.0.2:8000"], "poll_interval_ms": 100}"#;

thread_local! {
    /// What this test's thread logged at warning level (each test runs on its own thread).
    static WARNINGS: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

struct WarningLog;

impl log::Log for WarningLog {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::Level::Warn
    }

    fn log(&self, record: &log::Record<'_>) {
        if self.enabled(record.metadata()) {
            WARNINGS.with(|w| w.borrow_mut().push(record.args().to_string()));
        }
    }

    fn flush(&self) {}
}

static LOGGER: WarningLog = WarningLog;

/// The warnings logged on this thread so far (the logger is installed on first use).
fn warnings() -> Vec<String> {
    // Err: already installed by another test of this binary.
    let _ = log::set_logger(&LOGGER).map(|()| log::set_max_level(log::LevelFilter::Warn));
    WARNINGS.with(|w| w.borrow().clone())
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
        assert!(warning.contains("--api-key"), "says why: {warning}");
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
