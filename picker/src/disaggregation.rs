//! Prefill/decode disaggregation: which pods may take which half of a request, and whether a
//! request is worth splitting.
//!
//! Under P/D every request's destination is a decode (or both-role) pod, chosen among those
//! alone; a request is also given a prefill pod, chosen among the prefill pods by its own
//! weights, when the decode pod probably lacks at least `threshold_tokens` of its prompt
//! (llm-d's P/D decider). The prefix index is keyed by pod, so each role's pods keep their own
//! entries: a prefill pod the prompts it computed, a decode pod the blocks transferred to it.

use crate::address::PodAddress;
use crate::config::PdConfig;
use crate::models::index::ModelIndex;
use crate::pod_table::PodTable;
use crate::role::PodRole;

/// A table split by role, rebuilt only when the table's version changes.
#[derive(Debug, Default)]
pub struct RoleTables {
    version: Option<u64>,
    /// Decode and both-role pods: the destinations.
    decode: PodTable,
    /// Prefill pods: where the prompt may be computed.
    prefill: PodTable,
    /// Each role table's own model index: an index names pods by table position, so the full
    /// table's would name other pods here (a model's request sent to another model's pod).
    decode_models: ModelIndex,
    prefill_models: ModelIndex,
    /// The prefill pods' addresses, sorted, with their positions in the prefill table: the
    /// prefill pick names every pod it compares by position (epoch, prefix index) without a
    /// walk of the table per pod.
    prefill_by_address: Vec<(PodAddress, usize)>,
    /// Some prefill pod names a model no decode pod does (one it may serve alone).
    prefill_names_own: bool,
}

/// Whether `table` splits into roles: at least one prefill pod and one pod that decodes
/// (else a pool routes exactly as without P/D).
pub fn splits(table: &PodTable) -> bool {
    table.pods.iter().any(|pod| pod.role == PodRole::Prefill) && table.pods.iter().any(|pod| pod.role.decodes())
}

/// The two roles' tables and model indexes, as [`RoleTables::split`] gives them.
#[derive(Debug, Clone, Copy)]
pub struct RoleSplit<'a> {
    pub decode: &'a PodTable,
    pub decode_models: &'a ModelIndex,
    pub prefill: &'a PodTable,
    pub prefill_models: &'a ModelIndex,
    prefill_by_address: &'a [(PodAddress, usize)],
    prefill_names_own: bool,
}

impl RoleSplit<'_> {
    /// Whether some prefill pod names a model no decode pod names: requests for it may be
    /// served on prefill pods alone (the router's `disaggregate::served_on_prefill_pods_only`).
    pub fn prefill_names_own_models(&self) -> bool {
        self.prefill_names_own
    }

    /// The position of the prefill pod at `address` in the prefill table, if it is one.
    pub fn prefill_position(&self, address: &PodAddress) -> Option<usize> {
        let found = self.prefill_by_address.binary_search_by(|(known, _)| known.cmp(address)).ok()?;
        self.prefill_by_address.get(found).map(|&(_, position)| position)
    }
}

impl RoleTables {
    /// The role views of `table`, their model indexes made by `index_of`; `None` when it lacks
    /// a prefill pod or a decode pod, so a pool without roles routes exactly as without P/D.
    pub fn split(&mut self, table: &PodTable, index_of: &dyn Fn(&PodTable) -> ModelIndex) -> Option<RoleSplit<'_>> {
        if self.version != Some(table.version) {
            let only = |keep: fn(PodRole) -> bool| PodTable {
                version: table.version,
                published_at_ms: table.published_at_ms,
                poll_interval_ms: table.poll_interval_ms,
                pods: table.pods.iter().filter(|pod| keep(pod.role)).cloned().collect(),
            };
            self.decode = only(PodRole::decodes);
            self.prefill = only(|role| role == PodRole::Prefill);
            self.decode_models = index_of(&self.decode);
            self.prefill_models = index_of(&self.prefill);
            self.prefill_by_address =
                self.prefill.pods.iter().enumerate().map(|(i, pod)| (pod.address.clone(), i)).collect();
            self.prefill_by_address.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            self.prefill_names_own = self.prefill_models.names_any_unknown_to(&self.decode_models);
            self.version = Some(table.version);
        }
        // Both roles present, as [`splits`] would say of the table.
        (!self.decode.pods.is_empty() && !self.prefill.pods.is_empty()).then_some(RoleSplit {
            decode: &self.decode,
            decode_models: &self.decode_models,
            prefill: &self.prefill,
            prefill_models: &self.prefill_models,
            prefill_by_address: &self.prefill_by_address,
            prefill_names_own: self.prefill_names_own,
        })
    }

    /// A request for `model` went to decode table pod `pod` (see `ModelIndex::note_routed`).
    pub fn note_routed(&mut self, model: &str, pod: usize) {
        if let Ok(pod) = u32::try_from(pod) {
            self.decode_models.note_routed(model, pod);
        }
    }

    /// A prompt for adapter `model`, which no prefill pod lists, went to prefill table pod `pod`
    /// to be loaded into a free slot (see `ModelIndex::note_loading`).
    pub fn note_adapter_loading(&mut self, model: &str, pod: usize) {
        if let Ok(pod) = u32::try_from(pod) {
            self.prefill_models.note_loading(model, pod);
        }
    }

    /// A prompt for `model` went to prefill table pod `pod`: its adapter loads there too, and
    /// until the next scrape says so the next prefill picks must see it resident and its slot
    /// taken, as the decode picks do ([`Self::note_routed`]).
    pub fn note_prefilled(&mut self, model: &str, pod: usize) {
        if let Ok(pod) = u32::try_from(pod) {
            self.prefill_models.note_routed(model, pod);
        }
    }
}

/// Tokens of the prompt the pod probably lacks: all but the blocks it matched of the hashed
/// prefix (`prefix_match` is the matched share of `hashed_blocks`).
pub fn uncached_tokens(prompt_tokens: u64, hashed_blocks: usize, prefix_match: f64, block_tokens: usize) -> u64 {
    let matched_blocks = (prefix_match.clamp(0.0, 1.0) * hashed_blocks as f64).round() as u64;
    prompt_tokens.saturating_sub(matched_blocks.saturating_mul(block_tokens as u64))
}

/// The share of the prompt's hashed blocks a decode pod must hold to lack fewer than
/// `threshold_tokens` of it, so that the decider lets it prefill itself ([`uncached_tokens`]
/// below the threshold); 0 for a prompt shorter than the threshold, above 1 when no pod can.
pub fn share_skipping_prefill(
    prompt_tokens: u64,
    hashed_blocks: usize,
    block_tokens: usize,
    threshold_tokens: u64,
) -> f64 {
    if prompt_tokens < threshold_tokens {
        return 0.0;
    }
    let needed_blocks = (prompt_tokens - threshold_tokens) / (block_tokens.max(1) as u64) + 1;
    if hashed_blocks == 0 {
        return f64::INFINITY;
    }
    needed_blocks as f64 / hashed_blocks as f64
}

/// One prefill pod the prefill pick may choose: its uncached prompt tokens already in flight
/// (every worker's, not yet answered) and the tokens of this prompt it lacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrefillWork {
    pub tokens_ahead: u64,
    pub uncached_tokens: u64,
}

impl PrefillWork {
    /// Tokens the pod computes before this prompt's first token: what its prefill time, and
    /// so the split request's TTFT, grows with.
    pub fn total(self) -> u64 {
        self.tokens_ahead.saturating_add(self.uncached_tokens)
    }
}

/// The prefill pod with the least work before this prompt's KV is ready (the first of equals,
/// so the scorers' order breaks ties); `None` for no pod. Request counts cannot tell a pod
/// prefilling two 8k-token prompts from one prefilling two short ones; tokens can, and the
/// prompt's own cached blocks count in the same unit (a pod holding its shared document
/// saves those tokens).
pub fn least_prefill_work(pods: &[PrefillWork]) -> Option<usize> {
    (0..pods.len()).min_by_key(|&i| pods.get(i).map_or(u64::MAX, |work| work.total()))
}

/// Whether the prompt should wait for `work` on a prefill pod, or the decode pod prefill it
/// itself: a prefill pod with more than `max_tokens_ahead` uncached tokens in flight would
/// start it later than the hop is worth (0 = always wait).
pub fn prefill_pod_backed_up(work: PrefillWork, max_tokens_ahead: u64) -> bool {
    max_tokens_ahead > 0 && work.tokens_ahead > max_tokens_ahead
}

/// How long after its pick a prefill pod is estimated to have the prompt's KV ready: `work`
/// is what it computes before then ([`PrefillWork::total`]: the uncached tokens in flight to
/// it and the prompt's own); `learned_ms` the learned TTFT model's prediction for that load
/// (learning on). Learning off, `prefill_overhead_ms` plus `prefill_ms_per_token` per token.
/// Never below `prefill_overhead_ms`, in whole ms rounded up. The prefill pod's count of the
/// request ends then, or at the decode pod's answer headers if they come first: a whole
/// (non-streamed) answer's come after its decode, long after the prefill ended.
pub fn prefill_duration_ms(work: PrefillWork, learned_ms: Option<f64>, config: &PdConfig) -> u64 {
    let configured = || config.prefill_overhead_ms + work.total() as f64 * config.prefill_ms_per_token;
    // `max` ignores a NaN prediction; the cast saturates an infinite one.
    learned_ms.unwrap_or_else(configured).max(config.prefill_overhead_ms).ceil() as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::address::PodAddress;
    use crate::pod_table::PodState;

    fn pod(address: &str, role: PodRole) -> PodState {
        PodState { role, ..PodState::unknown(&PodAddress::parse(address).unwrap()) }
    }

    #[test]
    fn a_table_splits_by_role_and_a_pool_without_prefill_pods_does_not() {
        let mut table = PodTable { version: 3, ..PodTable::default() };
        table.pods = vec![
            pod("10.0.0.1:80", PodRole::Prefill),
            pod("10.0.0.2:80", PodRole::Decode),
            pod("10.0.0.3:80", PodRole::Both),
        ];
        let mut split = RoleTables::default();
        let roles = split.split(&table, &index_of).unwrap();
        let names = |t: &PodTable| t.pods.iter().map(|p| p.address.as_str().to_owned()).collect::<Vec<_>>();
        assert_eq!(names(roles.decode), ["10.0.0.2:80", "10.0.0.3:80"]);
        assert_eq!(names(roles.prefill), ["10.0.0.1:80"]);
        let plain = PodTable { version: 4, pods: vec![pod("10.0.0.3:80", PodRole::Both)], ..PodTable::default() };
        assert!(split.split(&plain, &index_of).is_none(), "no prefill pod: no P/D");
    }

    fn index_of(table: &PodTable) -> ModelIndex {
        ModelIndex::build(table, &|_| true)
    }

    #[test]
    fn each_role_s_model_index_names_that_role_s_pods() {
        // Positions differ between the full table and each role's: the full table's index
        // would give model b's decode pod (full position 2) to a decode table of two pods.
        let serving = |address, role, model: &str| PodState { models: vec![model.to_owned()], ..pod(address, role) };
        let table = PodTable {
            version: 5,
            pods: vec![
                serving("10.0.0.1:80", PodRole::Decode, "a"),
                serving("10.0.0.2:80", PodRole::Prefill, "a"),
                serving("10.0.0.3:80", PodRole::Decode, "b"),
                serving("10.0.0.4:80", PodRole::Prefill, "b"),
            ],
            ..PodTable::default()
        };
        let mut tables = RoleTables::default();
        let roles = tables.split(&table, &index_of).unwrap();
        let at = |index: &ModelIndex, model| index.servers(model).unwrap().iter().map(|&(i, _)| i).collect::<Vec<_>>();
        assert_eq!((at(roles.decode_models, "a"), at(roles.decode_models, "b")), (vec![0], vec![1]));
        assert_eq!((at(roles.prefill_models, "a"), at(roles.prefill_models, "b")), (vec![0], vec![1]));
        assert_eq!(roles.decode.pods[1].address.as_str(), "10.0.0.3:80");
        assert!(!roles.prefill_names_own_models(), "every prefill model has decode pods");
        let mut alone = table.clone();
        (alone.version, alone.pods[3].models) = (6, vec!["p".to_owned()]);
        assert!(tables.split(&alone, &index_of).unwrap().prefill_names_own_models(), "p is the prefill pods' alone");
    }

    #[test]
    fn uncached_tokens_subtract_the_matched_blocks() {
        assert_eq!(uncached_tokens(6000, 256, 0.0, 16), 6000);
        assert_eq!(uncached_tokens(6000, 256, 1.0, 16), 6000 - 4096, "only the hashed prefix can match");
        assert_eq!(uncached_tokens(1000, 62, 1.0, 16), 8);
        assert_eq!(uncached_tokens(100, 6, 1.0, 16), 4);
    }

    #[test]
    fn the_share_skipping_prefill_is_where_the_decider_stops_splitting() {
        let decider_splits = |prompt, hashed, share: f64| uncached_tokens(prompt, hashed, share, 16) >= 1024;
        for (prompt, hashed) in [(2000, 125), (3000, 187), (1500, 93), (1024, 64)] {
            let share = share_skipping_prefill(prompt, hashed, 16, 1024);
            assert!(!decider_splits(prompt, hashed, share), "{prompt}: holding {share} skips the hop");
            let one_block_less = share - 1.0 / hashed as f64;
            assert!(decider_splits(prompt, hashed, one_block_less), "{prompt}: one block less does not");
        }
        assert!(share_skipping_prefill(6000, 256, 16, 1024) > 1.0, "only 4096 tokens are hashed: no pod can");
        assert_eq!(share_skipping_prefill(900, 56, 16, 1024), 0.0, "short prompts are never split");
        assert!(share_skipping_prefill(6000, 256, 16, 0) > 1.0, "threshold 0 splits every prompt");
    }

    #[test]
    fn the_prefill_pod_with_the_least_work_ahead_and_own_wins() {
        let work = |tokens_ahead, uncached_tokens| PrefillWork { tokens_ahead, uncached_tokens };
        // Fewer requests is not less work: two short prompts ahead beat one long one.
        assert_eq!(least_prefill_work(&[work(7000, 5000), work(1200, 5000)]), Some(1));
        // The pod holding the prompt's shared document saves its tokens.
        assert_eq!(least_prefill_work(&[work(1000, 6000), work(1000, 4000)]), Some(1));
        assert_eq!(least_prefill_work(&[work(3000, 4000), work(0, 6000)]), Some(1), "7000 against 6000");
        assert_eq!(least_prefill_work(&[work(0, 4000), work(0, 4000)]), Some(0), "the first of equals");
        assert_eq!(least_prefill_work(&[]), None);
    }

    #[test]
    fn a_prefill_pod_is_backed_up_past_the_tokens_ahead_limit() {
        let ahead = |tokens_ahead| PrefillWork { tokens_ahead, uncached_tokens: 4000 };
        assert!(!prefill_pod_backed_up(ahead(8192), 8192));
        assert!(prefill_pod_backed_up(ahead(8193), 8192));
        assert!(!prefill_pod_backed_up(ahead(1 << 30), 0), "0 turns the limit off");
    }

    #[test]
    fn a_prefill_lasts_its_tokens_at_the_configured_cost_or_the_learned_time_never_below_the_overhead() {
        let config = PdConfig { prefill_overhead_ms: 100.0, prefill_ms_per_token: 0.05, ..PdConfig::default() };
        let work = PrefillWork { tokens_ahead: 2000, uncached_tokens: 2001 };
        assert_eq!(prefill_duration_ms(work, None, &config), 301, "100 + 4,001 × 0.05, rounded up");
        assert_eq!(prefill_duration_ms(work, Some(180.0), &config), 180, "the learned model's time");
        assert_eq!(prefill_duration_ms(work, Some(40.0), &config), 100, "never below the overhead");
        assert_eq!(prefill_duration_ms(work, Some(f64::NAN), &config), 100);
        assert_eq!(prefill_duration_ms(work, Some(f64::INFINITY), &config), u64::MAX, "the answer's end bounds it");
    }
}
