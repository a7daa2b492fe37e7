//! Flow control's share of the pool between the workers that wait, on this Envoy and on
//! the other gateway replicas (the rule itself is the filter's: `router/src/flow/share.rs`).
//!
//! Each worker with requests waiting says so in shared data (a key per in-flight slot:
//! its refresh time and queue length, written on its tick while it waits). The pool
//! service counts the fresh ones ([`waiting_workers`]) and tells its peers in every peer
//! message ([`crate::peer`]); it publishes what its live peers said, summed
//! ([`publish_peer_waiting`]), and each waiting worker counts those beside its own Envoy's.

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

/// Record: refresh time in ms (u64 LE), requests waiting (u32 LE).
const RECORD_BYTES: usize = 12;

/// A published peer sum: publish time in ms (u64 LE), waiting workers (u32 LE).
const PEER_RECORD_BYTES: usize = 12;

/// The key of slot `slot`'s waiting record.
pub fn waiting_key(slot: usize) -> String {
    per_slot(FLOW_WAITING_PREFIX, slot)
}

/// A waiting record: `waiting` requests as of `now_ms`.
pub fn waiting_record(now_ms: u64, waiting: u32) -> Vec<u8> {
    let mut record = Vec::with_capacity(RECORD_BYTES);
    record.extend_from_slice(&now_ms.to_le_bytes());
    record.extend_from_slice(&waiting.to_le_bytes());
    record
}

fn decode(bytes: &[u8]) -> Option<(u64, u32)> {
    let bytes = bytes.get(..RECORD_BYTES)?;
    let time = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?);
    let count = u32::from_le_bytes(bytes.get(8..)?.try_into().ok()?);
    Some((time, count))
}

/// Workers of this Envoy (but `except`) whose record says they wait, refreshed within
/// `stale_after_ms` of `now_ms`.
pub fn waiting_workers(store: &dyn SharedStore, except: Option<usize>, now_ms: u64, stale_after_ms: u64) -> u32 {
    let mut waiting = 0;
    for slot in (0..MAX_SLOTS).filter(|s| Some(*s) != except) {
        let Ok((Some(record), _)) = store.get(&waiting_key(slot)) else { continue };
        let Some((refreshed, count)) = decode(&record) else { continue };
        // Before or after now: another worker may have read the clock after this one; but a
        // record further ahead was written before the wall clock stepped back, by a worker
        // that has not written since (a live one rewrites it on its next waiting tick).
        if count > 0 && now_ms.abs_diff(refreshed) <= stale_after_ms {
            waiting += 1;
        }
    }
    waiting
}

/// Publishes the waiting workers of the live peers, summed (bounded by [`MAX_PEER_WAITING`]).
pub fn publish_peer_waiting(store: &dyn SharedStore, now_ms: u64, waiting: u32) -> Result<(), StoreError> {
    store.set(FLOW_PEER_WAITING, &waiting_record(now_ms, waiting.min(MAX_PEER_WAITING)), None)
}

/// The peers' waiting workers as last published: none if never published or not within
/// [`SLOT_STALE_MS`] of `now_ms` (the pool service stopped: its peers' counts, like their
/// requests in flight, are dropped as long after its last publish).
pub fn peer_waiting(store: &dyn SharedStore, now_ms: u64) -> u32 {
    let Ok((Some(record), _)) = store.get(FLOW_PEER_WAITING) else { return 0 };
    match record.get(..PEER_RECORD_BYTES).and_then(decode) {
        Some((published, waiting)) if now_ms.abs_diff(published) <= SLOT_STALE_MS => waiting.min(MAX_PEER_WAITING),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemoryStore;

    #[test]
    fn fresh_records_with_requests_waiting_count() {
        let store = MemoryStore::default();
        store.set(&waiting_key(0), &waiting_record(1_000, 3), None).unwrap();
        store.set(&waiting_key(1), &waiting_record(1_000, 0), None).unwrap();
        store.set(&waiting_key(2), &waiting_record(900, 1), None).unwrap();
        store.set(&waiting_key(3), b"short", None).unwrap();
        assert_eq!(waiting_workers(&store, None, 1_000, 205), 2, "slots 0 and 2");
        assert_eq!(waiting_workers(&store, Some(0), 1_000, 205), 1, "not the reader's own");
        assert_eq!(waiting_workers(&store, None, 1_000, 50), 1, "slot 2 is stale at 50 ms");
        assert_eq!(waiting_workers(&store, None, 1_000 + SERVICE_STALE_AFTER_MS + 1, SERVICE_STALE_AFTER_MS), 0);
    }

    #[test]
    fn the_peers_sum_is_bounded_and_expires() {
        let store = MemoryStore::default();
        assert_eq!(peer_waiting(&store, 1_000), 0, "never published");
        publish_peer_waiting(&store, 1_000, 3).unwrap();
        assert_eq!(peer_waiting(&store, 1_000 + SLOT_STALE_MS), 3);
        assert_eq!(peer_waiting(&store, 1_000 + SLOT_STALE_MS + 1), 0, "the pool service stopped publishing");
        assert_eq!(peer_waiting(&store, 1_000u64.saturating_sub(1)), 3);
        publish_peer_waiting(&store, 3_600_000, 3).unwrap();
        assert_eq!(peer_waiting(&store, 1_000), 0, "published before the clock stepped back an hour");
        publish_peer_waiting(&store, 1_000, u32::MAX).unwrap();
        assert_eq!(peer_waiting(&store, 1_000), MAX_PEER_WAITING);
        store
            .set(FLOW_PEER_WAITING, &[&waiting_record(1_000, 0)[..8], &u32::MAX.to_le_bytes()[..]].concat(), None)
            .unwrap();
        assert_eq!(peer_waiting(&store, 1_000), MAX_PEER_WAITING, "written by another hand: still bounded");
    }
}
