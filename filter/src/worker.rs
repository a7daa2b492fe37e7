//! What every request on one worker thread shares: the validated configuration, the
//! decoded pod table, the prefix index replica, the tie-breaker and the stats.

use std::cell::{Cell, RefCell};

use picker::address::PodAddress;
use picker::config::FilterConfig;
use picker::prefix::WorkerPrefix;
use picker::random::TieBreaker;
use picker::scheduler::Policy;
use wasm_epp_host::{Counter, LabelledCounters};

use crate::table_cache::TableCache;

pub struct Stats {
    pub routed: Counter,
    pub fail_open: Counter,
    pub affinity: Counter,
    pub prefix_matched: Counter,
    pub no_pod: Counter,
    pub shed: Counter,
    pub body_invalid: Counter,
    pub body_rejected: Counter,
    pub body_over_limit: Counter,
    pub prompt_unhashable: Counter,
    pub forged_destination: Counter,
    pub inflight_update_failed: Counter,
    pub table_decode_failed: Counter,
    pub prefix_events_sent: Counter,
    pub prefix_events_learned: Counter,
    pub prefix_send_failed: Counter,
    pub prefix_ring_lost: Counter,
    picks: RefCell<LabelledCounters>,
}

impl Stats {
    fn define() -> Self {
        Self {
            routed: Counter::define("wasm_epp.requests_routed"),
            fail_open: Counter::define("wasm_epp.fail_open"),
            affinity: Counter::define("wasm_epp.affinity_picks"),
            prefix_matched: Counter::define("wasm_epp.prefix_matched_picks"),
            no_pod: Counter::define("wasm_epp.no_pod"),
            shed: Counter::define("wasm_epp.shed"),
            body_invalid: Counter::define("wasm_epp.body_invalid"),
            body_rejected: Counter::define("wasm_epp.body_rejected"),
            body_over_limit: Counter::define("wasm_epp.body_over_limit"),
            prompt_unhashable: Counter::define("wasm_epp.prompt_unhashable"),
            forged_destination: Counter::define("wasm_epp.forged_destination_removed"),
            inflight_update_failed: Counter::define("wasm_epp.inflight_update_failed"),
            table_decode_failed: Counter::define("wasm_epp.table_decode_failed"),
            prefix_events_sent: Counter::define("wasm_epp.prefix_events_sent"),
            prefix_events_learned: Counter::define("wasm_epp.prefix_events_learned"),
            prefix_send_failed: Counter::define("wasm_epp.prefix_send_failed"),
            prefix_ring_lost: Counter::define("wasm_epp.prefix_ring_segments_lost"),
            picks: RefCell::new(LabelledCounters::new("wasm_epp.picks.pod")),
        }
    }

    pub fn count_pick(&self, pod: &PodAddress, fail_open: bool, affinity: bool, prefix_matched: bool) {
        self.routed.increment();
        for (happened, counter) in
            [(fail_open, self.fail_open), (affinity, self.affinity), (prefix_matched, self.prefix_matched)]
        {
            if happened {
                counter.increment();
            }
        }
        if let Ok(mut picks) = self.picks.try_borrow_mut() {
            picks.increment(&pod.stat_label());
        }
    }
}

pub struct Worker {
    pub config: FilterConfig,
    pub policy: Policy,
    pub fallback_pool: Vec<PodAddress>,
    pub table: RefCell<TableCache>,
    pub prefix: RefCell<WorkerPrefix>,
    pub random: RefCell<TieBreaker>,
    pub stats: Stats,
    /// The singleton's event queue, once resolved (it may register after us).
    pub event_queue: Cell<Option<u32>>,
    /// The `vm_id` shared with the singleton (queues are resolved by it).
    pub vm_id: String,
    /// Whether the last pick failed open, so the change is logged once, not per request.
    failing_open: Cell<bool>,
    /// This root has created an HTTP context: it serves requests. Envoy's main-thread root
    /// never does, and must not keep (and sync) a prefix replica for nothing.
    pub serving: Cell<bool>,
}

impl Worker {
    pub fn new(config: FilterConfig, fallback_pool: Vec<PodAddress>, vm_id: String) -> Self {
        Self {
            policy: config.policy(),
            prefix: RefCell::new(WorkerPrefix::new(config.prefix.max_index_entries)),
            config,
            fallback_pool,
            table: RefCell::new(TableCache::default()),
            random: RefCell::new(TieBreaker::new(wasm_epp_host::clock::seed())),
            stats: Stats::define(),
            event_queue: Cell::new(None),
            vm_id,
            failing_open: Cell::new(false),
            serving: Cell::new(false),
        }
    }

    /// Logs when picking starts or stops failing open (no usable pod data).
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
