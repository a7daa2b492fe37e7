//! Fairness across Envoy workers: each worker holds its own paused requests, so without
//! care the worker that ticks first, or whose requests end most often, takes every place
//! that frees up and the other worker's queue starves.
//!
//! Each worker with requests waiting says so in shared data (a key per in-flight slot:
//! its refresh time and queue length, written on its tick while it waits). While `n`
//! workers wait, each may keep at most `ceil(capacity / n)` requests of its own in flight
//! (capacity = pods × `max_inflight_per_pod`); a worker alone in waiting may use it all.
//! So two backlogged workers converge to half the pool each, whichever ticks first, and a
//! worker whose queue empties gives its share back on its next tick (one that stopped
//! ticking, once its record is stale: [`stale_after_ms`]).

use picker::inflight::MAX_SLOTS;
use picker::store::SharedStore;

/// Slack for a waiting record beyond its ticks: forty ticks of the default 5 ms waiting
/// tick, well past any scheduling jitter.
pub const WAITING_JITTER_MS: u64 = 200;

/// A waiting record older than this is ignored (its worker stopped waiting or died). The
/// record is rewritten only on its worker's tick, and workers tick out of step, so a live
/// worker's record is up to a whole `waiting_tick_ms` old when read: two ticks (one late or
/// missed is scheduling, not a worker gone) plus the jitter slack. A fixed limit below the
/// tick would drop live workers from the count, and each would take the whole pool.
pub fn stale_after_ms(waiting_tick_ms: u64) -> u64 {
    waiting_tick_ms.saturating_mul(2).saturating_add(WAITING_JITTER_MS)
}

/// Record: refresh time in ms (u64 LE), requests waiting (u32 LE).
const RECORD_BYTES: usize = 12;

fn key(slot: usize) -> String {
    picker::keys::per_slot(picker::keys::FLOW_WAITING_PREFIX, slot)
}

/// This worker's view of who else waits.
#[derive(Debug)]
pub struct WorkerShare {
    /// What this worker last wrote (so an empty queue is written once, not every tick).
    published_waiting: u32,
    /// Other workers waiting, as of the last read.
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
                let mut record = Vec::with_capacity(RECORD_BYTES);
                record.extend_from_slice(&now_ms.to_le_bytes());
                record.extend_from_slice(&waiting.to_le_bytes());
                // Only this worker writes its key: a plain write, no compare-and-swap.
                if store.set(&key(slot), &record, None).is_ok() {
                    self.published_waiting = waiting;
                }
            }
        }
        self.others_waiting = if waiting > 0 { count_waiting(store, slot, now_ms, self.stale_after_ms) } else { 0 };
    }

    /// Workers waiting, this one included if it waits.
    pub fn contenders(&self, waiting_here: bool) -> u32 {
        self.others_waiting + u32::from(waiting_here)
    }

    /// How many requests of its own this worker may keep in flight.
    pub fn local_limit(&self, capacity: u32, waiting_here: bool) -> u32 {
        let contenders = self.contenders(waiting_here).max(1);
        capacity.div_ceil(contenders)
    }
}

fn count_waiting(store: &dyn SharedStore, own_slot: Option<usize>, now_ms: u64, stale_after_ms: u64) -> u32 {
    let mut waiting = 0;
    for slot in (0..MAX_SLOTS).filter(|s| Some(*s) != own_slot) {
        let Ok((Some(record), _)) = store.get(&key(slot)) else { continue };
        let Some(bytes) = record.get(..RECORD_BYTES) else { continue };
        let refreshed = bytes.get(..8).and_then(|b| b.try_into().ok()).map_or(0, u64::from_le_bytes);
        let count = bytes.get(8..).and_then(|b| b.try_into().ok()).map_or(0, u32::from_le_bytes);
        // Before or after now: another worker may have read the clock after this one; but a
        // record further ahead was written before the wall clock stepped back, by a worker
        // that has not written since (a live one rewrites it on its next waiting tick).
        if count > 0 && now_ms.abs_diff(refreshed) <= stale_after_ms {
            waiting += 1;
        }
    }
    waiting
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
