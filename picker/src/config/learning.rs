//! The filter's settings for learning from responses (token load, TTFT model, index
//! correction). Off by default: with `enabled: false` the picker decides exactly as before,
//! and the response hooks only pass the answer on.

use serde::Deserialize;

use crate::learn::allowance::Allowance;
use crate::learn::Prior;

/// How the TTFT scorer turns predictions into scores (`learning.ttft_score`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TtftScore {
    /// The best prediction ÷ the pod's: a pod predicted 3 × slower keeps a third of the weight,
    /// whatever the prompt's length.
    Proportional,
    /// By the time lost against the best prediction beyond `lead_margin`, one pool's recent
    /// mean TTFT of it scoring 0 (in proportion until the pool has a mean): a long prompt's
    /// lead on a fast pod weighs more than a short one's. Workload f (session 10, learning
    /// alone, alternated): TTFT p90 514–546 ms against 589–639 in proportion, 1–4 % fewer
    /// output tokens/s; a–d and l unchanged (c's p99 jumps run to run with either score).
    #[default]
    Lead,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LearningConfig {
    /// Observe answers, count uncached prompt tokens in flight, predict each pod's TTFT.
    pub enabled: bool,
    /// Weight of the predicted-TTFT scorer, beside `weights.*` (lower predicted TTFT scores 1).
    pub ttft_weight: f64,
    /// How the TTFT scorer compares pods: `proportional` (best ÷ own) or `lead` (a pod
    /// predicted one typical TTFT of the pool later than the best scores 0); see [`TtftScore`].
    pub ttft_score: TtftScore,
    /// With `ttft_score: lead`: a lead up to this share of the pool's typical TTFT counts for
    /// nothing, so request counts decide between pods predicted about as fast (the model is
    /// linear in requests and cannot see a full running batch: a few ms of lead is noise there).
    pub lead_margin: f64,
    /// Affinity (session or prefix) is released when the sticky pod's predicted TTFT exceeds
    /// the best other pod's by more than this plus the prefill work the move adds: moving must
    /// buy at least this much time beyond the work it costs the other pod.
    pub release_penalty_ms: f64,
    /// Request header with the client's TTFT objective in ms; pods predicted to meet it are
    /// preferred. Empty = no header read.
    pub slo_header: String,
    /// Read when `slo_header` is absent, in order (llm-d's deprecated name).
    pub slo_header_aliases: Vec<String>,
    /// The model's assumption before any answer: fixed time to first byte.
    pub prior_overhead_ms: f64,
    /// The model's assumption before any answer: prefill cost per uncached prompt token.
    pub prior_ms_per_token: f64,
    /// Shrink the prefix index's capacity for a pod that reports fewer cached tokens than
    /// predicted (it evicts sooner than its KV size says).
    pub correct_index: bool,
    /// A prompt no pod holds goes to a pod with about the fewest prompt blocks in the prefix
    /// index (within half the prompt's blocks), rendezvous hashing among those: homes of long shared
    /// prefixes spread evenly, so no pod gets more of the traffic that sticks to them.
    pub balance_homes: bool,
    /// A pick by load (no affinity holds the request) leaves out the pods predicted to answer
    /// later than this many times the pool's typical TTFT while another pod is predicted
    /// within it: an objective for the tail, like a client's TTFT objective but without one.
    /// On a pool of mixed speeds the scores alone still sent a 2,000-token prompt to a 3 ×
    /// slower pod predicted at 1.5 × the typical TTFT because it had fewer requests in flight
    /// (workload f). 0: off.
    pub tail_guard: f64,
    /// Streams whose chunks are read for their final `usage`, at most, per pod and worker at
    /// once; further streams to the pod give their TTFT sample (first chunk) and are read no
    /// further. Each chunk read is a copy into the VM (~2.5–4 µs), so this bounds
    /// the cost per pod whatever its concurrency, at the price of usage reports from a
    /// share of a busy pod's streams (whole answers are always read). 0: no stream is read
    /// past its first chunk.
    pub usage_streams_per_pod: u16,
    /// The worker's budget of chunks read past first tokens for `usage` grows by this with
    /// every stream that asks for `usage`, and by `usage_chunks_per_second` a second; each
    /// chunk read takes one, and a stream is read on for its `usage` only while the budget is
    /// positive. A stream of N tokens read to its end costs N copies, so at high rates the
    /// streams average this many chunks read each (with 128-token answers one stream in
    /// about 64 is read), while at low rates the time share reads most of them. Both 0: no
    /// stream is read past its first chunk.
    pub usage_chunks_per_stream: f64,
    /// See `usage_chunks_per_stream`: the budget's growth a second, per worker (100: well
    /// under 1 ms of copying a second).
    pub usage_chunks_per_second: f64,
    /// Answers watched (the pod that answered checked, the body read for `usage` and the
    /// TTFT sample), per worker and second, beyond `watch_share`. Watching one costs two
    /// host calls on the response path (~6–14 µs of VM time in Envoy, `make bench-cost`),
    /// so at high rates a sample is watched: what the model needs grows with pods and time,
    /// not with the request rate. The others still release their prompt tokens at their
    /// first byte (token load is exact for every request). The budget starts full, so a
    /// burst of up to about this many answers is watched whole.
    pub watch_per_second: f64,
    /// The share of answers watched at rates past `watch_per_second` (1: every answer).
    pub watch_share: f64,
}

/// Upper bound of `usage_streams_per_pod`.
pub const MAX_USAGE_STREAMS_PER_POD: u16 = 1024;

impl Default for LearningConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            ttft_weight: 4.0,
            ttft_score: TtftScore::Lead,
            lead_margin: 0.1,
            release_penalty_ms: 1000.0,
            slo_header: "x-llm-d-slo-ttft-ms".into(),
            slo_header_aliases: vec!["x-slo-ttft-ms".into()],
            prior_overhead_ms: 30.0,
            prior_ms_per_token: 0.02,
            correct_index: true,
            balance_homes: true,
            tail_guard: 1.45,
            usage_streams_per_pod: 4,
            usage_chunks_per_stream: 2.0,
            usage_chunks_per_second: 100.0,
            watch_per_second: 100.0,
            watch_share: 0.1,
        }
    }
}

impl LearningConfig {
    pub fn prior(&self) -> Prior {
        Prior { overhead_ms: self.prior_overhead_ms, ms_per_token: self.prior_ms_per_token }
    }

    /// The worker's budget of answers watched in full: one unit per answer watched, earned
    /// per answer (`watch_share`) and per second (`watch_per_second`); it starts with a
    /// second's worth, so the first burst (the model's coldest moment) is watched whole.
    pub fn watch_budget(&self) -> Allowance {
        const SAVED_ANSWERS: f64 = 64.0;
        const SAVED_SECONDS: f64 = 1.0;
        Allowance::new(self.watch_share, self.watch_per_second, SAVED_ANSWERS, SAVED_SECONDS, 1.0)
    }

    pub fn validate(&self) -> Result<(), String> {
        let finite_within = |name: &str, value: f64, max: f64| {
            if value.is_finite() && (0.0..=max).contains(&value) {
                Ok(())
            } else {
                Err(format!("learning.{name} = {value}, must be within 0..={max}"))
            }
        };
        finite_within("ttft_weight", self.ttft_weight, 100.0)?;
        finite_within("tail_guard", self.tail_guard, 100.0)?;
        finite_within("lead_margin", self.lead_margin, 10.0)?;
        finite_within("release_penalty_ms", self.release_penalty_ms, 600_000.0)?;
        finite_within("prior_overhead_ms", self.prior_overhead_ms, 600_000.0)?;
        finite_within("prior_ms_per_token", self.prior_ms_per_token, 1_000.0)?;
        finite_within("usage_chunks_per_stream", self.usage_chunks_per_stream, 1_000_000.0)?;
        finite_within("usage_chunks_per_second", self.usage_chunks_per_second, 1_000_000_000.0)?;
        finite_within("watch_per_second", self.watch_per_second, 1_000_000_000.0)?;
        finite_within("watch_share", self.watch_share, 1.0)?;
        if self.usage_streams_per_pod > MAX_USAGE_STREAMS_PER_POD {
            return Err(format!(
                "learning.usage_streams_per_pod = {}, must be within 0..={MAX_USAGE_STREAMS_PER_POD}",
                self.usage_streams_per_pod
            ));
        }
        super::check_optional_header("learning.slo_header", &self.slo_header)?;
        super::check_header_list("learning.slo_header_aliases", &self.slo_header_aliases)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_json;

    #[test]
    fn old_configurations_keep_learning_off_and_bad_values_are_named() {
        let config: LearningConfig = parse_json(br#"{"enabled": true}"#).unwrap();
        assert!(config.enabled && config.validate().is_ok());
        assert!(!LearningConfig::default().enabled);
        let bad: LearningConfig = parse_json(br#"{"release_penalty_ms": -5}"#).unwrap();
        assert!(bad.validate().unwrap_err().contains("release_penalty_ms"));
        assert!(parse_json::<LearningConfig>(br#"{"penalty": 1}"#).is_err());
        let too_many: LearningConfig = parse_json(br#"{"usage_streams_per_pod": 5000}"#).unwrap();
        assert!(too_many.validate().unwrap_err().contains("usage_streams_per_pod"));
        let over_all: LearningConfig = parse_json(br#"{"watch_share": 1.5}"#).unwrap();
        assert!(over_all.validate().unwrap_err().contains("watch_share"));
    }

    #[test]
    fn the_ttft_score_is_by_lead_unless_proportional_is_asked_for() {
        assert_eq!(LearningConfig::default().ttft_score, TtftScore::Lead);
        let proportional: LearningConfig = parse_json(br#"{"ttft_score": "proportional"}"#).unwrap();
        assert_eq!(proportional.ttft_score, TtftScore::Proportional);
        assert!(parse_json::<LearningConfig>(br#"{"ttft_score": "fastest"}"#).is_err());
    }
}
