//! One routing decision as the filter makes it (`filter/src/decide.rs`), natively: the state
//! it reads, built once per case outside the timed loop, and the steps it runs per request.
//!
//! State: a pod table of N healthy pods with varied load, in-flight counts in a
//! [`MemoryStore`], and a worker's prefix replica warmed with [`WARM_INDEX_ENTRIES`] entries
//! of unrelated prompts plus the request's own first half on every fourth pod, so a lookup
//! walks real matches. Steps: [`Case::decide`] (parse → hash → choose with the prefix query)
//! and [`Case::filter_path`] (plus in-flight read and updates, recording the pick).

use std::cell::{Cell, RefCell};

use picker::address::PodAddress;
use picker::config::FilterConfig;
use picker::inflight::InflightCounts;
use picker::pod_table::{PodState, PodTable};
use picker::prefix::{hash_prompt, HashParams, WorkerPrefix};
use picker::random::TieBreaker;
use picker::request::{parse_request, Endpoint};
use picker::route::{choose, PrefixQuery, Route, RoutingView};
use picker::scheduler::Policy;
use picker::store::MemoryStore;

use crate::workload;

/// The host clock the decision sees; pods were scraped 40 ms before it.
pub const NOW_MS: u64 = 1_700_000_000_000;

/// Entries in the warm prefix index: most of the filter's default budget (262,144).
pub const WARM_INDEX_ENTRIES: usize = 200_000;

/// KV capacity per pod in blocks (the simulator's small preset).
pub const POD_CAPACITY_BLOCKS: usize = 16_384;

/// Block size the pods report, in tokens.
pub const BLOCK_SIZE: u32 = 16;

/// Prompts recorded at most while warming (each adds up to 64 entries).
const MAX_WARM_PROMPTS: usize = 100_000;

/// Picks between two sends of the pending routing events (the filter sends on a 20 ms tick).
const PICKS_PER_SYNC: u32 = 32;

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

/// A store holding in-flight counts for most pods (0..4 each), as busy workers leave it.
pub fn inflight_store(pods: usize, expiry_ms: u64) -> Result<MemoryStore, String> {
    let store = MemoryStore::new();
    InflightCounts::ensure_key(&store).map_err(|e| format!("{e:?}"))?;
    let mut counts = InflightCounts::read(&store).map_err(|e| format!("{e:?}"))?;
    for i in 0..pods {
        let delta = (i % 5) as i32;
        if delta > 0 {
            counts = counts.update(&store, &pod_address(i), delta, NOW_MS, expiry_ms).map_err(|e| format!("{e:?}"))?;
        }
    }
    Ok(store)
}

fn hashes_of(body: &str, endpoint: Endpoint, params: &HashParams) -> Result<Vec<u64>, String> {
    let request = parse_request(body.as_bytes(), endpoint).map_err(|e| e.to_string())?;
    let mut hashes = Vec::new();
    hash_prompt(&request, endpoint, params, &mut hashes).map_err(|e| e.to_string())?;
    Ok(hashes)
}

/// A worker's prefix replica, warmed as the module doc says.
pub fn warm_prefix(config: &FilterConfig, pods: usize, body: &str, endpoint: Endpoint) -> Result<WorkerPrefix, String> {
    let params = config.prefix.hash_params(Some(BLOCK_SIZE));
    let mut prefix = WorkerPrefix::new(config.prefix.max_index_entries);
    // Small pools cannot hold the whole warm set: their pods' KV capacity bounds them.
    let target = WARM_INDEX_ENTRIES.min(config.prefix.max_index_entries).min(pods * POD_CAPACITY_BLOCKS * 9 / 10);
    for seed in 1_000_000..1_000_000 + MAX_WARM_PROMPTS as u64 {
        if prefix.index().len() >= target {
            break;
        }
        let hashes = hashes_of(&workload::completions_body(4096, seed), Endpoint::Completions, &params)?;
        prefix.record_pick(&pod_address(seed as usize % pods.max(1)), 0, &hashes, None, POD_CAPACITY_BLOCKS);
        prefix.take_batch();
    }
    let hashes = hashes_of(body, endpoint, &params)?;
    let half = hashes.get(..hashes.len() / 2).unwrap_or(&hashes);
    for i in (0..pods).step_by(4) {
        prefix.record_pick(&pod_address(i), 0, half, None, POD_CAPACITY_BLOCKS);
    }
    prefix.take_batch();
    Ok(prefix)
}

/// Everything one benchmark case reads.
pub struct Case {
    pub body: String,
    pub endpoint: Endpoint,
    pub table: PodTable,
    pub store: MemoryStore,
    pub config: FilterConfig,
    pub policy: Policy,
    pub params: HashParams,
    pub prefix: RefCell<WorkerPrefix>,
    picks: Cell<u32>,
}

impl Case {
    /// A `prompt_kb` KB prompt of `endpoint` against `pods` pods, with the filter's defaults.
    pub fn new(endpoint: Endpoint, prompt_kb: usize, pods: usize) -> Result<Self, String> {
        let config = FilterConfig::default();
        let body = workload::body(endpoint, prompt_kb * 1024, 42);
        Ok(Self {
            prefix: RefCell::new(warm_prefix(&config, pods, &body, endpoint)?),
            table: pod_table(pods)?,
            store: inflight_store(pods, config.inflight_expiry_ms)?,
            params: config.prefix.hash_params(Some(BLOCK_SIZE)),
            policy: config.policy(),
            config,
            body,
            endpoint,
            picks: Cell::new(0),
        })
    }

    /// The in-flight counts as the filter reads them per request.
    pub fn inflight(&self) -> Option<InflightCounts> {
        InflightCounts::read(&self.store).ok()
    }

    /// parse → hash → choose (prefix lookup for every pod, scoring, pick): the decision.
    pub fn decide(&self, inflight: &InflightCounts, random: &mut TieBreaker) -> Option<Route> {
        let request = parse_request(self.body.as_bytes(), self.endpoint).ok()?;
        let mut hashes = Vec::new();
        let _ = hash_prompt(&request, self.endpoint, &self.params, &mut hashes);
        let prefix = self.prefix.try_borrow().ok()?;
        self.choose(&prefix, &hashes, inflight, random)
    }

    /// The scheduler alone, on hashes already computed.
    pub fn choose(
        &self,
        prefix: &WorkerPrefix,
        hashes: &[u64],
        inflight: &InflightCounts,
        random: &mut TieBreaker,
    ) -> Option<Route> {
        let last_picked = |pod: &str| prefix.last_picked(pod);
        let view = RoutingView {
            table: Some(&self.table),
            fallback_pool: &[],
            inflight,
            prefix: Some(PrefixQuery { index: prefix.index(), hashes, session_pod: None, last_picked: &last_picked }),
            now_ms: NOW_MS,
            stale_after_ms: self.config.stale_after_ms,
            inflight_expiry_ms: self.config.inflight_expiry_ms,
        };
        choose(&view, &self.policy, random)
    }

    /// What the filter does per request around the decision: read the in-flight counts,
    /// decide, record the pick in the prefix replica, count it in flight, and (in `on_log`)
    /// count its completion; every [`PICKS_PER_SYNC`] picks, encode the pending events.
    pub fn filter_path(&self, random: &mut TieBreaker) -> Option<()> {
        let expiry = self.config.inflight_expiry_ms;
        let inflight = self.inflight()?;
        let request = parse_request(self.body.as_bytes(), self.endpoint).ok()?;
        let mut hashes = Vec::new();
        let _ = hash_prompt(&request, self.endpoint, &self.params, &mut hashes);
        let mut prefix = self.prefix.try_borrow_mut().ok()?;
        let route = self.choose(&prefix, &hashes, &inflight, random)?;
        let address = route.address.as_str();
        prefix.record_pick(address, route.epoch, &hashes, None, POD_CAPACITY_BLOCKS);
        self.picks.set(self.picks.get() + 1);
        if self.picks.get() % PICKS_PER_SYNC == 0 {
            std::hint::black_box(prefix.take_batch());
        }
        inflight.update(&self.store, address, 1, NOW_MS, expiry).ok()?;
        self.inflight()?.update(&self.store, address, -1, NOW_MS, expiry).ok()?;
        Some(())
    }
}
