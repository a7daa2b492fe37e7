//! The singleton's bookkeeping: which pods to scrape, what their answers mean, and the
//! table to publish.
//!
//! Time comes in as a parameter (`now_ms`) so the health rules are tested without a clock.
//! Health flips to bad only after `unhealthy_after_failures` consecutive failed scrapes (one
//! slow answer must not empty the pool), and back to good on the first good scrape.

use hashbrown::HashMap;

use crate::address::PodAddress;
use crate::config::PollerConfig;
use crate::metrics_text::{parse_engine_metrics, EngineMetrics};
use crate::pod_table::{PodState, PodTable};

/// The outcome of one scrape, as the host reported it.
pub enum ScrapeResult<'a> {
    Answered {
        status: u16,
        body: &'a [u8],
    },
    /// No answer (timeout, reset, no upstream): the host gave no status.
    NoAnswer,
}

struct PodRecord {
    address: PodAddress,
    state: PodState,
    /// The host's token for the scrape in flight; one at a time per pod.
    call: Option<u32>,
    call_started_ms: u64,
    last_prefix_queries: Option<f64>,
    /// The last page parsed and what it said: an identical page is not parsed again (idle
    /// pods answer the same bytes round after round).
    last_page: Option<(u64, EngineMetrics)>,
    /// The pod's last `/v1/models` answer (polled less often than `/metrics`).
    catalog: Option<crate::models::catalog::Catalog>,
    /// The pod answered the default filtered path with no load metric: it is scraped at
    /// [`PLAIN_METRICS_PATH`] from then on ([`PoolPoller::metrics_path`]).
    plain_path: bool,
    /// [`PodEvent::Implausible`] was told for this pod.
    told_implausible: bool,
    /// [`PodEvent::RepeatedSeries`] was told for this pod.
    told_repeated: bool,
    /// Its last good page repeated a series ([`PoolPoller::pods_repeating_series`]).
    repeats_series: bool,
    /// Listed again after it left, not scraped since: out of rotation as a pod that joins.
    rejoined: bool,
}

impl PodRecord {
    fn new(state: PodState) -> Self {
        Self {
            address: state.address.clone(),
            state,
            call: None,
            call_started_ms: 0,
            last_prefix_queries: None,
            last_page: None,
            catalog: None,
            plain_path: false,
            told_implausible: false,
            told_repeated: false,
            repeats_series: false,
            rejoined: false,
        }
    }
}

/// Where a pod is scraped once it answered the default filtered path with no load metric.
pub const PLAIN_METRICS_PATH: &str = "/metrics";

pub struct PoolPoller {
    config: PollerConfig,
    /// `metrics_path` is the default, which asks for the picker's series by name (`name[]`):
    /// a server whose registry cannot filter by name answers it with an empty page.
    filtered_by_default: bool,
    pods: Vec<PodRecord>,
    /// Where each pod is in `pods`, and which pod each scrape in flight is for: a scrape's
    /// start and answer find their pod without a scan of the pool (1,000 pods scraped every
    /// second are 1,000 answers a second on Envoy's main thread). Rebuilt with the pool.
    index_of: HashMap<PodAddress, usize>,
    in_flight: HashMap<u32, usize>,
    version: u64,
    dirty: bool,
    /// Epochs are drawn from one counter for all pods, so a pod that leaves and a new pod
    /// that later reuses its address never share an epoch (the prefix index would think the
    /// newcomer's cache holds the old pod's blocks).
    next_epoch: u32,
    /// Roles from the configuration, and from the pods' `llm-d.ai/role` labels (which win).
    static_roles: crate::role::RoleMap,
    discovered_roles: crate::role::RoleMap,
    /// Changes of a pod's standing not yet taken by the pool service ([`Self::take_events`]).
    events: Vec<PodEvent>,
    /// The pool is the table's published before us ([`Self::resume_from`]), not listed yet: a
    /// discovered pool's last known pool, scraped until its first list replaces it.
    pool_resumed: bool,
    /// Records of pods that left the pool lately (a pod NotReady for a few seconds): listed
    /// again within [`crate::departed::GRACE_MS`], a pod takes its record back, not healthy,
    /// and its first scrape decides whether it is the same engine ([`Self::record_success`]).
    departed: crate::departed::Departed<PodRecord>,
}

/// How long a pod may go unscraped and still be taken for the same engine when its counters
/// carried on. An engine that restarts spends its first tens of seconds loading weights and
/// answers little; to pass its old counter again it must have served a lifetime's tokens.
pub const TRUST_COUNTERS_FOR_MS: u64 = 60_000;

/// Events kept for the service at most; it takes them after every answer, so more would mean
/// it stopped taking them, and the oldest are not worth memory.
const MAX_PENDING_EVENTS: usize = 64;

/// A change of a pod's standing an operator should hear of: it explains the cache misses or
/// the requests a pod stops getting. Not raised on a pod's first answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodEvent {
    /// Out of rotation after this many failed scrapes in a row.
    Unhealthy { address: PodAddress, failures: u32 },
    /// Never in rotation: this many scrapes failed in a row without a good one since it
    /// joined (a wrong port or path, a page naming none of the load metrics). Once per pod;
    /// `reason` is the last failure's.
    NeverHealthy { address: PodAddress, failures: u32, reason: String },
    /// A new epoch: what was known of its cache is void, because it restarted (its counters
    /// went back) or because it answers again after failing with nothing to show it did not
    /// (no counter, or away longer than [`TRUST_COUNTERS_FOR_MS`]).
    CacheDropped { address: PodAddress, restarted: bool },
    /// Its page gave a load past any engine's (`reading`: the metric and its value), read at
    /// the bound: a KV usage past 1 (an exporter giving a percent makes the pod read as full
    /// for good), a queue or running count past a billion. Once per pod.
    Implausible { address: PodAddress, reading: String },
    /// Its page gave a series again with the same label set (`samples` of them in one
    /// scrape, the first of `metric`): invalid text from a broken exporter, whose repeats are
    /// skipped (the first of each series is read, as Prometheus reads it). Once per pod.
    RepeatedSeries { address: PodAddress, metric: &'static str, samples: u32 },
}

/// What [`PoolPoller::on_scrape`] learned, for stats and logs.
#[derive(Debug, PartialEq, Eq)]
pub enum ScrapeOutcome {
    Success,
    Failure(String),
    /// The pod answered the default filtered path with a page naming no load metric (a
    /// multiprocess `prometheus_client` registry, as SGLang's, cannot filter by name and
    /// answers an empty page): neither a success nor a failure, and it is scraped at
    /// [`PLAIN_METRICS_PATH`] from now on. Once per pod.
    PlainPathNext(PodAddress),
    /// The token matches no scrape in flight (a pod that left the pool meanwhile).
    Unknown,
}

impl PoolPoller {
    pub fn new(config: PollerConfig, pool: Vec<PodAddress>) -> Self {
        let static_roles = config.role_map().unwrap_or_default();
        let filtered_by_default = config.metrics_path == crate::metrics_text::filtered_metrics_path();
        let mut poller = Self {
            filtered_by_default,
            config,
            pods: Vec::new(),
            index_of: HashMap::new(),
            in_flight: HashMap::new(),
            version: 0,
            dirty: true,
            next_epoch: 1,
            static_roles,
            discovered_roles: crate::role::RoleMap::default(),
            events: Vec::new(),
            pool_resumed: false,
            departed: Default::default(),
        };
        poller.set_pool(pool, 0);
        poller
    }

    fn take_epoch(&mut self) -> u32 {
        let epoch = self.next_epoch;
        self.next_epoch = self.next_epoch.wrapping_add(1).max(1);
        epoch
    }

    pub fn config(&self) -> &PollerConfig {
        &self.config
    }

    /// Replaces the pool at `now_ms`, keeping what is known about pods that stay. A pod that
    /// joins starts unknown (it is scraped before the table calls it healthy); one that left
    /// within [`crate::departed::GRACE_MS`] comes back with its record, not healthy, so its
    /// epoch is kept only if its first scrape shows the same engine (counters carried on,
    /// away at most [`TRUST_COUNTERS_FOR_MS`]); an address taken by another pod meanwhile
    /// shows counters that went back, a restart.
    pub fn set_pool(&mut self, pool: Vec<PodAddress>, now_ms: u64) {
        let old = std::mem::take(&mut self.pods);
        let old_index = std::mem::take(&mut self.index_of);
        let mut taken: Vec<Option<PodRecord>> = old.into_iter().map(Some).collect();
        let mut listed: hashbrown::HashSet<PodAddress> = hashbrown::HashSet::new();
        for address in pool {
            if !listed.insert(address.clone()) {
                continue; // Listed twice (two discovered pods on one address): one pod.
            }
            let kept = old_index.get(&address).and_then(|&i| taken.get_mut(i)).and_then(Option::take);
            let record = match kept.or_else(|| self.departed.take(address.as_str(), now_ms)) {
                Some(record) => record,
                None => {
                    let state = PodState { epoch: self.take_epoch(), ..PodState::unknown(&address) };
                    PodRecord::new(state)
                }
            };
            self.pods.push(record);
        }
        for mut record in taken.into_iter().flatten() {
            // Its scrape in flight is forgotten (its answer is `Unknown`); back, it is scraped
            // anew and is out of rotation until then, as a pod that joins.
            record.call = None;
            record.state.healthy = false;
            record.state.consecutive_failures = 0;
            record.rejoined = true;
            self.departed.insert(record.address.clone(), record, now_ms);
        }
        self.departed.expire(now_ms, crate::pod_table::MAX_PODS);
        self.index_of = self.pods.iter().enumerate().map(|(i, r)| (r.address.clone(), i)).collect();
        self.in_flight = self.pods.iter().enumerate().filter_map(|(i, r)| Some((r.call?, i))).collect();
        self.pool_resumed = false;
        self.apply_roles();
        self.dirty = true;
    }

    /// Replaces the roles read from the pods' labels (Kubernetes discovery).
    pub fn set_discovered_roles(&mut self, roles: crate::role::RoleMap) {
        self.discovered_roles = roles;
        self.apply_roles();
    }

    /// Stamps each pod's role: its label's, else the configuration's, else `both`.
    fn apply_roles(&mut self) {
        for record in &mut self.pods {
            let role = self
                .discovered_roles
                .get(&record.address)
                .or_else(|| self.static_roles.get(&record.address))
                .unwrap_or_default();
            if record.state.role != role {
                record.state.role = role;
                self.dirty = true;
            }
        }
    }

    /// Continues after a table someone published before us (a previous leader, the
    /// singleton before a VM reload): versions go on from its version, so workers do not
    /// mistake our first table for one they already have, and pods it knew keep their
    /// state (epoch, health, last load), so what the workers learned about their caches
    /// stays valid; the first round of scrapes then updates it. A restart during the
    /// handover itself is not seen (no counter to compare with yet).
    pub fn resume_from(&mut self, published: &PodTable) {
        self.version = self.version.max(published.version);
        for record in &mut self.pods {
            if let Some(old) = published.pods.iter().find(|p| p.address == record.state.address) {
                record.state = old.clone();
            }
        }
        if self.config.kubernetes.is_some() && self.pods.is_empty() {
            self.adopt_pool(published);
        }
        // Published under the previous leader's `max_names_per_pod`, which may have been larger
        // (no-singleton mode: the filter's configuration changed): a pod that stays down would
        // keep those lists, as only a scrape replaces them.
        let max_names = self.config.names_per_pod();
        self.pods.iter_mut().for_each(|record| record.state.bound_name_lists_at(max_names));
        let highest = published.pods.iter().map(|p| p.epoch).chain(self.pods.iter().map(|r| r.state.epoch)).max();
        self.next_epoch = self.next_epoch.max(highest.unwrap_or(0).saturating_add(1));
        self.apply_roles();
    }

    /// A discovered pool is empty until its first list, which may fail for a long time (an
    /// API server answering 403 or 5xx): the table's pods are its last known pool, as they
    /// were the previous leader's, and are scraped meanwhile. Left unscraped, they were
    /// published by no one while the heartbeat kept the workers on the old table, with no
    /// bound on its age.
    fn adopt_pool(&mut self, published: &PodTable) {
        let pods = published.pods.iter().take(crate::pod_table::MAX_PODS);
        // Their roles came from labels, which the first list reads again.
        self.discovered_roles = crate::role::RoleMap::new(pods.clone().map(|p| (p.address.clone(), p.role)).collect());
        self.pods = pods.cloned().map(PodRecord::new).collect();
        self.index_of = self.pods.iter().enumerate().map(|(i, r)| (r.address.clone(), i)).collect();
        self.pool_resumed = true;
    }

    /// The pool has been listed since [`Self::resume_from`], changed or not. A list that
    /// changed it has set it already; the first list changes nothing only when it finds no
    /// pod (the lister's own pool starts empty), so then every resumed pod left.
    pub fn end_resume(&mut self, now_ms: u64) {
        if self.pool_resumed {
            self.set_pool(Vec::new(), now_ms);
        }
    }

    /// Pods due for a scrape now: every pod without a scrape in flight, plus pods whose
    /// scrape has outlived its timeout (the host should have answered; never wait forever).
    pub fn due(&self, now_ms: u64) -> Vec<PodAddress> {
        let grace = self.config.timeout_ms.saturating_mul(2);
        self.pods
            .iter()
            .filter(|r| r.call.is_none() || !crate::clock::within_last(now_ms, r.call_started_ms, grace))
            .map(|r| r.address.clone())
            .collect()
    }

    pub fn scrape_started(&mut self, address: &PodAddress, token: u32, now_ms: u64) {
        let Some(&index) = self.index_of.get(address) else { return };
        if let Some(record) = self.pods.get_mut(index) {
            // A scrape that outlived its timeout is given up: its answer, if any, is unknown.
            if let Some(old) = record.call.replace(token) {
                self.in_flight.remove(&old);
            }
            record.call_started_ms = now_ms;
            self.in_flight.insert(token, index);
        }
    }

    /// A scrape could not even be dispatched: count it as a failed scrape.
    pub fn scrape_not_sent(&mut self, address: &PodAddress, reason: &str) {
        if let Some(&index) = self.index_of.get(address) {
            self.record_failure(index, reason.to_string());
        }
    }

    pub fn on_scrape(&mut self, token: u32, result: ScrapeResult<'_>, now_ms: u64) -> ScrapeOutcome {
        let Some(index) = self.in_flight.remove(&token) else {
            return ScrapeOutcome::Unknown;
        };
        if let Some(record) = self.pods.get_mut(index) {
            record.call = None;
        }
        let parsed = match result {
            ScrapeResult::NoAnswer => Err(ScrapeError::Failed("no answer".to_string())),
            ScrapeResult::Answered { status, .. } if status != 200 => {
                Err(ScrapeError::Failed(format!("status {status}")))
            }
            ScrapeResult::Answered { body, .. } if body.len() as u64 > self.config.max_metrics_bytes => {
                Err(ScrapeError::Failed(format!("scrape of {} bytes is over max_metrics_bytes", body.len())))
            }
            ScrapeResult::Answered { body, .. } => self.parse_page(index, body),
        };
        match parsed {
            Ok(metrics) => {
                self.record_success(index, metrics, now_ms);
                ScrapeOutcome::Success
            }
            Err(ScrapeError::NoLoadMetric(reason)) => match self.take_plain_path(index) {
                Some(address) => ScrapeOutcome::PlainPathNext(address),
                None => self.record_failure(index, reason),
            },
            Err(ScrapeError::Failed(reason)) => self.record_failure(index, reason),
        }
    }

    /// A pod whose page named no load metric is scraped at the plain path from now on: only
    /// from the default filtered path (a path the operator chose is kept), and once.
    fn take_plain_path(&mut self, index: usize) -> Option<PodAddress> {
        let filtered = self.filtered_by_default;
        let record = self.pods.get_mut(index).filter(|r| filtered && !r.plain_path)?;
        record.plain_path = true;
        Some(record.address.clone())
    }

    /// Parses a page, or reuses what the same pod's identical last page said.
    fn parse_page(&mut self, index: usize, body: &[u8]) -> Result<EngineMetrics, ScrapeError> {
        let hash = xxhash_rust::xxh3::xxh3_64(body);
        let left = || ScrapeError::Failed("pod left the pool".into());
        let record = self.pods.get_mut(index).ok_or_else(left)?;
        if let Some((last, metrics)) = &record.last_page {
            if *last == hash {
                return Ok(metrics.clone());
            }
        }
        let text = std::str::from_utf8(body).map_err(|_| ScrapeError::Failed("scrape is not UTF-8".into()))?;
        let metrics = parse_engine_metrics(text, self.config.names_per_pod()).map_err(ScrapeError::NoLoadMetric)?;
        record.last_page = Some((hash, metrics.clone()));
        Ok(metrics)
    }

    fn record_success(&mut self, index: usize, metrics: EngineMetrics, now_ms: u64) {
        let fresh_epoch = self.next_epoch;
        let Some(record) = self.pods.get_mut(index) else { return };
        let state = &mut record.state;
        // Counters only grow while an engine lives; going backwards means it restarted and
        // its KV cache is empty. `None`: nothing to compare (no counter now or before).
        let carried_on = match (record.last_prefix_queries, metrics.prefix_queries) {
            (Some(before), Some(now)) => Some(now >= before),
            _ => None,
        };
        let restarted = carried_on == Some(false);
        // A pod back from failed scrapes kept its cache if its counters carried on: a
        // /metrics that times out under load (an API server busy tokenizing) is not a
        // restart, and voiding the pool's cache knowledge on it would thrash every prefix
        // exactly when load is highest. Without a counter, or after an absence long
        // enough for a restarted engine to have counted past the old figure, assume the
        // worst.
        let away_ms = now_ms.saturating_sub(state.last_success_ms);
        let trusted = carried_on == Some(true) && away_ms <= TRUST_COUNTERS_FOR_MS;
        let new_epoch = restarted || (!state.healthy && !trusted);
        if new_epoch {
            // Not news on its first answer (`last_success_ms` 0: never answered).
            if state.last_success_ms > 0 {
                let event = PodEvent::CacheDropped { address: state.address.clone(), restarted };
                push_event(&mut self.events, event);
            }
            state.epoch = fresh_epoch;
            if restarted {
                // The model list came from the engine before: this one may serve other models
                // (or adapters), and a failing `/v1/models` would keep the old names. (A pod
                // back from failed scrapes keeps it: adapters known from it alone would be
                // refused until the next `/v1/models`.)
                record.catalog = None;
            }
        }
        record.last_prefix_queries = metrics.prefix_queries;
        record.rejoined = false;
        if let Some(reading) = metrics.implausible.filter(|_| !record.told_implausible) {
            record.told_implausible = true;
            push_event(&mut self.events, PodEvent::Implausible { address: state.address.clone(), reading });
        }
        record.repeats_series = metrics.repeated_samples > 0;
        if let Some(metric) = metrics.first_repeated.filter(|_| !record.told_repeated) {
            record.told_repeated = true;
            let event =
                PodEvent::RepeatedSeries { address: state.address.clone(), metric, samples: metrics.repeated_samples };
            push_event(&mut self.events, event);
        }
        state.healthy = true;
        state.waiting = metrics.waiting;
        state.running = metrics.running;
        state.kv_usage = metrics.kv_usage;
        state.block_size = metrics.block_size.or(state.block_size);
        state.num_gpu_blocks = metrics.num_gpu_blocks.or(state.num_gpu_blocks);
        state.last_success_ms = now_ms;
        state.consecutive_failures = 0;
        state.set_names(metrics.lora, metrics.models, record.catalog.as_ref(), self.config.names_per_pod());
        self.dirty = true;
        if new_epoch {
            self.take_epoch();
        }
    }

    fn record_failure(&mut self, index: usize, reason: String) -> ScrapeOutcome {
        let threshold = self.config.unhealthy_after_failures;
        if let Some(record) = self.pods.get_mut(index) {
            let state = &mut record.state;
            state.consecutive_failures = state.consecutive_failures.saturating_add(1);
            if state.healthy && state.consecutive_failures >= threshold {
                state.healthy = false;
                let event =
                    PodEvent::Unhealthy { address: state.address.clone(), failures: state.consecutive_failures };
                push_event(&mut self.events, event);
            } else if (state.last_success_ms == 0 || record.rejoined) && state.consecutive_failures == threshold {
                // `last_success_ms` 0: it never answered (or not since it was listed again).
                // Otherwise nothing would ever say why a pod is missing from the rotation: it
                // never left it.
                let address = state.address.clone();
                let event = PodEvent::NeverHealthy { address, failures: threshold, reason: reason.clone() };
                push_event(&mut self.events, event);
            }
            self.dirty = true;
        }
        ScrapeOutcome::Failure(reason)
    }

    /// Pods in the pool whose last good page repeated a series: the warning
    /// ([`PodEvent::RepeatedSeries`]) comes once per pod, this count says whether it still
    /// does (back to 0 once its exporter is fixed). At most the pool's size.
    pub fn pods_repeating_series(&self) -> usize {
        self.pods.iter().filter(|record| record.repeats_series).count()
    }

    /// The changes of pods' standing since the last call, oldest first.
    pub fn take_events(&mut self) -> Vec<PodEvent> {
        std::mem::take(&mut self.events)
    }

    /// Whether `token` is a scrape this poller is waiting for.
    pub fn owns_scrape(&self, token: u32) -> bool {
        self.in_flight.contains_key(&token)
    }

    /// True when no scrape is in flight: a round is complete and worth publishing.
    pub fn round_complete(&self) -> bool {
        self.in_flight.is_empty()
    }

    /// The table to publish, or `None` when nothing changed since the last one.
    pub fn take_table(&mut self, now_ms: u64) -> Option<PodTable> {
        if !self.dirty {
            return None;
        }
        self.dirty = false;
        self.version = self.version.wrapping_add(1);
        Some(PodTable {
            version: self.version,
            published_at_ms: now_ms,
            poll_interval_ms: self.config.poll_interval_ms,
            pods: self.pods.iter().map(|r| r.state.clone()).collect(),
        })
    }

    /// Marks the table changed so the next publish happens even without news (a heartbeat:
    /// the filter judges staleness by `published_at_ms`).
    pub fn touch(&mut self) {
        self.dirty = true;
    }

    /// A pod's `/v1/models` list arrived: kept for later scrapes and merged into its state now.
    pub fn set_catalog(&mut self, address: &PodAddress, catalog: crate::models::catalog::Catalog) {
        let Some(record) = self.pods.iter_mut().find(|r| &r.address == address) else { return };
        record.state.add_catalog(&catalog, self.config.names_per_pod());
        record.catalog = Some(catalog);
        self.dirty = true;
    }

    /// A pod's `/v1/models` list was over `max_models_bytes`: it names more than can be read,
    /// so it is marked as naming more than its lists hold (names no pod lists may go to it),
    /// keeping what an earlier list of it gave.
    pub fn catalog_too_large(&mut self, address: &PodAddress) {
        let Some(record) = self.pods.iter_mut().find(|r| &r.address == address) else { return };
        let catalog = record.catalog.get_or_insert_with(Default::default);
        catalog.cut = true;
        record.state.names_cut = true;
        self.dirty = true;
    }

    /// The path to scrape `address` at: the configured one, or [`PLAIN_METRICS_PATH`] for a
    /// pod that answered the default filtered path with no load metric.
    pub fn metrics_path(&self, address: &PodAddress) -> &str {
        let record = self.index_of.get(address).and_then(|&i| self.pods.get(i));
        match record {
            Some(record) if record.plain_path => PLAIN_METRICS_PATH,
            _ => &self.config.metrics_path,
        }
    }

    /// Addresses of every pod in the pool.
    pub fn addresses(&self) -> Vec<PodAddress> {
        self.pods.iter().map(|r| r.address.clone()).collect()
    }

    /// Every pod's state as known now (published or not).
    pub fn pods(&self) -> impl Iterator<Item = &PodState> {
        self.pods.iter().map(|r| &r.state)
    }
}

/// Why a scrape gave no metrics.
enum ScrapeError {
    /// No answer, not a 200, too large, not text.
    Failed(String),
    /// Text that names none of the load metrics (`parse_engine_metrics`' reason): a server
    /// that cannot filter by name answers the filtered path so.
    NoLoadMetric(String),
}

/// Keeps `event` for the service, dropping the oldest past [`MAX_PENDING_EVENTS`].
fn push_event(events: &mut Vec<PodEvent>, event: PodEvent) {
    if events.len() >= MAX_PENDING_EVENTS {
        events.remove(0);
    }
    events.push(event);
}

#[cfg(test)]
mod metrics_path_tests;

#[cfg(test)]
mod resume_tests;

#[cfg(test)]
mod tests;
