//! Pods that left the pool lately, and what is kept of them for a while.
//!
//! A Kubernetes pod leaves the discovered pool whenever it turns NotReady, and a readiness
//! probe that times out while the engine is busy (the API server blocked under load) turns it
//! NotReady for a few seconds with its KV cache intact. Forgetting such a pod at once voids
//! what the pool service and the workers know of its cache (a new epoch, the prefix index and
//! sessions cleared, its learned speed gone) exactly when load is highest. So a departed pod's
//! state is kept for [`GRACE_MS`]: listed again within it, the pod takes its state back, and
//! its first scrape decides whether it is the same engine (its counters carried on, see
//! [`crate::poller`]). Gone longer, it is forgotten as before.

use hashbrown::HashMap;

use crate::address::PodAddress;
use crate::clock::within_last;

/// How long a departed pod's state is kept: as long as its counters are trusted to tell the
/// same engine from a restarted one ([`crate::poller::TRUST_COUNTERS_FOR_MS`]); a pod back
/// later gets a new epoch anyway, so keeping it longer would hold memory for nothing.
pub const GRACE_MS: u64 = crate::poller::TRUST_COUNTERS_FOR_MS;

/// Departed pods with what is kept of each (`T`) and when it left. Bounded by its callers'
/// `room` ([`Departed::expire`]): at most the pool's cap.
pub struct Departed<T> {
    pods: HashMap<PodAddress, (u64, T)>,
    /// The earliest departure held: expiry is one comparison while none is due.
    oldest_ms: Option<u64>,
}

impl<T> Default for Departed<T> {
    fn default() -> Self {
        Self { pods: HashMap::new(), oldest_ms: None }
    }
}

impl<T> Departed<T> {
    /// `pod` left the pool at `now_ms`, with `kept`.
    pub fn insert(&mut self, pod: PodAddress, kept: T, now_ms: u64) {
        self.pods.insert(pod, (now_ms, kept));
        self.oldest_ms = Some(self.oldest_ms.map_or(now_ms, |oldest| oldest.min(now_ms)));
    }

    /// `pod` is listed again at `now_ms`: what was kept of it, if it left within [`GRACE_MS`].
    pub fn take(&mut self, pod: &str, now_ms: u64) -> Option<T> {
        let (left_ms, kept) = self.pods.remove(pod)?;
        within_last(now_ms, left_ms, GRACE_MS).then_some(kept)
    }

    /// Whether `pod` left within the grace (as of the last [`Departed::expire`]).
    pub fn contains(&self, pod: &str) -> bool {
        self.pods.contains_key(pod)
    }

    /// Drops the pods `listed` says are back in the pool.
    pub fn remove_listed(&mut self, listed: impl Fn(&str) -> bool) {
        self.pods.retain(|pod, _| !listed(pod.as_str()));
        self.oldest_ms = self.pods.values().map(|(left_ms, _)| *left_ms).min();
    }

    pub fn len(&self) -> usize {
        self.pods.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    /// Forgets the pods gone longer than [`GRACE_MS`] at `now_ms` (or stamped after it: the
    /// wall clock stepped back), then the earliest departures past `room`. Returns whether
    /// any was forgotten.
    pub fn expire(&mut self, now_ms: u64, room: usize) -> bool {
        let due = self.oldest_ms.is_some_and(|oldest| !within_last(now_ms, oldest, GRACE_MS));
        if !due && self.pods.len() <= room {
            return false;
        }
        let before = self.pods.len();
        self.pods.retain(|_, (left_ms, _)| within_last(now_ms, *left_ms, GRACE_MS));
        if self.pods.len() > room {
            let mut by_age: Vec<(u64, PodAddress)> =
                self.pods.iter().map(|(pod, (left_ms, _))| (*left_ms, pod.clone())).collect();
            by_age.sort_unstable();
            let excess = self.pods.len() - room;
            for (_, pod) in by_age.into_iter().take(excess) {
                self.pods.remove(&pod);
            }
        }
        self.oldest_ms = self.pods.values().map(|(left_ms, _)| *left_ms).min();
        self.pods.len() != before
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(text: &str) -> PodAddress {
        PodAddress::parse(text).unwrap()
    }

    #[test]
    fn a_pod_back_within_the_grace_takes_its_state_back() {
        let mut departed = Departed::default();
        departed.insert(addr("10.0.0.1:80"), 'a', 1_000);
        departed.insert(addr("10.0.0.2:80"), 'b', 1_000);
        assert_eq!(departed.take("10.0.0.1:80", 1_000 + GRACE_MS), Some('a'));
        assert_eq!(departed.take("10.0.0.1:80", 1_000 + GRACE_MS), None, "taken once");
        assert_eq!(departed.take("10.0.0.2:80", 1_001 + GRACE_MS), None, "back too late");
        assert!(departed.is_empty());
        departed.insert(addr("10.0.0.3:80"), 'c', 5_000);
        assert_eq!(departed.take("10.0.0.3:80", 4_000), None, "left 'after now': the clock stepped back");
    }

    #[test]
    fn departures_expire_and_keep_to_their_room_newest_first() {
        let mut departed = Departed::default();
        for (i, at) in [(1, 100), (2, 200), (3, 300), (4, 300)] {
            departed.insert(addr(&format!("10.0.0.{i}:80")), (), at);
        }
        assert!(!departed.expire(100 + GRACE_MS, 4), "none due, none past the room");
        assert!(departed.expire(101 + GRACE_MS, 4), "the first is due");
        assert!(!departed.contains("10.0.0.1:80") && departed.len() == 3);
        assert!(departed.expire(150 + GRACE_MS, 1), "past the room: the earliest go");
        assert!(departed.len() == 1 && !departed.contains("10.0.0.2:80"));
        departed.remove_listed(|pod| pod == "10.0.0.3:80" || pod == "10.0.0.4:80");
        assert!(departed.is_empty());
        departed.insert(addr("10.0.0.5:80"), (), 10_000);
        assert!(departed.expire(9_000, 4), "stamped after now: before a step back");
        assert!(departed.is_empty() && !departed.expire(u64::MAX, 0));
    }
}
