//! Which pods serve each model name, built once per published table so a decision looks its
//! model up in O(1) instead of scanning every pod's lists.
//!
//! Built by the worker when its table changes (every publish, ~10 per second) and by
//! [`crate::route::choose`] when none is given (tests). Size: one entry per (pod, name) the
//! table lists, and each pod lists at most 5 × [`super::MAX_MODELS_PER_POD`] names, so at
//! most 1024 × 320 entries of 8 bytes (2.6 MB) for a hostile full table; a real pool of 64
//! pods with 32 adapters each holds about 2,000.

use hashbrown::HashMap;

use super::affinity::lora_tier;
use crate::pod_table::PodTable;

/// Pods serving one name: (index in the table, LoRA tier: 0 for the base model).
pub type Servers = Vec<(u32, u8)>;

/// Model name → the pods that serve it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelIndex {
    by_name: HashMap<String, Servers>,
    /// Pods that name no model at all (they may serve anything).
    silent: Vec<u32>,
}

impl ModelIndex {
    pub fn build(table: &PodTable) -> Self {
        let mut index = Self::default();
        for (i, pod) in table.pods.iter().enumerate() {
            let Ok(i) = u32::try_from(i) else { break };
            let adapters = [&pod.adapters, &pod.running_loras, &pod.waiting_loras, &pod.resident_loras];
            if pod.models.is_empty() && adapters.iter().all(|list| list.is_empty()) {
                index.silent.push(i);
                continue;
            }
            for name in &pod.models {
                index.add(name, i, 0);
            }
            for name in adapters.into_iter().flatten() {
                if !pod.models.contains(name) {
                    index.add(name, i, lora_tier(pod, name));
                }
            }
        }
        index
    }

    /// Adds (pod, tier) under `name` once per pod (pods are added in order, so the last entry
    /// is the only one that can be this pod's).
    fn add(&mut self, name: &str, pod: u32, tier: u8) {
        let servers = match self.by_name.get_mut(name) {
            Some(servers) => servers,
            None => self.by_name.entry(name.to_owned()).or_default(),
        };
        if servers.last().is_none_or(|&(last, _)| last != pod) {
            servers.push((pod, tier));
        }
    }

    /// The pods serving `model`, in table order.
    pub fn servers(&self, model: &str) -> Option<&Servers> {
        self.by_name.get(model)
    }

    /// Pods that name no model.
    pub fn silent(&self) -> &[u32] {
        &self.silent
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::address::PodAddress;
    use crate::pod_table::PodState;

    #[test]
    fn names_map_to_their_pods_with_tiers() {
        let mut a = PodState::unknown(&PodAddress::parse("10.0.0.1:80").unwrap());
        a.models = vec!["base".into()];
        a.adapters = vec!["x".into(), "y".into()];
        a.resident_loras = vec!["x".into()];
        a.running_loras = vec!["x".into()];
        a.max_loras = 1;
        let silent = PodState::unknown(&PodAddress::parse("10.0.0.2:80").unwrap());
        let table = PodTable { pods: vec![a, silent], ..PodTable::default() };
        let index = ModelIndex::build(&table);
        assert_eq!(index.servers("base"), Some(&vec![(0, 0)]));
        assert_eq!(index.servers("x"), Some(&vec![(0, 0)]), "resident, listed once though named thrice");
        assert_eq!(index.servers("y"), Some(&vec![(0, 2)]), "its one slot is taken");
        assert_eq!(index.servers("z"), None);
        assert_eq!(index.silent(), [1]);
    }
}
