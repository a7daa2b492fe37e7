//! A worker's decoded copy of the pod table, refreshed only when its version changes.
//!
//! The version lives in its own 8-byte key, so the per-request cost is one tiny shared-data
//! read; the table itself is copied and decoded once per publish, not once per request.

use picker::keys;
use picker::pod_table::{decode_version, PodTable};
use picker::store::SharedStore;

#[derive(Default)]
pub struct TableCache {
    version: Option<u64>,
    table: Option<PodTable>,
    /// A table arrived whose pod list the prefix index has not been trimmed to yet.
    pods_changed: bool,
}

/// What a refresh found, for the caller's stats.
enum Refresh {
    Unchanged,
    Updated,
    DecodeFailed(String),
}

impl TableCache {
    fn refresh(&mut self, store: &dyn SharedStore) -> Refresh {
        let version = match store.get(keys::POD_TABLE_VERSION) {
            Ok((Some(bytes), _)) => decode_version(&bytes),
            _ => None,
        };
        if version.is_none() || version == self.version {
            return Refresh::Unchanged;
        }
        let bytes = match store.get(keys::POD_TABLE) {
            Ok((Some(bytes), _)) => bytes,
            Ok((None, _)) => return Refresh::DecodeFailed("version published without a table".into()),
            Err(error) => return Refresh::DecodeFailed(format!("{error:?}")),
        };
        match PodTable::decode(&bytes) {
            Ok(table) => {
                self.version = version;
                let old_pods =
                    self.table.as_ref().map(|t| t.pods.iter().map(|p| p.address.clone()).collect::<Vec<_>>());
                let new_pods: Vec<String> = table.pods.iter().map(|p| p.address.clone()).collect();
                self.pods_changed |= old_pods.is_some_and(|old| old != new_pods);
                self.table = Some(table);
                Refresh::Updated
            }
            Err(reason) => {
                // Keep the last good table; a newer publish will replace it.
                self.version = version;
                Refresh::DecodeFailed(reason)
            }
        }
    }

    /// [`Self::refresh`], counting and logging a table that does not decode (the last good
    /// one is kept). The one place both the tick and a table-less request refresh through.
    pub fn refresh_counted(&mut self, store: &dyn SharedStore, decode_failed: wasm_epp_host::Counter) {
        if let Refresh::DecodeFailed(reason) = self.refresh(store) {
            decode_failed.increment();
            log::warn!("wasm-epp: pod table not usable, keeping the last one: {reason}");
        }
    }

    pub fn table(&self) -> Option<&PodTable> {
        self.table.as_ref()
    }

    /// The pool's addresses, once after each change of membership (not of load).
    pub fn take_new_pod_list(&mut self) -> Option<Vec<String>> {
        if !std::mem::take(&mut self.pods_changed) {
            return None;
        }
        self.table.as_ref().map(|t| t.pods.iter().map(|p| p.address.clone()).collect())
    }
}
