//! What every request on one worker thread shares: the validated configuration, the
//! decoded pod table, the prefix index replica, the tie-breaker, the stats and the bytes
//! all its streams hold buffered.

use std::cell::{Cell, RefCell};

use picker::address::PodAddress;
use picker::config::FilterConfig;
use picker::inflight::WorkerInflight;
use picker::prefix::WorkerPrefix;
use picker::random::TieBreaker;
use picker::scheduler::Policy;

use crate::response::LearningStats;
use crate::stats::Stats;
use crate::table_cache::{Refresh, TableCache};

pub struct Worker {
    pub config: FilterConfig,
    pub policy: Policy,
    pub fallback_pool: Vec<PodAddress>,
    pub table: RefCell<TableCache>,
    pub prefix: RefCell<WorkerPrefix>,
    /// Requests in flight per pod: this worker's exact, the others' as of their last tick.
    pub inflight: RefCell<WorkerInflight>,
    pub random: RefCell<TieBreaker>,
    pub stats: Stats,
    /// The pool service's event queue, once resolved (it may register after us).
    pub event_queue: Cell<Option<u32>>,
    /// The pool service's peer inbox, once resolved (peer listener only).
    pub peer_inbox: Cell<Option<u32>>,
    /// The `vm_id` shared with the pool service (queues are resolved by it).
    pub vm_id: String,
    /// Request body bytes held by all of this worker's streams together.
    pub buffered_bytes: Cell<u64>,
    /// Whether the last pick failed open, so the change is logged once, not per request.
    failing_open: Cell<bool>,
    /// A table came from a pool service scraping less often than `stale_after_ms` (logged
    /// once: its data goes stale between scrapes, and picks fail open then).
    pub stale_cadence_told: Cell<bool>,
    /// The last model list answered lacked names, and a warning said so (logged again only
    /// after a whole list: a client polling `GET /v1/models` is not a warning per poll).
    pub model_list_cut_told: Cell<bool>,
    /// This root has created an HTTP context: it serves requests. Envoy's main-thread root
    /// never does, and must not keep (and sync) a prefix replica for nothing.
    pub serving: Cell<bool>,
    /// The wait queue and its state (idle unless `flow_control.enabled`).
    pub flow: crate::flow::FlowState,
    /// Prefill/decode disaggregation, when the configuration has a `pd` section.
    pub pd: Option<crate::disaggregate::PdRouting>,
    /// Split requests' holds on their prefill pods, ended by the tick at their prefills'
    /// estimated ends (see [`crate::prefill_hold`]).
    pub prefill_timers: RefCell<crate::prefill_hold::PrefillTimers>,
    /// What this worker learned from the answers it proxied (see [`picker::learn`]).
    pub learning: RefCell<picker::learn::Learner>,
    pub learning_stats: LearningStats,
    /// When the learned TTFT observations were last shared with the other workers.
    pub learning_share: crate::learning_share::ShareClock,
    /// Streams read for their `usage`, per pod (`learning.usage_streams_per_pod`).
    pub usage_readers: RefCell<picker::learn::UsageReaders>,
    /// Answers watched in full (`learning.watch_per_second`, `learning.watch_share`).
    pub watch_budget: RefCell<picker::learn::allowance::Allowance>,
    /// The live comparison with a baseline, when `comparison.baseline_share` is above 0.
    pub comparison: Option<Comparing>,
    /// Pods this worker saw fail requests, and those it took out of rotation for it.
    pub outliers: RefCell<picker::outliers::Outliers>,
    /// Names pods listed but answered 404 to ([`crate::disowned`]).
    pub disowned: RefCell<crate::disowned::Disowned>,
    /// What this worker last told the other workers of its ejections.
    pub ejection_share: crate::outliers_share::EjectionShare,
    /// Pods that left the pool lately: their prefix entries, sessions, learned state and
    /// outlier records are kept for [`picker::departed::GRACE_MS`] (see [`crate::tick`]).
    pub departed: RefCell<picker::departed::Departed<()>>,
    /// The host's clock as of this worker's last tick (or its start): read on paths that run
    /// per body chunk, where a host call each would cost more than a tick's lag matters (one
    /// tick period: `prefix.sync_interval_ms`, 20 ms by default, 10 s at most).
    pub clock_ms: Cell<u64>,
}

/// What the comparison needs on every request: the baseline's policy and the arms' stats.
pub struct Comparing {
    pub baseline: Policy,
    pub stats: crate::comparison_stats::ComparisonStats,
}

impl Worker {
    /// `seed` differs per VM: it seeds tie-breaking and the prefix index's keyed hashing.
    pub fn new(config: FilterConfig, fallback_pool: Vec<PodAddress>, vm_id: String, seed: u64) -> Self {
        let stats = Stats::define();
        stats.metrics.label_pool(&config.pool_name);
        let flow = crate::flow::FlowState::new(&config.flow_control, &stats.metrics);
        let learning_stats = LearningStats::define(&stats.metrics);
        let policy = config.policy();
        let comparison = config.comparison.enabled().then(|| Comparing {
            baseline: picker::comparison::baseline_policy(&config.comparison, policy.fallbacks),
            stats: crate::comparison_stats::ComparisonStats::define(&stats.metrics),
        });
        Self {
            comparison,
            outliers: RefCell::new(picker::outliers::Outliers::new(config.outlier_detection.clone())),
            disowned: Default::default(),
            ejection_share: Default::default(),
            departed: Default::default(),
            pd: config.pd.as_ref().map(|pd| crate::disaggregate::PdRouting::new(pd, &policy)),
            prefill_timers: Default::default(),
            policy,
            learning: RefCell::new(picker::learn::Learner::new(config.learning.prior())),
            learning_stats,
            learning_share: Default::default(),
            usage_readers: RefCell::new(picker::learn::UsageReaders::new(
                config.learning.usage_streams_per_pod,
                config.learning.usage_chunks_per_stream,
                config.learning.usage_chunks_per_second,
            )),
            watch_budget: RefCell::new(config.learning.watch_budget()),
            prefix: RefCell::new(
                WorkerPrefix::with_seed(config.prefix.max_index_entries, seed)
                    .with_reuse_prior(config.prefix.reuse_prior),
            ),
            config,
            fallback_pool,
            table: RefCell::new(TableCache::default()),
            inflight: RefCell::new(WorkerInflight::new()),
            random: RefCell::new(TieBreaker::new(seed)),
            stats,
            event_queue: Cell::new(None),
            peer_inbox: Cell::new(None),
            vm_id,
            buffered_bytes: Cell::new(0),
            failing_open: Cell::new(false),
            stale_cadence_told: Cell::new(false),
            model_list_cut_told: Cell::new(false),
            serving: Cell::new(false),
            flow,
            clock_ms: Cell::new(0),
        }
    }

    /// Readies the table for a request at `now_ms`: the tick keeps it fresh, so only a worker
    /// that has none yet looks now. Returns whether it has expired: the pool service has been
    /// silent past `fail_open_max_age_ms`, and the table no longer says who is in the pool.
    pub fn table_expired_for_request(
        &self,
        cache: &mut TableCache,
        store: &dyn picker::store::SharedStore,
        now_ms: u64,
    ) -> bool {
        if cache.table().is_none() {
            self.refresh_table(cache, store);
        }
        cache.expired(now_ms, self.config.fail_open_max_age_ms)
    }

    /// Refreshes the table, counting and logging one that does not decode (the last good
    /// one is kept). The one place both the tick and a table-less request refresh through.
    pub fn refresh_table(&self, cache: &mut TableCache, store: &dyn picker::store::SharedStore) {
        let refresh = cache.refresh(store);
        if refresh == Refresh::Updated {
            self.tell_stale_cadence(cache);
        }
        match refresh {
            Refresh::DecodeFailed(reason) => {
                self.stats.increment(self.stats.table_decode_failed);
                log::warn!("wasm-epp: pod table not usable, keeping the last one: {reason}");
            }
            Refresh::Updated if self.config.learning.enabled => {
                // Once per publish: which pods were seen with a full batch, at what size and when,
                // and which restarted (learned anew).
                if let (Some(table), Ok(mut learner)) = (cache.table(), self.learning.try_borrow_mut()) {
                    learner.models.saw_batches(
                        table.pods.iter().map(|p| (p.address.as_str(), p.running, p.waiting, p.last_success_ms)),
                    );
                    learner.saw_epochs(table.pods.iter().map(|p| (p.address.as_str(), p.epoch)));
                }
            }
            Refresh::Updated | Refresh::Unchanged => {}
        }
    }

    /// The prefix index's capacity for `pod` of `kv_blocks`: shrunk for a pod that evicts
    /// sooner than its size says, when learning corrects the index.
    pub fn index_capacity(&self, pod: &str, kv_blocks: usize) -> usize {
        let learning = &self.config.learning;
        match self.learning.try_borrow() {
            Ok(learner) if learning.enabled && learning.correct_index => learner.capacity(pod, kv_blocks),
            _ => kv_blocks,
        }
    }

    /// Tells once (a warning) that the table's pool service scrapes less often than this
    /// filter trusts pod data: the singleton's `poll_interval_ms` is its own configuration,
    /// which the filter's `validate` cannot see.
    fn tell_stale_cadence(&self, cache: &TableCache) {
        let Some(table) = cache.table().filter(|_| !self.stale_cadence_told.get()) else { return };
        if let Some(reason) =
            picker::config::stale_before_next_scrape(table.poll_interval_ms, self.config.stale_after_ms)
        {
            self.stale_cadence_told.set(true);
            log::warn!("wasm-epp: {reason}");
        }
    }

    /// Logs when picking starts or stops failing open for the pool (no pod of the table with
    /// usable data, or no table).
    pub fn note_fail_open(&self, fail_open: bool) {
        if self.failing_open.replace(fail_open) == fail_open {
            return;
        }
        if fail_open {
            log::warn!("wasm-epp: no fresh pod data (singleton absent, stale or every scrape failing): routing by in-flight counts only");
        } else {
            log::info!("wasm-epp: fresh pod data again: routing by load");
        }
    }
}
