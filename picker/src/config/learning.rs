//! The filter's settings for learning from responses (token load, TTFT model, index
//! correction). Off by default: with `enabled: false` the picker decides exactly as before,
//! and the response hooks only pass the answer on.

use serde::Deserialize;

use crate::learn::Prior;

/// How the TTFT scorer turns predictions into scores (`learning.ttft_score`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TtftScore {
    /// The best prediction ÷ the pod's: a pod predicted 3 × slower keeps a third of the weight.
    #[default]
    Proportional,
    /// By the time lost against the best prediction, one pool's recent mean TTFT of it scoring
    /// 0 (in proportion until the pool has a mean): a long prompt's lead on a fast pod weighs
    /// more than a short one's, so slow pods get the short prompts (workload f: TTFT p90
    /// 472–543 ms against 546–571 in proportion, 3 % fewer output tokens/s). Where every pod's
    /// running batch is full (workload c) a few ms of predicted lead then outvote the request
    /// counts that show a full batch, and a request waits seconds for a slot.
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
    /// Affinity (session or prefix) is released when the sticky pod's predicted TTFT exceeds
    /// the best other pod's by more than this: moving must buy at least this much time.
    pub release_penalty_ms: f64,
    /// Request header with the client's TTFT objective in ms; pods predicted to meet it are
    /// preferred. Empty = no header read.
    pub slo_header: String,
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
}

impl Default for LearningConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            ttft_weight: 4.0,
            ttft_score: TtftScore::Proportional,
            release_penalty_ms: 1000.0,
            slo_header: "x-llm-d-slo-ttft-ms".into(),
            prior_overhead_ms: 30.0,
            prior_ms_per_token: 0.02,
            correct_index: true,
            balance_homes: true,
        }
    }
}

impl LearningConfig {
    pub fn prior(&self) -> Prior {
        Prior { overhead_ms: self.prior_overhead_ms, ms_per_token: self.prior_ms_per_token }
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
        finite_within("release_penalty_ms", self.release_penalty_ms, 600_000.0)?;
        finite_within("prior_overhead_ms", self.prior_overhead_ms, 600_000.0)?;
        finite_within("prior_ms_per_token", self.prior_ms_per_token, 1_000.0)?;
        if !self.slo_header.bytes().all(|b| b.is_ascii_lowercase() || b == b'-' || b.is_ascii_digit()) {
            return Err(format!("learning.slo_header '{}' must be a lower-case header name", self.slo_header));
        }
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
    }

    #[test]
    fn the_ttft_score_is_proportional_unless_lead_is_asked_for() {
        assert_eq!(LearningConfig::default().ttft_score, TtftScore::Proportional);
        let lead: LearningConfig = parse_json(br#"{"ttft_score": "lead"}"#).unwrap();
        assert_eq!(lead.ttft_score, TtftScore::Lead);
        assert!(parse_json::<LearningConfig>(br#"{"ttft_score": "fastest"}"#).is_err());
    }
}
