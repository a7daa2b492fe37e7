//! One worker's prefix state: its index replica, the decisions it has yet to share, and its
//! reader of the ring that carries every worker's decisions back.
//!
//! The filter's root context drives it on a tick ([`WorkerPrefix::take_batch`] to send,
//! [`WorkerPrefix::sync_from_ring`] to learn); each request reads it ([`WorkerPrefix::index`])
//! and writes it ([`WorkerPrefix::record_pick`]). Plain Rust, so the cross-worker behaviour is
//! tested natively with two of these and a [`super::RingWriter`] over a `MemoryStore`.

use std::collections::VecDeque;

use hashbrown::{HashMap, HashSet};

use crate::prefix::keyed::{HashKey, KeyedState};
use xxhash_rust::xxh3::xxh3_64_with_seed;

use super::events::{encode_batch, RoutingEvent, NO_ORIGIN};
use super::index::PodId;
use super::ring::{RingReader, StartAt};
use super::{PrefixIndex, RING_SEGMENTS};
use crate::pod_table::{PodTable, MAX_PODS};
use crate::store::{SharedStore, StoreError};

/// The origin mark of a worker seeded with `seed`: a 32-bit mix of it, never [`NO_ORIGIN`].
/// Two workers of one Envoy sharing one is a 1-in-4-billion chance, and costs only that
/// they skip each other's events (as if the ring lost them), never a wrong route.
fn origin_of(seed: u64) -> u32 {
    let mixed = xxh3_64_with_seed(&seed.to_le_bytes(), 0x6f72_6967);
    (mixed as u32).max(1)
}

/// Decisions kept for the next send at most. At the default 20 ms tick this is ~50k picks/s;
/// past it the oldest are dropped (costing other workers some hits, never a wrong route).
pub const MAX_PENDING_EVENTS: usize = 1024;

/// Seed that keeps session keys apart from prompt block hashes.
const SESSION_SEED: u64 = 0x5e55_1011_0000_0001;

/// First hash of a routing event that carries a session (`[SESSION_MARKER, key]`), not a
/// prompt chain: a chain starting with this exact value is a 1-in-2^64 accident.
const SESSION_MARKER: u64 = 0x5e55_1011_ffff_fffe;

/// Sessions remembered per worker; the least recently used is forgotten past this (~100
/// bytes each, and 16 per use queued).
pub const MAX_SESSIONS: usize = 65_536;

/// The index key of a session id: recorded for the session's pod like a one-block chain.
pub fn session_key(session_id: impl AsRef<[u8]>) -> u64 {
    xxh3_64_with_seed(session_id.as_ref(), SESSION_SEED)
}

/// What a sync with the ring did, for stats.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SyncReport {
    /// Events learned: the ring's new events less this worker's own chains.
    pub events: usize,
    pub lost_segments: u64,
}

/// Where each session last went. Last writer wins, in ring order, so every worker converges on
/// the same pod for a session (the index would keep every pod a session ever visited).
/// Bounded to [`MAX_SESSIONS`]; the one used longest ago is forgotten first, so a long
/// conversation stays on its pod however many short ones come and go beside it.
#[derive(Default)]
struct Sessions {
    /// Keyed: session keys are hashes of a client's header (see [`crate::prefix::keyed`]).
    pods: HashMap<u64, Session, KeyedState>,
    /// Every use as (key, its stamp), oldest first. A use whose stamp is no longer its
    /// session's latest is stale and skipped: moving a key to the back would walk the queue.
    uses: VecDeque<(u64, u64)>,
    /// Stamps uses in order.
    clock: u64,
}

struct Session {
    pod: String,
    epoch: u32,
    /// The stamp of its latest use.
    used: u64,
}

/// Stale uses allowed beyond [`MAX_SESSIONS`] before the queue is compacted: each compaction
/// walks at most 1.5 × [`MAX_SESSIONS`] uses and frees at least half of [`MAX_SESSIONS`], so a
/// use costs O(1) amortised.
const STALE_USES: usize = MAX_SESSIONS / 2;

impl Sessions {
    fn set(&mut self, key: u64, pod: &str, epoch: u32) {
        self.clock += 1;
        let used = self.clock;
        match self.pods.get_mut(&key) {
            Some(session) => {
                if session.pod != pod {
                    session.pod = pod.to_string();
                }
                session.epoch = epoch;
                session.used = used;
            }
            None => {
                self.pods.insert(key, Session { pod: pod.to_string(), epoch, used });
            }
        }
        self.uses.push_back((key, used));
        while self.pods.len() > MAX_SESSIONS {
            let Some((oldest, stamp)) = self.uses.pop_front() else { break };
            if self.pods.get(&oldest).is_some_and(|session| session.used == stamp) {
                self.pods.remove(&oldest);
            }
        }
        if self.uses.len() > MAX_SESSIONS + STALE_USES {
            self.drop_stale_uses();
        }
    }

    /// Keeps only each live session's latest use.
    fn drop_stale_uses(&mut self) {
        let pods = &self.pods;
        self.uses.retain(|(key, stamp)| pods.get(key).is_some_and(|session| session.used == *stamp));
    }
}

/// Prompts the reuse share averages over: long enough that a few unrelated prompts among
/// shared ones do not swing placement, short enough to follow a change of traffic within
/// seconds.
const REUSE_WINDOW: f64 = 16.0;

pub struct WorkerPrefix {
    index: PrefixIndex,
    sessions: Sessions,
    reader: RingReader,
    /// This worker's mark on the events it sends (from its seed, never [`NO_ORIGIN`]).
    origin: u32,
    pending: VecDeque<RoutingEvent>,
    dropped: u64,
    pick_clock: u64,
    last_picked: HashMap<String, u64>,
    /// Moving share of this worker's prompts that matched a known prefix (see
    /// [`crate::scheduler::Placement::reuse`]); starts at the configured prior.
    reuse: f64,
    /// The index ids of the routed table's pods, by table position (see
    /// [`Self::index_ids_in_order`]), and the table and index pods generation they are of.
    ordered_ids: Vec<Option<PodId>>,
    ordered_for: Option<((u64, u64, usize), u64)>,
}

impl WorkerPrefix {
    /// A replica bounded to `max_entries`; a new worker replays the ring's recent history.
    pub fn new(max_entries: usize) -> Self {
        Self::with_seed(max_entries, 0)
    }

    /// As [`Self::new`], with client-keyed tables keyed by a secret derived from `seed`
    /// (give each VM its own: the host clock at start).
    pub fn with_seed(max_entries: usize, seed: u64) -> Self {
        let key = HashKey::from_seed(seed);
        Self {
            index: PrefixIndex::with_key(max_entries, key),
            sessions: Sessions { pods: HashMap::with_hasher(KeyedState(key)), uses: VecDeque::new(), clock: 0 },
            reader: RingReader::new(StartAt::Oldest),
            origin: origin_of(seed),
            pending: VecDeque::new(),
            dropped: 0,
            pick_clock: 0,
            last_picked: HashMap::new(),
            reuse: 0.0,
            ordered_ids: Vec::new(),
            ordered_for: None,
        }
    }

    pub fn index(&self) -> &PrefixIndex {
        &self.index
    }

    /// Looks up the index ids of `table`'s pods, by table position, if the table or the
    /// index's pods changed since the last call (a publish, a new pod recorded: not per
    /// decision); read them with [`Self::index_ids`].
    pub fn index_ids_in_order(&mut self, table: &PodTable) {
        let of = (table.identity(), self.index.pods_generation());
        if self.ordered_for == Some(of) {
            return;
        }
        self.ordered_for = Some(of);
        self.ordered_ids.clear();
        let index = &self.index;
        self.ordered_ids.extend(table.pods.iter().take(MAX_PODS).map(|pod| index.pod_id(pod.address.as_str())));
    }

    /// The ids [`Self::index_ids_in_order`] looked up for `table`, if they are still valid
    /// (the same table, the index's pods unchanged since).
    pub fn index_ids(&self, table: &PodTable) -> Option<&[Option<PodId>]> {
        let valid = self.ordered_for == Some((table.identity(), self.index.pods_generation()));
        valid.then_some(self.ordered_ids.as_slice())
    }

    /// The pod (and its epoch then) that session `key` last went to.
    pub fn session_pod(&self, key: u64) -> Option<(&str, u32)> {
        self.sessions.pods.get(&key).map(|session| (session.pod.as_str(), session.epoch))
    }

    /// When this worker last picked `pod` (pick counter; 0 = never).
    pub fn last_picked(&self, pod: &str) -> u64 {
        self.last_picked.get(pod).copied().unwrap_or(0)
    }

    /// Starts the reuse share at `prior` (`prefix.reuse_prior`): what to assume before any
    /// prompt has been seen.
    pub fn with_reuse_prior(mut self, prior: f64) -> Self {
        self.reuse = prior.clamp(0.0, 1.0);
        self
    }

    /// Share of recent prompts that matched a known prefix (0..1).
    pub fn reuse(&self) -> f64 {
        self.reuse
    }

    /// Counts one prompt that did (`matched`) or did not match a known prefix, into a moving
    /// average over about the last [`REUSE_WINDOW`] prompts.
    pub fn note_prompt(&mut self, matched: bool) {
        let sample = if matched { 1.0 } else { 0.0 };
        self.reuse += (sample - self.reuse) / REUSE_WINDOW;
    }

    /// Decisions dropped because the pending list was full.
    pub fn dropped_events(&self) -> u64 {
        self.dropped
    }

    /// Records this worker's decision at once, and keeps it to share on the next tick.
    pub fn record_pick(&mut self, pod: &str, epoch: u32, hashes: &[u64], session: Option<u64>, capacity: usize) {
        self.pick_clock += 1;
        // Per pick: update in place; a pod's name is copied only the first time it is picked.
        let known = self.last_picked.len();
        match self.last_picked.get_mut(pod) {
            Some(last) => *last = self.pick_clock,
            None if known < MAX_PODS => {
                self.last_picked.insert(pod.to_string(), self.pick_clock);
            }
            None => {}
        }
        if !hashes.is_empty() {
            self.index.record(pod, epoch, hashes, capacity);
            self.queue_event(RoutingEvent {
                pod: pod.to_string(),
                epoch,
                origin: self.origin,
                hashes: hashes.to_vec(),
            });
        }
        if let Some(key) = session {
            self.record_session(pod, epoch, key);
        }
    }

    /// Records that the session `key` is on `pod` (now, and on the other workers and replicas
    /// after their next sync), without a pick: a Responses API answer's id, learned when it
    /// came back, is the session a later `previous_response_id` names.
    pub fn record_session(&mut self, pod: &str, epoch: u32, key: u64) {
        self.sessions.set(key, pod, epoch);
        let hashes = vec![SESSION_MARKER, key];
        self.queue_event(RoutingEvent { pod: pod.to_string(), epoch, origin: self.origin, hashes });
    }

    /// Learns that the session `key` is on `pod`, for this worker alone (the worker that noted
    /// it shares it through the ring).
    pub fn learn_session(&mut self, key: u64, pod: &str, epoch: u32) {
        self.sessions.set(key, pod, epoch);
    }

    fn queue_event(&mut self, event: RoutingEvent) {
        if self.pending.len() >= MAX_PENDING_EVENTS {
            self.pending.pop_front();
            self.dropped += 1;
        }
        self.pending.push_back(event);
    }

    /// The decisions since the last call, encoded for the singleton's queue.
    pub fn take_batch(&mut self) -> Option<Vec<u8>> {
        if self.pending.is_empty() {
            return None;
        }
        let batch = encode_batch(self.pending.make_contiguous());
        self.pending.clear();
        Some(batch)
    }

    /// Learns the other workers' decisions from the ring. This worker's own come back too:
    /// their chains are skipped (recorded at the pick), their sessions applied in ring order
    /// like everyone's. `capacity_of` gives a pod's KV capacity in blocks.
    pub fn sync_from_ring(
        &mut self,
        store: &dyn SharedStore,
        capacity_of: &dyn Fn(&str) -> usize,
    ) -> Result<SyncReport, StoreError> {
        let result = self.reader.poll(store, RING_SEGMENTS)?;
        let mut learned = 0;
        for event in &result.events {
            match event.hashes.as_slice() {
                // Sessions are applied in ring order, own ones too: the ring's order is the
                // one every worker agrees on, so all end on the same latest pod.
                [SESSION_MARKER, key] => self.sessions.set(*key, &event.pod, event.epoch),
                // Own chains were recorded at the pick: a second record only costs time.
                _ if event.origin != NO_ORIGIN && event.origin == self.origin => continue,
                chain => {
                    self.index.record(&event.pod, event.epoch, chain, capacity_of(&event.pod));
                }
            }
            learned += 1;
        }
        Ok(SyncReport { events: learned, lost_segments: result.lost })
    }

    /// Forgets pods that left the pool. `keep` is asked once per pod, not once per session:
    /// sessions are the clients' to make (up to [`MAX_SESSIONS`]) and few pods hold them, and
    /// the caller's check may walk the pool (65,536 sessions × 1,024 pods was 0.1 s natively
    /// on every change of the pool, the worker stalled meanwhile).
    pub fn retain_pods(&mut self, keep: impl Fn(&str) -> bool) {
        self.index.retain_pods(&keep);
        self.last_picked.retain(|pod, _| keep(pod));
        let gone: HashSet<String> = {
            let mut kept: HashMap<&str, bool> = HashMap::new();
            for session in self.sessions.pods.values() {
                kept.entry(session.pod.as_str()).or_insert_with(|| keep(&session.pod));
            }
            kept.into_iter().filter(|(_, kept)| !kept).map(|(pod, _)| pod.to_owned()).collect()
        };
        if gone.is_empty() {
            return;
        }
        self.sessions.pods.retain(|_, session| !gone.contains(session.pod.as_str()));
        self.sessions.drop_stale_uses();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prefix::RingWriter;
    use crate::store::MemoryStore;

    /// The singleton's part: relay every worker's batch into the ring.
    fn relay(store: &MemoryStore, writer: &mut RingWriter, workers: &mut [&mut WorkerPrefix]) {
        for worker in workers.iter_mut() {
            if let Some(batch) = worker.take_batch() {
                writer.append(store, &batch).unwrap();
            }
        }
    }

    #[test]
    fn index_ids_in_table_order_hold_until_the_table_or_the_pods_change() {
        let table_of = |version: u64, addresses: &[&str]| PodTable {
            version,
            published_at_ms: version,
            poll_interval_ms: 100,
            pods: addresses
                .iter()
                .map(|a| crate::pod_table::PodState::unknown(&crate::address::PodAddress::parse(a).unwrap()))
                .collect(),
        };
        let mut worker = WorkerPrefix::with_seed(4096, 1);
        worker.record_pick("10.0.0.2:80", 0, &[1, 2], None, 1000);
        worker.record_pick("10.0.0.1:80", 0, &[1], None, 1000);
        let table = table_of(1, &["10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"]);
        assert_eq!(worker.index_ids(&table), None, "none looked up yet");
        worker.index_ids_in_order(&table);
        let index = worker.index();
        let expected = vec![index.pod_id("10.0.0.1:80"), index.pod_id("10.0.0.2:80"), None];
        assert!(expected[0].is_some() && expected[1].is_some());
        assert_eq!(worker.index_ids(&table), Some(expected.as_slice()));
        assert_eq!(
            worker.index_ids(&table_of(2, &["10.0.0.2:80", "10.0.0.1:80", "10.0.0.3:80"])),
            None,
            "another table"
        );
        worker.record_pick("10.0.0.3:80", 0, &[1], None, 1000);
        assert_eq!(worker.index_ids(&table), None, "a pod got an id since");
        worker.index_ids_in_order(&table);
        assert!(worker.index_ids(&table).is_some_and(|ids| ids.iter().all(Option::is_some)));
    }

    #[test]
    fn a_decision_on_one_worker_reaches_the_other_after_one_sync() {
        let store = MemoryStore::new();
        let mut writer = RingWriter::resume(&store).unwrap();
        let (mut a, mut b) = (WorkerPrefix::with_seed(4096, 1), WorkerPrefix::with_seed(4096, 2));
        a.record_pick("10.0.0.1:80", 0, &[1, 2, 3], Some(session_key("s1")), 1000);
        assert_eq!(a.index().matched_blocks(&[1, 2, 3], "10.0.0.1:80", 0), 3, "own decision at once");
        assert_eq!(b.index().matched_blocks(&[1, 2, 3], "10.0.0.1:80", 0), 0);
        relay(&store, &mut writer, &mut [&mut a, &mut b]);
        let report = b.sync_from_ring(&store, &|_| 1000).unwrap();
        assert_eq!(report.events, 2);
        assert_eq!(b.index().matched_blocks(&[1, 2, 3], "10.0.0.1:80", 0), 3);
        assert_eq!(b.session_pod(session_key("s1")), Some(("10.0.0.1:80", 0)));
        assert_eq!(a.sync_from_ring(&store, &|_| 1000).unwrap().events, 1, "a's own chain is skipped, its session not");
        assert_eq!(a.index().matched_blocks(&[1, 2, 3], "10.0.0.1:80", 0), 3);
    }

    #[test]
    fn workers_seeded_apart_mark_their_events_apart_and_never_unmarked() {
        let origins: Vec<u32> = (0..1000).map(origin_of).collect();
        assert!(origins.iter().all(|&o| o != NO_ORIGIN));
        let mut distinct = origins.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), origins.len());
    }

    #[test]
    fn a_session_follows_its_latest_pick_on_every_worker() {
        let store = MemoryStore::new();
        let mut writer = RingWriter::resume(&store).unwrap();
        let (mut a, mut b) = (WorkerPrefix::with_seed(4096, 1), WorkerPrefix::with_seed(4096, 2));
        let key = session_key("chat-7");
        a.record_pick("10.0.0.1:80", 0, &[], Some(key), 100);
        b.record_pick("10.0.0.2:80", 0, &[], Some(key), 100); // b had not heard of it yet
        relay(&store, &mut writer, &mut [&mut a, &mut b]);
        a.sync_from_ring(&store, &|_| 100).unwrap();
        b.sync_from_ring(&store, &|_| 100).unwrap();
        assert_eq!(a.session_pod(key), b.session_pod(key), "both converge on the same pod");
        assert_eq!(a.session_pod(key), Some(("10.0.0.2:80", 0)));
    }

    #[test]
    fn forgetting_a_pod_keeps_the_session_order_true() {
        let mut worker = WorkerPrefix::new(1024);
        worker.sessions.set(1, "10.0.0.1:80", 0);
        worker.retain_pods(|pod| pod != "10.0.0.1:80");
        for key in 2..(MAX_SESSIONS as u64 + 2) {
            worker.sessions.set(key, "10.0.0.2:80", 0);
        }
        assert_eq!(worker.sessions.uses.len(), MAX_SESSIONS);
        assert!(worker.session_pod(MAX_SESSIONS as u64 + 1).is_some(), "the newest session is kept");
    }

    #[test]
    fn forgetting_pods_asks_about_each_pod_once_not_each_session() {
        let pods: Vec<String> = (0..64).map(|i| format!("10.0.0.{i}:80")).collect();
        let mut worker = WorkerPrefix::new(1024);
        for key in 0..MAX_SESSIONS as u64 {
            let pod = &pods[key as usize % pods.len()];
            worker.sessions.set(key, pod, 0);
        }
        worker.record_pick(&pods[0], 0, &[1, 2], Some(MAX_SESSIONS as u64), 100);
        let asked = std::cell::Cell::new(0usize);
        worker.retain_pods(|pod| {
            asked.set(asked.get() + 1);
            pod != pods[0] && pod != pods[1]
        });
        // The index's pods, the picked pods and the sessions' pods: each once.
        assert!(asked.get() <= 3 * pods.len(), "keep asked {} times for {} pods", asked.get(), pods.len());
        assert_eq!(worker.sessions.pods.len(), MAX_SESSIONS - 2 * MAX_SESSIONS / pods.len());
        assert_eq!(worker.sessions.uses.len(), worker.sessions.pods.len());
        assert_eq!(worker.session_pod(64), None, "a session on a pod that left");
        assert_eq!(worker.session_pod(65), None);
        assert_eq!(worker.session_pod(2), Some((pods[2].as_str(), 0)));
        assert_eq!(worker.index().pod_len(&pods[0]), 0);
        assert_eq!(worker.last_picked(&pods[0]), 0);
    }

    #[test]
    fn sessions_are_bounded() {
        let mut worker = WorkerPrefix::new(1024);
        for i in 0..(MAX_SESSIONS as u64 + 5) {
            worker.sessions.set(i, "10.0.0.1:80", 0);
        }
        assert_eq!(worker.sessions.pods.len(), MAX_SESSIONS);
        assert_eq!(worker.session_pod(0), None, "the oldest went first");
    }

    #[test]
    fn a_session_in_use_outlives_newer_ones() {
        let mut worker = WorkerPrefix::new(1024);
        worker.sessions.set(0, "10.0.0.1:80", 0);
        // A long conversation: a turn every thousand new one-request sessions, past the bound
        // twice over. Forgotten in order of first use, it lost its pod at the bound.
        for i in 1..(2 * MAX_SESSIONS as u64) {
            worker.sessions.set(i, "10.0.0.2:80", 0);
            if i % 1000 == 0 {
                assert_eq!(worker.session_pod(0), Some(("10.0.0.1:80", 0)), "lost by turn {i}");
                worker.sessions.set(0, "10.0.0.1:80", 0);
            }
        }
        assert_eq!(worker.session_pod(0), Some(("10.0.0.1:80", 0)));
        assert_eq!(worker.sessions.pods.len(), MAX_SESSIONS);
        assert_eq!(worker.session_pod(1), None, "the least recently used went");
        // The queue of uses stays bounded though one session is used again and again.
        for _ in 0..(2 * MAX_SESSIONS) {
            worker.sessions.set(0, "10.0.0.3:80", 1);
        }
        assert!(worker.sessions.uses.len() <= MAX_SESSIONS + STALE_USES);
        assert_eq!(worker.session_pod(0), Some(("10.0.0.3:80", 1)), "last writer wins");
        assert_eq!(worker.sessions.pods.len(), MAX_SESSIONS);
    }

    #[test]
    fn pending_decisions_are_bounded_and_pick_order_is_remembered() {
        let mut worker = WorkerPrefix::new(4096);
        for i in 0..(MAX_PENDING_EVENTS as u64 + 10) {
            worker.record_pick("10.0.0.1:80", 0, &[i], None, 100);
        }
        assert_eq!(worker.dropped_events(), 10);
        worker.record_pick("10.0.0.2:80", 0, &[], None, 100);
        assert!(worker.last_picked("10.0.0.2:80") > worker.last_picked("10.0.0.1:80"));
        assert_eq!(worker.last_picked("10.0.0.3:80"), 0);
        assert!(worker.take_batch().is_some());
        assert!(worker.take_batch().is_none());
        worker.retain_pods(|pod| pod != "10.0.0.1:80");
        assert_eq!(worker.index().pod_len("10.0.0.1:80"), 0);
    }
}
