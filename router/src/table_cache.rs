//! A worker's decoded copy of the pod table, refreshed only when its version changes, and
//! when the pool service was last seen alive.
//!
//! The version lives in its own 8-byte key, so a refresh that finds nothing new costs one
//! tiny shared-data read; the table itself is copied and decoded once per publish.

use std::rc::Rc;

use picker::comparison::PodSplit;
use picker::keys;
use picker::models::demand::AdapterDemand;
use picker::models::index::ModelIndex;
use picker::models::listing::ModelList;
use picker::pod_table::{decode_version, PodTable};
use picker::store::SharedStore;

#[derive(Default)]
pub struct TableCache {
    version: Option<u64>,
    table: Option<PodTable>,
    /// Which pods serve each model, built once per table (decisions look their model up).
    models: ModelIndex,
    /// The block size prompts are hashed in for this table ([`PodTable::common_block_size`]:
    /// the healthy pods' majority vote), counted once per table rather than per decision.
    block_size: Option<u32>,
    /// The models this worker routed lately (which adapters free slots are kept for).
    demand: AdapterDemand,
    /// A table arrived whose pod list the prefix index has not been trimmed to yet.
    pods_changed: bool,
    /// The pods that left the pool in the tables since [`TableCache::take_pod_change`].
    left: Vec<picker::address::PodAddress>,
    /// The pool service's last heartbeat (host ms); `None` if it never wrote one.
    service_seen_ms: Option<u64>,
    /// The pool's model list as last answered (`None` inside: the table cannot give one),
    /// kept until the table changes: a client repeating `GET /v1/models` costs one build per
    /// publish, not one per request.
    model_list: Option<Option<Rc<ModelList>>>,
    /// The comparison's split of the current table's pods into arms, built once per table.
    split: Option<PodSplit>,
}

/// What a refresh found.
#[derive(Debug, PartialEq, Eq)]
pub enum Refresh {
    Unchanged,
    Updated,
    /// A new version whose table could not be used; the last good table is kept.
    DecodeFailed(String),
}

impl TableCache {
    pub fn refresh(&mut self, store: &dyn SharedStore) -> Refresh {
        if let Ok((Some(bytes), _)) = store.get(keys::SERVICE_HEARTBEAT) {
            self.service_seen_ms = decode_version(&bytes).or(self.service_seen_ms);
        }
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
        // Whatever happens below, this version has been seen: a bad table is not re-read
        // every tick; a newer publish replaces it.
        self.version = version;
        match PodTable::decode(&bytes) {
            Ok(table) => {
                let same_pods = self.table.as_ref().is_some_and(|old| {
                    old.pods.len() == table.pods.len()
                        && old.pods.iter().zip(&table.pods).all(|(a, b)| a.address == b.address)
                });
                if let Some(old) = self.table.as_ref().filter(|_| !same_pods) {
                    self.pods_changed = true;
                    let mut listed: Vec<&str> = table.pods.iter().map(|p| p.address.as_str()).collect();
                    listed.sort_unstable();
                    let left = old.pods.iter().filter(|p| listed.binary_search(&p.address.as_str()).is_err());
                    self.left.extend(left.map(|p| p.address.clone()));
                }
                let now = table.published_at_ms;
                self.models = ModelIndex::build(&table, &|name| self.demand.wanted(name, now));
                self.block_size = table.common_block_size();
                self.table = Some(table);
                self.model_list = None;
                self.split = None;
                Refresh::Updated
            }
            Err(reason) => Refresh::DecodeFailed(reason),
        }
    }

    pub fn table(&self) -> Option<&PodTable> {
        self.table.as_ref()
    }

    /// The current table's block size ([`PodTable::common_block_size`]); `None` without a
    /// table, or when its pods give none by majority.
    pub fn block_size(&self) -> Option<u32> {
        self.block_size
    }

    /// The model list of the current table, built by `build` once per table.
    pub fn model_list(&mut self, build: impl FnOnce(&PodTable) -> Option<ModelList>) -> Option<Rc<ModelList>> {
        if self.model_list.is_none() {
            self.model_list = Some(self.table.as_ref().and_then(build).map(Rc::new));
        }
        self.model_list.clone().flatten()
    }

    /// Splits the current table's pods into the comparison's arms, once per table; `split`
    /// then gives it.
    pub fn ready_split(&mut self, baseline_share: f64) {
        if self.split.is_none() {
            self.split = self.table.as_ref().map(|table| PodSplit::of(table, baseline_share));
        }
    }

    /// The split [`TableCache::ready_split`] made of the current table.
    pub fn split(&self) -> Option<&PodSplit> {
        self.split.as_ref()
    }

    /// A request for `model` went to table pod `pod` at `now_ms` (see `ModelIndex::note_routed`).
    pub fn note_routed(&mut self, model: &str, pod: usize, now_ms: u64) {
        self.note_demand(model, now_ms);
        if let Ok(pod) = u32::try_from(pod) {
            self.models.note_routed(model, pod);
        }
    }

    /// A request for `model` was routed at `now_ms`, on a table of its own (P/D's roles).
    pub fn note_demand(&mut self, model: &str, now_ms: u64) {
        self.demand.note(model, now_ms);
    }

    /// A model index of `table` (a part of the current one), with the same adapter demand as
    /// the current table's.
    pub fn model_index_of(&self, table: &PodTable) -> ModelIndex {
        ModelIndex::build(table, &|name| self.demand.wanted(name, table.published_at_ms))
    }

    /// The current table's model index (empty without a table).
    pub fn models(&self) -> &ModelIndex {
        &self.models
    }

    /// When the pool service last ticked, if it ever wrote a heartbeat.
    pub fn service_seen_ms(&self) -> Option<u64> {
        self.service_seen_ms
    }

    /// The pool service has been silent for more than `max_age_ms` (`fail_open_max_age_ms`):
    /// the table no longer says who is in the pool.
    pub fn expired(&self, now_ms: u64, max_age_ms: u64) -> bool {
        self.service_seen_ms.is_some_and(|seen| now_ms.saturating_sub(seen) > max_age_ms)
    }

    /// The pods that left the pool (some may be back in the current table), once after each
    /// change of membership (not of load). The tick takes it every time it refreshes, so it
    /// holds the departures of a tick's tables.
    pub fn take_pod_change(&mut self) -> Option<Vec<picker::address::PodAddress>> {
        if !std::mem::take(&mut self.pods_changed) {
            return None;
        }
        Some(std::mem::take(&mut self.left))
    }
}
