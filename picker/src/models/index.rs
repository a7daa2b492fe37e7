//! Which pods serve each model name, built once per published table so a decision looks its
//! model up in O(1) instead of scanning every pod's lists.
//!
//! Built by the worker when its table changes (every publish, ~10 per second) and by
//! [`crate::route::choose`] when none is given (tests). Size: one entry per (pod, name) the
//! table lists, and each pod lists at most 5 × `max_names_per_pod` names (the pool service's
//! bound, 64 by default, at most [`super::MAX_NAMES_PER_POD`]): at the default, at most
//! 1024 × 320 entries of 8 bytes (2.6 MB) for a hostile full table, 16 times that at 1,024
//! names; a real pool of 64 pods with 32 adapters each holds about 2,000.

use hashbrown::HashMap;

use super::affinity::{free_slots, tiers, weight, Server};
use crate::pod_table::PodTable;

/// One pod serving a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    /// The pod's index in the table.
    pod: u32,
    /// The model is on it already: its base model, or an adapter resident, running, or
    /// waiting with a slot free for it.
    on_pod: bool,
    /// An adapter waiting there for a slot the pod's other adapters hold: it runs once one
    /// of them leaves, so it is no home while another pod has a slot free.
    waiting_for_slot: bool,
    /// The name is an adapter there (base models have no slots and no tiers).
    adapter: bool,
}

/// The pods serving one name.
#[derive(Debug, Clone, Default, PartialEq)]
struct Served {
    /// In table order, once per pod.
    entries: Vec<Entry>,
    /// Counted in `homeless_wanted`: an adapter in demand that is on no pod.
    homeless_wanted: bool,
}

/// Model name → the pods that serve it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelIndex {
    by_name: HashMap<String, Served>,
    /// Adapter slots free per pod; `u32::MAX` when the pod does not report `max_loras`.
    free_slots: Vec<u32>,
    /// Each pod's address hashed (rendezvous weights of adapter and pod).
    pod_keys: Vec<u64>,
    /// Pods that name no model at all (they may serve anything).
    silent: Vec<u32>,
    /// Pods that named more than their lists keep: they may serve a name no list holds.
    cut: Vec<u32>,
    /// Free adapter slots on the pods that hold adapters; `None` if one of them does not
    /// report `max_loras` (no slot is then known to be scarce).
    free_total: Option<i64>,
    /// Adapters in demand that are on no pod.
    homeless_wanted: i64,
}

impl ModelIndex {
    /// Builds the index of `table`; `wanted` says which adapters are in demand.
    pub fn build(table: &PodTable, wanted: &dyn Fn(&str) -> bool) -> Self {
        let mut index = Self { free_total: Some(0), ..Self::default() };
        let table_names_models = table.pods.iter().any(|pod| !pod.names_no_model());
        for (i, pod) in table.pods.iter().enumerate() {
            let Ok(i) = u32::try_from(i) else { break };
            let free = free_slots(pod);
            index.free_slots.push(free);
            index.pod_keys.push(xxhash_rust::xxh3::xxh3_64(pod.address.as_str().as_bytes()));
            let adapters = pod.adapter_lists();
            if pod.names_no_model() {
                if pod.may_serve_any_model(table_names_models) {
                    index.silent.push(i);
                }
                continue;
            }
            if pod.names_cut {
                index.cut.push(i);
            }
            if adapters.iter().any(|list| !list.is_empty()) {
                index.free_total =
                    index.free_total.zip((free != u32::MAX).then_some(i64::from(free))).map(|(a, b)| a + b);
            }
            // Each list says one thing of its names, and `add` merges a pod's entries for one
            // name: no list is searched for another's names (a search per name made a pod of
            // n adapters cost O(n²) per table, at 1,024 names a million comparisons).
            for name in &pod.models {
                index.add(name, Entry { pod: i, on_pod: true, waiting_for_slot: false, adapter: false });
            }
            let loaded = Entry { pod: i, on_pod: true, waiting_for_slot: false, adapter: true };
            for name in pod.running_loras.iter().chain(&pod.resident_loras) {
                index.add(name, loaded);
            }
            // vLLM lists a waiting request's adapter whether or not a slot awaits it.
            let waiting = Entry { pod: i, on_pod: free > 0, waiting_for_slot: free == 0, adapter: true };
            for name in &pod.waiting_loras {
                index.add(name, waiting);
            }
            for name in &pod.adapters {
                index.add(name, Entry { pod: i, on_pod: false, waiting_for_slot: false, adapter: true });
            }
        }
        for (name, served) in &mut index.by_name {
            let homeless = served.entries.iter().any(|e| e.adapter) && !served.entries.iter().any(|e| e.on_pod);
            served.homeless_wanted = homeless && wanted(name);
            index.homeless_wanted += i64::from(served.homeless_wanted);
        }
        index
    }

    /// Adds `entry` under `name` once per pod (pods are added in order, so the last entry is
    /// the only one that can be this pod's), merged with what the pod's other lists said: on
    /// the pod if any says so, waiting for a slot only if none does, an adapter only if no
    /// list names it as a base model.
    fn add(&mut self, name: &str, entry: Entry) {
        let served = match self.by_name.get_mut(name) {
            Some(served) => served,
            None => self.by_name.entry(name.to_owned()).or_default(),
        };
        match served.entries.last_mut() {
            Some(last) if last.pod == entry.pod => {
                last.on_pod |= entry.on_pod;
                last.adapter &= entry.adapter;
                last.waiting_for_slot = (last.waiting_for_slot || entry.waiting_for_slot) && !last.on_pod;
            }
            _ => served.entries.push(entry),
        }
    }

    /// Whether every free adapter slot is wanted by an adapter in demand that is on no pod.
    pub fn tight(&self) -> bool {
        self.free_total.is_some_and(|free| free <= self.homeless_wanted)
    }

    /// The pods serving `model` with their LoRA tiers (0 for a base model), in table order.
    pub fn servers(&self, model: &str) -> Option<Vec<(u32, u8)>> {
        let served = self.by_name.get(model)?;
        let model_key = xxhash_rust::xxh3::xxh3_64(model.as_bytes());
        let adapter_servers: Vec<Server> = (served.entries.iter().filter(|e| e.adapter))
            .map(|e| Server {
                on_pod: e.on_pod,
                waiting_for_slot: e.waiting_for_slot,
                free_slots: self.free_slots.get(e.pod as usize).copied().unwrap_or(u32::MAX),
                weight: weight(model_key, self.pod_keys.get(e.pod as usize).copied().unwrap_or(0)),
            })
            .collect();
        let mut adapter_tiers = tiers(&adapter_servers, self.tight()).into_iter();
        // Adapter entries take their tiers in order; base-model entries are tier 0.
        Some(
            served
                .entries
                .iter()
                .map(|e| (e.pod, if e.adapter { adapter_tiers.next().unwrap_or(0) } else { 0 }))
                .collect(),
        )
    }

    /// Whether table pod `pod` lists `model` (as a base model or an adapter, in any list).
    pub fn lists(&self, model: &str, pod: u32) -> bool {
        self.by_name.get(model).is_some_and(|served| served.entries.iter().any(|e| e.pod == pod))
    }

    /// Whether any pod serves `model`.
    pub fn knows(&self, model: &str) -> bool {
        self.by_name.contains_key(model)
    }

    /// Whether some name a pod of this index serves is one no pod of `other` does.
    pub fn names_any_unknown_to(&self, other: &ModelIndex) -> bool {
        self.by_name.keys().any(|name| !other.knows(name))
    }

    /// Whether some pod serves `model` or may: one names it, one names no model at all, or
    /// one named more than its lists keep. Not so, the name is the gateway's 404.
    pub fn may_be_served(&self, model: &str) -> bool {
        self.knows(model) || !self.silent.is_empty() || !self.cut.is_empty()
    }

    /// This worker just sent a request for `model` to table pod `pod`: the adapter is on its
    /// way onto that GPU, taking a slot, so the next requests see it resident there before the
    /// next scrape says so (without this, a burst spreads one adapter over every pod holding it).
    pub fn note_routed(&mut self, model: &str, pod: u32) {
        let Some(served) = self.by_name.get_mut(model) else { return };
        let Some(entry) = served.entries.iter_mut().find(|e| e.pod == pod) else { return };
        if entry.on_pod {
            return;
        }
        entry.on_pod = true;
        entry.waiting_for_slot = false;
        if std::mem::take(&mut served.homeless_wanted) {
            self.homeless_wanted -= 1;
        }
        if let Some(free) = self.free_slots.get_mut(pod as usize).filter(|free| **free != u32::MAX && **free > 0) {
            *free -= 1;
            self.free_total = self.free_total.map(|total| total - 1);
        }
    }

    /// A request for adapter `model`, which no pod of this table lists, was sent to table pod
    /// `pod` to be loaded there (P/D's prefill pods under `route_by_load`, into a free slot):
    /// until the next scrape the pod holds it and its slot is taken, so the adapter's next
    /// requests go there and the next cold adapter does not see the slot free. A name some
    /// pod lists is noted as [`Self::note_routed`] notes it.
    pub fn note_loading(&mut self, model: &str, pod: u32) {
        if !self.knows(model) && (pod as usize) < self.free_slots.len() {
            self.add(model, Entry { pod, on_pod: false, waiting_for_slot: false, adapter: true });
        }
        self.note_routed(model, pod);
    }

    /// Adapter slots free on table pod `pod` (as noted since the scrape); `None` when it does
    /// not report `max_loras` (or is no pod of the table).
    pub fn free_slots(&self, pod: u32) -> Option<u32> {
        self.free_slots.get(pod as usize).copied().filter(|&free| free != u32::MAX)
    }

    /// Pods that name no model.
    pub fn silent(&self) -> &[u32] {
        &self.silent
    }

    /// Pods whose model or adapter lists were cut at their bound (a pod registering more
    /// adapters than the table keeps): a name no pod lists may be one of theirs.
    pub fn cut(&self) -> &[u32] {
        &self.cut
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::address::PodAddress;
    use crate::models::affinity::{TIER_FREE_SLOT, TIER_FREE_SLOT_OTHER, TIER_RESIDENT, TIER_RESIDENT_COPY, TIER_SWAP};
    use crate::pod_table::PodState;

    #[test]
    fn names_map_to_their_pods_with_tiers() {
        let mut a = PodState::unknown(&PodAddress::parse("10.0.0.1:80").unwrap());
        a.models = vec!["base".into()];
        a.adapters = vec!["x".into(), "y".into()];
        a.resident_loras = vec!["x".into()];
        a.running_loras = vec!["x".into()];
        a.max_loras = 1;
        // An engine without model labels (it answers its scrapes): it may serve anything.
        let mut silent = PodState::unknown(&PodAddress::parse("10.0.0.2:80").unwrap());
        (silent.healthy, silent.last_success_ms) = (true, 1);
        let down = PodState::unknown(&PodAddress::parse("10.0.0.3:80").unwrap());
        let table = PodTable { pods: vec![a, silent, down], ..PodTable::default() };
        let mut index = ModelIndex::build(&table, &|_| true);
        assert_eq!(index.servers("base"), Some(vec![(0, 0)]));
        assert_eq!(index.servers("x"), Some(vec![(0, TIER_RESIDENT)]), "resident, listed once though named thrice");
        assert_eq!(index.servers("y"), Some(vec![(0, TIER_SWAP)]), "its one slot is taken");
        assert_eq!(index.servers("z"), None);
        assert_eq!(index.silent(), [1], "a pod down since before its first answer serves nothing yet");
        index.free_slots[0] = 1;
        assert_eq!(index.servers("y"), Some(vec![(0, TIER_FREE_SLOT)]));
        index.note_routed("y", 0);
        assert_eq!(index.servers("y"), Some(vec![(0, TIER_RESIDENT)]), "sent there: resident from now on");
        assert_eq!(index.free_slots[0], 0, "and it took the free slot");
    }

    #[test]
    fn an_adapter_waiting_for_a_slot_others_hold_is_no_home_while_a_pod_has_one_free() {
        let pod = |address: &str, max_loras: u32, running: &[&str], waiting: &[&str]| {
            let mut pod = PodState::unknown(&PodAddress::parse(address).unwrap());
            pod.models = vec!["base".into()];
            pod.adapters = vec!["x".into(), "y".into()];
            pod.max_loras = max_loras;
            pod.running_loras = running.iter().map(|m| m.to_string()).collect();
            pod.waiting_loras = waiting.iter().map(|m| m.to_string()).collect();
            pod
        };
        // A's one slot runs x; y waits there for it. B is idle with its slot free.
        let stuck = pod("10.0.0.1:80", 1, &["x"], &["y"]);
        let table = PodTable { pods: vec![stuck.clone(), pod("10.0.0.2:80", 1, &[], &[])], ..PodTable::default() };
        let tiers = ModelIndex::build(&table, &|_| true).servers("y").unwrap();
        assert!(tiers[1].1 < tiers[0].1, "the free slot serves y sooner: {tiers:?}");
        // Every other slot taken too: y's waiting pod costs no eviction, the other one does.
        let table = PodTable { pods: vec![stuck, pod("10.0.0.2:80", 1, &["x"], &[])], ..PodTable::default() };
        let tiers = ModelIndex::build(&table, &|_| true).servers("y").unwrap();
        assert_eq!(tiers, [(0, TIER_FREE_SLOT_OTHER), (1, TIER_SWAP)]);
        // Waiting with a slot free for it: its home.
        let table = PodTable { pods: vec![pod("10.0.0.1:80", 2, &["x"], &["y"])], ..PodTable::default() };
        assert_eq!(ModelIndex::build(&table, &|_| true).servers("y"), Some(vec![(0, TIER_RESIDENT)]));
    }

    /// Two pods serving `hot` and `cold`, one slot each, `hot` on both (a copy too many).
    fn two_copies() -> PodTable {
        let pods = ["10.0.0.1:80", "10.0.0.2:80"].map(|address| {
            let mut pod = PodState::unknown(&PodAddress::parse(address).unwrap());
            pod.models = vec!["base".into()];
            pod.adapters = vec!["hot".into(), "cold".into()];
            pod.resident_loras = vec!["hot".into()];
            pod.max_loras = 1;
            pod
        });
        PodTable { pods: pods.to_vec(), ..PodTable::default() }
    }

    #[test]
    fn when_an_adapter_in_demand_has_no_home_the_other_keeps_one_home() {
        let index = ModelIndex::build(&two_copies(), &|name| name == "cold");
        assert!(index.tight());
        let mut tiers: Vec<u8> = index.servers("hot").unwrap().into_iter().map(|(_, tier)| tier).collect();
        tiers.sort_unstable();
        assert_eq!(tiers, [TIER_RESIDENT, TIER_RESIDENT_COPY], "one home; the copy ages out for `cold`");
        assert_eq!(index.servers("base"), Some(vec![(0, 0), (1, 0)]), "base models are never consolidated");
    }

    #[test]
    fn with_a_free_slot_to_spare_every_copy_is_home() {
        let mut table = two_copies();
        for pod in &mut table.pods {
            pod.max_loras = 2;
        }
        let index = ModelIndex::build(&table, &|name| name == "cold");
        assert!(!index.tight(), "2 free slots, 1 adapter without a home");
        assert_eq!(index.servers("hot"), Some(vec![(0, TIER_RESIDENT), (1, TIER_RESIDENT)]));
        let mut index = index;
        index.note_routed("cold", 0);
        assert!(!index.tight(), "placing the homeless adapter uses the slot kept for it");
        index.note_routed("cold", 1);
        assert!(index.tight(), "a second copy took the last free slot");
    }

    #[test]
    fn each_pods_entry_is_what_searching_its_lists_for_the_name_says() {
        // The oracle: the search per name the build made before it merged its lists' entries.
        let searched = |pod: &PodState, name: &String| {
            if pod.models.contains(name) {
                return (true, false, false);
            }
            let loaded = pod.running_loras.contains(name) || pod.resident_loras.contains(name);
            let waiting = !loaded && pod.waiting_loras.contains(name);
            let on_pod = loaded || (waiting && free_slots(pod) > 0);
            (on_pod, waiting && !on_pod, true)
        };
        let mut seed = 7_u64;
        let mut draw = |below: u64| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) % below
        };
        for round in 0..200 {
            let mut pods = Vec::new();
            for p in 0..4 {
                let mut pod = PodState::unknown(&PodAddress::parse(&format!("10.0.0.{}:80", p + 1)).unwrap());
                let mut names = |count: u64| (0..count).map(|_| format!("n{}", draw(12))).collect::<Vec<_>>();
                (pod.models, pod.adapters) = (names(1), names(8));
                (pod.running_loras, pod.waiting_loras, pod.resident_loras) = (names(2), names(3), names(2));
                pod.max_loras = draw(4) as u32;
                pods.push(pod);
            }
            let table = PodTable { pods, ..PodTable::default() };
            let index = ModelIndex::build(&table, &|_| false);
            for (i, pod) in table.pods.iter().enumerate() {
                let lists = [&pod.models, &pod.adapters, &pod.running_loras, &pod.waiting_loras, &pod.resident_loras];
                for name in lists.into_iter().flatten() {
                    let entries = &index.by_name[name].entries;
                    let entry = entries.iter().find(|e| e.pod as usize == i).unwrap();
                    let built = (entry.on_pod, entry.waiting_for_slot, entry.adapter);
                    assert_eq!(built, searched(pod, name), "round {round}, pod {i}, {name}: {pod:?}");
                }
            }
        }
    }
}
