//! Ids that no two Wasm VMs of one Envoy share, handed out by a counter in shared data.
//!
//! Clock-derived ids can collide between worker VMs started in the same instant; a
//! compare-and-swap on one fixed key cannot. The lease election and the per-worker
//! in-flight slots use them to tell VMs apart.

use crate::store::{SharedStore, StoreError};

/// Attempts at the counter's CAS before giving up for this tick: each failure means
/// another VM got an id just now, and there are only a few VMs per Envoy.
const ID_CAS_RETRIES: usize = 16;

/// The next value of the id counter (never 0). `None` while the store refuses: try again
/// later, never go on with an id that might be shared.
pub fn unique_vm_id(store: &dyn SharedStore) -> Option<u64> {
    for _ in 0..ID_CAS_RETRIES {
        let (bytes, cas) = store.get(crate::keys::VM_IDS).ok()?;
        let last = bytes.and_then(|b| b.get(..8).and_then(|b| b.try_into().ok())).map_or(0, u64::from_le_bytes);
        let next = last.checked_add(1)?;
        match (cas, store.set(crate::keys::VM_IDS, &next.to_le_bytes(), cas)) {
            // A first write has no version to compare: re-read to be sure it was ours.
            (None, Ok(())) => continue,
            (Some(_), Ok(())) => return Some(next),
            (_, Err(StoreError::CasMismatch)) => continue,
            (_, Err(StoreError::Host(_))) => return None,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemoryStore;

    #[test]
    fn ids_are_unique_and_never_zero() {
        let store = MemoryStore::new();
        let mut ids: Vec<u64> = (0..100).map(|_| unique_vm_id(&store).unwrap()).collect();
        assert!(ids.iter().all(|&id| id != 0));
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), 100);
    }
}
