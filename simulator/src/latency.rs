//! The latency model: how long prefill and each decode step take.
//!
//! vLLM runs one engine step at a time; a newly admitted request is prefilled inside a step that
//! also decodes every running sequence, so its first token costs one step plus its prefill work.
//! Formulas (milliseconds, before `time_scale` and jitter; also in the README):
//!
//! ```text
//! step(running)        = decode_base_ms + decode_per_seq_ms * running
//! ttft_after_admission = api_overhead_ms + step(running)
//!                        + prefill_per_token_ms * uncached_tokens
//!                        + prefill_per_cached_token_ms * cached_tokens
//! inter_token_gap      = step(running at that token)
//! ```
//!
//! Queue wait comes on top of TTFT, from the scheduler. Times are parameters, never measured
//! here, so tests need no clock.

use std::time::Duration;

use crate::hashing::SplitMix64;

/// Jitter above this fraction would let delays reach zero or double; it is clamped here.
pub const MAX_JITTER_FRACTION: f64 = 0.5;
/// A single simulated delay never exceeds this, whatever the flags say (keeps timers sane).
const MAX_SIMULATED_DELAY: Duration = Duration::from_secs(3600);

/// Every latency parameter; each one is a command-line flag.
#[derive(Debug, Clone, PartialEq)]
pub struct LatencyParams {
    /// Fixed cost before the first token (HTTP, tokenization, detokenization, scheduling).
    pub api_overhead_ms: f64,
    /// Prefill cost per prompt token that is not in the prefix cache.
    pub prefill_per_token_ms: f64,
    /// Prefill cost per prompt token served from the prefix cache (small, not zero).
    pub prefill_per_cached_token_ms: f64,
    /// Decode step time with no other sequence running.
    pub decode_base_ms: f64,
    /// Extra decode step time per running sequence (batching makes steps slower).
    pub decode_per_seq_ms: f64,
    /// Each delay is multiplied by `1 + jitter * u`, `u` uniform in `[-1, 1)`; clamped to 0.5.
    pub jitter: f64,
    /// Multiplies every simulated delay; 0 answers as fast as the machine allows.
    pub time_scale: f64,
}

impl LatencyParams {
    /// Duration of one engine step with `running` sequences, in milliseconds.
    pub fn step_ms(&self, running: usize) -> f64 {
        self.decode_base_ms + self.decode_per_seq_ms * running as f64
    }

    /// Time from admission to the first token, in milliseconds.
    pub fn first_token_ms(&self, uncached_tokens: usize, cached_tokens: usize, running: usize) -> f64 {
        self.api_overhead_ms + self.recompute_ms(uncached_tokens, cached_tokens, running)
    }

    /// Time to prefill again after a preemption (no API overhead: the request never left).
    pub fn recompute_ms(&self, uncached_tokens: usize, cached_tokens: usize, running: usize) -> f64 {
        self.step_ms(running)
            + self.prefill_per_token_ms * uncached_tokens as f64
            + self.prefill_per_cached_token_ms * cached_tokens as f64
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
            jitter: 0.0,
            time_scale: 1.0,
        }
    }

    #[test]
    fn step_time_grows_with_running_sequences() {
        let p = params();
        assert!((p.step_ms(0) - 10.0).abs() < 1e-9);
        assert!((p.step_ms(4) - 12.0).abs() < 1e-9);
    }

    #[test]
    fn ttft_charges_uncached_tokens_more_than_cached_ones() {
        let p = params();
        // 20 overhead + 12 step + 100 * 0.1 + 500 * 0.01
        assert!((p.first_token_ms(100, 500, 4) - 47.0).abs() < 1e-9);
        assert!(p.first_token_ms(600, 0, 4) > p.first_token_ms(100, 500, 4));
        assert!((p.recompute_ms(100, 500, 4) - 27.0).abs() < 1e-9);
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
