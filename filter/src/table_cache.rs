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
}

/// What a refresh found, for the caller's stats.
pub enum Refresh {
    Unchanged,
    Updated,
    DecodeFailed(String),
}

impl TableCache {
    pub fn refresh(&mut self, store: &dyn SharedStore) -> Refresh {
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

    pub fn table(&self) -> Option<&PodTable> {
        self.table.as_ref()
    }
}
