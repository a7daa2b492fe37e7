//! Requests in flight per pod, as one worker sees them: its own exactly, every other
//! worker's as of that worker's last tick.
//!
//! Counts are in sequences, as the engine's batch (`--max-num-seqs`) and its
//! `num_requests_running` count them: a request asking for `n` choices weighs `n` (vLLM runs
//! one child request per choice, each holding a seat), see
//! [`crate::request::InferenceRequest::sequences`].
//!
//! Polled metrics are ~100 ms old; a burst that arrives meanwhile would all land on the
//! pod that looked idle. So each worker counts what it dispatches and what completes, in
//! its own memory (no host call per request), and on every tick publishes its counts in a
//! slot of shared data and reads the other workers' slots. A pick therefore sees its own
//! worker's burst at once and the other workers' within one tick (`prefix.sync_interval_ms`,
//! 20 ms). A worker claims a free slot with compare-and-swap under an id no other VM has;
//! a slot its owner stopped refreshing for [`SLOT_STALE_MS`] (the VM died or was reloaded)
//! is ignored by readers and may be claimed again, so dead workers' counts never linger.
//! Other gateway replicas' counts, relayed by the pool service ([`publish_peer_counts`]),
//! are added the same way: they are as old as the peer's last message.
//!
//! Beside each request count, a slot carries the pod's *uncached prompt tokens* in flight:
//! the prompt part of each request the pod has not started answering yet ([`WorkerInflight::add_tokens`]
//! at the pick, [`WorkerInflight::release_tokens`] at the first response byte). Request counts
//! mislead when one 8k-token prompt costs a pod as much prefill as a hundred short chats;
//! tokens ahead is what its next request waits behind. Other replicas relay theirs with their
//! counts (as old as their last message: a burst's tokens reach them within a send).

use hashbrown::HashMap;

use crate::keys::{INFLIGHT_DECISIONS, INFLIGHT_SLOT_KEYS, PEER_INFLIGHT};
use crate::pod_table::{PodTable, MAX_PODS};
use crate::store::{SharedStore, StoreError};

/// Worker slots at most: Envoy runs one VM per worker thread (`--concurrency`, usually the
/// core count); 32 covers any gateway we expect. Workers beyond it count only their own.
pub const MAX_SLOTS: usize = 32;

/// The slots of the other workers, for a worker in `slot` that knows of `claimed` claimed
/// slots: what the per-slot records of the other workers are read from (learned TTFTs,
/// ejections; see [`crate::keys::per_slot`]).
pub fn other_slots(slot: usize, claimed: usize) -> impl Iterator<Item = usize> {
    (0..claimed.max(slot.saturating_add(1))).filter(move |&other| other != slot)
}

/// A slot not refreshed for this long belongs to a gone VM: 100 ticks of the default 20 ms.
pub const SLOT_STALE_MS: u64 = 2_000;

/// For this long after a worker starts serving, each decision also looks one slot past the
/// claimed ones: the workers of a fresh Envoy claim their slots at their first request, all
/// within the same few ms under load, and a worker that claimed before another would
/// otherwise learn of it only at its next tick (up to `prefix.sync_interval_ms`, 20 ms),
/// blind to its picks meanwhile. Workload (c)'s opening burst lost runs to exactly that.
pub const SLOT_DISCOVERY_MS: u64 = 2_000;

/// Slot value header: owner id (u64 LE), then refresh time in ms (u64 LE).
const HEADER_BYTES: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Local {
    count: u32,
    /// Uncached prompt tokens of this worker's requests not yet answered (first byte).
    tokens: u32,
    updated_ms: u64,
}

/// One pod's load summed over slots: requests, and uncached prompt tokens not yet answered.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Load {
    /// Requests in flight, in sequences (a request of `n` choices counts `n`).
    pub count: u32,
    /// Uncached prompt tokens of those requests whose pod has not started answering
    /// (learning and P/D count them; 0 otherwise).
    pub tokens: u32,
}

/// This worker's view of the requests in flight per pod.
#[derive(Debug, Default)]
pub struct WorkerInflight {
    /// This worker's own requests, exact.
    local: HashMap<String, Local>,
    /// The other workers' counts, summed, as of their last publish (re-read per decision), for
    /// pods without a position in [`Self::positions`].
    others: HashMap<String, Load>,
    /// The other workers' counts of the pods of the table this worker routes on, by table
    /// position (see [`Self::refresh_others_in_order`]): a decision reads each pod's count
    /// here, not by a lookup of its address.
    others_at: Vec<Load>,
    /// Each table pod's position in the table [`Self::positions_of`] names (empty if none, or
    /// if the table named a pod twice: then every count is by address).
    positions: HashMap<Box<str>, u16>,
    /// The table the positions are of: its version, publish time and length.
    positions_of: Option<(u64, u64, usize)>,
    /// Other gateway replicas' counts, as the pool service last relayed them. They change
    /// once per peer heartbeat, so they are read on the tick, not per decision.
    replicas: HashMap<String, Load>,
    /// The slot this worker publishes in, once claimed.
    slot: Option<usize>,
    /// Slots claimed so far (they are taken lowest first and never deleted), as of the last
    /// tick: a decision reads only those, and not its own, so it makes one shared-data read
    /// per other worker and none to find the end. A worker that claims a slot later is seen
    /// from the next tick on.
    claimed_slots: usize,
    /// Until when a decision also looks for a slot claimed since the last tick (see
    /// [`SLOT_DISCOVERY_MS`]); set at the first sync.
    discover_until_ms: Option<u64>,
    /// This VM's id (from [`crate::vm_id`]), once it has one.
    owner: Option<u64>,
    /// [`SyncReport::slots_full`] was reported once already.
    told_slots_full: bool,
    /// The other workers' slot values as last read, by slot index up to the claimed ones
    /// (`None`: not counted, being this worker's own or stale): what `others` and `others_at`
    /// are the sums of when [`Self::sums_current`].
    slot_values: Vec<Option<Vec<u8>>>,
    /// The sums were made from [`Self::slot_values`] and nothing cleared them since. A
    /// decision that reads the same live values again keeps them instead of decoding every
    /// entry once more (~1 µs at 64 pods): the check is exact, so no count is older for it.
    sums_current: bool,
    /// The decision counter's version, read before this decision's choice while decisions
    /// are linearized ([`Self::begin_decision`]).
    ticket: Option<u32>,
    /// Until when decisions are linearized because a recent pick took a pod's last free
    /// batch slot ([`Self::note_last_slot_taken`]).
    contended_until_ms: u64,
}

/// How long after a pick that took a pod's last free batch slot this worker's decisions stay
/// linearized: while the pool runs full, two crossing picks of one pod leave one request
/// waiting a whole answer.
pub const CONTENDED_MS: u64 = 1_000;

/// What one sync did, for stats.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SyncReport {
    /// This worker has a slot (its counts reach the others).
    pub published: bool,
    /// Live slots of other workers read.
    pub peers: usize,
    /// Every slot is held by another live worker (Envoy runs more than [`MAX_SLOTS`]
    /// workers), so this worker's counts reach nobody: set on the first sync that finds it,
    /// for one warning.
    pub slots_full: bool,
}

impl WorkerInflight {
    pub fn new() -> Self {
        Self::default()
    }

    /// Sequences in flight to `address` (requests, each weighing its `n`): this worker's plus
    /// the others'.
    pub fn count(&self, address: &str) -> u32 {
        let local = self.local.get(address).map_or(0, |l| l.count);
        let others = self.other_load(address).count;
        local.saturating_add(others).saturating_add(self.replicas.get(address).map_or(0, |l| l.count))
    }

    /// [`Self::count`] of the pod at `position` in the table last given to
    /// [`Self::refresh_others_in_order`], whose address is `address`: the other workers' part
    /// read by position (one lookup fewer per pod and decision). Falls back to
    /// [`Self::count`] when positions are off or `position` is out of range.
    pub fn count_at(&self, position: usize, address: &str) -> u32 {
        let Some(others) = self.others_at.get(position).filter(|_| !self.positions.is_empty()) else {
            return self.count(address);
        };
        let local = self.local.get(address).map_or(0, |l| l.count);
        local.saturating_add(others.count).saturating_add(self.replicas.get(address).map_or(0, |l| l.count))
    }

    /// The other workers' load of `address`, wherever it is kept (by position or by address).
    fn other_load(&self, address: &str) -> Load {
        let at = match self.positions.is_empty() {
            true => None,
            false => self.positions.get(address).and_then(|&p| self.others_at.get(usize::from(p))),
        };
        at.or_else(|| self.others.get(address)).copied().unwrap_or_default()
    }

    /// Uncached prompt tokens in flight to `address` and not yet answered: this worker's
    /// plus the other workers' (as of their last publish) and the other replicas' (as of
    /// their last message).
    pub fn tokens(&self, address: &str) -> u32 {
        let local = self.local.get(address).map_or(0, |l| l.tokens);
        let replicas = self.replicas.get(address).map_or(0, |l| l.tokens);
        local.saturating_add(self.other_load(address).tokens).saturating_add(replicas)
    }

    /// A request just [`Self::started`] to `address` carries `tokens` uncached prompt tokens.
    pub fn add_tokens(&mut self, address: &str, tokens: u32) {
        if let Some(entry) = self.local.get_mut(address) {
            entry.tokens = entry.tokens.saturating_add(tokens);
        }
    }

    /// The pod started answering a request with `tokens` uncached prompt tokens (its first
    /// byte), or the request ended before it did.
    pub fn release_tokens(&mut self, address: &str, tokens: u32) {
        if let Some(entry) = self.local.get_mut(address) {
            entry.tokens = entry.tokens.saturating_sub(tokens);
        }
    }

    /// This worker's own count for `address`.
    pub fn local_count(&self, address: &str) -> u32 {
        self.local.get(address).map_or(0, |l| l.count)
    }

    /// The slot this worker publishes in, once claimed (it also names the worker in the
    /// flow-control share, see `wasm_epp_router::flow`).
    pub fn slot(&self) -> Option<usize> {
        self.slot
    }

    /// Slots claimed by this Envoy's workers as of the last read (this worker's included).
    pub fn claimed_slots(&self) -> usize {
        self.claimed_slots
    }

    /// A request of `weight` sequences was sent to `address` (its weight: see
    /// [`crate::request::InferenceRequest::sequences`]; 0 counts as 1). The same weight must
    /// end it ([`Self::finished`]).
    pub fn started(&mut self, address: &str, weight: u32, now_ms: u64) {
        let weight = weight.max(1);
        if let Some(entry) = self.local.get_mut(address) {
            entry.count = entry.count.saturating_add(weight);
            entry.updated_ms = now_ms;
        } else if self.local.len() < MAX_PODS {
            self.local.insert(address.to_string(), Local { count: weight, tokens: 0, updated_ms: now_ms });
        }
    }

    /// A request of `weight` sequences to `address` ended (completed, failed or reset), or
    /// its count moved elsewhere (a retry, a pick that gave way).
    pub fn finished(&mut self, address: &str, weight: u32, now_ms: u64) {
        if let Some(entry) = self.local.get_mut(address) {
            entry.count = entry.count.saturating_sub(weight.max(1));
            entry.updated_ms = now_ms;
            if entry.count == 0 {
                self.local.remove(address);
            }
        }
    }

    /// On the tick: drop own counts untouched for `expiry_ms` (a stream whose end was never
    /// seen), publish the rest in this worker's slot, and read the other workers' slots.
    pub fn sync(&mut self, store: &dyn SharedStore, now_ms: u64, expiry_ms: u64) -> SyncReport {
        self.discover_until_ms.get_or_insert(now_ms.saturating_add(SLOT_DISCOVERY_MS));
        self.local.retain(|_, l| now_ms.saturating_sub(l.updated_ms) <= expiry_ms);
        if self.owner.is_none() {
            self.owner = crate::vm_id::unique_vm_id(store);
        }
        let published = match (self.owner, self.slot) {
            (Some(owner), Some(slot)) => self.publish(store, slot, owner, now_ms).is_ok(),
            (Some(owner), None) => {
                self.slot = claim_slot(store, owner, now_ms, &encode(owner, now_ms, own_counts(&self.local)));
                self.slot.is_some()
            }
            (None, _) => false,
        };
        let peers = self.read_others(store, now_ms);
        self.read_replicas(store, now_ms);
        let slots_full =
            self.slot.is_none() && peers >= MAX_SLOTS && !std::mem::replace(&mut self.told_slots_full, true);
        SyncReport { published, peers, slots_full }
    }

    /// Per request: re-reads the other workers' slots, so a decision sees their picks up to
    /// their last publish ([`Self::publish_now`]), not up to this worker's last tick. The host
    /// copies every slot either way; only when a value differs from the last read (or the
    /// sums were cleared) are the entries decoded and summed again.
    pub fn refresh_others(&mut self, store: &dyn SharedStore, now_ms: u64) {
        // Early on, one slot further: one a worker claimed since this worker's last tick.
        let discovering = self.discovering(now_ms);
        let limit = match discovering {
            true => (self.claimed_slots + 1).min(MAX_SLOTS),
            false => self.claimed_slots,
        };
        let (claimed, changed) = self.read_slot_values(store, now_ms, limit);
        if discovering {
            self.claimed_slots = self.claimed_slots.max(claimed);
        }
        if changed || !self.sums_current {
            self.others.values_mut().for_each(|load| *load = Load::default());
            self.others_at.iter_mut().for_each(|load| *load = Load::default());
            self.sum_slot_values();
        }
    }

    /// Whether this worker is in its first [`SLOT_DISCOVERY_MS`] of serving: the workers of
    /// a fresh Envoy open together, so their decisions cross most then.
    fn discovering(&self, now_ms: u64) -> bool {
        // Further off than its length: set before the wall clock stepped back, and over.
        self.discover_until_ms.is_some_and(|until| crate::clock::not_due_yet(now_ms, until, SLOT_DISCOVERY_MS))
    }

    /// The other workers' requests in flight to `address` (as last read), without this
    /// worker's own or other replicas'.
    pub fn others_count(&self, address: &str) -> u32 {
        self.other_load(address).count
    }

    /// A pick just took the last free batch slot of its pod (as far as the batch sizes are
    /// known): linearize this worker's decisions for the next [`CONTENDED_MS`].
    pub fn note_last_slot_taken(&mut self, now_ms: u64) {
        self.contended_until_ms = now_ms.saturating_add(CONTENDED_MS);
    }

    /// Before a decision reads the other workers' slots: while decisions are linearized,
    /// notes the decision counter's version, for [`Self::confirm_decision`]. They are in a
    /// worker's first [`SLOT_DISCOVERY_MS`] of serving, when every worker of a fresh Envoy
    /// decides at once, and for [`CONTENDED_MS`] after a pick that took a pod's last free
    /// batch slot: then two workers' picks of one pod within the same microseconds leave a
    /// request waiting a whole answer. One shared-data read here, one write after the pick.
    /// A crossing is caught only between two linearized decisions: a worker whose decisions
    /// are not linearized does not bump the counter (both are when the pool runs full).
    pub fn begin_decision(&mut self, store: &dyn SharedStore, now_ms: u64) {
        self.ticket = None;
        let contended = crate::clock::not_due_yet(now_ms, self.contended_until_ms, CONTENDED_MS);
        let linearize = self.discovering(now_ms) || contended;
        // Alone (no other worker's slot known), nothing can cross this decision.
        if !linearize || self.slot.is_none() || self.claimed_slots < 2 {
            return;
        }
        self.ticket = match store.get(INFLIGHT_DECISIONS) {
            Ok((Some(_), version)) => version,
            // A compare-and-swap on a missing key is a plain write: create it first.
            Ok((None, _)) => {
                let _ = store.set(INFLIGHT_DECISIONS, &now_ms.to_le_bytes(), None);
                store.get(INFLIGHT_DECISIONS).ok().and_then(|(_, version)| version)
            }
            Err(_) => None,
        };
    }

    /// After publishing a pick of `address` that [`Self::begin_decision`] opened: whether the
    /// pick stands. The decision counter is bumped by compare-and-swap at the version read
    /// before the choice. If another decision bumped it meanwhile, that one published its
    /// pick after this worker could have read it: the other slots are read again, and the
    /// pick stands unless `address` gained requests there beyond `others_seen` (their count
    /// of it at the choice). Of two crossing decisions, only the later one finds the counter
    /// moved (each bumps it after publishing), so exactly one of them gives way.
    pub fn confirm_decision(&mut self, store: &dyn SharedStore, now_ms: u64, address: &str, others_seen: u32) -> bool {
        let Some(version) = self.ticket.take() else { return true };
        match store.set(INFLIGHT_DECISIONS, &now_ms.to_le_bytes(), Some(version)) {
            Err(StoreError::CasMismatch) => {
                self.refresh_others(store, now_ms);
                self.others_count(address) <= others_seen
            }
            _ => true,
        }
    }

    /// Whether the decision under way is linearized (it opened a ticket).
    pub fn linearized(&self) -> bool {
        self.ticket.is_some()
    }

    /// [`Self::refresh_others`], keeping the other workers' counts of `table`'s pods by their
    /// table position, so [`Self::count_at`] reads them without a lookup. The positions are
    /// rebuilt when another table is published (about ten times a second), not per decision.
    pub fn refresh_others_in_order(&mut self, store: &dyn SharedStore, now_ms: u64, table: &PodTable) {
        let this_table = table.identity();
        if self.positions_of != Some(this_table) {
            self.positions_of = Some(this_table);
            self.positions.clear();
            self.others_at.clear();
            for (position, pod) in table.pods.iter().take(MAX_PODS).enumerate() {
                let Ok(position) = u16::try_from(position) else { break };
                if self.positions.insert(pod.address.as_str().into(), position).is_some() {
                    // A pod named twice has two positions: count every pod by address.
                    self.positions.clear();
                    break;
                }
            }
            self.others_at.resize(self.positions.len(), Load::default());
            // Counts kept under the old positions are summed again below.
            self.others.clear();
            self.sums_current = false;
        }
        self.refresh_others(store, now_ms);
    }

    /// Per pick and per end: publishes this worker's counts at once, so the other workers'
    /// next decisions see them. One plain write, no read: the slot is this worker's (the tick
    /// checks that it still is, [`Self::sync`]). Should a stall past [`SLOT_STALE_MS`] have
    /// let another VM take it, this write overwrites that VM's counts until the next tick,
    /// where one of the two sees a foreign owner and moves to a new slot.
    pub fn publish_now(&mut self, store: &dyn SharedStore, now_ms: u64) {
        if let (Some(owner), Some(key)) = (self.owner, self.slot.and_then(|slot| INFLIGHT_SLOT_KEYS.get(slot))) {
            let _ = store.set(key, &encode(owner, now_ms, own_counts(&self.local)), None);
        }
    }

    fn publish(&mut self, store: &dyn SharedStore, slot: usize, owner: u64, now_ms: u64) -> Result<(), StoreError> {
        let key = INFLIGHT_SLOT_KEYS.get(slot).ok_or_else(|| StoreError::Host("slot out of range".into()))?;
        // Still ours? A stall past SLOT_STALE_MS may have let another VM take it.
        let (bytes, cas) = store.get(key)?;
        if bytes.as_deref().and_then(decode_header).map(|(o, _)| o) != Some(owner) {
            self.slot = None;
            return Err(StoreError::CasMismatch);
        }
        store.set(key, &encode(owner, now_ms, own_counts(&self.local)), cas).inspect_err(|_| self.slot = None)
    }

    /// On the tick: every slot up to the first never claimed, and how many are live.
    fn read_others(&mut self, store: &dyn SharedStore, now_ms: u64) -> usize {
        // Pods that left stop costing space here once per tick, not per decision.
        self.others.clear();
        self.others_at.iter_mut().for_each(|load| *load = Load::default());
        self.claimed_slots = self.read_slot_values(store, now_ms, MAX_SLOTS).0;
        self.sum_slot_values()
    }

    /// Reads the other workers' slots among the first `limit` into [`Self::slot_values`] (a
    /// live one's value, else `None`); returns how many slots are claimed (up to the first
    /// never written, or `limit`) and whether any value differs from the last read. This
    /// worker's own slot is not read.
    fn read_slot_values(&mut self, store: &dyn SharedStore, now_ms: u64, limit: usize) -> (usize, bool) {
        let (mut claimed, mut changed) = (0, false);
        for (index, key) in INFLIGHT_SLOT_KEYS.iter().enumerate().take(limit) {
            let value = match Some(index) == self.slot {
                true => None,
                false => match store.get(key) {
                    Ok((Some(bytes), _)) => is_live(&bytes, now_ms).then_some(bytes),
                    // Slots are claimed lowest first and never deleted: none beyond.
                    _ => break,
                },
            };
            claimed = index + 1;
            match self.slot_values.get_mut(index) {
                Some(last) if *last == value => {}
                Some(last) => {
                    *last = value;
                    changed = true;
                }
                None => {
                    self.slot_values.push(value);
                    changed = true;
                }
            }
        }
        changed |= self.slot_values.len() != claimed;
        self.slot_values.truncate(claimed);
        (claimed, changed)
    }

    /// Adds the live values of [`Self::slot_values`] into `others` (or `others_at`, by table
    /// position); returns how many were live. The sums are current from then on.
    fn sum_slot_values(&mut self) -> usize {
        let mut peers = 0;
        for bytes in self.slot_values.iter().flatten() {
            peers += 1;
            let positioned = Positioned { positions: &self.positions, at: &mut self.others_at };
            add_entries(&mut self.others, Some(positioned), bytes);
        }
        self.sums_current = true;
        peers
    }

    fn read_replicas(&mut self, store: &dyn SharedStore, now_ms: u64) {
        self.replicas.clear();
        if let Ok((Some(bytes), _)) = store.get(PEER_INFLIGHT) {
            if is_live(&bytes, now_ms) {
                add_entries(&mut self.replicas, None, &bytes);
            }
        }
    }
}

/// Loads kept by table position (see [`WorkerInflight::refresh_others_in_order`]).
struct Positioned<'a> {
    positions: &'a HashMap<Box<str>, u16>,
    at: &'a mut Vec<Load>,
}

impl Load {
    /// Adds `other`'s requests and tokens (saturating).
    pub fn add(&mut self, other: Load) {
        self.count = self.count.saturating_add(other.count);
        self.tokens = self.tokens.saturating_add(other.tokens);
    }
}

/// Adds a slot value's counts into `totals` (bounded to [`MAX_PODS`] pods), those of pods with
/// a position into `positioned` instead.
fn add_entries(totals: &mut HashMap<String, Load>, mut positioned: Option<Positioned<'_>>, slot_value: &[u8]) {
    for (address, load) in decode_entries(slot_value.get(HEADER_BYTES..).unwrap_or_default()) {
        let at = positioned.as_mut().filter(|p| !p.positions.is_empty()).and_then(|p| {
            let position = usize::from(*p.positions.get(address)?);
            p.at.get_mut(position)
        });
        if let Some(total) = at {
            total.add(load);
        } else if let Some(total) = totals.get_mut(address) {
            total.add(load);
        } else if totals.len() < MAX_PODS {
            totals.insert(address.to_string(), load);
        }
    }
}

/// This Envoy's load per pod, requests and prompt tokens: every live worker slot, summed
/// (what the pool service tells other replicas and shows per pod).
pub fn envoy_loads(store: &dyn SharedStore, now_ms: u64) -> HashMap<String, Load> {
    let mut totals = HashMap::new();
    for key in INFLIGHT_SLOT_KEYS {
        let Ok((Some(bytes), _)) = store.get(key) else { break };
        if is_live(&bytes, now_ms) {
            add_entries(&mut totals, None, &bytes);
        }
    }
    totals
}

/// Publishes other replicas' summed loads for this Envoy's workers to add to their view.
pub fn publish_peer_counts(
    store: &dyn SharedStore,
    now_ms: u64,
    loads: &HashMap<String, Load>,
) -> Result<(), StoreError> {
    let loads = loads.iter().take(MAX_PODS).map(|(address, &load)| (address.as_str(), load));
    let value = encode(0, now_ms, loads);
    store.set(PEER_INFLIGHT, &value, None)
}

/// Takes the lowest slot that is free (never written) or stale, by CAS, and confirms it.
fn claim_slot(store: &dyn SharedStore, owner: u64, now_ms: u64, value: &[u8]) -> Option<usize> {
    for (index, key) in INFLIGHT_SLOT_KEYS.iter().enumerate() {
        let Ok((bytes, cas)) = store.get(key) else { return None };
        let free = match bytes.as_deref().map(decode_header) {
            None => true,
            Some(None) => true, // corrupt: nobody can be using it
            Some(Some((_, refreshed))) => !refreshed_recently(refreshed, now_ms),
        };
        if !free || store.set(key, value, cas).is_err() {
            continue;
        }
        // A first write to a missing key is a plain write: re-read to be sure it is ours.
        match store.get(key) {
            Ok((Some(bytes), _)) if decode_header(&bytes).map(|(o, _)| o) == Some(owner) => return Some(index),
            _ => continue,
        }
    }
    None
}

/// A slot value: owner, refresh time, then `(address, count, tokens)` entries.
fn encode<'a>(owner: u64, now_ms: u64, counts: impl Iterator<Item = (&'a str, Load)>) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_BYTES + 28 * MAX_PODS.min(64));
    out.extend_from_slice(&owner.to_le_bytes());
    out.extend_from_slice(&now_ms.to_le_bytes());
    for (address, count) in counts {
        let Ok(len) = u8::try_from(address.len()) else { continue };
        out.push(len);
        out.extend_from_slice(address.as_bytes());
        out.extend_from_slice(&count.count.to_le_bytes());
        out.extend_from_slice(&count.tokens.to_le_bytes());
    }
    out
}

fn own_counts(local: &HashMap<String, Local>) -> impl Iterator<Item = (&str, Load)> {
    local.iter().map(|(address, entry)| (address.as_str(), Load { count: entry.count, tokens: entry.tokens }))
}

/// A slot value refreshed within [`SLOT_STALE_MS`] of `now_ms` (its writer is alive).
fn is_live(slot_value: &[u8], now_ms: u64) -> bool {
    decode_header(slot_value).is_some_and(|(_, refreshed)| refreshed_recently(refreshed, now_ms))
}

/// Refreshed within [`SLOT_STALE_MS`] of `now_ms`, before or after it. After: another worker
/// wrote after this one read the clock, a few ms; but the host's clock is the wall clock,
/// and stepped back (NTP, a VM restored) a gone writer's last refresh lies ahead by the step:
/// counted as live, its counts would stay on the pods until the clock caught up (an hour for
/// an hour's step). Further ahead than [`SLOT_STALE_MS`] it is stale at once; a live writer
/// rewrites its slot on its next tick.
fn refreshed_recently(refreshed_ms: u64, now_ms: u64) -> bool {
    now_ms.abs_diff(refreshed_ms) <= SLOT_STALE_MS
}

fn decode_header(bytes: &[u8]) -> Option<(u64, u64)> {
    let owner = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?);
    let refreshed = u64::from_le_bytes(bytes.get(8..HEADER_BYTES)?.try_into().ok()?);
    Some((owner, refreshed))
}

/// `(address, load)` pairs; stops at the first truncated or non-UTF-8 entry.
fn decode_entries(mut bytes: &[u8]) -> impl Iterator<Item = (&str, Load)> {
    std::iter::from_fn(move || {
        let (&len, rest) = bytes.split_first()?;
        let len = usize::from(len);
        let address = std::str::from_utf8(rest.get(..len)?).ok()?;
        let count = u32::from_le_bytes(rest.get(len..len + 4)?.try_into().ok()?);
        let tokens = u32::from_le_bytes(rest.get(len + 4..len + 8)?.try_into().ok()?);
        bytes = rest.get(len + 8..)?;
        Some((address, Load { count, tokens }))
    })
    .take(MAX_PODS)
}

#[cfg(test)]
mod tests;
