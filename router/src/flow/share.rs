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
//! pods × `max_inflight_per_pod`, of the pods a request may go to, and its requests in flight
//! on those; `release::Look::fit`); a worker alone in waiting may use it all. So two
//! backlogged workers converge to half the pool each, whichever ticks first, and a worker
//! whose queue empties gives its share back on its next tick (one that stopped ticking,
//! once its record is stale: [`stale_after_ms`]). A peer's workers count from its next
//! message (every `peers.heartbeat_ms`) and stop counting with its next message once they
//! no longer wait, or [`picker::inflight::SLOT_STALE_MS`] after its last message.
//!
//! Priority holds across them too: each record carries the worker's highest waiting band
//! (each peer message its sender's, with the workers at it), and the bands and models it
//! waits for, so a lower band is held only on the pods a higher one needs. Only the workers waiting at
//! the highest band waiting anywhere share the pool, `ceil(capacity / n)` with `n` the
//! workers at that band; a worker holds its requests of lower bands while that band waits
//! elsewhere (its requests in flight end and free places for the higher band's workers),
//! reserved places included. A worker alone, or all workers at one band, share as before.
//! A stale record counts for no band (the same freshness rules), so a worker that stopped
//! waiting or died holds no one longer than that.

use std::rc::Rc;

use picker::flow_share::{
    peer_waiting, waiting_claims, waiting_key, waiting_record_with_claims, waiting_view, Claim, Waiting,
};
use picker::store::SharedStore;

pub use picker::flow_share::{stale_after_ms, WAITING_JITTER_MS};

/// This worker's view of who else waits.
#[derive(Debug)]
pub struct WorkerShare {
    /// What this worker last wrote (so an empty queue is written once, not every tick).
    published_waiting: u32,
    /// Other workers waiting, by band, as of the last read: this Envoy's and the other
    /// replicas'.
    others: Waiting,
    /// What they wait for: this Envoy's workers by model, the other replicas' on every pod
    /// (their messages carry bands, not models).
    claims: Rc<[Claim]>,
    /// The other replicas' part of `others`.
    peers: Waiting,
    /// Records older than this are ignored ([`stale_after_ms`] of the waiting tick).
    stale_after_ms: u64,
}

impl WorkerShare {
    /// With the configured `flow_control.waiting_tick_ms` (every worker ticks at it while
    /// it waits).
    pub fn new(waiting_tick_ms: u64) -> Self {
        Self {
            published_waiting: 0,
            others: Waiting::default(),
            claims: Rc::from(Vec::new()),
            peers: Waiting::default(),
            stale_after_ms: stale_after_ms(waiting_tick_ms),
        }
    }

    /// Writes this worker's queue length, highest waiting band `top` and what it waits for,
    /// `claims` (band and model pairs, see [`picker::flow_share::Claim`]; while it waits,
    /// every call: the refresh time is what keeps it counted) and reads who else waits.
    pub fn sync(
        &mut self,
        store: &dyn SharedStore,
        slot: Option<usize>,
        waiting: u32,
        top: Option<i32>,
        claims: &[(i32, Option<&str>)],
        now_ms: u64,
    ) {
        if let Some(slot) = slot {
            if waiting > 0 || self.published_waiting > 0 {
                // Only this worker writes its key: a plain write, no compare-and-swap.
                let record = waiting_record_with_claims(now_ms, waiting, top.unwrap_or(0), claims);
                if store.set(&waiting_key(slot), &record, None).is_ok() {
                    self.published_waiting = waiting;
                }
            }
        }
        if waiting > 0 {
            self.look_around(store, slot, now_ms);
        } else {
            self.others = Waiting::default();
            self.peers = Waiting::default();
            self.claims = Rc::from(Vec::new());
        }
    }

    /// Reads who else waits, this Envoy's workers (but `slot`, this one's) and the peers'.
    /// [`Self::sync`] does on every tick while this worker waits; a worker whose queue was
    /// empty at its last tick has no view, so it reads one as it starts waiting: its releases
    /// before its next tick (when one of its own requests ends) then hold to the others'
    /// bands and shares as the later ones do.
    pub fn look_around(&mut self, store: &dyn SharedStore, slot: Option<usize>, now_ms: u64) {
        let mut others = waiting_view(store, slot, now_ms, self.stale_after_ms);
        let peers = peer_waiting(store, now_ms);
        others.merge(peers);
        self.others = others;
        self.peers = peers;
        let mut claims = waiting_claims(store, slot, now_ms, self.stale_after_ms);
        if let Some((band, _)) = peers.top {
            claims.push(Claim { band, model: None, worker: None });
        }
        // Shared with each look at the pool until the next read (not copied per release).
        self.claims = Rc::from(claims);
        // Peers of unknown band (an older pool service's) hold no one: they count in the share.
    }

    /// What the other workers waiting wait for, as of the last read.
    pub fn claims(&self) -> Rc<[Claim]> {
        Rc::clone(&self.claims)
    }

    /// The other replicas' workers waiting, by band, as of the last read.
    pub fn peers(&self) -> Waiting {
        self.peers
    }

    /// The other workers waiting, by band, as of the last [`Self::sync`].
    pub fn others(&self) -> Waiting {
        self.others
    }

    /// The pool-wide share ([`Waiting::limit`]: 0 while a higher band waits on another
    /// worker), by which these tests read the view of the others; the release counts a
    /// request's own pods and the claims on them (`release::Look::fit`).
    #[cfg(test)]
    pub fn local_limit(&self, capacity: u32, priority: i32) -> u32 {
        self.others.limit(capacity, priority)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use picker::flow_share::publish_peer_waiting;
    use picker::store::MemoryStore;

    fn peers(band: Option<i32>, workers: u32) -> Waiting {
        let mut waiting = Waiting::default();
        waiting.add(band, workers);
        waiting
    }

    #[test]
    fn backlogged_workers_split_the_capacity_and_an_idle_one_gives_it_back() {
        let store = MemoryStore::default();
        let (mut a, mut b) = (WorkerShare::new(5), WorkerShare::new(5));
        a.sync(&store, Some(0), 5, Some(0), &[], 1_000);
        assert_eq!(a.local_limit(16, 0), 16, "alone in waiting: the whole pool");
        b.sync(&store, Some(1), 3, Some(0), &[], 1_001);
        a.sync(&store, Some(0), 5, Some(0), &[], 1_002);
        assert_eq!((a.local_limit(16, 0), b.local_limit(16, 0)), (8, 8));
        assert_eq!(a.local_limit(15, 0), 8, "rounded up: nothing is left unused");
        b.sync(&store, Some(1), 0, None, &[], 1_003);
        a.sync(&store, Some(0), 5, Some(0), &[], 1_004);
        assert_eq!(a.local_limit(16, 0), 16, "b's queue emptied");
        b.sync(&store, Some(1), 2, Some(0), &[], 1_005);
        a.sync(&store, Some(0), 5, Some(0), &[], 1_005 + stale_after_ms(5) + 1);
        assert_eq!(a.local_limit(16, 0), 16, "a record not refreshed is a worker gone");
    }

    #[test]
    fn a_worker_holds_its_lower_bands_while_a_higher_one_waits_on_another() {
        let store = MemoryStore::default();
        let (mut a, mut b, mut c) = (WorkerShare::new(5), WorkerShare::new(5), WorkerShare::new(5));
        // a holds sheddable requests, b a critical one.
        a.sync(&store, Some(0), 5, Some(-1), &[], 1_000);
        assert_eq!(a.local_limit(16, -1), 16, "alone: the whole pool, whatever its band");
        b.sync(&store, Some(1), 1, Some(2), &[], 1_001);
        a.sync(&store, Some(0), 5, Some(-1), &[], 1_002);
        assert_eq!(a.local_limit(16, -1), 0, "b's critical request waits: a's sheddable ones hold");
        assert_eq!(b.local_limit(16, 2), 16, "b alone at the highest band: the whole pool");
        // A critical request reaches a too: a and b share at band 2; a's sheddable ones still hold.
        a.sync(&store, Some(0), 6, Some(2), &[], 1_003);
        b.sync(&store, Some(1), 1, Some(2), &[], 1_003);
        assert_eq!((a.local_limit(16, 2), b.local_limit(16, 2), a.local_limit(16, -1)), (8, 8, 0));
        // c waits at band 0, below both: it holds, and is not counted in their share.
        c.sync(&store, Some(2), 4, Some(0), &[], 1_004);
        a.sync(&store, Some(0), 6, Some(2), &[], 1_004);
        assert_eq!((a.local_limit(16, 2), c.local_limit(16, 0)), (8, 0));
        // b's queue empties and a's critical request is released: a is back to -1, below c.
        b.sync(&store, Some(1), 0, None, &[], 1_005);
        a.sync(&store, Some(0), 5, Some(-1), &[], 1_006);
        c.sync(&store, Some(2), 4, Some(0), &[], 1_006);
        assert_eq!((c.local_limit(16, 0), a.local_limit(16, -1)), (16, 0));
        // c dies waiting: its record goes stale and a holds no longer.
        a.sync(&store, Some(0), 5, Some(-1), &[], 1_006 + stale_after_ms(5) + 1);
        assert_eq!(a.local_limit(16, -1), 16, "a stale record holds no one");
    }

    #[test]
    fn the_workers_of_other_replicas_that_wait_take_their_share() {
        let store = MemoryStore::default();
        let (mut a, mut b) = (WorkerShare::new(5), WorkerShare::new(5));
        a.sync(&store, Some(0), 5, Some(0), &[], 1_000);
        assert_eq!(a.local_limit(16, 0), 16, "no peer waits: the whole pool, as without peers");
        // Another replica's two workers wait (its pool service told this one's).
        publish_peer_waiting(&store, 1_000, peers(Some(0), 2)).unwrap();
        a.sync(&store, Some(0), 5, Some(0), &[], 1_001);
        assert_eq!(a.local_limit(16, 0), 6, "a third of the pool: ceil(16 / 3)");
        b.sync(&store, Some(1), 1, Some(0), &[], 1_002);
        a.sync(&store, Some(0), 5, Some(0), &[], 1_003);
        assert_eq!((a.local_limit(16, 0), b.local_limit(16, 0)), (4, 4), "four workers wait");
        // A worker whose queue is empty is not held to a share (as before): routed at once
        // when the pool has room, it waits like any other once it does not.
        a.sync(&store, Some(0), 0, None, &[], 1_004);
        assert_eq!(a.local_limit(16, 0), 16);
        // The pool service stopped publishing: the peers' workers stop counting.
        a.sync(&store, Some(0), 5, Some(0), &[], 1_000 + picker::inflight::SLOT_STALE_MS + 1);
        assert_eq!(a.local_limit(16, 0), 16, "b's record is stale too by now");
        // A peer claiming a billion waiting workers is bounded: a place is always left.
        publish_peer_waiting(&store, 5_000, peers(Some(0), 1_000_000_000)).unwrap();
        a.sync(&store, Some(0), 5, Some(0), &[], 5_000);
        assert_eq!(a.local_limit(16, 0), 1);
        assert_eq!(a.others().workers, picker::flow_share::MAX_PEER_WAITING);
    }

    #[test]
    fn a_peer_s_higher_band_holds_this_replica_s_lower_ones_and_an_older_peer_holds_none() {
        let store = MemoryStore::default();
        let mut a = WorkerShare::new(5);
        publish_peer_waiting(&store, 1_000, peers(Some(3), 1)).unwrap();
        a.sync(&store, Some(0), 5, Some(0), &[], 1_000);
        assert_eq!((a.local_limit(16, 0), a.local_limit(16, 3)), (0, 8), "a peer's worker waits at band 3");
        // An older peer (no band): it shares at whatever band, as before, and holds no one.
        publish_peer_waiting(&store, 1_001, peers(None, 1)).unwrap();
        a.sync(&store, Some(0), 5, Some(0), &[], 1_001);
        assert_eq!(a.local_limit(16, 0), 8);
    }

    #[test]
    fn with_a_slow_waiting_tick_a_worker_between_its_ticks_still_counts() {
        let store = MemoryStore::default();
        let (mut a, mut b) = (WorkerShare::new(1_000), WorkerShare::new(1_000));
        b.sync(&store, Some(1), 3, Some(0), &[], 10_000);
        a.sync(&store, Some(0), 5, Some(0), &[], 10_900);
        assert_eq!(a.local_limit(16, 0), 8, "b wrote 900 ms ago and ticks every 1,000 ms");
        a.sync(&store, Some(0), 5, Some(0), &[], 10_000 + stale_after_ms(1_000) + 1);
        assert_eq!(a.local_limit(16, 0), 16, "two ticks and the slack without a write: gone");
    }

    #[test]
    fn a_worker_gone_before_the_wall_clock_stepped_back_stops_counting() {
        let store = MemoryStore::default();
        let (mut a, mut b) = (WorkerShare::new(5), WorkerShare::new(5));
        b.sync(&store, Some(1), 3, Some(5), &[], 3_600_000);
        // b's VM goes away while it waits; the clock steps back an hour. b counted until the
        // clock caught up with its last write: a's share of the pool halved for the hour.
        a.sync(&store, Some(0), 5, Some(0), &[], 1_000);
        assert_eq!(a.local_limit(16, 0), 16, "b's record lies an hour ahead: gone");
        b.sync(&store, Some(1), 3, Some(0), &[], 1_001);
        a.sync(&store, Some(0), 5, Some(0), &[], 1_002);
        assert_eq!(a.local_limit(16, 0), 8, "a live worker counts again from its next write");
    }
}
