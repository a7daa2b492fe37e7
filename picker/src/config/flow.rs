//! Flow control: when the pool is saturated, requests wait in the gateway (paused Envoy
//! streams) and are released in priority order, fairly between tenants, instead of all
//! piling into the engines' queues. Off unless `flow_control.enabled`.

use serde::Deserialize;

use super::check_range;

/// Priorities are clamped into `-MAX_PRIORITY..=MAX_PRIORITY`, so there are at most
/// `2 * MAX_PRIORITY + 1` bands: enough for critical / standard / sheddable and the steps
/// between, and a bound on per-band state whatever clients send.
pub const MAX_PRIORITY: i32 = 8;

/// The longest a request may wait in the queue (`ttl_ms`, `sheddable_ttl_ms`; a request's
/// own TTL header only shortens its band's).
pub const MAX_TTL_MS: u64 = 3_600_000;

/// The most body bytes a worker may be told to hold (`max_queued_bytes`, `max_band_bytes`):
/// held bodies are copies in the worker's Wasm VM, whose memory (wasm32) ends at 4 GiB, and a
/// queue filled past that would crash the VM with every request it holds. Half of it leaves
/// room for the body being parsed (up to `max_body_bytes`, 1 GiB) and the tables.
pub const MAX_HELD_BYTES: u64 = 1 << 31;

/// What a pod whose metrics are stale (older than `stale_after_ms`) counts as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum StaleMetricsPolicy {
    /// Judge it by the in-flight counts this gateway keeps (exact) and ignore its stale
    /// queue and KV numbers. The default: a broken scraper must not stop all traffic,
    /// and `max_inflight_per_pod` still bounds what the pod gets.
    #[default]
    Ignore,
    /// Count it as saturated: nothing is released to it until its metrics are fresh again.
    Saturated,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FlowControlConfig {
    pub enabled: bool,
    /// Requests this gateway (all workers) keeps in flight to one pod at most while others
    /// wait; with the queue and KV thresholds of `saturation`, what "the pod has room" means.
    pub max_inflight_per_pod: u32,
    /// How long a request may wait (priority >= 0); then 429 (503 with no pod at all).
    /// Keep it below the listener's `request_timeout`, which also runs while a request waits.
    pub ttl_ms: u64,
    /// How long a sheddable request (priority < 0) may wait.
    pub sheddable_ttl_ms: u64,
    /// Requests one worker holds at most, all bands together (Envoy memory bound).
    pub max_queued_requests: u32,
    /// Body bytes one worker holds at most, all bands together.
    pub max_queued_bytes: u64,
    /// Requests one band of one worker holds at most.
    pub max_band_requests: u32,
    /// Body bytes one band of one worker holds at most.
    pub max_band_bytes: u64,
    /// Header naming the request's flow (tenant); requests without it share one flow.
    pub fairness_header: String,
    /// Read when `fairness_header` is absent, in order (llm-d's deprecated name).
    pub fairness_header_aliases: Vec<String>,
    /// Request header with the request's own queue TTL, a duration as llm-d writes it
    /// (`"2s"`, `"1m30s"`, `"500ms"`); it may shorten the band's TTL, never lengthen it.
    /// An unreadable value is ignored. Empty = not read.
    pub ttl_header: String,
    /// Response header telling the client how long its request waited in the queue (whole
    /// ms; 0 when routed at once), on requests flow control admitted once sent to a pod.
    /// Empty = not written.
    pub queue_duration_header: String,
    /// Distinct flows per band at most; later ones share one overflow flow.
    pub max_flows_per_band: u32,
    pub stale_metrics: StaleMetricsPolicy,
    /// Requests one worker releases per tick at most, so a burst of releases does not
    /// overshoot before the next look at the pods.
    pub release_per_tick: u32,
    /// Tick period while requests wait (releases and TTLs are checked on the tick).
    pub waiting_tick_ms: u64,
    /// In-flight places per pod kept free for requests of `reserved_min_priority` and
    /// above: lower bands fill each pod that has room only up to
    /// `max_inflight_per_pod - reserved_per_pod`, so a critical request finds a place at
    /// once instead of waiting for one to end.
    pub reserved_per_pod: u32,
    pub reserved_min_priority: i32,
}

impl Default for FlowControlConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            max_inflight_per_pod: 16,
            ttl_ms: 30_000,
            sheddable_ttl_ms: 5_000,
            max_queued_requests: 1_024,
            max_queued_bytes: 64 * 1024 * 1024,
            max_band_requests: 512,
            max_band_bytes: 32 * 1024 * 1024,
            fairness_header: "x-llm-d-inference-fairness-id".into(),
            fairness_header_aliases: vec!["x-gateway-inference-fairness-id".into()],
            ttl_header: "x-llm-d-inference-ttl".into(),
            queue_duration_header: "x-llm-d-flow-queue-duration-ms".into(),
            max_flows_per_band: 64,
            stale_metrics: StaleMetricsPolicy::Ignore,
            release_per_tick: 16,
            waiting_tick_ms: 5,
            reserved_per_pod: 0,
            reserved_min_priority: 1,
        }
    }
}

impl FlowControlConfig {
    pub fn validate(&self) -> Result<(), String> {
        let field = |name: &str| format!("flow_control.{name}");
        check_range(&field("max_inflight_per_pod"), u64::from(self.max_inflight_per_pod), 1, 4_096)?;
        check_range(&field("ttl_ms"), self.ttl_ms, 1, MAX_TTL_MS)?;
        check_range(&field("sheddable_ttl_ms"), self.sheddable_ttl_ms, 1, MAX_TTL_MS)?;
        check_range(&field("max_queued_requests"), u64::from(self.max_queued_requests), 1, 65_536)?;
        check_range(&field("max_queued_bytes"), self.max_queued_bytes, 1_024, MAX_HELD_BYTES)?;
        check_range(&field("max_band_requests"), u64::from(self.max_band_requests), 1, 65_536)?;
        check_range(&field("max_band_bytes"), self.max_band_bytes, 1_024, MAX_HELD_BYTES)?;
        check_range(&field("max_flows_per_band"), u64::from(self.max_flows_per_band), 1, 4_096)?;
        check_range(&field("release_per_tick"), u64::from(self.release_per_tick), 1, 4_096)?;
        check_range(&field("waiting_tick_ms"), self.waiting_tick_ms, 1, 1_000)?;
        if self.reserved_per_pod >= self.max_inflight_per_pod {
            return Err(format!(
                "flow_control.reserved_per_pod = {} must be below max_inflight_per_pod = {}",
                self.reserved_per_pod, self.max_inflight_per_pod
            ));
        }
        super::check_header(&field("fairness_header"), &self.fairness_header)?;
        super::check_header_list(&field("fairness_header_aliases"), &self.fairness_header_aliases)?;
        super::check_optional_header(&field("ttl_header"), &self.ttl_header)?;
        super::check_optional_header(&field("queue_duration_header"), &self.queue_duration_header)
    }

    /// How long a request of `priority` may wait.
    pub fn ttl_for(&self, priority: i32) -> u64 {
        if priority < 0 {
            self.sheddable_ttl_ms
        } else {
            self.ttl_ms
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_json;

    #[test]
    fn defaults_are_valid_and_off() {
        let config = FlowControlConfig::default();
        assert!(!config.enabled);
        config.validate().unwrap();
    }

    #[test]
    fn bad_values_name_the_field() {
        let bad: FlowControlConfig = parse_json(br#"{"max_inflight_per_pod": 0}"#).unwrap();
        assert!(bad.validate().unwrap_err().contains("max_inflight_per_pod"));
        let bad: FlowControlConfig = parse_json(br#"{"fairness_header": "Tenant Id"}"#).unwrap();
        assert!(bad.validate().unwrap_err().contains("fairness_header"));
        let policy: FlowControlConfig = parse_json(br#"{"stale_metrics": "saturated"}"#).unwrap();
        assert_eq!(policy.stale_metrics, StaleMetricsPolicy::Saturated);
        assert!(parse_json::<FlowControlConfig>(br#"{"ttl": 5}"#).is_err(), "typos are refused");
    }
}
