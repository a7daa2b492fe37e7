//! The seam between the routing logic and Envoy's shared data.
//!
//! Proxy-Wasm shared data is a process-wide map of `key -> (bytes, cas)`. The logic in this
//! crate reads and writes it only through [`SharedStore`], so the same code runs against
//! the real host in Envoy and against [`MemoryStore`] in native tests, which keeps the
//! host's real semantics: compare-and-swap on existing keys, no delete.

use std::cell::RefCell;
use std::collections::HashMap;

/// Why a shared-data write did not happen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// Another writer changed the key since our read: re-read and retry.
    CasMismatch,
    /// The host refused or failed the call; the text says what it answered.
    Host(String),
}

/// A value and the version it was read at.
pub type Versioned = (Option<Vec<u8>>, Option<u32>);

/// Shared data as Proxy-Wasm offers it.
pub trait SharedStore {
    /// Reads a key; `(None, None)` when it was never written.
    fn get(&self, key: &str) -> Result<Versioned, StoreError>;
    /// Writes a key. With `cas = Some(v)` the write only happens if the key is still at
    /// version `v`; with `None` it always happens.
    fn set(&self, key: &str, value: &[u8], cas: Option<u32>) -> Result<(), StoreError>;
}

/// An in-memory shared store with the host's semantics, for tests and benchmarks.
#[derive(Default)]
pub struct MemoryStore {
    entries: RefCell<HashMap<String, (Vec<u8>, u32)>>,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// How many keys were ever written (there is no delete, as in Envoy).
    pub fn key_count(&self) -> usize {
        self.entries.borrow().len()
    }
}

impl SharedStore for MemoryStore {
    fn get(&self, key: &str) -> Result<Versioned, StoreError> {
        Ok(match self.entries.borrow().get(key) {
            Some((value, cas)) => (Some(value.clone()), Some(*cas)),
            None => (None, None),
        })
    }

    fn set(&self, key: &str, value: &[u8], cas: Option<u32>) -> Result<(), StoreError> {
        let mut entries = self.entries.borrow_mut();
        match entries.get_mut(key) {
            Some((stored, version)) => {
                if cas.is_some_and(|expected| expected != *version) {
                    return Err(StoreError::CasMismatch);
                }
                *stored = value.to_vec();
                *version = version.wrapping_add(1).max(1);
            }
            None => {
                // Envoy accepts a CAS write to a missing key as a plain write.
                entries.insert(key.to_string(), (value.to_vec(), 1));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cas_rejects_stale_writers() {
        let store = MemoryStore::new();
        store.set("k", b"a", None).unwrap();
        let (_, cas) = store.get("k").unwrap();
        store.set("k", b"b", cas).unwrap();
        assert_eq!(store.set("k", b"c", cas), Err(StoreError::CasMismatch));
        assert_eq!(store.get("k").unwrap().0.as_deref(), Some(&b"b"[..]));
    }

    #[test]
    fn missing_key_reads_as_none() {
        assert_eq!(MemoryStore::new().get("nope").unwrap(), (None, None));
    }
}
