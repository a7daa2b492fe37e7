//! Which pods probably hold which prompt blocks: one worker's replica of the prefix index.
//!
//! An entry says "pod P holds block hash H". Each pod's entries are bounded by its real KV
//! capacity in blocks and evicted least recently used first, as the engine evicts; all entries
//! together are bounded by `max_entries`, evicting the globally oldest. A pod is known under an
//! epoch: a different epoch means it restarted with an empty cache, so its entries are void.
//!
//! Layout, chosen so every operation is O(1) per block with no lazy garbage:
//! - a slab of slots `(hash, pod, 4 links)`: 32 bytes each. Every slot is on two intrusive
//!   doubly-linked recency lists, its pod's and the global one, so a touch moves it to the front
//!   of both and eviction pops a back, with no timestamps to compare and no compaction.
//! - a `HashTable<u32>` of slot ids keyed by `(hash, pod)`: 4 bytes plus 1 control byte per
//!   bucket. Buckets are a power of two at most 7/8 full, and under steady churn hashbrown
//!   doubles the table once more to make room for tombstones: 1.14 to 4.6 buckets per entry.
//!
//! So one entry costs 38 to 55 bytes, and the index at most about `max_entries × 56` bytes plus
//! ~100 bytes per pod ([`PrefixIndex::approx_bytes`] measures it). Matching a request costs one
//! probe for a pod without its first block and a binary search over the blocks for a pod with
//! it: O(pods + matching pods × log blocks) (see [`PrefixIndex::matched_blocks`] for why a binary
//! search gives the chain's answer).

use hashbrown::{HashMap, HashTable};

use crate::pod_table::MAX_PODS;
use crate::prefix::keyed::HashKey;

/// Entries at most, whatever the configuration says: 16M entries are ~700 MB per worker, far
/// past any sane setting, and keep slot ids in a `u32` with room for an end-of-list marker.
pub const MAX_ENTRIES_LIMIT: usize = 1 << 24;

/// "No slot": the end of a list.
const NIL: u32 = u32::MAX;

/// Blocks [`PrefixIndex::record`] looks up together before touching any of them.
const LOOKAHEAD: usize = 32;

/// One entry, on its pod's recency list and on the global one (front = most recent).
#[derive(Debug, Clone, Copy)]
struct Slot {
    hash: u64,
    pod: u16,
    pod_newer: u32,
    pod_older: u32,
    newer: u32,
    /// Also links the free list while the slot is unused.
    older: u32,
}

/// Ends of a doubly-linked recency list.
#[derive(Debug, Clone, Copy)]
struct Ends {
    newest: u32,
    oldest: u32,
}

const EMPTY: Ends = Ends { newest: NIL, oldest: NIL };

#[derive(Debug, Clone)]
struct Pod {
    address: Box<str>,
    epoch: u32,
    len: usize,
    list: Ends,
    /// When the pod was last recorded, to reclaim the stalest pod id when all are taken.
    last_record: u64,
}

/// A pod's id in one index: valid while the index's [`PrefixIndex::pods_generation`] stays
/// the same. A caller that keeps the ids of a table's pods saves a lookup of each address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodId(u16);

/// The prefix index of one worker. See the module doc for its layout and cost.
#[derive(Debug)]
pub struct PrefixIndex {
    max_entries: usize,
    slots: Vec<Slot>,
    free: u32,
    table: HashTable<u32>,
    global: Ends,
    len: usize,
    pods: Vec<Option<Pod>>,
    pod_ids: HashMap<Box<str>, u16>,
    /// Keys the table's buckets: block hashes are client-chosen (see [`crate::prefix::keyed`]).
    key: HashKey,
    records: u64,
    /// Bumped whenever a pod is given an id or loses it: ids looked up under one generation
    /// name the same pods until it changes.
    pods_generation: u64,
}

impl PrefixIndex {
    /// An empty index holding at most `max_entries` (clamped to 1..=[`MAX_ENTRIES_LIMIT`]).
    /// Memory grows with use, never past the bound.
    pub fn new(max_entries: usize) -> Self {
        Self::with_key(max_entries, HashKey::default())
    }

    /// As [`Self::new`], with the table keyed by `key` (use a per-VM secret in production).
    pub fn with_key(max_entries: usize, key: HashKey) -> Self {
        Self {
            key,
            max_entries: max_entries.clamp(1, MAX_ENTRIES_LIMIT),
            slots: Vec::new(),
            free: NIL,
            table: HashTable::new(),
            global: EMPTY,
            len: 0,
            pods: Vec::new(),
            pod_ids: HashMap::new(),
            records: 0,
            pods_generation: 0,
        }
    }

    /// Entries held, over all pods.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn max_entries(&self) -> usize {
        self.max_entries
    }

    /// Entries held for `pod`.
    pub fn pod_len(&self, pod: &str) -> usize {
        self.pod(pod).map_or(0, |(_, p)| p.len)
    }

    /// Changes whenever a pod is given an id or loses it (see [`PodId`]).
    pub fn pods_generation(&self) -> u64 {
        self.pods_generation
    }

    /// `pod`'s id, if the index knows it (valid for the current [`Self::pods_generation`]).
    pub fn pod_id(&self, pod: &str) -> Option<PodId> {
        self.pod_ids.get(pod).map(|&id| PodId(id))
    }

    /// Pods the index knows, with or without entries.
    pub fn pod_count(&self) -> usize {
        self.pod_ids.len()
    }

    /// Heap bytes in use now (slab, table, pod records), to report as a gauge.
    pub fn approx_bytes(&self) -> usize {
        let addresses: usize = self.pod_ids.keys().map(|a| a.len() * 2).sum();
        self.slots.capacity() * std::mem::size_of::<Slot>()
            + self.table.allocation_size()
            + self.pods.capacity() * std::mem::size_of::<Option<Pod>>()
            + self.pod_ids.allocation_size()
            + addresses
    }

    /// Records that `pod` (under `epoch`) now holds the chain `hashes`. Its first
    /// `pod_capacity_blocks` blocks are touched, last block first, so the chain's first block is
    /// the most recent and a later eviction takes the tail of a chain before its head, as vLLM
    /// does. Returns false if the pod could not be given an id (an empty address).
    pub fn record(&mut self, pod: &str, epoch: u32, hashes: &[u64], pod_capacity_blocks: usize) -> bool {
        let Some(id) = self.intern(pod, epoch) else { return false };
        self.records += 1;
        let capacity = pod_capacity_blocks.clamp(1, self.max_entries);
        if let Some(Some(entry)) = self.pods.get_mut(usize::from(id)) {
            entry.last_record = self.records;
        }
        // The capacity may have shrunk since the last record: trim to it first.
        while self.pod_len_by_id(id) > capacity {
            self.evict_oldest_of(id);
        }
        let hashes = hashes.get(..capacity).unwrap_or(hashes);
        // Last block first, a batch at a time: a batch's lookups are all made before any of its
        // touches, so they do not wait on one another (each is a few cache misses in a table of
        // 200k entries; made one after the other they were most of a record's time). What a
        // lookup found stays true until the batch inserts (a hash may come twice) or evicts (it
        // may free a slot found ahead): from then on the batch looks each block up as it goes,
        // so the index ends exactly as with one lookup per block at its turn.
        for batch in hashes.rchunks(LOOKAHEAD) {
            let mut ahead = [NIL; LOOKAHEAD];
            for (found, &hash) in ahead.iter_mut().zip(batch) {
                *found = self.find(hash, id).unwrap_or(NIL);
            }
            let mut changed = false;
            for (&hash, &found_ahead) in batch.iter().zip(&ahead).rev() {
                let found = if changed { self.find(hash, id) } else { Some(found_ahead).filter(|&s| s != NIL) };
                if let Some(slot) = found {
                    self.touch(slot);
                    continue;
                }
                changed = true;
                // Each check evicts at most one: the count only grew by one since it last held.
                if self.pod_len_by_id(id) >= capacity {
                    self.evict_oldest_of(id);
                }
                if self.len >= self.max_entries {
                    self.evict_globally_oldest();
                }
                self.insert(hash, id);
            }
        }
        true
    }

    /// How many leading blocks of `hashes` `pod` holds under `epoch` (0 if it restarted since).
    ///
    /// A binary search, not a walk: a pod's blocks of one chain always form a prefix of it.
    /// Block k's hash names the whole chain up to k, so every record of block k also records
    /// blocks 0..k, touching them after it ([`Self::record`] touches tails first); block k is
    /// thus never more recent than an earlier block, and LRU eviction never takes an earlier
    /// block while a later one stays. Only a hash collision could break that, and then the count
    /// is merely off. So a pod holding the whole of a 256-block chain costs 9 probes, not 256,
    /// and a pod without its first block costs one.
    pub fn matched_blocks(&self, hashes: &[u64], pod: &str, epoch: u32) -> usize {
        self.matched_blocks_near(hashes, pod, epoch, 0)
    }

    /// [`Self::matched_blocks`], trying `guess` first: pods holding one prompt's prefix mostly
    /// hold the same length of it (the chain recorded for it), so when the previous pod's count
    /// is this pod's too, two probes after block 0's (block `guess - 1` held, block `guess`
    /// not) replace the binary search's eight for 256 blocks. Otherwise the search runs on the
    /// side of `guess` the answer is on. The answer is the same whatever the guess: the held
    /// blocks are a prefix of the chain (see [`Self::matched_blocks`]), so the first block not
    /// held is one place however it is found (a hash collision, which alone could break the
    /// prefix, leaves the count merely off, as it does the plain search's).
    fn matched_blocks_near(&self, hashes: &[u64], pod: &str, epoch: u32, guess: usize) -> usize {
        self.pod_ids.get(pod).map_or(0, |&id| self.matched_blocks_of(hashes, PodId(id), epoch, guess))
    }

    /// [`Self::matched_blocks_near`] of the pod with id `id`.
    fn matched_blocks_of(&self, hashes: &[u64], PodId(id): PodId, epoch: u32, guess: usize) -> usize {
        let Some(entry) = self.pods.get(usize::from(id)).and_then(Option::as_ref) else { return 0 };
        let holds = |hash: &u64| self.find(*hash, id).is_some();
        if entry.epoch != epoch || !hashes.first().is_some_and(holds) {
            return 0;
        }
        // Block 0 is held: the answer is in 1..=len. Is the guess's last block held?
        let Some(last) = guess.checked_sub(1).and_then(|i| hashes.get(i)) else {
            return hashes.partition_point(holds);
        };
        if !holds(last) {
            // The answer is in 1..guess: blocks 1..guess - 1 decide it.
            return 1 + hashes.get(1..guess - 1).map_or(0, |middle| middle.partition_point(holds));
        }
        match hashes.get(guess) {
            Some(next) if holds(next) => {
                guess + 1 + hashes.get(guess + 1..).map_or(0, |rest| rest.partition_point(holds))
            }
            _ => guess,
        }
    }

    /// [`Self::matched_blocks`] for each of `pods` (address, epoch), into `out` (cleared first),
    /// in the same order.
    pub fn matched_blocks_each(&self, hashes: &[u64], pods: &[(&str, u32)], out: &mut Vec<usize>) {
        let ids = pods.iter().map(|&(pod, epoch)| (self.pod_id(pod), epoch));
        self.matched_blocks_each_of(hashes, ids, out);
    }

    /// [`Self::matched_blocks_each`] of pods given by id (`None`: a pod the index does not
    /// know, which holds nothing), the ids looked up under the current
    /// [`Self::pods_generation`]: no lookup of an address per pod.
    pub fn matched_blocks_each_by_id(&self, hashes: &[u64], pods: &[(Option<PodId>, u32)], out: &mut Vec<usize>) {
        self.matched_blocks_each_of(hashes, pods.iter().copied(), out);
    }

    /// Each pod's match, each search starting from the last pod's match (pods holding a
    /// prompt's prefix mostly hold the same length of it).
    fn matched_blocks_each_of(
        &self,
        hashes: &[u64],
        pods: impl ExactSizeIterator<Item = (Option<PodId>, u32)>,
        out: &mut Vec<usize>,
    ) {
        out.clear();
        if self.is_empty() || hashes.is_empty() {
            out.resize(pods.len(), 0);
            return;
        }
        let mut guess = 0;
        for (id, epoch) in pods {
            let matched = id.map_or(0, |id| self.matched_blocks_of(hashes, id, epoch, guess));
            if matched > 0 {
                guess = matched;
            }
            out.push(matched);
        }
    }

    /// Drops everything held for `pod` (it left the pool) and frees its id. Returns the
    /// number of entries dropped.
    pub fn flush_pod(&mut self, pod: &str) -> usize {
        let Some(id) = self.pod_ids.remove(pod) else { return 0 };
        self.pods_generation = self.pods_generation.wrapping_add(1);
        let dropped = self.pod_len_by_id(id);
        self.clear_pod(id);
        if let Some(slot) = self.pods.get_mut(usize::from(id)) {
            *slot = None;
        }
        dropped
    }

    /// Flushes every pod for which `keep` says false, e.g. pods no longer in the pod table.
    pub fn retain_pods(&mut self, mut keep: impl FnMut(&str) -> bool) {
        let gone: Vec<Box<str>> = self.pod_ids.keys().filter(|a| !keep(a)).cloned().collect();
        for pod in gone {
            self.flush_pod(&pod);
        }
    }

    fn pod(&self, pod: &str) -> Option<(u16, &Pod)> {
        let id = *self.pod_ids.get(pod)?;
        Some((id, self.pods.get(usize::from(id))?.as_ref()?))
    }

    fn pod_len_by_id(&self, id: u16) -> usize {
        self.pods.get(usize::from(id)).and_then(Option::as_ref).map_or(0, |p| p.len)
    }

    /// The pod's id, made if new; a different epoch voids what it held.
    fn intern(&mut self, pod: &str, epoch: u32) -> Option<u16> {
        if pod.is_empty() {
            return None;
        }
        if let Some(&id) = self.pod_ids.get(pod) {
            let stale = self.pods.get(usize::from(id)).and_then(Option::as_ref).is_some_and(|p| p.epoch != epoch);
            if stale {
                self.clear_pod(id);
                if let Some(Some(entry)) = self.pods.get_mut(usize::from(id)) {
                    entry.epoch = epoch;
                }
            }
            return Some(id);
        }
        let id = match self.pods.iter().position(Option::is_none) {
            Some(free) => free,
            None if self.pods.len() < MAX_PODS => {
                self.pods.push(None);
                self.pods.len() - 1
            }
            None => {
                // Every id is taken: the pool churned through MAX_PODS addresses. Reclaim the
                // id of the pod recorded longest ago; it is most likely gone.
                let stalest = self.pods.iter().flatten().min_by_key(|p| p.last_record)?.address.clone();
                self.flush_pod(&stalest);
                self.pods.iter().position(Option::is_none)?
            }
        };
        let short_id = u16::try_from(id).ok()?;
        let address: Box<str> = pod.into();
        *self.pods.get_mut(id)? =
            Some(Pod { address: address.clone(), epoch, len: 0, list: EMPTY, last_record: self.records });
        self.pod_ids.insert(address, short_id);
        self.pods_generation = self.pods_generation.wrapping_add(1);
        Some(short_id)
    }

    fn find(&self, hash: u64, pod: u16) -> Option<u32> {
        let slots = &self.slots;
        let same = |&i: &u32| slots.get(i as usize).is_some_and(|s| s.hash == hash && s.pod == pod);
        self.table.find(self.key.hash(hash, u64::from(pod)), same).copied()
    }

    fn insert(&mut self, hash: u64, pod: u16) {
        let slot = Slot { hash, pod, pod_newer: NIL, pod_older: NIL, newer: NIL, older: NIL };
        let id = if self.free != NIL {
            let id = self.free;
            self.free = self.slots.get(id as usize).map_or(NIL, |s| s.older);
            if let Some(free) = self.slots.get_mut(id as usize) {
                *free = slot;
            }
            id
        } else {
            let Ok(id) = u32::try_from(self.slots.len()) else { return };
            if self.slots.len() == self.slots.capacity() {
                // Double as a Vec would, but never past the bound.
                let room = self.max_entries.saturating_sub(self.slots.len());
                self.slots.reserve_exact(self.slots.len().max(64).min(room).max(1));
            }
            self.slots.push(slot);
            id
        };
        let (slots, key) = (&self.slots, self.key);
        self.table.insert_unique(key.hash(hash, u64::from(pod)), id, |&i| {
            slots.get(i as usize).map_or(0, |s| key.hash(s.hash, u64::from(s.pod)))
        });
        self.link_front(id);
        self.len += 1;
        if let Some(Some(entry)) = self.pods.get_mut(usize::from(pod)) {
            entry.len += 1;
        }
    }

    fn remove(&mut self, id: u32) {
        let Some(slot) = self.slots.get(id as usize).copied() else { return };
        if let Ok(entry) = self.table.find_entry(self.key.hash(slot.hash, u64::from(slot.pod)), |&i| i == id) {
            entry.remove();
        }
        self.unlink(id);
        if let Some(free) = self.slots.get_mut(id as usize) {
            free.older = self.free;
        }
        self.free = id;
        self.len = self.len.saturating_sub(1);
        if let Some(Some(entry)) = self.pods.get_mut(usize::from(slot.pod)) {
            entry.len = entry.len.saturating_sub(1);
        }
    }

    fn touch(&mut self, id: u32) {
        self.unlink(id);
        self.link_front(id);
    }

    fn evict_oldest_of(&mut self, pod: u16) {
        let oldest = self.pods.get(usize::from(pod)).and_then(Option::as_ref).map_or(NIL, |p| p.list.oldest);
        if oldest != NIL {
            self.remove(oldest);
        }
    }

    fn evict_globally_oldest(&mut self) {
        if self.global.oldest != NIL {
            self.remove(self.global.oldest);
        }
    }

    /// Removes all of a pod's entries, walking its own list: O(its entries).
    fn clear_pod(&mut self, pod: u16) {
        loop {
            let oldest = self.pods.get(usize::from(pod)).and_then(Option::as_ref).map_or(NIL, |p| p.list.oldest);
            if oldest == NIL {
                break;
            }
            self.remove(oldest);
        }
    }

    /// Puts a detached slot at the front of its pod's list and of the global list.
    fn link_front(&mut self, id: u32) {
        let Some(slot) = self.slots.get(id as usize).copied() else { return };
        let Some(Some(pod)) = self.pods.get_mut(usize::from(slot.pod)) else { return };
        let (pod_next, next) = (pod.list.newest, self.global.newest);
        pod.list.newest = id;
        if pod.list.oldest == NIL {
            pod.list.oldest = id;
        }
        self.global.newest = id;
        if self.global.oldest == NIL {
            self.global.oldest = id;
        }
        if let Some(s) = self.slots.get_mut(id as usize) {
            (s.pod_newer, s.pod_older, s.newer, s.older) = (NIL, pod_next, NIL, next);
        }
        if let Some(s) = self.slots.get_mut(pod_next as usize) {
            s.pod_newer = id;
        }
        if let Some(s) = self.slots.get_mut(next as usize) {
            s.newer = id;
        }
    }

    /// Takes a slot off both of its lists.
    fn unlink(&mut self, id: u32) {
        let Some(slot) = self.slots.get(id as usize).copied() else { return };
        match self.slots.get_mut(slot.pod_newer as usize) {
            Some(s) => s.pod_older = slot.pod_older,
            None => {
                if let Some(Some(pod)) = self.pods.get_mut(usize::from(slot.pod)) {
                    pod.list.newest = slot.pod_older;
                }
            }
        }
        match self.slots.get_mut(slot.pod_older as usize) {
            Some(s) => s.pod_newer = slot.pod_newer,
            None => {
                if let Some(Some(pod)) = self.pods.get_mut(usize::from(slot.pod)) {
                    pod.list.oldest = slot.pod_newer;
                }
            }
        }
        match self.slots.get_mut(slot.newer as usize) {
            Some(s) => s.older = slot.older,
            None => self.global.newest = slot.older,
        }
        match self.slots.get_mut(slot.older as usize) {
            Some(s) => s.newer = slot.newer,
            None => self.global.oldest = slot.newer,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Walks every list and checks it against the counts and the bounds.
    fn check(index: &PrefixIndex, capacity: usize) {
        let mut seen = 0;
        let mut at = index.global.newest;
        while at != NIL {
            let slot = index.slots[at as usize];
            assert_eq!(index.find(slot.hash, slot.pod), Some(at));
            at = slot.older;
            seen += 1;
            assert!(seen <= index.len);
        }
        assert_eq!(seen, index.len);
        assert_eq!(index.table.len(), index.len);
        assert!(index.len <= index.max_entries);
        assert!(index.slots.capacity() <= index.max_entries);
        let mut per_pod = 0;
        for pod in index.pods.iter().flatten() {
            let mut at = pod.list.newest;
            let mut count = 0;
            while at != NIL {
                at = index.slots[at as usize].pod_older;
                count += 1;
            }
            assert_eq!(count, pod.len);
            assert!(pod.len <= capacity);
            per_pod += count;
        }
        assert_eq!(per_pod, index.len);
    }

    /// The chain's answer by walking every block, to hold the binary search to.
    fn linear_match(index: &PrefixIndex, hashes: &[u64], pod: &str, epoch: u32) -> usize {
        match index.pod(pod) {
            Some((id, entry)) if entry.epoch == epoch => {
                hashes.iter().take_while(|&&h| index.find(h, id).is_some()).count()
            }
            _ => 0,
        }
    }

    fn pod(i: usize) -> String {
        format!("10.0.{}.{}:8000", i / 250, i % 250)
    }

    #[test]
    fn chain_semantics_stop_at_the_first_missing_block() {
        let mut index = PrefixIndex::new(1000);
        index.record("a:1", 0, &[1, 2, 3, 4], 100);
        index.record("b:1", 0, &[1, 2], 100);
        index.record("c:1", 0, &[2, 3, 4], 100);
        let mut out = vec![9];
        index.matched_blocks_each(&[1, 2, 3, 9], &[("a:1", 0), ("b:1", 0), ("c:1", 0), ("d:1", 0)], &mut out);
        assert_eq!(out, vec![3, 2, 0, 0]);
        assert_eq!(index.matched_blocks(&[], "a:1", 0), 0);
        check(&index, 100);
    }

    #[test]
    fn pod_lru_evicts_oldest_first_and_chain_tails_first() {
        let mut index = PrefixIndex::new(1000);
        index.record("a:1", 0, &[1, 2, 3], 4);
        index.record("a:1", 0, &[10, 11], 4);
        // Full at 4 with 5 wanted: the oldest is chain [1,2,3]'s tail, block 3.
        assert_eq!(index.pod_len("a:1"), 4);
        assert_eq!(index.matched_blocks(&[1, 2, 3], "a:1", 0), 2);
        index.record("a:1", 0, &[1], 4); // Touch 1: now 2 is the oldest.
        index.record("a:1", 0, &[20], 4);
        assert_eq!(index.matched_blocks(&[1, 2], "a:1", 0), 1);
        assert_eq!(index.matched_blocks(&[10, 11], "a:1", 0), 2);
        index.record("a:1", 0, &[30, 31, 32, 33, 34, 35], 2);
        assert_eq!(index.pod_len("a:1"), 2, "a smaller capacity trims the pod");
        assert_eq!(index.matched_blocks(&[30, 31, 32], "a:1", 0), 2);
        check(&index, 4);
    }

    #[test]
    fn global_bound_evicts_the_globally_oldest() {
        let mut index = PrefixIndex::new(3);
        index.record("a:1", 0, &[1, 2], 10);
        index.record("b:1", 0, &[5], 10);
        index.record("b:1", 0, &[6], 10);
        assert_eq!(index.len(), 3);
        assert_eq!(index.matched_blocks(&[1, 2], "a:1", 0), 1, "a's block 2 was the oldest");
        assert_eq!(index.matched_blocks(&[5], "b:1", 0), 1);
        check(&index, 10);
    }

    #[test]
    fn a_new_epoch_voids_and_flush_forgets() {
        let mut index = PrefixIndex::new(100);
        index.record("a:1", 1, &[1, 2], 10);
        assert_eq!(index.matched_blocks(&[1, 2], "a:1", 2), 0, "queried under a newer epoch");
        index.record("a:1", 2, &[7], 10);
        assert_eq!(index.matched_blocks(&[1, 2], "a:1", 1), 0);
        assert_eq!(index.matched_blocks(&[1, 2], "a:1", 2), 0);
        assert_eq!(index.matched_blocks(&[7], "a:1", 2), 1);
        index.record("b:1", 0, &[1], 10);
        assert_eq!(index.flush_pod("a:1"), 1);
        assert_eq!((index.pod_len("a:1"), index.len(), index.pod_count()), (0, 1, 1));
        index.retain_pods(|a| a != "b:1");
        assert!(index.is_empty() && index.pod_count() == 0);
        check(&index, 10);
    }

    #[test]
    fn many_pods_reuse_ids_and_share_blocks() {
        let mut index = PrefixIndex::new(100_000);
        let pods: Vec<String> = (0..MAX_PODS + 200).map(pod).collect();
        for (i, address) in pods.iter().enumerate() {
            assert!(index.record(address, 0, &[1, 2, i as u64 + 100], 10));
        }
        assert_eq!(index.pod_count(), MAX_PODS, "the stalest pods' ids were reclaimed");
        assert_eq!(index.matched_blocks(&[1, 2], &pods[0], 0), 0);
        let last = &pods[MAX_PODS + 199];
        assert_eq!(index.matched_blocks(&[1, 2, MAX_PODS as u64 + 299], last, 0), 3);
        let queries: Vec<(&str, u32)> = pods.iter().map(|p| (p.as_str(), 0)).collect();
        let mut out = Vec::new();
        index.matched_blocks_each(&[1, 2, 3], &queries, &mut out);
        assert_eq!(out.iter().filter(|&&n| n == 2).count(), MAX_PODS);
        assert!(!index.record("", 0, &[1], 10));
        check(&index, 10);
    }

    #[test]
    fn a_guessed_match_length_gives_the_searchs_answer_whatever_the_guess() {
        let mut index = PrefixIndex::new(10_000);
        let chain: Vec<u64> = (1..=40).collect();
        for (i, held) in [0, 1, 2, 7, 39, 40].into_iter().enumerate() {
            index.record(&pod(i), 0, chain.get(..held).unwrap_or(&chain), 1000);
        }
        // A pod holding a chain's later blocks without its first holds none of it.
        index.record(&pod(9), 0, &chain[5..], 1000);
        for i in (0..6).chain([9]) {
            let expected = linear_match(&index, &chain, &pod(i), 0);
            assert_eq!(index.matched_blocks(&chain, &pod(i), 0), expected);
            for guess in 0..=chain.len() + 2 {
                assert_eq!(index.matched_blocks_near(&chain, &pod(i), 0, guess), expected, "pod {i} guess {guess}");
            }
        }
        let pods: Vec<String> = [5, 0, 3, 1, 4, 2, 9, 4].into_iter().map(pod).collect();
        let queries: Vec<(&str, u32)> = pods.iter().map(|p| (p.as_str(), 0)).collect();
        let mut out = Vec::new();
        index.matched_blocks_each(&chain, &queries, &mut out);
        let expected: Vec<usize> = queries.iter().map(|&(p, e)| linear_match(&index, &chain, p, e)).collect();
        assert_eq!(out, expected);
        assert_eq!(out, vec![40, 0, 7, 1, 39, 2, 0, 39]);
    }

    #[test]
    fn matching_by_id_gives_the_answer_by_address_while_the_generation_holds() {
        let mut index = PrefixIndex::new(10_000);
        let chain: Vec<u64> = (1..=20).collect();
        index.record(&pod(0), 0, &chain, 1000);
        index.record(&pod(1), 0, &chain[..5], 1000);
        index.record(&pod(2), 1, &chain, 1000);
        let generation = index.pods_generation();
        let pods: Vec<String> = (0..4).map(pod).collect();
        let queries: Vec<(&str, u32)> = pods.iter().map(|p| (p.as_str(), 0)).collect();
        let by_id: Vec<(Option<PodId>, u32)> = queries.iter().map(|&(p, e)| (index.pod_id(p), e)).collect();
        let (mut expected, mut got) = (Vec::new(), Vec::new());
        index.matched_blocks_each(&chain, &queries, &mut expected);
        index.matched_blocks_each_by_id(&chain, &by_id, &mut got);
        assert_eq!((got.clone(), expected), (vec![20, 5, 0, 0], vec![20, 5, 0, 0]), "pod 2 is under epoch 1");
        index.record(&pod(1), 0, &chain, 1000);
        assert_eq!(index.pods_generation(), generation, "recording a known pod keeps every id");
        index.record(&pod(3), 0, &chain[..2], 1000);
        assert_ne!(index.pods_generation(), generation, "a new pod gets an id");
        let generation = index.pods_generation();
        index.flush_pod(&pod(0));
        assert_ne!(index.pods_generation(), generation, "a flushed pod loses its id");
        assert_eq!(index.pod_id(&pod(0)), None);
    }

    #[test]
    fn bounds_hold_under_a_million_random_inserts() {
        let (max_entries, capacity) = (50_000, 2_000);
        let mut index = PrefixIndex::new(max_entries);
        let pods: Vec<String> = (0..64).map(pod).collect();
        let mut state = 0x1234_5678_9abc_def0u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut chain = Vec::new();
        let mut inserted = 0;
        while inserted < 1_000_000 {
            let pod = &pods[(next() % 64) as usize];
            chain.clear();
            // Chains often share a hot prefix, as real prompts do.
            let shared = next() % 8;
            chain.extend((0..shared).map(|i| i + 1));
            chain.extend((0..next() % 100).map(|_| next()));
            let epoch = u32::from(next() % 1000 == 0);
            index.record(pod, epoch, &chain, capacity);
            inserted += chain.len();
            assert!(index.len() <= max_entries);
            // Eviction keeps every pod's blocks of a chain a prefix of it, as the search needs.
            let other = &pods[(next() % 64) as usize];
            for (pod, epoch) in [(pod, epoch), (other, 0), (other, 1)] {
                assert_eq!(index.matched_blocks(&chain, pod, epoch), linear_match(&index, &chain, pod, epoch));
            }
            if inserted % 97 == 0 {
                check(&index, capacity);
            }
        }
        check(&index, capacity);
        assert!(index.len() > max_entries / 2);
        // 32-byte slots plus 5 bytes per table bucket, at 1.14 to 4.6 buckets per entry.
        assert!(index.approx_bytes() <= max_entries * 56 + 64 * 200, "{}", index.approx_bytes());
    }
}
