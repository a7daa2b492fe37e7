//! The pod table: what the singleton knows about every pod, as the filter reads it.
//!
//! Published as one JSON value under [`crate::keys::POD_TABLE`] with its version under
//! [`crate::keys::POD_TABLE_VERSION`], so a worker reads the tiny version key on each tick
//! and decodes the table only when it changed. Decoding trusts nothing: an entry whose
//! address is not a literal `ip:port` is dropped, so it can never become a destination.

use serde::{Deserialize, Serialize};

use crate::address::PodAddress;
use crate::metrics_text::LoraState;

/// Pods in one pool at most. Bounds the table, the in-flight map and the stats names.
pub const MAX_PODS: usize = 1024;

/// One pod as last seen by the poller.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PodState {
    /// Validated when the table is decoded: only literal `ip:port` values exist here.
    pub address: PodAddress,
    /// Last poll succeeded recently enough and the failure threshold was not reached.
    pub healthy: bool,
    pub waiting: f64,
    pub running: f64,
    pub kv_usage: Option<f64>,
    pub block_size: Option<u32>,
    pub num_gpu_blocks: Option<u64>,
    /// Host time of the last successful scrape, ms since the epoch; 0 = never.
    pub last_success_ms: u64,
    pub consecutive_failures: u32,
    /// Bumped when the pod restarts (its counters went backwards) or rejoins the pool:
    /// anything remembered about its cache under an older epoch is void.
    pub epoch: u32,
    #[serde(default)]
    pub max_loras: u32,
    #[serde(default)]
    pub running_loras: Vec<String>,
    #[serde(default)]
    pub waiting_loras: Vec<String>,
    /// Prefill, decode or both (tables published before roles existed decode as `both`).
    #[serde(default)]
    pub role: crate::role::PodRole,
    /// Base model names the pod serves (see [`crate::models`]); empty = not told.
    #[serde(default)]
    pub models: Vec<String>,
    /// LoRA adapters the pod can serve (registered, on GPU or CPU).
    #[serde(default)]
    pub adapters: Vec<String>,
    /// Adapters resident on the pod's GPU now.
    #[serde(default)]
    pub resident_loras: Vec<String>,
    /// The pod named more models or adapters than its lists keep (or a name too long to
    /// keep): it may serve a name no list holds, so a request for a name no pod lists goes to
    /// it rather than being answered 404 by the gateway. Written only when set, so tables
    /// stay as they were for pods within the bounds.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub names_cut: bool,
}

impl PodState {
    /// Its data is recent at `now_ms`: last scraped within `stale_after_ms`.
    pub fn fresh_at(&self, now_ms: u64, stale_after_ms: u64) -> bool {
        now_ms.saturating_sub(self.last_success_ms) <= stale_after_ms
    }

    /// Routing may trust its data at `now_ms`: healthy and fresh.
    pub fn usable_at(&self, now_ms: u64, stale_after_ms: u64) -> bool {
        self.healthy && self.fresh_at(now_ms, stale_after_ms)
    }

    /// Drops over-long names and keeps at most [`crate::models::MAX_NAMES_PER_POD`] in each
    /// of the pod's model and adapter lists, as a pod's own report is bounded (and marks the
    /// lists cut when it dropped a name). The hard maximum, not the pool service's configured
    /// bound, which it applied already and which a worker does not know.
    pub fn bound_name_lists(&mut self) {
        self.bound_name_lists_at(crate::models::MAX_NAMES_PER_POD);
    }

    /// [`Self::bound_name_lists`] at `max` names per list: a pool service resuming a table
    /// published under another `max_names_per_pod` applies its own to the pods it takes over.
    pub fn bound_name_lists_at(&mut self, max: usize) {
        let max = max.min(crate::models::MAX_NAMES_PER_POD);
        let mut cut = false;
        let lists = [
            &mut self.running_loras,
            &mut self.waiting_loras,
            &mut self.models,
            &mut self.adapters,
            &mut self.resident_loras,
        ];
        for list in lists {
            let before = list.len();
            list.retain(|name| name.len() <= crate::metrics_text::MAX_ADAPTER_NAME_BYTES);
            list.truncate(max);
            cut |= list.len() != before;
        }
        self.names_cut |= cut;
    }

    /// Every list naming the pod's adapters: registered, running, waiting, resident.
    pub fn adapter_lists(&self) -> [&Vec<String>; 4] {
        [&self.adapters, &self.running_loras, &self.waiting_loras, &self.resident_loras]
    }

    /// The pod names no model at all (not scraped yet, or an engine without model labels), so
    /// it may serve any: requests for a model no pod names go to such pods.
    pub fn names_no_model(&self) -> bool {
        self.models.is_empty() && self.adapter_lists().iter().all(|list| list.is_empty())
    }

    /// The pod names no model and may serve any: requests for a model no pod names go to
    /// it, and the pool's model list cannot be told. `table_names_models`: some pod of its
    /// table names a model. Then a pod that never answered a scrape and is down is not counted:
    /// it serves nothing now and its first answer will name its models (one pod down since the
    /// gateway started would otherwise turn every unknown name from a 404 into a wait on it,
    /// and the model list off). While no pod names any (a pool starting up), it still is.
    pub fn may_serve_any_model(&self, table_names_models: bool) -> bool {
        let never_answered = !self.healthy && self.last_success_ms == 0;
        self.names_no_model() && !(table_names_models && never_answered)
    }

    /// A pod nobody has scraped yet.
    pub fn unknown(address: &PodAddress) -> Self {
        Self {
            address: address.clone(),
            healthy: false,
            waiting: 0.0,
            running: 0.0,
            kv_usage: None,
            block_size: None,
            num_gpu_blocks: None,
            last_success_ms: 0,
            consecutive_failures: 0,
            epoch: 0,
            max_loras: 0,
            running_loras: Vec::new(),
            waiting_loras: Vec::new(),
            role: crate::role::PodRole::Both,
            models: Vec::new(),
            adapters: Vec::new(),
            resident_loras: Vec::new(),
            names_cut: false,
        }
    }

    /// Takes a scrape's names: its adapter requests (`lora`), the models it named (`scraped`),
    /// and those `/v1/models` listed (kept from the last catalog poll, which runs less often
    /// than the scrape); at most `max_names` in each list (`max_names_per_pod`).
    pub fn set_names(
        &mut self,
        lora: Option<LoraState>,
        scraped: crate::models::residency::ScrapedModels,
        catalog: Option<&crate::models::catalog::Catalog>,
        max_names: usize,
    ) {
        let lora = lora.unwrap_or_default();
        self.max_loras = lora.max_loras;
        self.running_loras = lora.running;
        self.waiting_loras = lora.waiting;
        self.names_cut = lora.cut || scraped.cut;
        self.models = scraped.base;
        self.adapters = scraped.adapters;
        self.resident_loras = scraped.resident;
        if let Some(slots) = scraped.max_gpu_loras {
            self.max_loras = slots;
        }
        if let Some(catalog) = catalog {
            self.add_catalog(catalog, max_names);
        }
    }

    /// Adds what `/v1/models` listed to the names the pod's scrapes gave, at most `max_names`
    /// in each list.
    pub fn add_catalog(&mut self, catalog: &crate::models::catalog::Catalog, max_names: usize) {
        use crate::models::name_list::NameList;
        let mut cut = catalog.cut;
        for (list, listed) in [(&mut self.models, &catalog.base), (&mut self.adapters, &catalog.adapters)] {
            let mut merged = NameList::with_names(std::mem::take(list), max_names);
            for name in listed {
                cut |= !merged.push(name);
            }
            *list = merged.into_names();
        }
        self.names_cut |= cut;
    }
}

/// The table as it crosses shared data: each pod checked on its own, so one bad entry costs
/// that entry, not the table. Each entry is kept as its raw text and parsed on its own: an
/// untagged enum (valid pod, or anything) would buffer every entry into serde's generic tree
/// first, nine allocations and ~4.6 KB per pod, on every worker at every publish.
#[derive(Deserialize)]
struct WireTable<'a> {
    version: u64,
    published_at_ms: u64,
    poll_interval_ms: u64,
    #[serde(borrow)]
    pods: Vec<&'a serde_json::value::RawValue>,
}

/// The whole pool, as published.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PodTable {
    pub version: u64,
    pub published_at_ms: u64,
    pub poll_interval_ms: u64,
    pub pods: Vec<PodState>,
}

impl PodTable {
    /// What tells one published table from another: its version, publish time and length. A
    /// worker replaces its table only when the version changes, so state kept per table
    /// position (in-flight counts, prefix index ids) is rebuilt when this changes.
    pub fn identity(&self) -> (u64, u64, usize) {
        (self.version, self.published_at_ms, self.pods.len())
    }

    pub fn encode(&self) -> Vec<u8> {
        // Serialising plain structs of numbers and strings cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Decodes a published table, dropping entries that are not literal pod addresses.
    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        let wire: WireTable = serde_json::from_slice(bytes).map_err(|e| format!("pod table does not decode: {e}"))?;
        // Canonical addresses (made so by `PodAddress`'s deserializer) once each: in-flight
        // counts and the prefix index are keyed by this text, so " 10.0.0.4:8000" and
        // "10.0.0.4:8000" must not be two pods. An entry that is not a valid pod is dropped.
        // Repeats are found by the address's hash, checked against the kept pods on a hash
        // seen before: no copy of each address for the check.
        let mut pods: Vec<PodState> = Vec::with_capacity(wire.pods.len().min(MAX_PODS));
        let mut seen = hashbrown::HashSet::with_capacity(pods.capacity());
        for raw in wire.pods {
            if pods.len() == MAX_PODS {
                break;
            }
            let Ok(pod) = serde_json::from_str::<PodState>(raw.get()) else { continue };
            let hash = xxhash_rust::xxh3::xxh3_64(pod.address.as_str().as_bytes());
            if !seen.insert(hash) && pods.iter().any(|kept| kept.address == pod.address) {
                continue;
            }
            pods.push(pod);
        }
        let mut table = PodTable {
            version: wire.version,
            published_at_ms: wire.published_at_ms,
            poll_interval_ms: wire.poll_interval_ms,
            pods,
        };
        // Bounded again on the way in: the table crosses a trust boundary (shared data).
        table.pods.iter_mut().for_each(PodState::bound_name_lists);
        Ok(table)
    }
}

impl PodTable {
    /// The `block_size` more than half of the healthy pods that report one report; `None` if
    /// none reports or no size has such a majority (then the filter's configured block size is
    /// used). Every prompt is hashed in this one size, for every pod: a pod's claim is one
    /// vote, so a lying or misconfigured pod among agreeing ones changes no one's hashing
    /// (when it undid the agreement, every pod fell back to the configured size, and each time
    /// it came and went every remembered prefix hashed anew, matching no pod). Where all
    /// reporting pods agree, as in a true pool, that is their size, as before. A pod of
    /// another size is still held to its prefixes as hashed; only its predicted cached
    /// tokens are rounded in the pool's blocks.
    pub fn common_block_size(&self) -> Option<u32> {
        let sizes = || self.pods.iter().filter(|p| p.healthy).filter_map(|p| p.block_size);
        // Boyer-Moore's vote: the one size that can hold a majority, then a count to see it
        // does (two passes over the pods, no allocation; a worker counts it once per table).
        let (candidate, _) = sizes().fold((None, 0u32), |(candidate, lead), size| match candidate {
            _ if lead == 0 => (Some(size), 1),
            Some(current) if current == size => (candidate, lead + 1),
            _ => (candidate, lead - 1),
        });
        let candidate = candidate?;
        let (votes, reports) = sizes()
            .fold((0usize, 0usize), |(votes, reports), size| (votes + usize::from(size == candidate), reports + 1));
        (votes * 2 > reports).then_some(candidate)
    }

    /// The table's pod at `address` (a scan: for the rare paths, not per candidate).
    pub fn pod(&self, address: &str) -> Option<&PodState> {
        self.pods.iter().find(|p| p.address == *address)
    }

    /// The epoch of the pod at `address`, if the table has it.
    pub fn epoch_of(&self, address: &str) -> Option<u32> {
        self.pod(address).map(|p| p.epoch)
    }

    /// A pod's KV capacity in blocks, if it reported one.
    pub fn capacity_blocks(&self, address: &str) -> Option<usize> {
        self.pod(address)?.num_gpu_blocks.and_then(|blocks| usize::try_from(blocks).ok())
    }
}

/// Encodes a version number for [`crate::keys::POD_TABLE_VERSION`].
pub fn encode_version(version: u64) -> [u8; 8] {
    version.to_le_bytes()
}

/// Decodes [`encode_version`]; anything else reads as "no table".
pub fn decode_version(bytes: &[u8]) -> Option<u64> {
    bytes.try_into().ok().map(u64::from_le_bytes)
}

#[cfg(test)]
mod tests;
