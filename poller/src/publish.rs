//! Writes the pod table into shared data: the table first, then its version, so a worker
//! that sees a new version always finds the table it names (or a newer one).

use picker::keys;
use picker::pod_table::{encode_version, PodTable};
use picker::store::{SharedStore, StoreError};

pub fn publish(store: &dyn SharedStore, table: &PodTable) -> Result<(), StoreError> {
    store.set(keys::POD_TABLE, &table.encode(), None)?;
    store.set(keys::POD_TABLE_VERSION, &encode_version(table.version), None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use picker::pod_table::decode_version;
    use picker::store::MemoryStore;

    #[test]
    fn publishes_table_and_version_under_fixed_keys() {
        let store = MemoryStore::new();
        for version in 1..=50 {
            publish(&store, &PodTable { version, ..PodTable::default() }).unwrap();
        }
        let (bytes, _) = store.get(keys::POD_TABLE_VERSION).unwrap();
        assert_eq!(decode_version(&bytes.unwrap()), Some(50));
        let (table, _) = store.get(keys::POD_TABLE).unwrap();
        assert_eq!(PodTable::decode(&table.unwrap()).unwrap().version, 50);
        assert_eq!(store.key_count(), 2, "the key set does not grow with publishes");
    }
}
