//! Fairness across Envoy workers and gateway replicas: each worker holds its own paused
//! requests, so without care the worker that ticks first, or whose requests end most often,
//! takes every place that frees up and the other worker's queue starves; and a replica that
//! held the pool when the overload began keeps it, refilling each place as it frees, while
//! the clients of a replica started later wait out their TTL.
//!
//! Each worker with requests waiting says so in shared data (a key per in-flight slot:
//! its refresh time and queue length, written on its tick while it waits); the pool
//! service counts those and tells its peers, and publishes how many of its peers' workers
//! wait (see [`picker::flow_share`]). While `n` workers wait, this Envoy's and the peers',
//! each may keep at most `ceil(capacity / n)` requests of its own in flight (capacity =
//! pods × `max_inflight_per_pod`); a worker alone in waiting may use it all. So two
//! backlogged workers converge to half the pool each, whichever ticks first, and a worker
//! whose queue empties gives its share back on its next tick (one that stopped ticking,
//! once its record is stale: [`stale_after_ms`]). A peer's workers count from its next
//! message (every `peers.heartbeat_ms`) and stop counting with its next message once they
//! no longer wait, or [`picker::inflight::SLOT_STALE_MS`] after its last message.

use picker::flow_share::{peer_waiting, waiting_key, waiting_record, waiting_workers};
use picker::store::SharedStore;

pub use picker::flow_share::{stale_after_ms, WAITING_JITTER_MS};

/// This worker's view of who else waits.
#[derive(Debug)]
pub struct WorkerShare {
    /// What this worker last wrote (so an empty queue is written once, not every tick).
    published_waiting: u32,
    /// Other workers waiting, as of the last read: this Envoy's and the other replicas'.
    others_waiting: u32,
    /// Records older than this are ignored ([`stale_after_ms`] of the waiting tick).
    stale_after_ms: u64,
}

impl WorkerShare {
    /// With the configured `flow_control.waiting_tick_ms` (every worker ticks at it while
    /// it waits).
    pub fn new(waiting_tick_ms: u64) -> Self {
        Self { published_waiting: 0, others_waiting: 0, stale_after_ms: stale_after_ms(waiting_tick_ms) }
    }

    /// Writes this worker's queue length (while it waits, every call: the refresh time is
    /// what keeps it counted) and reads how many other workers wait.
    pub fn sync(&mut self, store: &dyn SharedStore, slot: Option<usize>, waiting: u32, now_ms: u64) {
        if let Some(slot) = slot {
            if waiting > 0 || self.published_waiting > 0 {
                // Only this worker writes its key: a plain write, no compare-and-swap.
                if store.set(&waiting_key(slot), &waiting_record(now_ms, waiting), None).is_ok() {
                    self.published_waiting = waiting;
                }
            }
        }
        self.others_waiting = if waiting > 0 {
            waiting_workers(store, slot, now_ms, self.stale_after_ms).saturating_add(peer_waiting(store, now_ms))
        } else {
            0
        };
    }

    /// Workers waiting, this one included if it waits.
    pub fn contenders(&self, waiting_here: bool) -> u32 {
        self.others_waiting.saturating_add(u32::from(waiting_here))
    }

    /// How many requests of its own this worker may keep in flight.
    pub fn local_limit(&self, capacity: u32, waiting_here: bool) -> u32 {
        let contenders = self.contenders(waiting_here).max(1);
        capacity.div_ceil(contenders)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use picker::store::MemoryStore;

    #[test]
    fn backlogged_workers_split_the_capacity_and_an_idle_one_gives_it_back() {
        let store = MemoryStore::default();
        let (mut a, mut b) = (WorkerShare::new(5), WorkerShare::new(5));
        a.sync(&store, Some(0), 5, 1_000);
        assert_eq!(a.local_limit(16, true), 16, "alone in waiting: the whole pool");
        b.sync(&store, Some(1), 3, 1_001);
        a.sync(&store, Some(0), 5, 1_002);
        assert_eq!((a.local_limit(16, true), b.local_limit(16, true)), (8, 8));
        assert_eq!(a.local_limit(15, true), 8, "rounded up: nothing is left unused");
        b.sync(&store, Some(1), 0, 1_003);
        a.sync(&store, Some(0), 5, 1_004);
        assert_eq!(a.local_limit(16, true), 16, "b's queue emptied");
        b.sync(&store, Some(1), 2, 1_005);
        a.sync(&store, Some(0), 5, 1_005 + stale_after_ms(5) + 1);
        assert_eq!(a.local_limit(16, true), 16, "a record not refreshed is a worker gone");
    }

    #[test]
    fn the_workers_of_other_replicas_that_wait_take_their_share() {
        let store = MemoryStore::default();
        let (mut a, mut b) = (WorkerShare::new(5), WorkerShare::new(5));
        a.sync(&store, Some(0), 5, 1_000);
        assert_eq!(a.local_limit(16, true), 16, "no peer waits: the whole pool, as without peers");
        // Another replica's two workers wait (its pool service told this one's).
        picker::flow_share::publish_peer_waiting(&store, 1_000, 2).unwrap();
        a.sync(&store, Some(0), 5, 1_001);
        assert_eq!(a.local_limit(16, true), 6, "a third of the pool: ceil(16 / 3)");
        b.sync(&store, Some(1), 1, 1_002);
        a.sync(&store, Some(0), 5, 1_003);
        assert_eq!((a.local_limit(16, true), b.local_limit(16, true)), (4, 4), "four workers wait");
        // A worker whose queue is empty is not held to a share (as before): routed at once
        // when the pool has room, it waits like any other once it does not.
        a.sync(&store, Some(0), 0, 1_004);
        assert_eq!(a.local_limit(16, true), 16);
        // The pool service stopped publishing: the peers' workers stop counting.
        a.sync(&store, Some(0), 5, 1_000 + picker::inflight::SLOT_STALE_MS + 1);
        assert_eq!(a.local_limit(16, true), 16, "b's record is stale too by now");
        // A peer claiming a billion waiting workers is bounded: a place is always left.
        picker::flow_share::publish_peer_waiting(&store, 5_000, 1_000_000_000).unwrap();
        a.sync(&store, Some(0), 5, 5_000);
        assert_eq!(a.local_limit(16, true), 1);
        assert_eq!(a.contenders(true), picker::flow_share::MAX_PEER_WAITING + 1);
    }

    #[test]
    fn with_a_slow_waiting_tick_a_worker_between_its_ticks_still_counts() {
        let store = MemoryStore::default();
        let (mut a, mut b) = (WorkerShare::new(1_000), WorkerShare::new(1_000));
        b.sync(&store, Some(1), 3, 10_000);
        a.sync(&store, Some(0), 5, 10_900);
        assert_eq!(a.local_limit(16, true), 8, "b wrote 900 ms ago and ticks every 1,000 ms");
        a.sync(&store, Some(0), 5, 10_000 + stale_after_ms(1_000) + 1);
        assert_eq!(a.local_limit(16, true), 16, "two ticks and the slack without a write: gone");
    }

    #[test]
    fn a_worker_gone_before_the_wall_clock_stepped_back_stops_counting() {
        let store = MemoryStore::default();
        let (mut a, mut b) = (WorkerShare::new(5), WorkerShare::new(5));
        b.sync(&store, Some(1), 3, 3_600_000);
        // b's VM goes away while it waits; the clock steps back an hour. b counted until the
        // clock caught up with its last write: a's share of the pool halved for the hour.
        a.sync(&store, Some(0), 5, 1_000);
        assert_eq!(a.local_limit(16, true), 16, "b's record lies an hour ahead: gone");
        b.sync(&store, Some(1), 3, 1_001);
        a.sync(&store, Some(0), 5, 1_002);
        assert_eq!(a.local_limit(16, true), 8, "a live worker counts again from its next write");
    }
}
