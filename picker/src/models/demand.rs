//! Which adapters are in demand: requested within the last [`DEMAND_WINDOW_MS`] (by this
//! worker). A free adapter slot is worth keeping for an adapter in demand that sits on no
//! pod; a registered adapter nobody asks for does not hold slots back (see
//! [`super::affinity`], "tight"). Until the worker has seen a whole window of requests it
//! cannot tell, so every adapter counts as in demand: at start, the slots are kept for the
//! adapters the pods registered rather than given to second copies of the first ones asked.

use hashbrown::HashMap;

/// How long a request keeps its adapter in demand: far longer than the gap between two
/// requests for a tail adapter in a busy pool (seconds), short enough that a retired
/// adapter stops holding a slot back within a minute.
pub const DEMAND_WINDOW_MS: u64 = 60_000;
/// Adapters tracked at most: more distinct adapters asked for within a minute than this
/// is far beyond any pool's GPU slots, where holding slots back no longer matters.
pub const MAX_TRACKED_ADAPTERS: usize = 1024;

#[derive(Debug, Clone, Default)]
pub struct AdapterDemand {
    /// Model name → when it was last routed (host ms).
    last_ms: HashMap<String, u64>,
    /// The first request noted (host ms).
    since_ms: Option<u64>,
}

impl AdapterDemand {
    /// `model` was routed at `now_ms`.
    pub fn note(&mut self, model: &str, now_ms: u64) {
        self.since_ms.get_or_insert(now_ms);
        if let Some(last) = self.last_ms.get_mut(model) {
            *last = now_ms;
            return;
        }
        if self.last_ms.len() >= MAX_TRACKED_ADAPTERS {
            self.last_ms.retain(|_, last| now_ms.saturating_sub(*last) <= DEMAND_WINDOW_MS);
        }
        if self.last_ms.len() >= MAX_TRACKED_ADAPTERS {
            let oldest = self.last_ms.iter().min_by_key(|(_, last)| **last).map(|(name, _)| name.clone());
            if let Some(oldest) = oldest {
                self.last_ms.remove(&oldest);
            }
        }
        self.last_ms.insert(model.to_owned(), now_ms);
    }

    /// Whether `model` was routed within the window before `now_ms`, or the worker has not
    /// seen a whole window yet.
    pub fn wanted(&self, model: &str, now_ms: u64) -> bool {
        let young = self.since_ms.is_none_or(|since| now_ms.saturating_sub(since) <= DEMAND_WINDOW_MS);
        young || self.last_ms.get(model).is_some_and(|last| now_ms.saturating_sub(*last) <= DEMAND_WINDOW_MS)
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
        assert_eq!(demand.last_ms.len(), MAX_TRACKED_ADAPTERS);
        let newest = 2_000 + 2 * MAX_TRACKED_ADAPTERS as u64 - 1;
        assert!(demand.wanted(&format!("m{}", 2 * MAX_TRACKED_ADAPTERS - 1), newest + DEMAND_WINDOW_MS), "kept");
    }
}
