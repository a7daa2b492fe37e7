//! Per-endpoint request counters and engine-step counters for `GET /sim/stats`.
//!
//! End-to-end tests use them to check where traffic went (received vs served per endpoint)
//! without parsing Prometheus text. The key set is the router's fixed list of endpoint names,
//! so the map is bounded.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::engine::StepWork;

use serde_json::{json, Value};

/// Counts for one endpoint.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EndpointCounts {
    /// Requests that reached the pod.
    pub received: u64,
    /// Requests answered with a 2xx status.
    pub served: u64,
    /// Requests answered with any other status.
    pub failed: u64,
}

/// Counts per endpoint name.
#[derive(Debug, Clone, Default)]
pub struct EndpointStats {
    counts: BTreeMap<&'static str, EndpointCounts>,
}

impl EndpointStats {
    /// Counts a request arriving at `endpoint`.
    pub fn record_received(&mut self, endpoint: &'static str) {
        self.counts.entry(endpoint).or_default().received += 1;
    }

    /// Counts the status a request to `endpoint` was answered with.
    pub fn record_answer(&mut self, endpoint: &'static str, status: u16) {
        let counts = self.counts.entry(endpoint).or_default();
        if (200..300).contains(&status) {
            counts.served += 1;
        } else {
            counts.failed += 1;
        }
    }

    /// Counts for one endpoint (zeros if never called).
    pub fn get(&self, endpoint: &str) -> EndpointCounts {
        self.counts.get(endpoint).copied().unwrap_or_default()
    }

    /// `{"/v1/completions": {"received": .., "served": .., "failed": ..}, ...}`.
    pub fn to_json(&self) -> Value {
        let map: serde_json::Map<String, Value> = self
            .counts
            .iter()
            .map(|(endpoint, counts)| {
                let value = json!({"received": counts.received, "served": counts.served, "failed": counts.failed});
                ((*endpoint).to_owned(), value)
            })
            .collect();
        Value::Object(map)
    }
}

/// What the engine steps did since start (or restart).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StepCounters {
    /// Steps run.
    pub steps: u64,
    /// Tokens computed by all steps (decodes plus prefill chunks).
    pub batched_tokens: u64,
    /// Most tokens one step computed.
    pub max_batched_tokens: usize,
    /// The latest step: tokens computed.
    pub last_batched_tokens: usize,
    /// The latest step: sequences decoding one token.
    pub last_decode_seqs: usize,
    /// The latest step: prompt tokens computed in chunks.
    pub last_prefill_tokens: usize,
    /// The latest step: its duration (after time scale and jitter), milliseconds.
    pub last_duration_ms: f64,
}

impl StepCounters {
    /// Counts a step that was just planned.
    pub fn record(&mut self, batched_tokens: usize, work: &StepWork, duration: Duration) {
        self.steps += 1;
        self.batched_tokens += batched_tokens as u64;
        self.max_batched_tokens = self.max_batched_tokens.max(batched_tokens);
        self.last_batched_tokens = batched_tokens;
        self.last_decode_seqs = work.decode_seqs;
        self.last_prefill_tokens = work.prefill_tokens;
        self.last_duration_ms = duration.as_secs_f64() * 1000.0;
    }

    /// The `"steps"` object of `/sim/stats`.
    pub fn to_json(&self) -> Value {
        json!({
            "steps": self.steps,
            "batched_tokens": self.batched_tokens,
            "max_batched_tokens": self.max_batched_tokens,
            "last_batched_tokens": self.last_batched_tokens,
            "last_decode_seqs": self.last_decode_seqs,
            "last_prefill_tokens": self.last_prefill_tokens,
            "last_duration_ms": self.last_duration_ms,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_received_served_and_failed() {
        let mut stats = EndpointStats::default();
        stats.record_received("/v1/completions");
        stats.record_received("/v1/completions");
        stats.record_answer("/v1/completions", 200);
        stats.record_answer("/v1/completions", 503);
        assert_eq!(stats.get("/v1/completions"), EndpointCounts { received: 2, served: 1, failed: 1 });
        assert_eq!(stats.get("/health"), EndpointCounts::default());
        assert_eq!(stats.to_json()["/v1/completions"]["failed"], json!(1));
    }
}
