//! The singleton's configuration: which pods, how to reach them, how often.

use serde::Deserialize;

use super::{check_range, parse_pool};
use crate::address::PodAddress;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PollerConfig {
    /// The pods of the pool, as literal `ip:port`.
    pub pool: Vec<String>,
    /// An ORIGINAL_DST cluster that follows `destination_header`, used to reach each pod.
    pub metrics_cluster: String,
    pub destination_header: String,
    pub metrics_path: String,
    pub poll_interval_ms: u64,
    pub timeout_ms: u64,
    /// Consecutive failed scrapes before a pod leaves the rotation.
    pub unhealthy_after_failures: u32,
    /// Scrape bodies larger than this are refused (a real vLLM scrape is ~20-60 KB).
    pub max_metrics_bytes: u64,
}

impl Default for PollerConfig {
    fn default() -> Self {
        Self {
            pool: Vec::new(),
            metrics_cluster: "wasm_epp_metrics".into(),
            destination_header: "x-gateway-destination-endpoint".into(),
            metrics_path: "/metrics".into(),
            poll_interval_ms: 100,
            timeout_ms: 1_000,
            unhealthy_after_failures: 2,
            max_metrics_bytes: 4 * 1024 * 1024,
        }
    }
}

impl PollerConfig {
    pub fn validate(&self) -> Result<Vec<PodAddress>, String> {
        if self.metrics_cluster.is_empty() {
            return Err("metrics_cluster must name an Envoy cluster".into());
        }
        if !self.metrics_path.starts_with('/') {
            return Err(format!("metrics_path '{}' must start with '/'", self.metrics_path));
        }
        check_range("poll_interval_ms", self.poll_interval_ms, 10, 60_000)?;
        check_range("timeout_ms", self.timeout_ms, 10, 60_000)?;
        check_range("unhealthy_after_failures", u64::from(self.unhealthy_after_failures), 1, 100)?;
        check_range("max_metrics_bytes", self.max_metrics_bytes, 1024, 64 * 1024 * 1024)?;
        parse_pool(&self.pool)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_json;

    #[test]
    fn validates_pool_and_bounds() {
        let ok: PollerConfig = parse_json(br#"{"pool": ["127.0.0.1:8001", "127.0.0.1:8002"]}"#).unwrap();
        assert_eq!(ok.validate().unwrap().len(), 2);
        let bad: PollerConfig = parse_json(br#"{"pool": ["localhost:8001"]}"#).unwrap();
        assert!(bad.validate().unwrap_err().contains("localhost"));
        let bad: PollerConfig = parse_json(br#"{"poll_interval_ms": 1}"#).unwrap();
        assert!(bad.validate().unwrap_err().contains("poll_interval_ms"));
    }
}
