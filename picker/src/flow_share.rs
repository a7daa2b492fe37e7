//! Flow control's share of the pool between the workers that wait, on this Envoy and on
//! the other gateway replicas (the rule itself is the filter's: `router/src/flow/share.rs`).
//!
//! Each worker with requests waiting says so in shared data (a key per in-flight slot:
//! its refresh time, queue length and highest waiting band, written on its tick while it
//! waits). The pool service counts the fresh ones ([`waiting_view`]) and tells its peers in
//! every peer message ([`crate::peer`]); it publishes what its live peers said, summed
//! ([`publish_peer_waiting`]), and each waiting worker reads those beside its own Envoy's.
//!
//! Priority holds across workers and replicas: only the workers waiting at the highest band
//! waiting anywhere share the pool ([`Waiting::limit`]); a worker whose requests are all of
//! lower bands holds them while that band waits elsewhere. A record without a band (an
//! older build's, during an upgrade) counts at whatever band is highest: that worker does
//! not hold for anyone, so it takes its share as before and the others count it in theirs.

use crate::config::MAX_PRIORITY;
use crate::inflight::{MAX_SLOTS, SLOT_STALE_MS};
use crate::keys::{per_slot, FLOW_PEER_WAITING, FLOW_WAITING_PREFIX};
use crate::peer::MAX_PEERS;
use crate::store::{SharedStore, StoreError};

/// Slack for a waiting record beyond its ticks: forty ticks of the default 5 ms waiting
/// tick, well past any scheduling jitter.
pub const WAITING_JITTER_MS: u64 = 200;

/// The slowest waiting tick the configuration accepts (`flow_control.waiting_tick_ms`).
pub const MAX_WAITING_TICK_MS: u64 = 1_000;

/// A waiting record older than this is ignored (its worker stopped waiting or died). The
/// record is rewritten only on its worker's tick, and workers tick out of step, so a live
/// worker's record is up to a whole `waiting_tick_ms` old when read: two ticks (one late or
/// missed is scheduling, not a worker gone) plus the jitter slack. A fixed limit below the
/// tick would drop live workers from the count, and each would take the whole pool.
pub fn stale_after_ms(waiting_tick_ms: u64) -> u64 {
    waiting_tick_ms.saturating_mul(2).saturating_add(WAITING_JITTER_MS)
}

/// How long the pool service counts a worker's waiting record: it does not know the
/// filter's `waiting_tick_ms`, so the slowest tick's bound (2.2 s). A worker whose queue
/// empties writes so on its next tick; only a worker that died waiting counts this long.
pub const SERVICE_STALE_AFTER_MS: u64 = MAX_WAITING_TICK_MS * 2 + WAITING_JITTER_MS;

/// Waiting workers one peer may claim at most: an Envoy has no more worker slots. A broken
/// or hostile peer claiming a billion cannot shrink this replica's share below
/// `capacity / (MAX_SLOTS × MAX_PEERS)` (rounded up, so never below one place).
pub const MAX_WAITING_PER_PEER: u32 = MAX_SLOTS as u32;

/// Most waiting workers all peers together count for ([`MAX_PEERS`] peers at most).
pub const MAX_PEER_WAITING: u32 = MAX_WAITING_PER_PEER * MAX_PEERS as u32;

/// Record: refresh time in ms (u64 LE), requests waiting (u32 LE), then the priority of
/// the highest band waiting (i32 LE). An older build's record stops before the band: its
/// worker counts at any band ([`Waiting::unknown`]).
const RECORD_BYTES: usize = 12;
const RECORD_WITH_BAND_BYTES: usize = RECORD_BYTES + 4;

/// A published peer sum: publish time in ms (u64 LE), waiting workers (u32 LE), then the
/// workers of unknown band (u32 LE), the highest band (i32 LE) and the workers at it (u32
/// LE; 0: no band known). A 12-byte record (an older pool service's) is all unknown band.
const PEER_RECORD_BYTES: usize = 12;
const PEER_RECORD_WITH_BANDS_BYTES: usize = PEER_RECORD_BYTES + 12;

/// Who waits, as one worker sees the others: the highest band some worker waits at and how
/// many wait at it, and the workers whose band is not known.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Waiting {
    /// The highest band waiting and the workers at it (`None`: no worker of known band).
    pub top: Option<(i32, u32)>,
    /// Workers of unknown band (an older build's record or peer): they count at any band.
    pub unknown: u32,
    /// Every waiting worker counted, whatever its band (what older peers are told).
    pub workers: u32,
}

impl Waiting {
    /// Counts `workers` waiting with `band` as their highest (`None`: unknown).
    pub fn add(&mut self, band: Option<i32>, workers: u32) {
        if workers == 0 {
            return;
        }
        self.workers = self.workers.saturating_add(workers);
        let Some(band) = band.map(clamp_band) else {
            self.unknown = self.unknown.saturating_add(workers);
            return;
        };
        self.top = match self.top {
            Some((top, at)) if top > band => Some((top, at)),
            Some((top, at)) if top == band => Some((top, at.saturating_add(workers))),
            _ => Some((band, workers)),
        };
    }

    /// Both counted together.
    pub fn merge(&mut self, other: Waiting) {
        if let Some((band, workers)) = other.top {
            self.add(Some(band), workers);
        }
        self.add(None, other.unknown);
        // Workers below either top count too (`add` counted the tops and the unknown ones).
        let below = other.workers.saturating_sub(other.unknown).saturating_sub(other.top.map_or(0, |(_, at)| at));
        self.workers = self.workers.saturating_add(below);
    }

    /// How many requests of its own a worker may keep in flight to release one of
    /// `priority`, these being the others that wait: none while a higher band waits
    /// elsewhere; else the pool shared with the others waiting at its band (and those of
    /// unknown band). A worker alone, or all at one band, get `ceil(capacity / n)` as
    /// without bands.
    pub fn limit(&self, capacity: u32, priority: i32) -> u32 {
        let priority = clamp_band(priority);
        let sharing = match self.top {
            Some((top, _)) if top > priority => return 0,
            Some((top, at)) if top == priority => at,
            _ => 0,
        };
        capacity.div_ceil(sharing.saturating_add(self.unknown).saturating_add(1))
    }

    /// Whether a higher band than `priority` waits on some other worker.
    pub fn outranks(&self, priority: i32) -> bool {
        self.top.is_some_and(|(top, _)| top > clamp_band(priority))
    }
}

/// Bands are priorities clamped as the queue clamps them (a record may come from anyone).
fn clamp_band(priority: i32) -> i32 {
    priority.clamp(-MAX_PRIORITY, MAX_PRIORITY)
}

/// The key of slot `slot`'s waiting record.
pub fn waiting_key(slot: usize) -> String {
    per_slot(FLOW_WAITING_PREFIX, slot)
}

/// A waiting record: `waiting` requests as of `now_ms`, the highest of them of band `top`.
pub fn waiting_record(now_ms: u64, waiting: u32, top: i32) -> Vec<u8> {
    let mut record = Vec::with_capacity(RECORD_WITH_BAND_BYTES);
    record.extend_from_slice(&now_ms.to_le_bytes());
    record.extend_from_slice(&waiting.to_le_bytes());
    record.extend_from_slice(&top.to_le_bytes());
    record
}

/// Distinct (band, model) pairs one worker's record names at most; past them it claims every
/// pod at its highest band.
pub const MAX_CLAIMS: usize = 8;

/// What a waiting worker waits for: a band, and the model whose pods it needs (`None`: any
/// pod). Another worker holds its requests of lower bands only for those pods (priority holds
/// where requests compete for places, not across models on pods of their own).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub band: i32,
    pub model: Option<String>,
    /// The worker's slot on this Envoy (`None`: another replica's workers), so the workers
    /// sharing a request's pods at its band are counted once each.
    pub worker: Option<usize>,
}

/// [`waiting_record`] followed by what the worker waits for: a count, then each pair as its
/// band (i32 LE), the model name's length (u8) and the name. `claims` of none or of more
/// than [`MAX_CLAIMS`] pairs, or naming `None` (a request whose model was not read) or a name
/// longer than 255 bytes, is written as a claim on every pod at `top` (count 255).
pub fn waiting_record_with_claims(now_ms: u64, waiting: u32, top: i32, claims: &[(i32, Option<&str>)]) -> Vec<u8> {
    let mut record = waiting_record(now_ms, waiting, top);
    let named = (1..=MAX_CLAIMS).contains(&claims.len())
        && claims.iter().all(|(_, model)| model.is_some_and(|m| m.len() <= 255));
    if !named {
        record.push(u8::MAX);
        return record;
    }
    record.push(u8::try_from(claims.len()).unwrap_or(u8::MAX));
    for (band, model) in claims {
        let name = model.unwrap_or_default().as_bytes();
        record.extend_from_slice(&band.to_le_bytes());
        record.push(u8::try_from(name.len()).unwrap_or(u8::MAX));
        record.extend_from_slice(name);
    }
    record
}

/// The claims after a record's band: `None` when the record has none, or claims every pod
/// (an older build's record, a worker past [`MAX_CLAIMS`], a record cut short).
fn claims_at(bytes: &[u8], worker: usize) -> Option<Vec<Claim>> {
    let count = *bytes.get(RECORD_WITH_BAND_BYTES)?;
    // A waiting worker waits for something: no claim at all is not one of ours (the writer
    // names at least one), and read so it would make the worker's band hold no one.
    if count == 0 || usize::from(count) > MAX_CLAIMS {
        return None;
    }
    let mut claims = Vec::with_capacity(usize::from(count));
    let mut at = RECORD_WITH_BAND_BYTES + 1;
    for _ in 0..count {
        let band = band_at(bytes, at)?;
        let length = usize::from(*bytes.get(at + 4)?);
        let name = bytes.get(at + 5..at + 5 + length)?;
        claims.push(Claim { band, model: Some(String::from_utf8(name.to_vec()).ok()?), worker: Some(worker) });
        at += 5 + length;
    }
    Some(claims)
}

/// What the workers of this Envoy (but `except`) that wait, by their fresh records (as
/// [`waiting_view`] reads them), wait for. A record that names no claims claims every pod at
/// its highest band; one without a band claims nothing (it makes no worker hold).
pub fn waiting_claims(store: &dyn SharedStore, except: Option<usize>, now_ms: u64, stale_after_ms: u64) -> Vec<Claim> {
    let mut claims = Vec::new();
    for slot in (0..MAX_SLOTS).filter(|s| Some(*s) != except) {
        let Ok((Some(record), _)) = store.get(&waiting_key(slot)) else { continue };
        let Some((refreshed, count)) = decode(&record) else { continue };
        if count == 0 || now_ms.abs_diff(refreshed) > stale_after_ms {
            continue;
        }
        match claims_at(&record, slot) {
            Some(named) => claims.extend(named),
            // A record without a band (an older build's) holds no one: it counts in the
            // share at any band ([`Waiting::unknown`]), not as the highest band on every pod.
            None => {
                if let Some(band) = band_at(&record, RECORD_BYTES) {
                    claims.push(Claim { band, model: None, worker: Some(slot) });
                }
            }
        }
    }
    claims
}

fn decode(bytes: &[u8]) -> Option<(u64, u32)> {
    let bytes = bytes.get(..RECORD_BYTES)?;
    let time = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?);
    let count = u32::from_le_bytes(bytes.get(8..)?.try_into().ok()?);
    Some((time, count))
}

/// The band after a record's first 12 bytes (at `at`), if the record has it.
fn band_at(bytes: &[u8], at: usize) -> Option<i32> {
    bytes.get(at..at + 4).and_then(|b| b.try_into().ok()).map(i32::from_le_bytes).map(clamp_band)
}

fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    bytes.get(at..at + 4).and_then(|b| b.try_into().ok()).map(u32::from_le_bytes)
}

/// Workers of this Envoy (but `except`) whose record says they wait, refreshed within
/// `stale_after_ms` of `now_ms`, by their highest band.
pub fn waiting_view(store: &dyn SharedStore, except: Option<usize>, now_ms: u64, stale_after_ms: u64) -> Waiting {
    let mut waiting = Waiting::default();
    for slot in (0..MAX_SLOTS).filter(|s| Some(*s) != except) {
        let Ok((Some(record), _)) = store.get(&waiting_key(slot)) else { continue };
        let Some((refreshed, count)) = decode(&record) else { continue };
        // Before or after now: another worker may have read the clock after this one; but a
        // record further ahead was written before the wall clock stepped back, by a worker
        // that has not written since (a live one rewrites it on its next waiting tick).
        if count > 0 && now_ms.abs_diff(refreshed) <= stale_after_ms {
            waiting.add(band_at(&record, RECORD_BYTES), 1);
        }
    }
    waiting
}

/// Publishes the waiting workers of the live peers, summed (each count bounded by
/// [`MAX_PEER_WAITING`]).
pub fn publish_peer_waiting(store: &dyn SharedStore, now_ms: u64, waiting: Waiting) -> Result<(), StoreError> {
    let (top, at) = waiting.top.map_or((0, 0), |(top, at)| (top, at.min(MAX_PEER_WAITING)));
    let mut record = waiting_record(now_ms, waiting.workers.min(MAX_PEER_WAITING), 0);
    record.truncate(PEER_RECORD_BYTES);
    record.extend_from_slice(&waiting.unknown.min(MAX_PEER_WAITING).to_le_bytes());
    record.extend_from_slice(&top.to_le_bytes());
    record.extend_from_slice(&at.to_le_bytes());
    store.set(FLOW_PEER_WAITING, &record, None)
}

/// The peers' waiting workers as last published: none if never published or not within
/// [`SLOT_STALE_MS`] of `now_ms` (the pool service stopped: its peers' counts, like their
/// requests in flight, are dropped as long after its last publish). Every count is bounded
/// by [`MAX_PEER_WAITING`]; an older pool service's record (no bands) is all unknown band.
pub fn peer_waiting(store: &dyn SharedStore, now_ms: u64) -> Waiting {
    let Ok((Some(record), _)) = store.get(FLOW_PEER_WAITING) else { return Waiting::default() };
    let Some((published, workers)) = record.get(..PEER_RECORD_BYTES).and_then(decode) else {
        return Waiting::default();
    };
    if now_ms.abs_diff(published) > SLOT_STALE_MS {
        return Waiting::default();
    }
    let workers = workers.min(MAX_PEER_WAITING);
    if record.len() < PEER_RECORD_WITH_BANDS_BYTES {
        return Waiting { top: None, unknown: workers, workers };
    }
    let unknown = u32_at(&record, PEER_RECORD_BYTES).unwrap_or(0).min(MAX_PEER_WAITING);
    let top = band_at(&record, PEER_RECORD_BYTES + 4).unwrap_or(0);
    let at = u32_at(&record, PEER_RECORD_BYTES + 8).unwrap_or(0).min(MAX_PEER_WAITING);
    Waiting { top: (at > 0).then_some((top, at)), unknown, workers: workers.max(unknown.saturating_add(at)) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemoryStore;

    fn unknown(workers: u32) -> Waiting {
        let mut waiting = Waiting::default();
        waiting.add(None, workers);
        waiting
    }

    fn at(band: i32, workers: u32) -> Waiting {
        let mut waiting = Waiting::default();
        waiting.add(Some(band), workers);
        waiting
    }

    #[test]
    fn only_the_workers_at_the_highest_band_share_and_the_others_hold() {
        // What worker `a` sees of the others: one waits at band 5, two at band 0.
        let mut others = at(5, 1);
        others.merge(at(0, 2));
        assert_eq!((others.top, others.unknown, others.workers), (Some((5, 1)), 0, 3));
        assert_eq!(others.limit(16, 0), 0, "a's band-0 requests hold while band 5 waits elsewhere");
        assert_eq!(others.limit(16, -3), 0);
        assert!(others.outranks(0) && !others.outranks(5));
        assert_eq!(others.limit(16, 5), 8, "a at band 5 shares with the other band-5 worker only");
        assert_eq!(others.limit(16, 7), 16, "a alone above everyone: the whole pool");
        // Priorities clamp as the queue clamps them: 100 and 8 are one band.
        assert_eq!(at(100, 1).limit(16, 8), 8);
        // No band anywhere: as before bands, ceil(capacity / n).
        assert_eq!(Waiting::default().limit(16, -8), 16, "alone");
        assert_eq!(at(0, 3).limit(15, 0), 4, "all at one band: ceil(15 / 4)");
    }

    #[test]
    fn workers_of_unknown_band_share_at_any_band_and_hold_no_one() {
        // An older build's worker (no band in its record) takes its share as before, so the
        // others count it whatever their band; it makes no one hold.
        let mut others = unknown(1);
        assert_eq!(others.limit(16, -8), 8);
        others.merge(at(2, 1));
        assert_eq!(others.limit(16, 2), 6, "with the band-2 worker and the unknown one: ceil(16 / 3)");
        assert_eq!(others.limit(16, 3), 8, "above band 2: shares with the unknown one only");
        assert_eq!(others.limit(16, 1), 0);
        assert_eq!(others.workers, 2);
    }

    #[test]
    fn records_carry_the_highest_band_and_older_ones_read_as_unknown() {
        let store = MemoryStore::default();
        store.set(&waiting_key(0), &waiting_record(1_000, 3, 2), None).unwrap();
        store.set(&waiting_key(1), &waiting_record(1_000, 1, -1), None).unwrap();
        store.set(&waiting_key(2), &waiting_record(1_000, 1, 2), None).unwrap();
        // An older build's record: time and count, no band.
        store.set(&waiting_key(3), &waiting_record(1_000, 4, 9)[..RECORD_BYTES], None).unwrap();
        store.set(&waiting_key(4), &waiting_record(1_000, 0, 8), None).unwrap();
        store.set(&waiting_key(5), &waiting_record(1_000, 2, i32::MAX), None).unwrap();
        let view = waiting_view(&store, Some(5), 1_000, 205);
        assert_eq!(view, Waiting { top: Some((2, 2)), unknown: 1, workers: 4 }, "slot 4 waits for nothing");
        assert_eq!(waiting_view(&store, None, 1_000, 205).top, Some((MAX_PRIORITY, 1)), "a band out of range clamps");
        assert_eq!(waiting_view(&store, None, 1_000, 205).workers, 5);
    }

    #[test]
    fn the_peers_bands_are_published_and_an_older_record_has_none() {
        let store = MemoryStore::default();
        let mut peers = at(3, 2);
        peers.merge(unknown(1));
        peers.merge(at(-2, 4));
        publish_peer_waiting(&store, 1_000, peers).unwrap();
        assert_eq!(peer_waiting(&store, 1_000), Waiting { top: Some((3, 2)), unknown: 1, workers: 7 });
        // An older pool service's record: the time and the sum only.
        store.set(FLOW_PEER_WAITING, &waiting_record(1_000, 5, 0)[..PEER_RECORD_BYTES], None).unwrap();
        assert_eq!(peer_waiting(&store, 1_000), Waiting { top: None, unknown: 5, workers: 5 });
        // Written by another hand: bands clamp, counts are bounded.
        let hostile = [
            &waiting_record(1_000, u32::MAX, 0)[..PEER_RECORD_BYTES],
            &u32::MAX.to_le_bytes(),
            &i32::MIN.to_le_bytes(),
            &u32::MAX.to_le_bytes(),
        ]
        .concat();
        store.set(FLOW_PEER_WAITING, &hostile, None).unwrap();
        let read = peer_waiting(&store, 1_000);
        assert_eq!((read.top, read.unknown), (Some((-MAX_PRIORITY, MAX_PEER_WAITING)), MAX_PEER_WAITING));
        assert_eq!(read.limit(16, -MAX_PRIORITY), 1, "a place is always left at the top band");
    }

    #[test]
    fn fresh_records_with_requests_waiting_count() {
        let store = MemoryStore::default();
        store.set(&waiting_key(0), &waiting_record(1_000, 3, 0), None).unwrap();
        store.set(&waiting_key(1), &waiting_record(1_000, 0, 0), None).unwrap();
        store.set(&waiting_key(2), &waiting_record(900, 1, 0), None).unwrap();
        store.set(&waiting_key(3), b"short", None).unwrap();
        assert_eq!(waiting_view(&store, None, 1_000, 205).workers, 2, "slots 0 and 2");
        assert_eq!(waiting_view(&store, Some(0), 1_000, 205).workers, 1, "not the reader's own");
        assert_eq!(waiting_view(&store, None, 1_000, 50).workers, 1, "slot 2 is stale at 50 ms");
        assert_eq!(waiting_view(&store, None, 1_000 + SERVICE_STALE_AFTER_MS + 1, SERVICE_STALE_AFTER_MS).workers, 0);
    }

    #[test]
    fn the_peers_sum_is_bounded_and_expires() {
        let store = MemoryStore::default();
        let workers = |store: &MemoryStore, now| peer_waiting(store, now).workers;
        assert_eq!(workers(&store, 1_000), 0, "never published");
        publish_peer_waiting(&store, 1_000, unknown(3)).unwrap();
        assert_eq!(workers(&store, 1_000 + SLOT_STALE_MS), 3);
        assert_eq!(workers(&store, 1_000 + SLOT_STALE_MS + 1), 0, "the pool service stopped publishing");
        assert_eq!(workers(&store, 1_000u64.saturating_sub(1)), 3);
        publish_peer_waiting(&store, 3_600_000, unknown(3)).unwrap();
        assert_eq!(workers(&store, 1_000), 0, "published before the clock stepped back an hour");
        publish_peer_waiting(&store, 1_000, unknown(u32::MAX)).unwrap();
        assert_eq!(workers(&store, 1_000), MAX_PEER_WAITING);
        store
            .set(FLOW_PEER_WAITING, &[&waiting_record(1_000, 0, 0)[..8], &u32::MAX.to_le_bytes()[..]].concat(), None)
            .unwrap();
        assert_eq!(workers(&store, 1_000), MAX_PEER_WAITING, "written by another hand: still bounded");
        assert_eq!(peer_waiting(&store, 1_000).unknown, MAX_PEER_WAITING, "an older pool service's: no band known");
    }

    #[test]
    fn a_workers_claims_are_read_back_and_a_record_without_them_claims_every_pod() {
        let store = MemoryStore::default();
        let claims = [(5, Some("qwen")), (0, Some("llama"))];
        store.set(&waiting_key(0), &waiting_record_with_claims(1_000, 3, 5, &claims), None).unwrap();
        let named = |model: &str, band| Claim { band, model: Some(model.to_owned()), worker: Some(0) };
        assert_eq!(waiting_claims(&store, None, 1_000, 50), [named("qwen", 5), named("llama", 0)]);
        assert_eq!(waiting_view(&store, None, 1_000, 50), at(5, 1), "older readers see the band as before");
        assert!(waiting_claims(&store, Some(0), 1_000, 50).is_empty(), "its own record is not read");
        assert!(waiting_claims(&store, None, 2_000, 50).is_empty(), "stale");
        // An older build's record, a model not read, too many pairs: every pod at its band.
        let every = |band| vec![Claim { band, model: None, worker: Some(0) }];
        store.set(&waiting_key(0), &waiting_record(1_000, 3, 2), None).unwrap();
        assert_eq!(waiting_claims(&store, None, 1_000, 50), every(2));
        store.set(&waiting_key(0), &waiting_record_with_claims(1_000, 3, 4, &[(4, None)]), None).unwrap();
        assert_eq!(waiting_claims(&store, None, 1_000, 50), every(4));
        let many: Vec<(i32, Option<&str>)> = (0..=MAX_CLAIMS as i32).map(|band| (band, Some("m"))).collect();
        store.set(&waiting_key(0), &waiting_record_with_claims(1_000, 3, 8, &many), None).unwrap();
        assert_eq!(waiting_claims(&store, None, 1_000, 50), every(8));
        // Cut short: every pod.
        let mut cut = waiting_record_with_claims(1_000, 3, 5, &claims);
        cut.truncate(cut.len() - 2);
        store.set(&waiting_key(0), &cut, None).unwrap();
        assert_eq!(waiting_claims(&store, None, 1_000, 50), every(5));
        // Every cut and every byte of a record changed: read without a panic.
        let full = waiting_record_with_claims(1_000, 3, 5, &claims);
        for at in 0..full.len() {
            store.set(&waiting_key(0), &full[..at], None).unwrap();
            waiting_claims(&store, None, 1_000, 50);
            for byte in [0, 1, 0x7f, 0xff] {
                let mut changed = full.clone();
                changed[at] = byte;
                store.set(&waiting_key(0), &changed, None).unwrap();
                waiting_claims(&store, None, 1_000, 50);
            }
        }
        // Written by another hand: no claim at all, a name not UTF-8.
        let mut none = waiting_record(1_000, 3, 5);
        none.push(0);
        store.set(&waiting_key(0), &none, None).unwrap();
        assert_eq!(waiting_claims(&store, None, 1_000, 50), every(5));
        let mut bad = waiting_record(1_000, 3, 5);
        bad.extend_from_slice(&[1, 5, 0, 0, 0, 2, 0xff, 0xfe]);
        store.set(&waiting_key(0), &bad, None).unwrap();
        assert_eq!(waiting_claims(&store, None, 1_000, 50), every(5));
        store.set(&waiting_key(0), &waiting_record(12_345, 12_345_678, 0)[..RECORD_BYTES], None).unwrap();
        assert!(waiting_claims(&store, None, 12_345, 50).is_empty(), "no band: it holds no one");
    }
}
