//! A request's place in the queue: its priority (band) and its flow (tenant).
//!
//! Priority is the request's own, read as routing reads it (`crate::protocol`): the priority
//! header, else the objective named by an objective header (`models.objectives`), else the
//! model's (`models.priorities`), else 0; clamped to the bands that exist. Below 0 is
//! sheddable. The flow is the fairness header's value (keyed hash); requests without it share
//! one flow.

use picker::config::{FilterConfig, MAX_PRIORITY};
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
}

impl RequestClass {
    pub fn from_headers(config: &FilterConfig, headers: &HeaderMap, header_priority: Option<i64>) -> Self {
        let flow = headers
            .get(&config.flow_control.fairness_header)
            .filter(|id| !id.is_empty())
            .map_or(DEFAULT_FLOW, |id| session_key(id).max(1));
        Self { header_priority, flow }
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
}
