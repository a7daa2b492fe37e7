//! The latency model: how long one engine step takes, given what it computes.
//!
//! vLLM runs one engine step at a time over the whole batch (decodes and prefill chunks
//! together), so every running sequence waits for the step's slowest part: a long uncached
//! prefill in the batch raises everyone's inter-token latency. Formula (milliseconds, before
//! `time_scale` and jitter; also in the README):
//!
//! ```text
//! step = decode_base_ms
//!      + decode_per_seq_ms           × sequences decoding one token
//!      + prefill_per_token_ms        × prompt tokens computed (chunks longer than one token)
//!      + prefill_per_cached_token_ms × prompt tokens found in cache by requests admitted now
//!      + context_per_ktoken_ms       × (Σ context tokens the scheduled sequences attend over) / 1000
//! ```
//!
//! A token sampled by a step reaches the client `api_overhead_ms` after the step ends (HTTP,
//! detokenization, streaming), so TTFT = queue wait + steps until the prompt is computed +
//! `api_overhead_ms`, and the gap between tokens is one step. Times are parameters, never
//! measured here, so tests need no clock.

use std::time::Duration;

use crate::engine::StepWork;
use crate::hashing::SplitMix64;

/// Jitter above this fraction would let delays reach zero or double; it is clamped here.
pub const MAX_JITTER_FRACTION: f64 = 0.5;
/// A single simulated delay never exceeds this, whatever the flags say (keeps timers sane).
const MAX_SIMULATED_DELAY: Duration = Duration::from_secs(3600);

/// Every latency parameter; each one is a command-line flag.
#[derive(Debug, Clone, PartialEq)]
pub struct LatencyParams {
    /// Time from a step's end to its tokens reaching the client (HTTP, detokenization).
    pub api_overhead_ms: f64,
    /// Prefill cost per prompt token that is not in the prefix cache.
    pub prefill_per_token_ms: f64,
    /// Prefill cost per prompt token served from the prefix cache (small, not zero).
    pub prefill_per_cached_token_ms: f64,
    /// Step time with nothing in the batch (launch, sampling, scheduling).
    pub decode_base_ms: f64,
    /// Extra step time per sequence decoding one token (batching makes steps slower).
    pub decode_per_seq_ms: f64,
    /// Step time per 1,000 tokens of context attended over by the scheduled sequences.
    pub context_per_ktoken_ms: f64,
    /// Each delay is multiplied by `1 + jitter * u`, `u` uniform in `[-1, 1)`; clamped to 0.5.
    pub jitter: f64,
    /// Multiplies every simulated delay; 0 answers as fast as the machine allows.
    pub time_scale: f64,
}

impl LatencyParams {
    /// Duration of one engine step doing `work`, in milliseconds.
    pub fn step_ms(&self, work: &StepWork) -> f64 {
        self.decode_base_ms
            + self.decode_per_seq_ms * work.decode_seqs as f64
            + self.prefill_per_token_ms * work.prefill_tokens as f64
            + self.prefill_per_cached_token_ms * work.cached_tokens as f64
            + self.context_per_ktoken_ms * work.context_tokens as f64 / 1000.0
    }

    /// Converts simulated milliseconds to a wall-clock delay: scaled, bounded, never negative.
    pub fn to_delay(&self, simulated_ms: f64) -> Duration {
        let scaled_ms = simulated_ms * self.time_scale;
        if !scaled_ms.is_finite() || scaled_ms <= 0.0 {
            return Duration::ZERO;
        }
        Duration::from_secs_f64(scaled_ms / 1000.0).min(MAX_SIMULATED_DELAY)
    }

    /// A jitter source for one request, fixed by `seed`.
    pub fn jitter_source(&self, seed: u64) -> Jitter {
        Jitter { fraction: self.jitter.clamp(0.0, MAX_JITTER_FRACTION), rng: SplitMix64::new(seed) }
    }
}

/// Bounded multiplicative jitter from a seeded generator.
#[derive(Debug, Clone)]
pub struct Jitter {
    fraction: f64,
    rng: SplitMix64,
}

impl Jitter {
    /// `milliseconds` scaled by a factor in `[1 - fraction, 1 + fraction)`.
    pub fn apply(&mut self, milliseconds: f64) -> f64 {
        if self.fraction == 0.0 {
            return milliseconds;
        }
        let signed_unit = self.rng.next_unit() * 2.0 - 1.0;
        milliseconds * (1.0 + self.fraction * signed_unit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> LatencyParams {
        LatencyParams {
            api_overhead_ms: 20.0,
            prefill_per_token_ms: 0.1,
            prefill_per_cached_token_ms: 0.01,
            decode_base_ms: 10.0,
            decode_per_seq_ms: 0.5,
            context_per_ktoken_ms: 1.0,
            jitter: 0.0,
            time_scale: 1.0,
        }
    }

    #[test]
    fn step_time_grows_with_sequences_prefill_and_context() {
        let p = params();
        assert!((p.step_ms(&StepWork::default()) - 10.0).abs() < 1e-9);
        let decodes = StepWork { decode_seqs: 4, context_tokens: 2000, ..StepWork::default() };
        assert!((p.step_ms(&decodes) - 14.0).abs() < 1e-9, "10 + 4 × 0.5 + 2 × 1");
        let with_prefill = StepWork { prefill_tokens: 1000, context_tokens: 3000, ..decodes };
        assert!((p.step_ms(&with_prefill) - 115.0).abs() < 1e-9, "10 + 2 + 100 + 3");
    }

    #[test]
    fn cached_tokens_cost_far_less_than_computed_ones() {
        let p = params();
        let cached = StepWork { cached_tokens: 1000, context_tokens: 1000, ..StepWork::default() };
        let computed = StepWork { prefill_tokens: 1000, context_tokens: 1000, ..StepWork::default() };
        assert!(p.step_ms(&computed) - p.step_ms(&cached) > 80.0);
    }

    #[test]
    fn delays_are_scaled_bounded_and_never_negative() {
        let mut p = params();
        assert_eq!(p.to_delay(15.0), Duration::from_millis(15));
        p.time_scale = 0.0;
        assert_eq!(p.to_delay(15.0), Duration::ZERO);
        p.time_scale = 1.0;
        assert_eq!(p.to_delay(-3.0), Duration::ZERO);
        assert_eq!(p.to_delay(f64::NAN), Duration::ZERO);
        assert_eq!(p.to_delay(1e12), MAX_SIMULATED_DELAY);
    }

    #[test]
    fn jitter_is_bounded_and_reproducible() {
        let mut p = params();
        p.jitter = 5.0; // clamped to MAX_JITTER_FRACTION
        let mut first = p.jitter_source(11);
        let mut second = p.jitter_source(11);
        for _ in 0..1000 {
            let value = first.apply(100.0);
            assert!((50.0..150.0).contains(&value));
            assert_eq!(value, second.apply(100.0));
        }
        assert_eq!(params().jitter_source(1).apply(100.0), 100.0);
    }
}
