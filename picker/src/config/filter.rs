//! The HTTP filter's configuration.

use serde::Deserialize;

use super::{check_pool_name, check_range, parse_pool};
use super::{PollerConfig, PrefixConfig};
use crate::address::PodAddress;
use crate::saturation::SaturationLimits;

/// What to do with a body that is not the OpenAI JSON we expect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum InvalidBodyPolicy {
    /// Route it by load anyway and let the engine answer it (the engine's 400 is clearer).
    #[default]
    Route,
    /// Answer 400 with an OpenAI-shaped error without touching a pod.
    Reject,
}

/// Relative weights of the scorers; each scorer gives 0..1 per pod.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ScorerWeights {
    /// Fewer requests waiting in the engine's queue (polled, so slightly stale).
    pub queue: f64,
    /// More free KV-cache (polled).
    pub kv_cache: f64,
    /// Fewer requests this proxy has in flight to the pod (exact, across workers).
    pub inflight: f64,
    /// More of the prompt's prefix probably in the pod's KV cache.
    pub prefix: f64,
}

impl Default for ScorerWeights {
    fn default() -> Self {
        Self { queue: 1.0, kv_cache: 1.0, inflight: 2.0, prefix: 3.0 }
    }
}

impl ScorerWeights {
    /// Each weight finite and within 0..=100; the error names the weight.
    pub fn validate(&self) -> Result<(), String> {
        for (name, weight) in
            [("queue", self.queue), ("kv_cache", self.kv_cache), ("inflight", self.inflight), ("prefix", self.prefix)]
        {
            if !weight.is_finite() || !(0.0..=100.0).contains(&weight) {
                return Err(format!("{name} = {weight}, must be within 0..=100"));
            }
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FilterConfig {
    /// Pool used when the singleton has published no table yet (or at all).
    pub pool: Vec<String>,
    /// The pool's name in the stats (a `pool` label), where one Envoy serves several pools,
    /// each with its own filter, singleton and `vm_id`; empty (default) = no label. The
    /// no-singleton pool service (`poller`) takes it too unless it names its own.
    pub pool_name: String,
    /// Header the ORIGINAL_DST cluster follows. Client copies are always removed.
    pub destination_header: String,
    pub weights: ScorerWeights,
    /// Bodies larger than this are routed by load without being parsed.
    pub max_body_bytes: u64,
    /// Request body bytes all streams of one worker may hold buffered together; a stream
    /// that would pass it is routed by load at once and its body streamed on unread, so
    /// slow or huge uploads cannot pin unbounded memory in the plugin.
    pub max_buffered_bytes: u64,
    /// How long the filter keeps failing open on the last table after the pool service
    /// stopped ticking (its heartbeat in shared data). Past it the table's pods are not
    /// trusted any more (pods move, addresses are reused): the static `pool` is used if
    /// there is one, else requests get 503.
    pub fail_open_max_age_ms: u64,
    /// The part of the path a route removes before the request reaches a pod (Envoy's
    /// `prefix_rewrite`, Istio's `rewrite.uri`, which run after the plugin), as a pool chosen by
    /// path does: taken off a path that begins with it before the endpoint and the paths the
    /// gateway answers are matched. Empty (default): paths are matched as they come.
    pub path_prefix: String,
    /// `GET` on this path is answered 200 by the filter itself while its VM runs: a
    /// liveness probe through the filter, which fails when the plugin cannot run.
    pub health_path: String,
    /// Set only on the internal peer listener: this filter then receives other replicas'
    /// messages and routes nothing.
    pub peer_receiver: Option<super::PeerReceiverConfig>,
    pub invalid_body: InvalidBodyPolicy,
    /// Pod data older than this is not trusted: the pod counts as unknown.
    pub stale_after_ms: u64,
    /// Prefix-cache affinity: hashing, the per-worker index, stickiness.
    pub prefix: PrefixConfig,
    /// When a pod, and the pool, count as saturated (for shedding and affinity).
    pub saturation: SaturationLimits,
    /// Request header carrying an integer priority; below 0 means sheddable: answered 429
    /// when the whole pool is saturated instead of queueing behind everyone.
    pub priority_header: String,
    /// Runners-up written after the chosen pod (`ip:port,ip:port,...`) for Envoy's
    /// override_host policy to retry on. Must be 0 with an ORIGINAL_DST cluster, which
    /// follows a single address only.
    pub fallback_destinations: u32,
    /// No-singleton mode: the filter's root contexts elect one of themselves to run the pool
    /// service with this configuration (the singleton's, see `PollerConfig`).
    pub poller: Option<PollerConfig>,
    /// In-flight counts older than this are presumed leaked (a stream whose end was never
    /// seen) and ignored.
    pub inflight_expiry_ms: u64,
    /// The wait queue: priorities, fairness between tenants, TTLs (off by default).
    pub flow_control: super::FlowControlConfig,
    /// Debugging: answer each routed request with an `x-wasm-epp-decision` response header
    /// (chosen pod, reason, prefix match, candidates' scores). Off by default: it shows the
    /// pool's addresses and load to every client. A client's own copy is always removed.
    pub debug_decision_header: bool,
    /// Prefill/decode disaggregation (see `PdConfig`); absent = every pod alike.
    pub pd: Option<super::PdConfig>,
    /// Many models in one pool, rewrites, and the protocol's headers.
    pub models: super::ModelsConfig,
    /// Learning from responses: token load, the per-pod TTFT model, index correction.
    pub learning: super::LearningConfig,
    /// A live A/B test of the picker against a plain load balancer (off by default).
    pub comparison: super::ComparisonConfig,
    /// Pods that fail the requests sent to them leave the rotation for a while (on by default).
    pub outlier_detection: super::OutlierConfig,
}

impl Default for FilterConfig {
    fn default() -> Self {
        Self {
            pool: Vec::new(),
            pool_name: String::new(),
            destination_header: "x-gateway-destination-endpoint".into(),
            weights: ScorerWeights::default(),
            max_body_bytes: 4 * 1024 * 1024,
            max_buffered_bytes: 256 * 1024 * 1024,
            fail_open_max_age_ms: 5 * 60 * 1000,
            path_prefix: String::new(),
            health_path: "/wasm-epp/healthz".into(),
            peer_receiver: None,
            invalid_body: InvalidBodyPolicy::Route,
            stale_after_ms: 5_000,
            fallback_destinations: 2,
            poller: None,
            saturation: SaturationLimits::default(),
            prefix: PrefixConfig::default(),
            priority_header: "x-gateway-inference-priority".into(),
            inflight_expiry_ms: 15 * 60 * 1000,
            flow_control: super::FlowControlConfig::default(),
            debug_decision_header: false,
            pd: None,
            models: super::ModelsConfig::default(),
            learning: super::LearningConfig::default(),
            comparison: super::ComparisonConfig::default(),
            outlier_detection: super::OutlierConfig::default(),
        }
    }
}

/// Why pod data scraped every `poll_interval_ms` cannot be trusted for `stale_after_ms`:
/// each pod's data would go stale before its next scrape could refresh it, so picks would
/// fail open (in-flight counts only) between scrapes, and flow control with `stale_metrics:
/// saturated` would release nothing then. `None` when the two agree.
pub fn stale_before_next_scrape(poll_interval_ms: u64, stale_after_ms: u64) -> Option<String> {
    (poll_interval_ms >= stale_after_ms).then(|| {
        format!(
            "stale_after_ms = {stale_after_ms} but the pool service scrapes every poll_interval_ms = \
             {poll_interval_ms}: each pod's data goes stale before its next scrape, and routing fails open \
             between scrapes; raise stale_after_ms above poll_interval_ms (with room for a scrape's answer)"
        )
    })
}

impl FilterConfig {
    /// The scheduling policy this configuration asks for.
    pub fn policy(&self) -> crate::scheduler::Policy {
        crate::scheduler::Policy {
            weights: self.weights.clone(),
            saturation: self.saturation.clone(),
            affinity_threshold: if self.prefix.enabled { self.prefix.affinity_threshold } else { 0.0 },
            affinity_slack: self.prefix.affinity_slack,
            fallbacks: self.fallback_destinations as usize,
            cold_placement: self.prefix.cold_placement,
            placement_load_factor: self.prefix.placement_load_factor,
            placement_slack: self.prefix.placement_slack,
            learning: self.learning.enabled.then_some(crate::scheduler::LearningPolicy {
                ttft_weight: self.learning.ttft_weight,
                release_penalty_ms: self.learning.release_penalty_ms,
                balance_homes: self.learning.balance_homes,
                tail_guard: self.learning.tail_guard,
            }),
        }
    }

    /// Combinations that are valid but probably not meant, each said as a warning to log at
    /// start (a configuration that worked before is not refused for them).
    pub fn warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        let flow = &self.flow_control;
        let held_at_most = flow.max_band_bytes.min(flow.max_queued_bytes);
        if flow.enabled && held_at_most < self.max_body_bytes {
            warnings.push(format!(
                "flow_control holds at most {held_at_most} body bytes per band (max_band_bytes, max_queued_bytes) but \
                 max_body_bytes is {}: a body in between is answered 429 whenever it would wait, however empty the \
                 queue (as is a body over max_body_bytes, which streams unread); keep both at least max_body_bytes",
                self.max_body_bytes
            ));
        }
        warnings
    }

    /// Checks every bound and returns the validated fallback pool.
    pub fn validate(&self) -> Result<Vec<PodAddress>, String> {
        for (field, header) in
            [("destination_header", &self.destination_header), ("priority_header", &self.priority_header)]
        {
            super::check_header(field, header)?;
        }
        check_pool_name(&self.pool_name)?;
        self.saturation.validate()?;
        self.prefix.validate()?;
        if let Some(receiver) = &self.peer_receiver {
            receiver.validate()?;
        }
        if let Some(poller) = &self.poller {
            poller.validate().map_err(|e| format!("poller: {e}"))?;
        }
        if self.prefix.session_header == self.destination_header {
            return Err("prefix.session_header must differ from destination_header".into());
        }
        let w = &self.weights;
        for (name, weight) in
            [("queue", w.queue), ("kv_cache", w.kv_cache), ("inflight", w.inflight), ("prefix", w.prefix)]
        {
            if !weight.is_finite() || !(0.0..=100.0).contains(&weight) {
                return Err(format!("weights.{name} = {weight}, must be within 0..=100"));
            }
        }
        check_range("max_body_bytes", self.max_body_bytes, 1024, 1 << 30)?;
        check_range("max_buffered_bytes", self.max_buffered_bytes, self.max_body_bytes, 1 << 34)?;
        check_range("fail_open_max_age_ms", self.fail_open_max_age_ms, 1_000, 86_400_000)?;
        if !crate::request::valid_path_prefix(&self.path_prefix) {
            return Err(format!(
                "path_prefix '{}': empty, or an absolute path of visible ASCII, no query, no trailing '/'",
                self.path_prefix
            ));
        }
        if !super::is_absolute_visible_path(&self.health_path) {
            return Err(format!("health_path '{}' must be an absolute path of visible ASCII", self.health_path));
        }
        check_range("stale_after_ms", self.stale_after_ms, 100, 3_600_000)?;
        if let Some(reason) = self
            .poller
            .as_ref()
            .and_then(|poller| stale_before_next_scrape(poller.poll_interval_ms, self.stale_after_ms))
        {
            return Err(reason);
        }
        check_range("fallback_destinations", u64::from(self.fallback_destinations), 0, 8)?;
        check_range("inflight_expiry_ms", self.inflight_expiry_ms, 1_000, 86_400_000)?;
        self.flow_control.validate()?;
        if let Some(pd) = &self.pd {
            pd.validate()?;
            if pd.prefiller_header == self.destination_header {
                return Err("pd.prefiller_header must differ from destination_header".into());
            }
        }
        self.models.validate()?;
        self.learning.validate()?;
        self.comparison.validate()?;
        self.outlier_detection.validate()?;
        // A P/D pool picks two pods per request by their roles: an arm of its own pods
        // would take one role's pods from the other arm. Flow control releases a request when
        // the pool has room, which may be in the other arm: the request would then go over
        // `max_inflight_per_pod` on its own arm's pods.
        if self.comparison.enabled() && self.pd.is_some() {
            return Err("comparison and pd cannot be on together".into());
        }
        if self.comparison.enabled() && self.flow_control.enabled {
            return Err("comparison and flow_control cannot be on together".into());
        }
        parse_pool(&self.pool)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_json;

    #[test]
    fn empty_configuration_is_all_defaults() {
        let config: FilterConfig = parse_json(b"  ").unwrap();
        assert_eq!(config, FilterConfig::default());
        assert!(config.validate().unwrap().is_empty());
    }

    #[test]
    fn typos_and_bad_values_are_refused_with_the_field_named() {
        let typo = parse_json::<FilterConfig>(br#"{"weigths": {}}"#).unwrap_err();
        assert!(typo.contains("weigths"), "{typo}");
        let bad: FilterConfig = parse_json(br#"{"weights": {"queue": -1}}"#).unwrap();
        assert!(bad.validate().unwrap_err().contains("weights.queue"));
        let bad: FilterConfig = parse_json(br#"{"pool": ["10.0.0.1:80", "10.0.0.1:80"]}"#).unwrap();
        assert!(bad.validate().unwrap_err().contains("twice"));
        let bad: FilterConfig = parse_json(br#"{"destination_header": "X-Bad Header"}"#).unwrap();
        assert!(bad.validate().is_err());
        let bad: FilterConfig = parse_json(br#"{"path_prefix": "/llama/"}"#).unwrap();
        assert!(bad.validate().unwrap_err().contains("path_prefix"));
        let good: FilterConfig = parse_json(br#"{"path_prefix": "/llama"}"#).unwrap();
        assert!(good.validate().is_ok());
    }

    #[test]
    fn the_comparison_is_refused_in_a_pd_pool_and_with_flow_control() {
        let both: FilterConfig = parse_json(br#"{"comparison": {"baseline_share": 0.5}, "pd": {}}"#).unwrap();
        assert!(both.validate().unwrap_err().contains("comparison and pd"));
        let queued: FilterConfig =
            parse_json(br#"{"comparison": {"baseline_share": 0.5}, "flow_control": {"enabled": true}}"#).unwrap();
        assert!(queued.validate().unwrap_err().contains("comparison and flow_control"));
        let off: FilterConfig = parse_json(br#"{"comparison": {"baseline_share": 0}, "pd": {}}"#).unwrap();
        assert!(off.validate().is_ok(), "a share of 0 is off");
    }

    #[test]
    fn pod_data_must_outlive_the_no_singleton_pool_service_s_scrape_interval() {
        let config = |poll: u64, stale: u64| {
            let json = format!(
                r#"{{"stale_after_ms": {stale},
                    "poller": {{"pool": ["10.0.0.1:80"], "poll_interval_ms": {poll}, "models_interval_ms": 0}}}}"#
            );
            parse_json::<FilterConfig>(json.as_bytes()).unwrap().validate()
        };
        assert!(config(100, 5_000).is_ok());
        assert!(config(4_999, 5_000).is_ok());
        let error = config(10_000, 5_000).unwrap_err();
        assert!(error.contains("stale_after_ms = 5000") && error.contains("poll_interval_ms = 10000"), "{error}");
        assert!(config(5_000, 5_000).is_err());
        assert!(config(10_000, 20_000).is_ok(), "a slow poll with data trusted for longer");
        assert_eq!(stale_before_next_scrape(100, 5_000), None);
    }

    #[test]
    fn flow_control_that_cannot_hold_a_readable_body_is_warned_of() {
        let config = |json: &str| parse_json::<FilterConfig>(json.as_bytes()).unwrap();
        assert!(FilterConfig::default().warnings().is_empty());
        let large = r#"{"max_body_bytes": 67108864, "flow_control": {"enabled": true}}"#;
        let warnings = config(large).warnings();
        assert!(warnings.len() == 1 && warnings[0].contains("max_band_bytes"), "{warnings:?}");
        assert!(config(large).validate().is_ok(), "valid: warned of, not refused");
        let off = r#"{"max_body_bytes": 67108864, "flow_control": {"enabled": false}}"#;
        assert!(config(off).warnings().is_empty(), "nothing is held with flow control off");
        let fits = r#"{"max_body_bytes": 67108864,
                       "flow_control": {"enabled": true, "max_band_bytes": 67108864, "max_queued_bytes": 134217728}}"#;
        assert!(config(fits).warnings().is_empty());
    }

    #[test]
    fn a_pool_name_is_a_dns_label() {
        for good in ["llama", "qwen-3-8b", "a", &"p".repeat(63)] {
            let config = FilterConfig { pool_name: good.to_string(), ..FilterConfig::default() };
            assert!(config.validate().is_ok(), "{good}");
        }
        // Dots and upper case would break the stat name apart; the ends as Kubernetes names.
        for bad in ["Llama", "pool.a", "-a", "a-", "a_b", "é", "pod", &"p".repeat(64)] {
            let config = FilterConfig { pool_name: bad.to_string(), ..FilterConfig::default() };
            assert!(config.validate().unwrap_err().contains("pool_name"), "{bad}");
        }
    }
}
