//! One request through the request path the filter ships (`wasm_epp_router`), natively, on a
//! [`MockHost`]: no copy of the pipeline here, only the state it reads and the calls Envoy
//! makes.
//!
//! State, built once per case outside the timed loop: a [`Worker`] from
//! `wasm_epp_router::configure` on the filter's default JSON configuration; a pod table of N
//! healthy pods with varied load, published into the mock's shared data as the pool service
//! publishes it, with a fresh heartbeat; in-flight counts for most pods; the worker's prefix
//! replica warmed with [`WARM_INDEX_ENTRIES`] entries of unrelated prompts plus the request's
//! own first half on every fourth pod, so a lookup walks real matches.
//!
//! Timed: [`Case::request`] is what Envoy drives per request (headers → body → decision →
//! destination header → `on_log`, and the worker's tick every [`PICKS_PER_SYNC`] requests);
//! [`Case::decide`] is the body parse and the router's decision alone (pick, prefix record,
//! in-flight count), its in-flight release left to [`Case::settle_decision`], untimed.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use picker::address::PodAddress;
use picker::prefix::{HashParams, WorkerPrefix, EVENT_QUEUE};
use picker::random::TieBreaker;
use picker::request::{parse_request, Endpoint};
use picker::route::{choose, PrefixQuery, Route, RoutingView};
use wasm_epp_host::{HeaderMap, Host, MockHost};
use wasm_epp_router::decision::{decide, Outcome, Prompt};
use wasm_epp_router::{configure, tick, RequestStream, Step, Worker};

use crate::workload;

mod flow;
mod state;

pub use flow::FlowScan;

use state::{count_inflight, warm_prefix, FILTER_CONFIG, PICKS_PER_SYNC, WORKER_SEED};
pub use state::{pod_address, pod_table, publish, BLOCK_SIZE, NOW_MS, POD_CAPACITY_BLOCKS, WARM_INDEX_ENTRIES};

/// [`pod_table`] (one version later) where every pod serves the base model and `adapters`
/// adapters, two of them resident and running (pod `i` holds adapters `i` and `i + 1`).
pub fn adapter_table(pods: usize, adapters: usize) -> Result<picker::pod_table::PodTable, String> {
    let mut table = pod_table(pods)?;
    table.version += 1;
    for (i, pod) in table.pods.iter_mut().enumerate() {
        pod.models = vec![crate::workload::MODEL.to_owned()];
        pod.adapters = (0..adapters).map(|a| format!("adapter-{a}")).collect();
        pod.max_loras = 2;
        pod.resident_loras = (0..2).map(|k| format!("adapter-{}", (i + k) % adapters.max(1))).collect();
        pod.running_loras = pod.resident_loras.clone();
    }
    Ok(table)
}

/// One ABI function's traffic per request (averaged over many, ticks included).
#[derive(Debug, Clone, PartialEq)]
pub struct HostTraffic {
    pub function: &'static str,
    pub calls: f64,
    /// Bytes copied into the VM.
    pub bytes_in: f64,
    /// Bytes handed to the host.
    pub bytes_out: f64,
}

/// One benchmark case: a configured worker on a mock host, and the request it serves.
pub struct Case {
    pub host: MockHost,
    pub worker: Rc<Worker>,
    pub body: String,
    pub endpoint: Endpoint,
    pub params: HashParams,
    /// The request's headers as the client sends them (restored before each request).
    headers: HeaderMap,
    /// The pod the last [`Case::decide`] counted in flight, not yet released.
    unreleased: RefCell<Option<PodAddress>>,
    /// Its prefill pod under P/D, with the prompt tokens counted on it ([`Case::with_pd`]).
    unreleased_prefill: RefCell<Option<(PodAddress, u32)>>,
    requests: Cell<u32>,
    /// The model the decision asks for (`None`: any pod; see [`Case::with_adapters`]).
    pub model: Option<String>,
}

impl Case {
    /// A `prompt_kb` KB prompt of `endpoint` against `pods` pods, with the filter's defaults.
    pub fn new(endpoint: Endpoint, prompt_kb: usize, pods: usize) -> Result<Self, String> {
        Self::configured(FILTER_CONFIG, endpoint, prompt_kb, pods)
    }

    /// [`Case::new`] with the plugin configuration `config`.
    pub fn configured(config: &str, endpoint: Endpoint, prompt_kb: usize, pods: usize) -> Result<Self, String> {
        let host = MockHost::new();
        // The worker started serving a while ago: its first seconds, when its decisions are
        // linearized (`picker::inflight::SLOT_DISCOVERY_MS`), are over by the benchmark's time.
        host.clock_ms.set(NOW_MS - picker::inflight::SLOT_DISCOVERY_MS);
        *host.configuration.borrow_mut() = config.as_bytes().to_vec();
        let worker = configure(&host, config.len(), WORKER_SEED).map_err(|e| e.to_string())?;
        // What the filter's first HTTP context and the pool service do before requests.
        worker.serving.set(true);
        tick::on_tick(&worker, &host);
        host.clock_ms.set(NOW_MS);
        host.register_queue(EVENT_QUEUE).map_err(|e| e.to_string())?;
        publish(&host, &pod_table(pods)?)?;
        count_inflight(&host, pods, worker.config.inflight_expiry_ms)?;
        let body = workload::body(endpoint, prompt_kb * 1024, 42);
        let params = worker.config.prefix.hash_params(Some(BLOCK_SIZE));
        warm_prefix(&mut worker.prefix.borrow_mut(), &params, pods, &body, endpoint)?;
        tick::on_tick(&worker, &host);
        let length = body.len().to_string();
        let headers = HeaderMap::from_pairs(&[
            (":method", "POST"),
            (":path", workload::path(endpoint)),
            (":authority", "inference.local"),
            ("content-type", "application/json"),
            ("content-length", &length),
        ]);
        *host.body.borrow_mut() = body.as_bytes().to_vec();
        let case = Self {
            host,
            worker: Rc::new(worker),
            body,
            endpoint,
            params,
            headers,
            unreleased: RefCell::new(None),
            unreleased_prefill: RefCell::new(None),
            requests: Cell::new(0),
            model: None,
        };
        case.next_request();
        Ok(case)
    }

    /// [`Case::new`] on a pool where every pod serves the base model and `adapters` LoRA
    /// adapters, two of them resident, and the decision asks for one adapter: the model filter
    /// and the LoRA tiers run on every pod.
    pub fn with_adapters(endpoint: Endpoint, prompt_kb: usize, pods: usize, adapters: usize) -> Result<Self, String> {
        let mut case = Self::new(endpoint, prompt_kb, pods)?;
        publish(&case.host, &adapter_table(pods, adapters)?)?;
        tick::on_tick(&case.worker, &case.host);
        case.model = Some(format!("adapter-{}", adapters.saturating_sub(1)));
        Ok(case)
    }

    /// [`Case::new`] under P/D (`pd.threshold_tokens` 1024): the first `prefill_pods` pods of
    /// the table prefill, the other `decode_pods` decode, so a long prompt takes both picks.
    pub fn with_pd(
        endpoint: Endpoint,
        prompt_kb: usize,
        prefill_pods: usize,
        decode_pods: usize,
    ) -> Result<Self, String> {
        let pods = prefill_pods + decode_pods;
        let case = Self::configured(r#"{"pd": {"threshold_tokens": 1024}}"#, endpoint, prompt_kb, pods)?;
        let mut table = pod_table(pods)?;
        table.version += 1;
        for (i, pod) in table.pods.iter_mut().enumerate() {
            pod.role = if i < prefill_pods { picker::role::PodRole::Prefill } else { picker::role::PodRole::Decode };
        }
        publish(&case.host, &table)?;
        tick::on_tick(&case.worker, &case.host);
        Ok(case)
    }

    /// Between requests (untimed): the client's headers again, as Envoy hands a new request
    /// over, and the pool service's side: it drains the decisions the worker queued.
    pub fn next_request(&self) {
        *self.host.headers.borrow_mut() = self.headers.clone();
        self.host.queue_messages.borrow_mut().values_mut().for_each(std::collections::VecDeque::clear);
    }

    /// One request as Envoy drives the filter: headers (held), the whole body (decision,
    /// destination header), `on_log` (in-flight release); every [`PICKS_PER_SYNC`] requests
    /// the worker's tick (send and learn decisions, flush stats). Call [`Case::next_request`]
    /// before each.
    pub fn request(&self) -> Result<(), String> {
        let mut stream = RequestStream::new(Rc::clone(&self.worker));
        let held = stream.on_request_headers(&self.host, false);
        let routed = stream.on_request_body(&self.host, self.body.len(), true);
        stream.on_log(&self.host);
        self.tick_now_and_then();
        if (held, routed) != (Step::Pause, Step::Continue) {
            return Err(format!(
                "headers answered {held:?}, body {routed:?}; replies {:?}",
                self.host.replies.borrow()
            ));
        }
        Ok(())
    }

    /// Host traffic of `requests` requests as [`Case::request`] drives them (ticks included),
    /// averaged per request, by ABI function. The setup's own calls are not counted.
    pub fn host_traffic(&self, requests: u32) -> Result<Vec<HostTraffic>, String> {
        self.host.tally.take();
        for _ in 0..requests {
            self.next_request();
            self.request()?;
        }
        let n = f64::from(requests.max(1));
        let traffic = self.host.tally.take().into_iter().map(|(function, count)| HostTraffic {
            function,
            calls: count.calls as f64 / n,
            bytes_in: count.bytes_in as f64 / n,
            bytes_out: count.bytes_out as f64 / n,
        });
        Ok(traffic.collect())
    }

    /// The destination header the last request left in the mock.
    pub fn destination(&self) -> Option<String> {
        self.host.header(&self.worker.config.destination_header)
    }

    /// The body parse and the router's decision on it (read table and in-flight counts, hash,
    /// choose, record the pick, count it in flight). Call [`Case::settle_decision`] after each.
    pub fn decide(&self) -> Option<PodAddress> {
        let request = parse_request(self.body.as_bytes(), self.endpoint).ok()?;
        let prompt = Prompt {
            request: Some(&request),
            endpoint: self.endpoint,
            session: None,
            session_pinned: false,
            sheddable: false,
            model: self.model.as_deref(),
            subset: None,
            slo_ttft_ms: None,
            weight: 1, // as `settle_decision` releases it
            band: None,
        };
        let Outcome::Routed { address, prefiller, .. } = decide(&self.worker, &self.host, &prompt) else {
            return None;
        };
        self.unreleased.replace(Some(address.clone()));
        self.unreleased_prefill.replace(prefiller.map(|p| (p.address, p.uncached_tokens)));
        Some(address)
    }

    /// After a [`Case::decide`] (untimed): release its in-flight count as `on_log` would, and
    /// tick now and then, so every decision starts from the same state.
    pub fn settle_decision(&self) {
        if let Some(address) = self.unreleased.take() {
            if let Ok(mut inflight) = self.worker.inflight.try_borrow_mut() {
                inflight.finished(address.as_str(), 1, NOW_MS);
            }
        }
        if let Some((address, tokens)) = self.unreleased_prefill.take() {
            if let Ok(mut inflight) = self.worker.inflight.try_borrow_mut() {
                inflight.finished(address.as_str(), 1, NOW_MS);
                inflight.release_tokens(address.as_str(), tokens);
            }
        }
        self.tick_now_and_then();
        self.next_request();
    }

    fn tick_now_and_then(&self) {
        let requests = self.requests.get().wrapping_add(1);
        self.requests.set(requests);
        if requests.is_multiple_of(PICKS_PER_SYNC) {
            tick::on_tick(&self.worker, &self.host);
        }
    }

    /// Requests in flight to `pod` as the router sees them (its own and other workers').
    pub fn inflight_of(&self, pod: &str) -> u32 {
        self.worker.inflight.try_borrow().map_or(0, |inflight| inflight.count(pod))
    }

    /// `route::choose` alone on the worker's table, prefix replica and policy (one step of
    /// the decision, to show where its time goes).
    pub fn choose(&self, prefix: &WorkerPrefix, hashes: &[u64], random: &mut TieBreaker) -> Option<Route> {
        let cache = self.worker.table.try_borrow().ok()?;
        let last_picked = |pod: &str| prefix.last_picked(pod);
        let view = RoutingView {
            table: cache.table(),
            fallback_pool: &self.worker.fallback_pool,
            inflight: &|pod: &str| self.inflight_of(pod),
            prefix: Some(PrefixQuery {
                index: prefix.index(),
                hashes,
                session_pod: None,
                session_pinned: false,
                last_picked: &last_picked,
                reuse: prefix.reuse(),
            }),
            now_ms: NOW_MS,
            stale_after_ms: self.worker.config.stale_after_ms,
            ejected: &[],
            models: picker::route::ModelQuery { model: self.model.as_deref(), ..Default::default() },
            learning: None,
        };
        choose(&view, &self.worker.policy, random).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inflight_total(case: &Case) -> i64 {
        (0..2).map(|i| i64::from(case.inflight_of(&pod_address(i)))).sum()
    }

    #[test]
    fn a_request_routes_to_a_pool_pod_through_the_router_and_releases_its_count() {
        let case = Case::new(Endpoint::Completions, 1, 2).unwrap();
        let before = inflight_total(&case);
        for _ in 0..PICKS_PER_SYNC + 1 {
            case.next_request();
            case.request().unwrap();
            let destination = case.destination().unwrap();
            let first = destination.split(',').next().unwrap();
            assert!([pod_address(0), pod_address(1)].iter().any(|p| p == first), "{destination}");
            assert_eq!(inflight_total(&case), before, "on_log released the request's count");
        }
        assert!(case.host.replies.borrow().is_empty());
        assert_eq!(case.worker.buffered_bytes.get(), 0);
    }

    #[test]
    fn host_traffic_counts_the_request_paths_calls_per_request() {
        let case = Case::new(Endpoint::Completions, 4, 16).unwrap();
        let traffic = case.host_traffic(PICKS_PER_SYNC * 4).unwrap();
        for t in &traffic {
            eprintln!("{:40} {:8.3} {:10.1} {:10.1}", t.function, t.calls, t.bytes_in, t.bytes_out);
        }
        let of = |name: &str| traffic.iter().find(|t| t.function == name).map_or(0.0, |t| t.calls);
        assert_eq!(of("proxy_get_header_map_pairs"), 1.0, "one read of the request headers");
        // Past a worker's first seconds of serving, decisions are not linearized: the pick's
        // and the end's publish, the tick's now and then, and no decision-counter write.
        assert!(of("proxy_set_shared_data") < 2.5, "{} writes per request", of("proxy_set_shared_data"));
        let body = traffic.iter().find(|t| t.function == "proxy_get_buffer_bytes").unwrap();
        assert_eq!(body.bytes_in, case.body.len() as f64, "the body is copied in once");
    }

    #[test]
    fn a_settled_decision_leaves_the_counts_as_they_were() {
        let case = Case::new(Endpoint::ChatCompletions, 1, 2).unwrap();
        let before = inflight_total(&case);
        assert!(case.decide().is_some());
        assert_eq!(inflight_total(&case), before + 1, "the decision counts its pick in flight");
        case.settle_decision();
        assert_eq!(inflight_total(&case), before);
    }
}
