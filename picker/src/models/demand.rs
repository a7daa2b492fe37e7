//! Which adapters are in demand: requested within the last [`DEMAND_WINDOW_MS`] (by this
//! worker). A free adapter slot is worth keeping for an adapter in demand that sits on no
//! pod; a registered adapter nobody asks for does not hold slots back (see
//! [`super::affinity`], "tight"). Until the worker has seen a whole window of requests it
//! cannot tell, so every adapter counts as in demand: at start, the slots are kept for the
//! adapters the pods registered rather than given to second copies of the first ones asked.

use hashbrown::HashMap;

use crate::inflight::SLOT_STALE_MS;
use crate::metrics_text::MAX_ADAPTER_NAME_BYTES;

/// How long a request keeps its adapter in demand: far longer than the gap between two
/// requests for a tail adapter in a busy pool (seconds), short enough that a retired
/// adapter stops holding a slot back within a minute.
pub const DEMAND_WINDOW_MS: u64 = 60_000;
/// Adapters tracked at most: more distinct adapters asked for within a minute than this
/// is far beyond any pool's GPU slots, where holding slots back no longer matters.
pub const MAX_TRACKED_ADAPTERS: usize = 1024;

/// Entries forgotten at once when every tracked adapter is still in demand: the oldest
/// eighth, so a stream of new names (the body's `model` is the client's to choose) costs one
/// walk of the map per [`EVICTED_AT_ONCE`] names, not two per name.
const EVICTED_AT_ONCE: usize = MAX_TRACKED_ADAPTERS / 8;

#[derive(Debug, Clone, Default)]
pub struct AdapterDemand {
    /// Model name → when it was last routed (host ms).
    last_ms: HashMap<String, u64>,
    /// The first request noted (host ms).
    since_ms: Option<u64>,
}

impl AdapterDemand {
    /// `model` was routed at `now_ms`. A name longer than any adapter a pod reports
    /// ([`MAX_ADAPTER_NAME_BYTES`]: the table drops longer ones) is never asked about, and is
    /// not kept: the body's `model` may be megabytes, and up to [`MAX_TRACKED_ADAPTERS`] of them
    /// stayed a minute (a gigabyte of a worker's memory with 1 MiB names).
    pub fn note(&mut self, model: &str, now_ms: u64) {
        // A first request "after now" was before the wall clock stepped back: the history is
        // counted from here, or every adapter would count as in demand until the clock caught up.
        if self.since_ms.is_none_or(|since| since > now_ms) {
            self.since_ms = Some(now_ms);
        }
        if model.len() > MAX_ADAPTER_NAME_BYTES {
            return;
        }
        if let Some(last) = self.last_ms.get_mut(model) {
            *last = now_ms;
            return;
        }
        if self.last_ms.len() >= MAX_TRACKED_ADAPTERS {
            self.last_ms.retain(|_, last| crate::clock::within_last(now_ms, *last, DEMAND_WINDOW_MS));
        }
        if self.last_ms.len() >= MAX_TRACKED_ADAPTERS {
            // Everything is recent: the oldest go, a batch at once (those before the batch's
            // newest time, then as many at that time as the batch has room for).
            let mut times: Vec<u64> = self.last_ms.values().copied().collect();
            let (older, &mut cutoff, _) = times.select_nth_unstable(EVICTED_AT_ONCE - 1);
            let mut at_cutoff = EVICTED_AT_ONCE - older.iter().filter(|&&time| time < cutoff).count();
            self.last_ms.retain(|_, last| match (*last).cmp(&cutoff) {
                std::cmp::Ordering::Less => false,
                std::cmp::Ordering::Equal if at_cutoff > 0 => {
                    at_cutoff -= 1;
                    false
                }
                _ => true,
            });
        }
        self.last_ms.insert(model.to_owned(), now_ms);
    }

    /// Whether `model` was routed within the window before `now_ms`, or the worker has not
    /// seen a whole window yet. `now_ms` is the pod table's publication, the pool service's
    /// clock: the worker reads the table up to a tick later, so its latest requests are
    /// stamped a little after it, and count.
    pub fn wanted(&self, model: &str, now_ms: u64) -> bool {
        let young = self.since_ms.is_none_or(|since| now_ms.saturating_sub(since) <= DEMAND_WINDOW_MS);
        young
            || self.last_ms.get(model).is_some_and(|last| {
                crate::clock::within_last_of_another(now_ms, *last, DEMAND_WINDOW_MS, SLOT_STALE_MS)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demand_expires_and_stays_bounded() {
        let mut demand = AdapterDemand::default();
        assert!(demand.wanted("b", 0), "no history yet: every adapter may be asked for");
        demand.note("a", 1_000);
        assert!(demand.wanted("b", 1_000 + DEMAND_WINDOW_MS), "still less than a window of history");
        demand.note("a", 2_000);
        assert!(demand.wanted("a", 2_000 + DEMAND_WINDOW_MS));
        assert!(!demand.wanted("a", 2_001 + DEMAND_WINDOW_MS), "not asked for within the window");
        assert!(!demand.wanted("b", 2_000 + DEMAND_WINDOW_MS), "never asked for");
        for i in 0..2 * MAX_TRACKED_ADAPTERS {
            demand.note(&format!("m{i}"), 2_000 + i as u64);
        }
        assert!(demand.last_ms.len() <= MAX_TRACKED_ADAPTERS);
        let newest = 2_000 + 2 * MAX_TRACKED_ADAPTERS as u64 - 1;
        assert!(demand.wanted(&format!("m{}", 2 * MAX_TRACKED_ADAPTERS - 1), newest + DEMAND_WINDOW_MS), "kept");
        assert!(!demand.last_ms.contains_key("m0"), "the oldest forgotten");
    }

    #[test]
    fn a_name_no_pod_can_report_is_not_kept() {
        let mut demand = AdapterDemand::default();
        let longest = "a".repeat(MAX_ADAPTER_NAME_BYTES);
        let longer = "b".repeat(MAX_ADAPTER_NAME_BYTES + 1);
        let huge = "c".repeat(1 << 20);
        for name in [&longest, &longer, &huge] {
            demand.note(name, 1_000);
        }
        assert!(demand.last_ms.contains_key(&longest));
        assert_eq!(demand.last_ms.len(), 1, "over-long names take no memory");
        let stored: usize = demand.last_ms.keys().map(String::len).sum();
        assert!(stored <= MAX_TRACKED_ADAPTERS * MAX_ADAPTER_NAME_BYTES);
    }

    #[test]
    fn past_the_bound_the_oldest_eighth_goes_at_once_ties_included() {
        // Distinct times: exactly the oldest batch goes, and the next names need no eviction.
        let mut demand = AdapterDemand::default();
        for i in 0..MAX_TRACKED_ADAPTERS {
            demand.note(&format!("m{i}"), i as u64);
        }
        demand.note("new", MAX_TRACKED_ADAPTERS as u64);
        assert_eq!(demand.last_ms.len(), MAX_TRACKED_ADAPTERS - EVICTED_AT_ONCE + 1);
        assert!((0..EVICTED_AT_ONCE).all(|i| !demand.last_ms.contains_key(&format!("m{i}"))));
        assert!((EVICTED_AT_ONCE..MAX_TRACKED_ADAPTERS).all(|i| demand.last_ms.contains_key(&format!("m{i}"))));
        // Every name at one time (a burst within a millisecond): still one batch, not all.
        let mut burst = AdapterDemand::default();
        for i in 0..MAX_TRACKED_ADAPTERS {
            burst.note(&format!("m{i}"), 7);
        }
        burst.note("new", 7);
        assert_eq!(burst.last_ms.len(), MAX_TRACKED_ADAPTERS - EVICTED_AT_ONCE + 1);
        assert!(burst.last_ms.contains_key("new"));
    }

    #[test]
    fn demand_follows_the_requests_after_the_wall_clock_stepped_back() {
        let mut demand = AdapterDemand::default();
        let at = 3_600_000 + 1_000;
        demand.note("a", at);
        // The clock steps back an hour: every adapter counted as in demand for the hour (no
        // whole window of history yet, it seemed), holding free slots back for them.
        let back = at - 3_600_000;
        demand.note("b", back);
        let later = back + DEMAND_WINDOW_MS + 1;
        demand.note("b", later);
        assert!(demand.wanted("b", later));
        assert!(!demand.wanted("c", later), "never asked for");
        assert!(!demand.wanted("a", later), "asked for before the step, not since");
    }

    #[test]
    fn a_request_routed_after_the_table_was_published_is_demand() {
        let mut demand = AdapterDemand::default();
        demand.note("other", 0);
        // The table is published at 1,000,000 by the pool service; the worker routes the
        // adapter 5 ms later and reads the table on its next tick, asking about that time.
        demand.note("hot-adapter", 1_000_005);
        assert!(demand.wanted("hot-adapter", 1_000_000));
        assert!(!demand.wanted("other", 1_000_000), "out of the window");
    }
}
