//! What every request on one worker thread shares: the validated configuration, the
//! decoded pod table, the tie-breaker and the stats.

use std::cell::{Cell, RefCell};

use picker::address::PodAddress;
use picker::config::FilterConfig;
use picker::random::TieBreaker;
use wasm_epp_host::{Counter, LabelledCounters};

use crate::table_cache::TableCache;

pub struct Stats {
    pub routed: Counter,
    pub fail_open: Counter,
    pub no_pod: Counter,
    pub shed: Counter,
    pub body_invalid: Counter,
    pub body_rejected: Counter,
    pub body_over_limit: Counter,
    pub forged_destination: Counter,
    pub inflight_update_failed: Counter,
    pub table_decode_failed: Counter,
    pub picks: RefCell<LabelledCounters>,
}

impl Stats {
    fn define() -> Self {
        Self {
            routed: Counter::define("wasm_epp.requests_routed"),
            fail_open: Counter::define("wasm_epp.fail_open"),
            no_pod: Counter::define("wasm_epp.no_pod"),
            shed: Counter::define("wasm_epp.shed"),
            body_invalid: Counter::define("wasm_epp.body_invalid"),
            body_rejected: Counter::define("wasm_epp.body_rejected"),
            body_over_limit: Counter::define("wasm_epp.body_over_limit"),
            forged_destination: Counter::define("wasm_epp.forged_destination_removed"),
            inflight_update_failed: Counter::define("wasm_epp.inflight_update_failed"),
            table_decode_failed: Counter::define("wasm_epp.table_decode_failed"),
            picks: RefCell::new(LabelledCounters::new("wasm_epp.picks.pod")),
        }
    }
}

pub struct Worker {
    pub config: FilterConfig,
    pub fallback_pool: Vec<PodAddress>,
    pub table: RefCell<TableCache>,
    pub random: RefCell<TieBreaker>,
    pub stats: Stats,
    /// Whether the last pick failed open, so the change is logged once, not per request.
    failing_open: Cell<bool>,
}

impl Worker {
    pub fn new(config: FilterConfig, fallback_pool: Vec<PodAddress>) -> Self {
        Self {
            config,
            fallback_pool,
            table: RefCell::new(TableCache::default()),
            random: RefCell::new(TieBreaker::new(wasm_epp_host::clock::seed())),
            stats: Stats::define(),
            failing_open: Cell::new(false),
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
