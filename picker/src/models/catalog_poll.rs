//! When to fetch each pod's `/v1/models`, and which answer belongs to which pod.
//!
//! Model lists change when an operator loads or unloads an adapter, so they are fetched every
//! `models_interval_ms` (seconds), not every scrape: a round asks every pod once, one call in
//! flight per pod at most. Time comes in as a parameter, so the schedule is tested without a
//! clock; the pool service does the host calls.

use crate::address::PodAddress;
use crate::pod_table::MAX_PODS;

/// Calls in flight at most: one per pod.
const MAX_CALLS: usize = MAX_PODS;

/// The schedule of model-list fetches.
#[derive(Debug, Default)]
pub struct CatalogSchedule {
    interval_ms: u64,
    next_round_ms: u64,
    /// (host call token, pod, started at).
    calls: Vec<(u32, PodAddress, u64)>,
}

impl CatalogSchedule {
    /// `interval_ms` 0 turns fetching off.
    pub fn new(interval_ms: u64) -> Self {
        Self { interval_ms, next_round_ms: 0, calls: Vec::new() }
    }

    /// The pods to ask now: all of `pods` without a call in flight, once per interval. A call
    /// older than `timeout_ms` twice over is forgotten (the host should have answered).
    pub fn due(&mut self, now_ms: u64, timeout_ms: u64, pods: &[PodAddress]) -> Vec<PodAddress> {
        if self.interval_ms == 0 || crate::clock::not_due_yet(now_ms, self.next_round_ms, self.interval_ms) {
            return Vec::new();
        }
        self.next_round_ms = now_ms.saturating_add(self.interval_ms);
        let grace = timeout_ms.saturating_mul(2);
        self.calls.retain(|(_, _, started)| crate::clock::within_last(now_ms, *started, grace));
        pods.iter().filter(|pod| !self.calls.iter().any(|(_, busy, _)| busy == *pod)).cloned().collect()
    }

    /// A fetch was dispatched with the host's `token`.
    pub fn started(&mut self, token: u32, pod: PodAddress, now_ms: u64) {
        if self.calls.len() < MAX_CALLS {
            self.calls.push((token, pod, now_ms));
        }
    }

    /// Whether `token` is a fetch of ours.
    pub fn owns(&self, token: u32) -> bool {
        self.calls.iter().any(|(t, _, _)| *t == token)
    }

    /// The pod whose fetch `token` answered (and forgets the call).
    pub fn finished(&mut self, token: u32) -> Option<PodAddress> {
        let position = self.calls.iter().position(|(t, _, _)| *t == token)?;
        Some(self.calls.swap_remove(position).1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_pod_is_asked_once_per_interval_and_answers_are_matched() {
        let pods = vec![PodAddress::parse("10.0.0.1:80").unwrap(), PodAddress::parse("10.0.0.2:80").unwrap()];
        let mut schedule = CatalogSchedule::new(5_000);
        assert_eq!(schedule.due(0, 1_000, &pods).len(), 2);
        schedule.started(7, pods[0].clone(), 0);
        assert!(schedule.due(100, 1_000, &pods).is_empty(), "not before the interval");
        assert_eq!(schedule.due(5_000, 1_000, &pods).len(), 2, "a lost call is forgotten after its timeout");
        schedule.started(8, pods[1].clone(), 5_000);
        assert!(schedule.owns(8) && !schedule.owns(7));
        assert_eq!(schedule.finished(8), Some(pods[1].clone()));
        assert!(CatalogSchedule::new(0).due(0, 1_000, &pods).is_empty(), "0 turns it off");
    }

    #[test]
    fn a_wall_clock_stepped_back_does_not_stop_the_fetches() {
        let pods = vec![PodAddress::parse("10.0.0.1:80").unwrap()];
        let mut schedule = CatalogSchedule::new(5_000);
        let hour = 3_600_000;
        assert_eq!(schedule.due(2 * hour, 1_000, &pods).len(), 1);
        schedule.started(7, pods[0].clone(), 2 * hour);
        // The clock goes back an hour: the next round comes one interval later, not an hour.
        assert!(schedule.due(hour, 1_000, &pods).len() == 1, "due at once, the old call forgotten");
        assert!(schedule.due(hour + 100, 1_000, &pods).is_empty(), "then once per interval again");
        assert_eq!(schedule.due(hour + 5_000, 1_000, &pods).len(), 1);
    }
}
