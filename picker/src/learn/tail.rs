//! How much of a prompt past the prefix index's hashed part a pod holds cached, learned from
//! the pods' `usage` reports.
//!
//! The index hashes at most `prefix.max_blocks` blocks (16 KB of text by default), so of a
//! longer prompt matched to the end of that part it knows nothing more. Taking all of the rest
//! as cached (sessions 6–24) priced the own question after a long shared system prompt at
//! nothing: in workload (g), 6,000 shared tokens and a 1,200-token question, every warm request
//! counted 0 uncached tokens, so neither the in-flight token load nor the TTFT model saw the
//! prefills queued on a pod, and a pod with 19 requests in flight was predicted ~300 ms where
//! its requests took ~1.1 s. A conversation's history past the index, by contrast, is mostly
//! cached. Which it is depends on the workload, and the pods say: an answer whose indexed part
//! was matched and confirmed reports how much of the rest it found too.

/// Weight of the prior (all of the rest cached, the behaviour before this was learned), in
/// answers: a handful of reports outweigh it.
const PRIOR_WEIGHT: f64 = 1.0;
const PRIOR_SHARE: f64 = 1.0;

/// Weight older reports keep at each new one: a memory of ~50 answers, like the TTFT model's.
const FORGET: f64 = 0.98;

/// The share of an unindexed prompt tail found cached, a discounted mean over answers.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TailShare {
    weight: f64,
    sum: f64,
}

/// One answer as the tail share needs it, all in the pod's tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TailReport {
    /// The prompt tokens the index covered; its whole hashed part was matched on the pod.
    pub indexed_tokens: u64,
    /// The pod's `usage.prompt_tokens` and `prompt_tokens_details.cached_tokens`.
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
    /// The engine's block size: caching is by whole blocks.
    pub block_tokens: u64,
}

impl TailShare {
    /// The share to predict with: the prior until answers show otherwise.
    pub fn value(&self) -> f64 {
        (self.sum + PRIOR_WEIGHT * PRIOR_SHARE) / (self.weight + PRIOR_WEIGHT)
    }

    /// Learns from one answer whose indexed part was matched in full. Ignored when the tail is
    /// under a block (nothing to learn) or the pod did not confirm the indexed part (it
    /// evicted: that is the index's error, corrected elsewhere, and says nothing of the tail).
    pub fn observe(&mut self, report: TailReport) {
        let TailReport { indexed_tokens, prompt_tokens, cached_tokens, block_tokens } = report;
        let block = block_tokens.max(1);
        let tail = prompt_tokens.saturating_sub(indexed_tokens);
        if tail < block || cached_tokens.saturating_add(block) < indexed_tokens {
            return;
        }
        let found = cached_tokens.saturating_sub(indexed_tokens).min(tail);
        self.weight = self.weight * FORGET + 1.0;
        self.sum = self.sum * FORGET + found as f64 / tail as f64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(indexed_tokens: u64, prompt_tokens: u64, cached_tokens: u64) -> TailReport {
        TailReport { indexed_tokens, prompt_tokens, cached_tokens, block_tokens: 16 }
    }

    #[test]
    fn a_shared_system_prompt_with_own_questions_is_learned_as_partly_cached() {
        let mut share = TailShare::default();
        assert_eq!(share.value(), 1.0, "before any answer: all of the rest, as before");
        // Workload (g): 4,000 tokens indexed of 6,000 shared, then a 1,200-token question.
        for _ in 0..30 {
            share.observe(report(4_000, 7_200, 6_000));
        }
        let learned = share.value();
        let predicted_uncached = (1.0 - learned) * 3_200.0;
        assert!((1_100.0..1_300.0).contains(&predicted_uncached), "{learned}: {predicted_uncached}");
    }

    #[test]
    fn a_conversation_cached_past_the_index_stays_cached() {
        let mut share = TailShare::default();
        for _ in 0..30 {
            share.observe(report(4_000, 9_000, 8_992));
        }
        assert!(share.value() > 0.99, "{}", share.value());
    }

    #[test]
    fn evictions_and_short_tails_teach_nothing() {
        let mut share = TailShare::default();
        share.observe(report(4_000, 7_200, 0));
        share.observe(report(4_000, 4_010, 4_000));
        share.observe(report(4_000, 3_000, 3_000));
        assert_eq!(share, TailShare::default());
        share.observe(report(4_000, 7_200, 3_990));
        assert!(share.value() < 1.0, "a block short of the indexed part is rounding, not eviction");
    }
}
