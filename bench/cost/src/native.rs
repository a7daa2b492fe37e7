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
use picker::inflight::InflightCounts;
use picker::pod_table::{encode_version, PodState, PodTable};
use picker::prefix::{hash_prompt, HashParams, WorkerPrefix, EVENT_QUEUE};
use picker::random::TieBreaker;
use picker::request::{parse_request, Endpoint};
use picker::route::{choose, PrefixQuery, Route, RoutingView};
use picker::{keys, store::SharedStore};
use wasm_epp_host::{HeaderMap, Host, MockHost};
use wasm_epp_router::decision::{decide, Outcome, Prompt};
use wasm_epp_router::{configure, tick, RequestStream, Step, Worker};

use crate::workload;

/// The host clock the decision sees; pods were scraped 40 ms before it.
pub const NOW_MS: u64 = 1_700_000_000_000;

/// The plugin configuration: the filter's defaults, as Envoy would pass `{}`.
pub const FILTER_CONFIG: &str = "{}";

/// Entries in the warm prefix index: most of the filter's default budget (262,144).
pub const WARM_INDEX_ENTRIES: usize = 200_000;

/// KV capacity per pod in blocks (the simulator's small preset).
pub const POD_CAPACITY_BLOCKS: usize = 16_384;

/// Block size the pods report, in tokens.
pub const BLOCK_SIZE: u32 = 16;

/// Prompts recorded at most while warming (each adds up to 64 entries).
const MAX_WARM_PROMPTS: usize = 100_000;

/// Requests between two worker ticks (the filter ticks every 20 ms; at tens of µs per request
/// a busy worker serves far more than this in between, so this overstates the tick's share).
pub const PICKS_PER_SYNC: u32 = 32;

/// The tie-breaking and keyed-hashing seed of the benchmark's worker (fixed: runs compare).
const WORKER_SEED: u64 = 7;

/// `10.x.y.z:8000` for pod `i`: distinct literal addresses for any pool size.
pub fn pod_address(i: usize) -> String {
    let n = i + 1;
    format!("10.{}.{}.{}:8000", (n >> 16) & 0xff, (n >> 8) & 0xff, n & 0xff)
}

/// A table of `pods` healthy pods with queues, KV usage and running counts that differ.
pub fn pod_table(pods: usize) -> Result<PodTable, String> {
    let mut table = PodTable { version: 1, published_at_ms: NOW_MS, poll_interval_ms: 100, ..PodTable::default() };
    for i in 0..pods {
        let mut pod = PodState::unknown(&PodAddress::parse(&pod_address(i))?);
        pod.healthy = true;
        pod.waiting = (i % 7) as f64;
        pod.running = (i % 13) as f64 + 1.0;
        pod.kv_usage = Some(((i * 37) % 100) as f64 / 100.0);
        pod.block_size = Some(BLOCK_SIZE);
        pod.num_gpu_blocks = Some(POD_CAPACITY_BLOCKS as u64);
        pod.last_success_ms = NOW_MS - 40;
        table.pods.push(pod);
    }
    Ok(table)
}

/// Publishes `table` as the pool service does (table, then version) with its heartbeat.
pub fn publish(store: &dyn SharedStore, table: &PodTable) -> Result<(), String> {
    let writes = [
        (keys::POD_TABLE, table.encode()),
        (keys::POD_TABLE_VERSION, encode_version(table.version).to_vec()),
        (keys::SERVICE_HEARTBEAT, encode_version(NOW_MS).to_vec()),
    ];
    for (key, value) in writes {
        store.set(key, &value, None).map_err(|e| format!("publish {key}: {e:?}"))?;
    }
    Ok(())
}

/// In-flight counts for most pods (0..4 each), as busy workers leave them.
fn count_inflight(store: &dyn SharedStore, pods: usize, expiry_ms: u64) -> Result<(), String> {
    let mut counts = InflightCounts::read(store).map_err(|e| format!("{e:?}"))?;
    for i in 0..pods {
        let delta = (i % 5) as i32;
        if delta > 0 {
            counts = counts.update(store, &pod_address(i), delta, NOW_MS, expiry_ms).map_err(|e| format!("{e:?}"))?;
        }
    }
    Ok(())
}

fn hashes_of(body: &str, endpoint: Endpoint, params: &HashParams) -> Result<Vec<u64>, String> {
    let request = parse_request(body.as_bytes(), endpoint).map_err(|e| e.to_string())?;
    let mut hashes = Vec::new();
    hash_prompt(&request, endpoint, params, &mut hashes).map_err(|e| e.to_string())?;
    Ok(hashes)
}

/// Warms a worker's prefix replica as the module doc says.
fn warm_prefix(
    prefix: &mut WorkerPrefix,
    params: &HashParams,
    pods: usize,
    body: &str,
    endpoint: Endpoint,
) -> Result<(), String> {
    // Small pools cannot hold the whole warm set: their pods' KV capacity bounds them.
    let target = WARM_INDEX_ENTRIES.min(prefix.index().max_entries()).min(pods * POD_CAPACITY_BLOCKS * 9 / 10);
    for seed in 1_000_000..1_000_000 + MAX_WARM_PROMPTS as u64 {
        if prefix.index().len() >= target {
            break;
        }
        let hashes = hashes_of(&workload::completions_body(4096, seed), Endpoint::Completions, params)?;
        prefix.record_pick(&pod_address(seed as usize % pods.max(1)), 0, &hashes, None, POD_CAPACITY_BLOCKS);
        prefix.take_batch();
    }
    let hashes = hashes_of(body, endpoint, params)?;
    let half = hashes.get(..hashes.len() / 2).unwrap_or(&hashes);
    for i in (0..pods).step_by(4) {
        prefix.record_pick(&pod_address(i), 0, half, None, POD_CAPACITY_BLOCKS);
    }
    prefix.take_batch();
    Ok(())
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
    requests: Cell<u32>,
}

impl Case {
    /// A `prompt_kb` KB prompt of `endpoint` against `pods` pods, with the filter's defaults.
    pub fn new(endpoint: Endpoint, prompt_kb: usize, pods: usize) -> Result<Self, String> {
        let host = MockHost::new();
        host.clock_ms.set(NOW_MS);
        *host.configuration.borrow_mut() = FILTER_CONFIG.as_bytes().to_vec();
        let worker = configure(&host, FILTER_CONFIG.len(), WORKER_SEED).map_err(|e| e.to_string())?;
        // What the filter's first HTTP context and the pool service do before requests.
        worker.serving.set(true);
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
            requests: Cell::new(0),
        };
        case.next_request();
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

    /// The destination header the last request left in the mock.
    pub fn destination(&self) -> Option<String> {
        self.host.header(&self.worker.config.destination_header)
    }

    /// The body parse and the router's decision on it (read table and in-flight counts, hash,
    /// choose, record the pick, count it in flight). Call [`Case::settle_decision`] after each.
    pub fn decide(&self) -> Option<PodAddress> {
        let request = parse_request(self.body.as_bytes(), self.endpoint).ok()?;
        let prompt = Prompt { request: Some(&request), endpoint: self.endpoint, session: None, sheddable: false };
        let Outcome::Routed { address, .. } = decide(&self.worker, &self.host, &prompt) else { return None };
        self.unreleased.replace(Some(address.clone()));
        Some(address)
    }

    /// After a [`Case::decide`] (untimed): release its in-flight count as `on_log` would, and
    /// tick now and then, so every decision starts from the same state.
    pub fn settle_decision(&self) {
        if let Some(address) = self.unreleased.take() {
            let expiry = self.worker.config.inflight_expiry_ms;
            let released = InflightCounts::read(&self.host)
                .and_then(|c| c.update(&self.host, address.as_str(), -1, NOW_MS, expiry));
            std::hint::black_box(released.is_ok());
        }
        self.tick_now_and_then();
        self.next_request();
    }

    fn tick_now_and_then(&self) {
        let requests = self.requests.get().wrapping_add(1);
        self.requests.set(requests);
        if requests % PICKS_PER_SYNC == 0 {
            tick::on_tick(&self.worker, &self.host);
        }
    }

    /// The in-flight counts as the router reads them per request.
    pub fn inflight(&self) -> Option<InflightCounts> {
        InflightCounts::read(&self.host).ok()
    }

    /// `route::choose` alone on the worker's table, prefix replica and policy (one step of
    /// the decision, to show where its time goes).
    pub fn choose(
        &self,
        prefix: &WorkerPrefix,
        hashes: &[u64],
        inflight: &InflightCounts,
        random: &mut TieBreaker,
    ) -> Option<Route> {
        let cache = self.worker.table.try_borrow().ok()?;
        let last_picked = |pod: &str| prefix.last_picked(pod);
        let view = RoutingView {
            table: cache.table(),
            fallback_pool: &self.worker.fallback_pool,
            inflight,
            prefix: Some(PrefixQuery { index: prefix.index(), hashes, session_pod: None, last_picked: &last_picked }),
            now_ms: NOW_MS,
            stale_after_ms: self.worker.config.stale_after_ms,
            inflight_expiry_ms: self.worker.config.inflight_expiry_ms,
        };
        choose(&view, &self.worker.policy, random)
    }
}
