//! The filter's prefill/decode disaggregation settings (`pd` section; absent = off).

use serde::Deserialize;

use super::ScorerWeights;

/// How requests are split between prefill and decode pods.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PdConfig {
    /// Disaggregate when the best decode pod lacks at least this many of the prompt's tokens
    /// (estimated from the prompt's size and the prefix index); below it, a prefill hop and a
    /// KV transfer cost more than the decode pod prefilling itself.
    pub threshold_tokens: u64,
    /// The decode pod prefills itself when even the least busy prefill pod has more than this
    /// many uncached prompt tokens in flight (its queue would cost more than the hop saves);
    /// 0 = always split.
    pub max_prefill_tokens_ahead: u64,
    /// Scorer weights of the prefill pick: prefix affinity and queue first (the prompt's KV is
    /// what the prefill pod reuses; its queue is what the request waits behind).
    pub prefill_weights: ScorerWeights,
    /// Scorer weights of the decode pick (the destination): running load and KV space first.
    pub decode_weights: ScorerWeights,
    /// The header naming the prefill pod, read by the decode pod's sidecar (llm-d's name).
    pub prefiller_header: String,
    /// The estimate of a prefill's end, after which its pod no longer counts the request
    /// (its decode pod's answer headers end the count sooner, if they come first): a fixed
    /// part (the sidecar's call, the API pass, a step boundary) and, with learning off, a
    /// cost per uncached token the pod computes before the prompt's KV is ready (with
    /// learning on, the learned TTFT model's prediction, never below `prefill_overhead_ms`).
    /// A non-streamed answer's headers come after its whole decode: without an estimate its
    /// prefill pod looked busy for seconds after computing the prompt.
    pub prefill_overhead_ms: f64,
    pub prefill_ms_per_token: f64,
}

impl Default for PdConfig {
    fn default() -> Self {
        Self {
            threshold_tokens: 1024,
            max_prefill_tokens_ahead: 0,
            prefill_weights: ScorerWeights { queue: 2.0, kv_cache: 0.0, inflight: 2.0, prefix: 3.0 },
            decode_weights: ScorerWeights { queue: 1.0, kv_cache: 2.0, inflight: 2.0, prefix: 1.0 },
            prefiller_header: "x-prefiller-host-port".into(),
            // 20,000 tokens/s: an 8B model's prefill on one recent GPU, 2.5 times the
            // simulator's small preset (0.02 ms/token, 30 ms per call). Too long an estimate
            // only ends the count later, as the headers would; too short hides work the pod
            // still has.
            prefill_overhead_ms: 100.0,
            prefill_ms_per_token: 0.05,
        }
    }
}

impl PdConfig {
    pub fn validate(&self) -> Result<(), String> {
        super::check_range("pd.threshold_tokens", self.threshold_tokens, 0, 1 << 24)?;
        super::check_range("pd.max_prefill_tokens_ahead", self.max_prefill_tokens_ahead, 0, 1 << 24)?;
        for (pick, weights) in [("prefill_weights", &self.prefill_weights), ("decode_weights", &self.decode_weights)] {
            weights.validate().map_err(|e| format!("pd.{pick}.{e}"))?;
        }
        let finite_within = |name: &str, value: f64, max: f64| {
            if value.is_finite() && (0.0..=max).contains(&value) {
                Ok(())
            } else {
                Err(format!("pd.{name} = {value}, must be within 0..={max}"))
            }
        };
        finite_within("prefill_overhead_ms", self.prefill_overhead_ms, 600_000.0)?;
        finite_within("prefill_ms_per_token", self.prefill_ms_per_token, 1_000.0)?;
        super::check_header("pd.prefiller_header", &self.prefiller_header)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_json;

    #[test]
    fn defaults_validate_and_bad_values_name_their_field() {
        assert_eq!(PdConfig::default().validate(), Ok(()));
        let bad: PdConfig = parse_json(br#"{"prefill_weights": {"queue": -1}}"#).unwrap();
        assert!(bad.validate().unwrap_err().contains("pd.prefill_weights.queue"));
        let bad: PdConfig = parse_json(br#"{"prefiller_header": "X Bad"}"#).unwrap();
        assert!(bad.validate().unwrap_err().contains("prefiller_header"));
        assert!(parse_json::<PdConfig>(br#"{"treshold_tokens": 5}"#).is_err(), "typos are refused");
        let bad: PdConfig = parse_json(br#"{"prefill_ms_per_token": -0.1}"#).unwrap();
        assert!(bad.validate().unwrap_err().contains("pd.prefill_ms_per_token"));
    }
}
