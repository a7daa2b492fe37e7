//! On the tick: this worker's TTFT observations published for the other workers of its Envoy,
//! and theirs added to its models (`picker::learn::shared_models` says why and how).

use std::cell::Cell;

use picker::learn::shared_models::{decode, share_every_ms, Learned, REFRESH_EVERY_MS};
use wasm_epp_host::Host;

use crate::worker::Worker;

/// When this worker last shared, and what it had observed then.
#[derive(Debug, Default)]
pub struct ShareClock {
    next_ms: Cell<u64>,
    published_ms: Cell<u64>,
    published_observed: Cell<Option<u64>>,
}

fn key(slot: usize) -> String {
    picker::keys::per_slot(picker::keys::LEARNED_TTFT_PREFIX, slot)
}

/// Every [`share_every_ms`] (100 ms up to 64 pods), learning on: forgets its observations of
/// pods gone stale (`TtftModels::forget_stale`), publishes this worker's observations (when
/// they changed since, or to stay live) under its in-flight slot, then reads every other
/// claimed slot's and sets them as the models' other workers' observations. A worker with no
/// slot (more workers than slots) learns from its own answers only.
pub fn share(worker: &Worker, host: &dyn Host, slot: Option<usize>, slots: usize, now_ms: u64) {
    let clock = &worker.learning_share;
    // A next share further off than the longest interval was set before the wall clock
    // stepped back: due now, or nothing would be shared until the clock caught up.
    let longest = share_every_ms(picker::pod_table::MAX_PODS);
    if !worker.config.learning.enabled || picker::clock::not_due_yet(now_ms, clock.next_ms.get(), longest) {
        return;
    }
    let Ok(mut learner) = worker.learning.try_borrow_mut() else { return };
    clock.next_ms.set(now_ms.saturating_add(share_every_ms(learner.models.pods())));
    // Before publishing, so the other workers' copies of what is forgotten go too.
    learner.models.forget_stale();
    let Some(slot) = slot else { return };
    let observed = learner.models.observed();
    // Published "after now" (the clock stepped back): published again now, stamped so.
    let stale = !picker::clock::within_last(now_ms, clock.published_ms.get(), REFRESH_EVERY_MS - 1);
    if (clock.published_observed.get() != Some(observed) || stale)
        && host.set(&key(slot), &learner.models.encode_own(now_ms), None).is_ok()
    {
        clock.published_ms.set(now_ms);
        clock.published_observed.set(Some(observed));
    }
    let mut others = Learned::default();
    let mut read = 0;
    for other in picker::inflight::other_slots(slot, slots) {
        if let Ok((Some(bytes), _)) = host.get(&key(other)) {
            if let Some(learned) = decode(&bytes, now_ms) {
                others.add(learned);
                read += 1;
            }
        }
    }
    worker.stats.add(worker.learning_stats.models_read, read);
    learner.models.set_others(others, now_ms);
}
