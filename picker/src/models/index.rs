//! Which pods serve each model name, built once per published table so a decision looks its
//! model up in O(1) instead of scanning every pod's lists.
//!
//! Built by the worker when its table changes (every publish, ~10 per second) and by
//! [`crate::route::choose`] when none is given (tests). Size: one entry per (pod, name) the
//! table lists, and each pod lists at most 5 × [`super::MAX_MODELS_PER_POD`] names, so at
//! most 1024 × 320 entries of 8 bytes (2.6 MB) for a hostile full table; a real pool of 64
//! pods with 32 adapters each holds about 2,000.

use hashbrown::HashMap;

use super::affinity::{free_slots, tier};
use crate::pod_table::PodTable;

/// Model name → the pods that serve it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelIndex {
    /// (pod's index in the table, whether the model is on it already: its base model, or an
    /// adapter resident, running or waiting there), in table order.
    by_name: HashMap<String, Vec<(u32, bool)>>,
    /// Adapter slots free per pod; `u32::MAX` when the pod does not report `max_loras`.
    free_slots: Vec<u32>,
    /// Pods that name no model at all (they may serve anything).
    silent: Vec<u32>,
}

impl ModelIndex {
    pub fn build(table: &PodTable) -> Self {
        let mut index = Self::default();
        for (i, pod) in table.pods.iter().enumerate() {
            let Ok(i) = u32::try_from(i) else { break };
            index.free_slots.push(free_slots(pod));
            let adapters = [&pod.adapters, &pod.running_loras, &pod.waiting_loras, &pod.resident_loras];
            if pod.models.is_empty() && adapters.iter().all(|list| list.is_empty()) {
                index.silent.push(i);
                continue;
            }
            for name in &pod.models {
                index.add(name, i, true);
            }
            let on_pod = [&pod.running_loras, &pod.waiting_loras, &pod.resident_loras];
            for name in adapters.into_iter().flatten() {
                if !pod.models.contains(name) {
                    index.add(name, i, on_pod.iter().any(|list| list.contains(name)));
                }
            }
        }
        index
    }

    /// Adds (pod, on it) under `name` once per pod (pods are added in order, so the last entry
    /// is the only one that can be this pod's; adapters on the pod are listed first).
    fn add(&mut self, name: &str, pod: u32, on_pod: bool) {
        let servers = match self.by_name.get_mut(name) {
            Some(servers) => servers,
            None => self.by_name.entry(name.to_owned()).or_default(),
        };
        match servers.last_mut() {
            Some((last, resident)) if *last == pod => *resident |= on_pod,
            _ => servers.push((pod, on_pod)),
        }
    }

    /// The pods serving `model` with their LoRA tiers (0 for a base model), in table order.
    pub fn servers<'a>(&'a self, model: &str) -> Option<impl Iterator<Item = (u32, u8)> + 'a> {
        let servers = self.by_name.get(model)?;
        Some(servers.iter().map(|&(pod, on_pod)| {
            let free = self.free_slots.get(pod as usize).copied().unwrap_or(u32::MAX);
            (pod, tier(on_pod, free))
        }))
    }

    /// Whether any pod serves `model`.
    pub fn knows(&self, model: &str) -> bool {
        self.by_name.contains_key(model)
    }

    /// This worker just sent a request for `model` to table pod `pod`: the adapter is on its
    /// way onto that GPU, taking a slot, so the next requests see it resident there before the
    /// next scrape says so (without this, a burst spreads one adapter over every pod holding it).
    pub fn note_routed(&mut self, model: &str, pod: u32) {
        let servers = self.by_name.get_mut(model).into_iter().flatten();
        let Some(entry) = servers.into_iter().find(|(index, _)| *index == pod) else { return };
        if !entry.1 {
            entry.1 = true;
            if let Some(free) = self.free_slots.get_mut(pod as usize).filter(|free| **free != u32::MAX) {
                *free = free.saturating_sub(1);
            }
        }
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
        let servers = |index: &ModelIndex, name: &str| index.servers(name).map(|s| s.collect::<Vec<_>>());
        assert_eq!(servers(&index, "base"), Some(vec![(0, 0)]));
        assert_eq!(servers(&index, "x"), Some(vec![(0, 0)]), "resident, listed once though named thrice");
        assert_eq!(servers(&index, "y"), Some(vec![(0, 2)]), "its one slot is taken");
        assert_eq!(servers(&index, "z"), None);
        assert_eq!(index.silent(), [1]);
        let mut index = index;
        index.free_slots[0] = 1;
        assert_eq!(servers(&index, "y"), Some(vec![(0, 1)]));
        index.note_routed("y", 0);
        assert_eq!(servers(&index, "y"), Some(vec![(0, 0)]), "sent there: resident from now on");
        assert_eq!(index.free_slots[0], 0, "and it took the free slot");
    }
}
