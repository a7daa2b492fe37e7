//! What learning adds to a routing decision: per candidate, the prompt tokens it would have
//! to compute (its predicted cache hit taken off) and the predicted time to first token
//! behind the uncached tokens already in flight to it.

use crate::learn::{Load, TtftModels};
use crate::prefix::ReplySpan;

/// The learned state and the request's size, for one decision (learning on).
pub struct LearningQuery<'a> {
    pub models: &'a TtftModels,
    /// The prompt's tokens (counted, or estimated and corrected).
    pub prompt_tokens: u32,
    /// Prompt tokens per prefix block, to turn matched blocks into cached tokens: the block
    /// size for token ids; for text, the block size × the learned text ratio (text blocks are
    /// cut at the configured bytes per token, which the pod's tokenizer may not match).
    pub tokens_per_block: f64,
    /// Blocks of the prompt that were hashed (at most `prefix.max_blocks`): the index knows
    /// nothing past them.
    pub hashed_blocks: usize,
    /// Of a prompt matched to the end of its hashed part, the share of the rest a pod holds
    /// too, as the pods' answers showed ([`crate::learn::TailShare`]).
    pub tail_cached_share: f64,
    /// Uncached prompt tokens in flight to a pod and not yet answered, every worker's.
    pub tokens_in_flight: &'a dyn Fn(&str) -> u32,
    /// The request's TTFT objective, if it has one.
    pub slo_ttft_ms: Option<f64>,
    /// Where the chat's assistant replies lie among the hashed blocks (none for completions).
    pub replies: &'a [ReplySpan],
    /// The TTFT scorer's scale (0 = in proportion) and the lead it ignores; see
    /// [`crate::scheduler::Candidate`].
    pub ttft_scale_ms: f64,
    pub ttft_margin_ms: f64,
    /// The pool's recent mean TTFT (0 before it has one).
    pub typical_ttft_ms: f64,
}

/// One candidate's share of the work, as predicted.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Predicted {
    pub cached_tokens: u32,
    /// The prompt tokens the index covers (its hashed blocks): predictions are judged on these.
    pub indexed_tokens: u32,
    /// Index blocks the pod was matched on, and blocks hashed: what the capacity floor counts.
    pub matched_blocks: u32,
    pub hashed_blocks: u32,
    pub uncached_tokens: u32,
    /// What its first token waits on: uncached tokens in flight plus its own, requests in flight.
    pub load: Load,
    pub ttft_ms: f64,
    /// Of `ttft_ms`, the pod's time to prefill this request's own uncached tokens.
    pub prefill_ms: f64,
    /// The pod's model has learned from enough of its answers ([`TtftModels::fitted`]).
    pub fitted: bool,
}

impl LearningQuery<'_> {
    /// The prediction for `pod`, which holds `matched_blocks` of the prompt's blocks and has
    /// `requests` in flight.
    pub fn predict(&self, pod: &str, matched_blocks: usize, requests: u32) -> Predicted {
        let to_tokens = |blocks: f64| (blocks * self.tokens_per_block).round().clamp(0.0, f64::from(u32::MAX)) as u32;
        let indexed_tokens = to_tokens(self.hashed_blocks as f64).min(self.prompt_tokens);
        // A prompt longer than its hashed part, matched to the end of it, matches on for the
        // share of the rest the pods' answers showed: most of a conversation's history, little
        // of a question after a long shared system prompt.
        let held_blocks = self.through_reply(matched_blocks);
        let cached_tokens = if held_blocks >= self.hashed_blocks && self.hashed_blocks > 0 {
            let rest = f64::from(self.prompt_tokens - indexed_tokens) * self.tail_cached_share.clamp(0.0, 1.0);
            indexed_tokens.saturating_add(rest.round() as u32).min(self.prompt_tokens)
        } else {
            to_tokens(held_blocks as f64).min(self.prompt_tokens)
        };
        let uncached_tokens = self.prompt_tokens - cached_tokens;
        let tokens = f64::from((self.tokens_in_flight)(pod)) + f64::from(uncached_tokens);
        let load = Load { tokens, requests: self.models.ahead_of_a_slot(pod, f64::from(requests)) };
        let hashed_blocks = u32::try_from(self.hashed_blocks).unwrap_or(u32::MAX);
        let matched_blocks = u32::try_from(matched_blocks.min(self.hashed_blocks)).unwrap_or(u32::MAX);
        let (fit, fitted) = self.models.fit_and_fitted(pod);
        Predicted {
            cached_tokens,
            indexed_tokens,
            matched_blocks,
            hashed_blocks,
            uncached_tokens,
            load,
            ttft_ms: fit.predict(load),
            prefill_ms: fit.ms_per_token * f64::from(uncached_tokens),
            fitted,
        }
    }

    /// The blocks a pod matched on `matched_blocks` probably holds: through the reply that
    /// starts where its match ends, when one does. The index learns a conversation from its
    /// prompts, so it never saw the reply the pod generated for the previous turn, which the
    /// engine caches with the prompt; without this, every follow-up turn was predicted about
    /// one reply short of what the pod reports. The index stays as it is; the prediction
    /// (cached and uncached tokens, so the predicted TTFT) counts the reply.
    fn through_reply(&self, matched_blocks: usize) -> usize {
        let starts_here = |span: &&ReplySpan| usize::try_from(span.start_block).is_ok_and(|b| b == matched_blocks);
        match self.replies.iter().find(starts_here) {
            Some(span) if matched_blocks > 0 => usize::try_from(span.end_block).unwrap_or(matched_blocks),
            _ => matched_blocks,
        }
    }

    /// Whether `ttft_ms` meets the request's objective (always, without one).
    pub fn meets_slo(&self, ttft_ms: f64) -> bool {
        self.slo_ttft_ms.is_none_or(|slo| ttft_ms <= slo)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::learn::Prior;

    #[test]
    fn cached_blocks_come_off_the_work_and_tokens_in_flight_are_waited_on() {
        let mut models = TtftModels::new(Prior { overhead_ms: 10.0, ms_per_token: 0.01 });
        // The busy pod was seen running 2 requests with more waiting: a full batch of 2.
        models.saw_batches([("busy", 2.0, 1.0, 0)].into_iter());
        let in_flight = |pod: &str| if pod == "busy" { 10_000 } else { 0 };
        let query = LearningQuery {
            models: &models,
            prompt_tokens: 2_000,
            tokens_per_block: 16.0,
            hashed_blocks: 100,
            tail_cached_share: 1.0,
            tokens_in_flight: &in_flight,
            slo_ttft_ms: Some(50.0),
            replies: &[],
            ttft_scale_ms: 0.0,
            typical_ttft_ms: 0.0,
            ttft_margin_ms: 0.0,
        };
        let warm = query.predict("idle", 90, 0);
        assert_eq!((warm.cached_tokens, warm.uncached_tokens, warm.indexed_tokens), (1_440, 560, 1_600));
        assert!((warm.ttft_ms - 15.6).abs() < 1e-9, "{}", warm.ttft_ms);
        let whole = query.predict("idle", 100, 0);
        assert_eq!(whole.uncached_tokens, 0, "matched to the end of the hashed part: the rest too");
        let question = LearningQuery { tail_cached_share: 0.25, ..query };
        let asked = question.predict("idle", 100, 0);
        assert_eq!((asked.cached_tokens, asked.uncached_tokens), (1_700, 300), "a quarter of the 400 past the index");
        let busy = query.predict("busy", 0, 3);
        // Of its 3 in flight, 2 must finish before this one gets a slot.
        assert_eq!((busy.uncached_tokens, busy.load), (2_000, Load { tokens: 12_000.0, requests: 2.0 }));
        assert_eq!(query.predict("idle", 0, 1).load.requests, 0.0, "the pool's batch of 2 has room for a second");
        assert!(query.meets_slo(warm.ttft_ms) && !query.meets_slo(busy.ttft_ms));
        assert_eq!(query.predict("idle", 1_000, 0).uncached_tokens, 0, "never more cached than the prompt");
    }

    #[test]
    fn a_pod_holding_a_conversation_up_to_a_reply_is_predicted_to_hold_the_reply() {
        let models = TtftModels::new(Prior { overhead_ms: 10.0, ms_per_token: 0.01 });
        let none = |_: &str| 0;
        let replies = [ReplySpan { start_block: 40, end_block: 44 }, ReplySpan { start_block: 60, end_block: 65 }];
        let query = LearningQuery {
            models: &models,
            prompt_tokens: 1_600,
            tokens_per_block: 16.0,
            hashed_blocks: 100,
            tail_cached_share: 1.0,
            tokens_in_flight: &none,
            slo_ttft_ms: None,
            replies: &replies,
            ttft_scale_ms: 0.0,
            typical_ttft_ms: 0.0,
            ttft_margin_ms: 0.0,
        };
        let served_last_turn = query.predict("p", 40, 0);
        assert_eq!(served_last_turn.cached_tokens, 44 * 16, "the reply it generated is cached too");
        assert_eq!(served_last_turn.matched_blocks, 40, "the index's own match is kept for the floor");
        assert_eq!(query.predict("p", 60, 0).cached_tokens, 65 * 16, "the later reply");
        assert_eq!(query.predict("p", 41, 0).cached_tokens, 41 * 16, "a match ending elsewhere is not extended");
        assert_eq!(query.predict("p", 30, 0).cached_tokens, 30 * 16);
        let cold = LearningQuery { replies: &[ReplySpan { start_block: 0, end_block: 3 }], ..query };
        assert_eq!(cold.predict("p", 0, 0).cached_tokens, 0, "no match: the pod never saw the conversation");
    }
}
