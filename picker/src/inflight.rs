//! Requests in flight per pod, counted exactly across every worker thread.
//!
//! Polled metrics are ~100 ms old; a burst that arrives meanwhile would all land on the
//! pod that looked idle. So each worker counts what it dispatches and what completes, in
//! one shared-data key updated by compare-and-swap: every worker sees every other worker's
//! picks at once. A count that never comes down (a stream whose end the VM never saw) is
//! ignored after an expiry instead of weighing on its pod forever.

use crate::keys;
use crate::pod_table::MAX_PODS;
use crate::store::{SharedStore, StoreError};

/// CAS retries per update. Workers collide rarely (a few µs window), so a handful is ample;
/// past it the update is dropped and counted by the caller, never spun on.
pub const MAX_CAS_RETRIES: usize = 16;

#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    address: String,
    count: u32,
    updated_ms: u64,
}

/// A decoded copy of the shared counts and the version it was read at.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InflightCounts {
    entries: Vec<Entry>,
    cas: Option<u32>,
}

impl InflightCounts {
    /// Reads the shared counts; a missing or corrupt value reads as all zero.
    pub fn read(store: &dyn SharedStore) -> Result<Self, StoreError> {
        let (bytes, cas) = store.get(keys::INFLIGHT)?;
        let entries = bytes.as_deref().map(decode).unwrap_or_default();
        Ok(Self { entries, cas })
    }

    /// Writes an empty value if the key was never written. A CAS needs an existing key;
    /// two first writers racing on a missing key could lose a count, so every worker calls
    /// this at configure time, before it routes anything.
    pub fn ensure_key(store: &dyn SharedStore) -> Result<(), StoreError> {
        match store.get(keys::INFLIGHT)? {
            (Some(_), _) => Ok(()),
            (None, _) => store.set(keys::INFLIGHT, &[], None),
        }
    }

    /// Every live count at once, for one lookup per pod instead of a scan per pod.
    pub fn live_counts(&self, now_ms: u64, expiry_ms: u64) -> hashbrown::HashMap<&str, u32> {
        self.entries
            .iter()
            .filter(|e| now_ms.saturating_sub(e.updated_ms) <= expiry_ms)
            .map(|e| (e.address.as_str(), e.count))
            .collect()
    }

    /// Requests in flight to `address`, ignoring counts not touched for `expiry_ms`.
    pub fn count(&self, address: &str, now_ms: u64, expiry_ms: u64) -> u32 {
        self.entries
            .iter()
            .find(|e| e.address == address)
            .filter(|e| now_ms.saturating_sub(e.updated_ms) <= expiry_ms)
            .map_or(0, |e| e.count)
    }

    fn apply(&mut self, address: &str, delta: i32, now_ms: u64, expiry_ms: u64) {
        self.entries.retain(|e| e.count > 0 && now_ms.saturating_sub(e.updated_ms) <= expiry_ms);
        match self.entries.iter_mut().find(|e| e.address == address) {
            Some(entry) => {
                entry.count = entry.count.saturating_add_signed(delta);
                entry.updated_ms = now_ms;
            }
            None if delta > 0 => {
                if self.entries.len() >= MAX_PODS {
                    // Full of live counts for other pods: forget the stalest.
                    if let Some(oldest) =
                        (0..self.entries.len()).min_by_key(|&i| self.entries.get(i).map_or(0, |e| e.updated_ms))
                    {
                        self.entries.swap_remove(oldest);
                    }
                }
                self.entries.push(Entry {
                    address: address.to_string(),
                    count: delta.unsigned_abs(),
                    updated_ms: now_ms,
                });
            }
            None => {} // A completion for a count already expired or never seen.
        }
        self.entries.retain(|e| e.count > 0);
    }

    /// Adds `delta` to a pod's count. Tries the version this copy was read at first (the
    /// common case: no other worker wrote since), then re-reads and retries.
    pub fn update(
        mut self,
        store: &dyn SharedStore,
        address: &str,
        delta: i32,
        now_ms: u64,
        expiry_ms: u64,
    ) -> Result<Self, StoreError> {
        for _ in 0..MAX_CAS_RETRIES {
            self.apply(address, delta, now_ms, expiry_ms);
            let bytes = encode(&self.entries);
            // A key never written has no version: write it plainly.
            match store.set(keys::INFLIGHT, &bytes, self.cas) {
                Ok(()) => return Ok(self),
                Err(StoreError::CasMismatch) => self = Self::read(store)?,
                Err(other) => return Err(other),
            }
        }
        Err(StoreError::CasMismatch)
    }
}

/// Layout: entries of `[len u8][address][count u32 le][updated_ms u64 le]`.
fn encode(entries: &[Entry]) -> Vec<u8> {
    let mut out = Vec::with_capacity(entries.len() * 36);
    for entry in entries {
        let address = entry.address.as_bytes();
        let Ok(len) = u8::try_from(address.len()) else { continue };
        out.push(len);
        out.extend_from_slice(address);
        out.extend_from_slice(&entry.count.to_le_bytes());
        out.extend_from_slice(&entry.updated_ms.to_le_bytes());
    }
    out
}

fn decode(mut bytes: &[u8]) -> Vec<Entry> {
    let mut entries = Vec::new();
    while let Some((&len, rest)) = bytes.split_first() {
        let len = usize::from(len);
        let (Some(address), Some(count), Some(updated)) =
            (rest.get(..len), rest.get(len..len + 4), rest.get(len + 4..len + 12))
        else {
            break; // Truncated: keep what decoded.
        };
        let (Ok(address), Ok(count), Ok(updated)) =
            (std::str::from_utf8(address), <[u8; 4]>::try_from(count), <[u8; 8]>::try_from(updated))
        else {
            break;
        };
        if entries.len() < MAX_PODS {
            entries.push(Entry {
                address: address.to_string(),
                count: u32::from_le_bytes(count),
                updated_ms: u64::from_le_bytes(updated),
            });
        }
        bytes = rest.get(len + 12..).unwrap_or_default();
    }
    entries
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemoryStore;

    const EXPIRY: u64 = 60_000;

    #[test]
    fn two_workers_see_each_others_counts() {
        let store = MemoryStore::new();
        InflightCounts::ensure_key(&store).unwrap();
        let worker_a = InflightCounts::read(&store).unwrap();
        let worker_b = InflightCounts::read(&store).unwrap();
        worker_a.update(&store, "10.0.0.1:80", 1, 0, EXPIRY).unwrap();
        // B read before A wrote: its first CAS fails, it re-reads and keeps A's count.
        worker_b.update(&store, "10.0.0.1:80", 1, 0, EXPIRY).unwrap();
        let now = InflightCounts::read(&store).unwrap();
        assert_eq!(now.count("10.0.0.1:80", 0, EXPIRY), 2);
        now.update(&store, "10.0.0.1:80", -1, 1, EXPIRY).unwrap();
        assert_eq!(InflightCounts::read(&store).unwrap().count("10.0.0.1:80", 1, EXPIRY), 1);
    }

    #[test]
    fn leaked_counts_expire_and_never_go_negative() {
        let store = MemoryStore::new();
        let counts = InflightCounts::read(&store).unwrap().update(&store, "a:1", 1, 0, EXPIRY).unwrap();
        assert_eq!(counts.count("a:1", EXPIRY + 1, EXPIRY), 0);
        let counts = counts.update(&store, "b:1", -1, 5, EXPIRY).unwrap();
        assert_eq!(counts.count("b:1", 5, EXPIRY), 0);
        assert_eq!(store.key_count(), 1, "one key, whatever the traffic");
    }

    #[test]
    fn corrupt_values_decode_to_what_is_whole() {
        let good = encode(&[Entry { address: "a:1".into(), count: 3, updated_ms: 9 }]);
        let mut truncated = good.clone();
        truncated.extend_from_slice(&[200, b'x']);
        assert_eq!(decode(&truncated).len(), 1);
        assert!(decode(&[7, 1, 2]).is_empty());
    }
}
