//! A request's place in the queue: its priority (band) and its flow (tenant).
//!
//! Priority is the request's own, read as routing reads it (`crate::protocol`): the priority
//! header, else the objective named by an objective header (`models.objectives`), else the
//! model's (`models.priorities`), else 0; clamped to the bands that exist. Below 0 is
//! sheddable. The flow is the fairness header's value (keyed hash; its aliases when it is
//! absent); requests without it share one flow. A TTL header may set the request's own wait.

use picker::config::{FilterConfig, MAX_PRIORITY, MAX_TTL_MS};
use picker::prefix::session_key;
use wasm_epp_host::HeaderMap;

/// The flow of requests that name none.
pub const DEFAULT_FLOW: u64 = 0;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestClass {
    /// From the headers (`crate::protocol::header_priority`), if they say; else the model
    /// decides once the body is read.
    header_priority: Option<i64>,
    pub flow: u64,
    /// The request's own queue TTL (`flow_control.ttl_header`), if it gave a readable one;
    /// it may shorten its band's TTL, not lengthen it (see `crate::flow::hold`).
    pub ttl_ms: Option<u64>,
}

impl RequestClass {
    pub fn from_headers(config: &FilterConfig, headers: &HeaderMap, header_priority: Option<i64>) -> Self {
        let flow_control = &config.flow_control;
        // The first name present decides: an empty value there is no flow, whatever an alias says.
        let flow = crate::protocol::first_present(
            headers,
            &flow_control.fairness_header,
            &flow_control.fairness_header_aliases,
        )
        .filter(|id| !id.is_empty())
        .map_or(DEFAULT_FLOW, |id| session_key(id).max(1));
        let ttl_ms = Some(flow_control.ttl_header.as_str())
            .filter(|name| !name.is_empty())
            .and_then(|name| headers.get_text(name))
            .and_then(picker::go_duration::positive_duration_ms)
            .map(|ttl| ttl.min(MAX_TTL_MS));
        Self { header_priority, flow, ttl_ms }
    }

    /// The request's band once its model is known.
    pub fn priority(&self, config: &FilterConfig, model: Option<&str>) -> i32 {
        let priority =
            self.header_priority.or_else(|| model.and_then(|m| config.models.priorities.get(m).copied())).unwrap_or(0);
        priority.clamp(i64::from(-MAX_PRIORITY), i64::from(MAX_PRIORITY)) as i32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> FilterConfig {
        let mut config = FilterConfig::default();
        config.models.objectives.insert("critical".into(), 2);
        config.models.priorities.insert("batch-model".into(), -1);
        config
    }

    #[test]
    fn priority_comes_from_header_then_objective_then_model() {
        let config = config();
        let class = |pairs: &[(&str, &str)]| {
            let headers = HeaderMap::from_pairs(pairs);
            RequestClass::from_headers(&config, &headers, crate::protocol::header_priority(&headers, &config))
        };
        assert_eq!(class(&[("x-gateway-inference-priority", "3")]).priority(&config, Some("batch-model")), 3);
        assert_eq!(class(&[("x-gateway-inference-objective", "critical")]).priority(&config, None), 2);
        assert_eq!(class(&[]).priority(&config, Some("batch-model")), -1);
        assert_eq!(class(&[]).priority(&config, Some("other")), 0);
        assert_eq!(class(&[("x-gateway-inference-priority", "-999999")]).priority(&config, None), -MAX_PRIORITY);
    }

    #[test]
    fn tenants_are_separate_flows_and_anonymous_requests_share_one() {
        let config = config();
        let flow_of = |id: &str| {
            RequestClass::from_headers(&config, &HeaderMap::from_pairs(&[("x-llm-d-inference-fairness-id", id)]), None)
                .flow
        };
        assert_ne!(flow_of("tenant-a"), flow_of("tenant-b"));
        assert_eq!(flow_of("tenant-a"), flow_of("tenant-a"));
        assert_eq!(RequestClass::from_headers(&config, &HeaderMap::default(), None).flow, DEFAULT_FLOW);
    }

    #[test]
    fn the_old_fairness_name_counts_when_the_new_one_is_absent_and_an_empty_new_one_shadows_it() {
        let config = config();
        let flow =
            |pairs: &[(&str, &str)]| RequestClass::from_headers(&config, &HeaderMap::from_pairs(pairs), None).flow;
        let new = flow(&[("x-llm-d-inference-fairness-id", "tenant-a")]);
        assert_eq!(flow(&[("x-gateway-inference-fairness-id", "tenant-a")]), new);
        assert_eq!(
            flow(&[("x-gateway-inference-fairness-id", "b"), ("x-llm-d-inference-fairness-id", "tenant-a")]),
            new
        );
        let shadowed = [("x-llm-d-inference-fairness-id", ""), ("x-gateway-inference-fairness-id", "tenant-a")];
        assert_eq!(flow(&shadowed), DEFAULT_FLOW);
    }

    #[test]
    fn a_request_ttl_is_read_as_llm_d_writes_it_bounded_and_ignored_when_unreadable() {
        let mut config = config();
        let ttl = |config: &FilterConfig, value: &str| {
            RequestClass::from_headers(config, &HeaderMap::from_pairs(&[("x-llm-d-inference-ttl", value)]), None).ttl_ms
        };
        assert_eq!(ttl(&config, " 2s "), Some(2_000));
        assert_eq!(ttl(&config, "1m30s"), Some(90_000));
        assert_eq!(ttl(&config, "48h"), Some(MAX_TTL_MS));
        for unreadable in ["soon", "", "0s", "-1s", "15"] {
            assert_eq!(ttl(&config, unreadable), None, "{unreadable:?}");
        }
        config.flow_control.ttl_header = String::new();
        assert_eq!(ttl(&config, "2s"), None, "not read when off");
    }
}
