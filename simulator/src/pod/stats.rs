//! Per-endpoint request counters for `GET /sim/stats`.
//!
//! End-to-end tests use them to check where traffic went (received vs served per endpoint)
//! without parsing Prometheus text. The key set is the router's fixed list of endpoint names,
//! so the map is bounded.

use std::collections::BTreeMap;

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
