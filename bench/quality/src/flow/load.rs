//! Workload j, the overload: an open-loop arrival schedule at a multiple of the pool's
//! capacity, three priority classes and two tenants inside the standard class.
//!
//! The mix: critical 10 % of the offered load (0.2 × capacity), standard 70 % (tenant A
//! four requests for each of tenant B's), sheddable 20 %. Why these numbers: without
//! preemption in the engines, a critical request gets an idle pool's TTFT only if it finds a
//! free engine slot when it arrives, so the critical load must fit in the places reserved
//! for it (`reserved_per_pod`) with room for its bursts; and both tenants must be backlogged
//! for "equal service when both are backlogged" to be measured: with half the slots left to
//! standard (0.5 × capacity), each tenant's fair share is 0.25 ×, and tenant B offers 0.28 ×.

use crate::prompts::{text_of_tokens, SeededRandom};

/// Offered load by class, in percent.
pub const CRITICAL_PERCENT: u64 = 10;
pub const STANDARD_PERCENT: u64 = 70;
/// Inside standard: tenant A sends four requests for each of tenant B's.
pub const TENANT_A_PER_B: u64 = 4;

/// Prompt and output length of every request (tokens): short enough that the pool turns
/// over many requests per second, long enough that a batch is busy.
pub const PROMPT_TOKENS: usize = 128;
pub const MAX_TOKENS: usize = 48;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    Critical,
    StandardA,
    StandardB,
    Sheddable,
}

impl Class {
    pub const ALL: [Class; 4] = [Class::Critical, Class::StandardA, Class::StandardB, Class::Sheddable];

    pub fn label(self) -> &'static str {
        match self {
            Class::Critical => "critical",
            Class::StandardA => "standard-a",
            Class::StandardB => "standard-b",
            Class::Sheddable => "sheddable",
        }
    }

    /// The request headers: priority (2 / 0 / -1) and the fairness id.
    pub fn headers(self) -> [(&'static str, &'static str); 2] {
        let (priority, tenant) = match self {
            Class::Critical => ("2", "critical"),
            Class::StandardA => ("0", "tenant-a"),
            Class::StandardB => ("0", "tenant-b"),
            Class::Sheddable => ("-1", "batch"),
        };
        [("x-gateway-inference-priority", priority), ("x-llm-d-inference-fairness-id", tenant)]
    }
}

#[derive(Debug, Clone)]
pub struct Arrival {
    pub at_ms: u64,
    pub class: Class,
    pub body: String,
}

/// Poisson arrivals at `rate_per_s` for `seconds`, classes drawn by the mix above.
pub fn schedule(rate_per_s: f64, seconds: u64, seed: u64) -> Vec<Arrival> {
    let mut random = SeededRandom::new(seed);
    let mut arrivals = Vec::new();
    let mut at_s = 0.0;
    let end = seconds as f64;
    while at_s < end {
        let gap = -(1.0 - random.next_unit()).max(1e-9).ln() / rate_per_s.max(1e-3);
        at_s += gap;
        let draw = random.next_u64() % 100;
        let class = if draw < CRITICAL_PERCENT {
            Class::Critical
        } else if draw < CRITICAL_PERCENT + STANDARD_PERCENT {
            if random.next_u64().is_multiple_of(TENANT_A_PER_B + 1) {
                Class::StandardB
            } else {
                Class::StandardA
            }
        } else {
            Class::Sheddable
        };
        arrivals.push(Arrival { at_ms: (at_s * 1000.0) as u64, class, body: body(arrivals.len() as u64 ^ seed) });
    }
    arrivals
}

/// A streaming completion with a prompt of its own (no shared prefixes: this workload is
/// about admission, not cache affinity).
pub fn body(seed: u64) -> String {
    serde_json::json!({
        "model": crate::workload::MODEL,
        "prompt": text_of_tokens(PROMPT_TOKENS, seed),
        "max_tokens": MAX_TOKENS,
        "stream": true,
        "stream_options": {"include_usage": true},
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mix_and_rate_are_as_documented() {
        let arrivals = schedule(50.0, 60, 9);
        let n = arrivals.len() as f64;
        assert!((n - 3000.0).abs() < 200.0, "{n}");
        let share = |c: Class| arrivals.iter().filter(|a| a.class == c).count() as f64 / n;
        assert!((share(Class::Critical) - 0.10).abs() < 0.03);
        assert!((share(Class::StandardA) / share(Class::StandardB) - 4.0).abs() < 0.6);
        assert!(arrivals.windows(2).all(|w| w[0].at_ms <= w[1].at_ms));
    }
}
