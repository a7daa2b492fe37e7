//! The filter's prefix-cache affinity settings.

use serde::Deserialize;

use super::check_range;
use crate::prefix::hash::{HashParams, MAX_BLOCKS};
use crate::prefix::index::MAX_ENTRIES_LIMIT;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PrefixConfig {
    pub enabled: bool,
    /// Tokens per block when the pods do not report `block_size` (vLLM's default is 16).
    pub block_tokens: usize,
    /// Prompt bytes per token, to cut text into blocks the size of the engine's.
    pub bytes_per_token: usize,
    /// Blocks hashed per request at most (a 256-block bound covers 16 KB of text at 16 × 4).
    pub max_blocks: usize,
    /// Entries in each worker's index, all pods together (~56 bytes each).
    pub max_index_entries: usize,
    /// A pod's KV capacity in blocks when it does not report `num_gpu_blocks`.
    pub default_capacity_blocks: usize,
    /// Share of the prompt's blocks a pod must hold to be preferred over all others unless
    /// saturated ("sticky until saturated"); 0 turns the affinity filter off (scoring stays).
    pub affinity_threshold: f64,
    /// Of the pods over `affinity_threshold`, only those whose share is within this of the
    /// best pod's stay candidates, so the pod with the whole conversation wins over pods with
    /// only its system prompt.
    pub affinity_slack: f64,
    /// Requests with this header stick to the pod their session last went to, unless saturated.
    pub session_header: String,
    /// A Responses API request naming `previous_response_id` goes to the pod that answered that
    /// response, as a session would (vLLM keeps stored responses in that pod's memory): each
    /// Responses answer's id is read from its first bytes and shared like a session.
    pub follow_response_ids: bool,
    /// How often each worker sends its decisions to the singleton and reads the others'.
    pub sync_interval_ms: u64,
    /// Where a prompt no pod holds goes: `rendezvous` (the same pod from every replica and
    /// worker, load-bounded) or `least_recent` (spread by this worker's pick history).
    pub cold_placement: crate::scheduler::ColdPlacement,
    /// Rendezvous placement skips pods whose queue plus running requests exceed this factor
    /// of the pool's mean (plus one).
    pub placement_load_factor: f64,
    /// Rendezvous placement chooses among the pods whose score is within this of the best
    /// (scores are 0..1), scaled by the share of recent prompts that matched a known prefix;
    /// 0 = it only breaks ties.
    pub placement_slack: f64,
    /// The reuse share assumed before a worker has seen prompts (0..1). 0: new prefixes go by
    /// load until prompts are seen to come back; 1: by hash from the first request, so
    /// replicas without peering agree on them from the start, at the cost of load balance
    /// for a start of unrelated prompts.
    pub reuse_prior: f64,
}

impl Default for PrefixConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            block_tokens: 16,
            bytes_per_token: 4,
            max_blocks: 256,
            max_index_entries: 262_144,
            default_capacity_blocks: 16_384,
            affinity_threshold: 0.5,
            affinity_slack: 0.05,
            session_header: "x-session-id".into(),
            follow_response_ids: true,
            sync_interval_ms: 20,
            cold_placement: crate::scheduler::ColdPlacement::default(),
            placement_load_factor: 2.0,
            placement_slack: 1.0,
            reuse_prior: 0.0,
        }
    }
}

impl PrefixConfig {
    pub fn hash_params(&self, block_tokens: Option<u32>) -> HashParams {
        HashParams {
            block_tokens: block_tokens.map_or(self.block_tokens, |b| b as usize),
            bytes_per_token: self.bytes_per_token,
            max_blocks: self.max_blocks,
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        self.hash_params(None).validate().map_err(|e| format!("prefix: {e}"))?;
        check_range("prefix.max_blocks", self.max_blocks as u64, 1, MAX_BLOCKS as u64)?;
        check_range("prefix.max_index_entries", self.max_index_entries as u64, 1024, MAX_ENTRIES_LIMIT as u64)?;
        check_range(
            "prefix.default_capacity_blocks",
            self.default_capacity_blocks as u64,
            1,
            MAX_ENTRIES_LIMIT as u64,
        )?;
        check_range("prefix.sync_interval_ms", self.sync_interval_ms, 5, 10_000)?;
        if !self.placement_load_factor.is_finite() || !(1.0..=10.0).contains(&self.placement_load_factor) {
            return Err(format!(
                "prefix.placement_load_factor = {}, must be within 1..=10",
                self.placement_load_factor
            ));
        }
        if !self.placement_slack.is_finite() || !(0.0..=1.0).contains(&self.placement_slack) {
            return Err(format!("prefix.placement_slack = {}, must be within 0..=1", self.placement_slack));
        }
        if !self.reuse_prior.is_finite() || !(0.0..=1.0).contains(&self.reuse_prior) {
            return Err(format!("prefix.reuse_prior = {}, must be within 0..=1", self.reuse_prior));
        }
        if !(0.0..=1.0).contains(&self.affinity_slack) {
            return Err(format!("prefix.affinity_slack = {}, must be within 0..=1", self.affinity_slack));
        }
        if !(0.0..=1.0).contains(&self.affinity_threshold) {
            return Err(format!("prefix.affinity_threshold = {}, must be within 0..=1", self.affinity_threshold));
        }
        super::check_header("prefix.session_header", &self.session_header)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_bounds_are_checked() {
        assert!(PrefixConfig::default().validate().is_ok());
        let bad = PrefixConfig { max_blocks: MAX_BLOCKS + 1, ..PrefixConfig::default() };
        assert!(bad.validate().unwrap_err().contains("max_blocks"));
        let bad = PrefixConfig { affinity_threshold: 2.0, ..PrefixConfig::default() };
        assert!(bad.validate().is_err());
        assert_eq!(PrefixConfig::default().hash_params(Some(32)).block_tokens, 32);
    }
}
