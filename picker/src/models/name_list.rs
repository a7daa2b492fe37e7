//! A pod's list of model or adapter names as the pool service reads it: in the order read,
//! each name once, at most `max_names_per_pod` names of at most
//! [`crate::metrics_text::MAX_ADAPTER_NAME_BYTES`] bytes.
//!
//! A name is looked up through a table of its position by hash, not a scan of the list: a
//! scan per name made reading n names O(n²), which at 512 adapters was ~0.7 ms per pod and
//! scrape (`cargo bench -p bench-cost -- many_names`), most of the pool service's tick.

use hashbrown::HashTable;

/// A bounded list of distinct names, filled one at a time.
#[derive(Debug, Clone)]
pub struct NameList {
    names: Vec<String>,
    /// Each name's position in `names`, by the name's hash.
    positions: HashTable<usize>,
    max: usize,
}

fn hash(name: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(name.as_bytes())
}

impl NameList {
    /// An empty list keeping at most `max` names.
    pub fn new(max: usize) -> Self {
        Self { names: Vec::new(), positions: HashTable::new(), max }
    }

    /// `names` (each once, as a list of this kind gave them) to add more to, at most `max` in all.
    pub fn with_names(names: Vec<String>, max: usize) -> Self {
        let mut positions = HashTable::with_capacity(names.len());
        for (i, name) in names.iter().enumerate() {
            positions.insert_unique(hash(name), i, |&at: &usize| names.get(at).map_or(0, |known| hash(known)));
        }
        Self { names, positions, max }
    }

    /// Keeps `name` if it is new, short enough and the list has room; `false` when a name was
    /// dropped (too long, or the list full): the pod serves a name its list lacks.
    pub fn push(&mut self, name: &str) -> bool {
        if name.is_empty() {
            return true;
        }
        let hash_of_name = hash(name);
        let names = &self.names;
        if self.positions.find(hash_of_name, |&at| names.get(at).is_some_and(|known| known == name)).is_some() {
            return true;
        }
        if name.len() > crate::metrics_text::MAX_ADAPTER_NAME_BYTES || names.len() >= self.max {
            return false;
        }
        self.positions.insert_unique(hash_of_name, names.len(), |&at| names.get(at).map_or(0, |known| hash(known)));
        self.names.push(name.to_owned());
        true
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// The names, in the order they were kept.
    pub fn into_names(self) -> Vec<String> {
        self.names
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_stay_bounded() {
        let mut list = NameList::new(300);
        let kept = (0..1000).filter(|i| list.push(&format!("m{i}"))).count();
        assert!(list.push("m0"), "a name kept already is no drop");
        assert_eq!(list.len(), 300);
        assert_eq!(kept, 300, "every name past the bound is reported dropped");
        let long = "x".repeat(crate::metrics_text::MAX_ADAPTER_NAME_BYTES + 1);
        assert!(!NameList::new(300).push(&long));
        assert!(NameList::new(300).push(""), "an empty name is no name");
    }

    #[test]
    fn names_are_kept_once_in_order_as_a_scan_would() {
        // Against the scan it replaces, on names that repeat (a pod's engines each name
        // every adapter) and collide in their first bytes.
        let read: Vec<String> = (0..5_000).map(|i| format!("tenant-{}", (i * 7919) % 1_500)).collect();
        let mut list = NameList::new(1024);
        let mut scanned: Vec<String> = Vec::new();
        for name in &read {
            let known = scanned.contains(name);
            let fits = known || scanned.len() < 1024;
            if !known && fits {
                scanned.push(name.clone());
            }
            assert_eq!(list.push(name), fits, "{name}");
        }
        assert_eq!(list.into_names(), scanned);
        let mut more = NameList::with_names(vec!["a".into(), "b".into()], 3);
        assert!(more.push("b") && more.push("c") && !more.push("d"));
        assert_eq!(more.into_names(), ["a", "b", "c"]);
    }
}
