//! A request's place in the queue: its priority (band) and its flow (tenant).
//!
//! Priority, first that applies: the integer priority header (`priority_header`), the
//! objective header looked up in `flow_control.objective_priorities`, the model looked up
//! in `flow_control.model_priorities`, else 0. Below 0 is sheddable. The flow is the
//! fairness header's value (keyed hash); requests without it share one flow.

use picker::config::{FilterConfig, FlowControlConfig, MAX_PRIORITY};
use picker::prefix::session_key;
use wasm_epp_host::HeaderMap;

/// The flow of requests that name none.
pub const DEFAULT_FLOW: u64 = 0;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestClass {
    /// From the headers, if they say; else the model decides once the body is read.
    header_priority: Option<i32>,
    pub flow: u64,
}

impl RequestClass {
    pub fn from_headers(config: &FilterConfig, headers: &HeaderMap) -> Self {
        let flow_config = &config.flow_control;
        let explicit = headers
            .get_text(&config.priority_header)
            .and_then(|v| v.trim().parse::<i64>().ok())
            .map(|p| p.clamp(i64::from(-MAX_PRIORITY), i64::from(MAX_PRIORITY)) as i32);
        let objective = || {
            let name = headers.get_text(&flow_config.objective_header)?;
            flow_config.objective_priorities.get(name.trim()).copied()
        };
        let flow = headers
            .get(&flow_config.fairness_header)
            .filter(|id| !id.is_empty())
            .map_or(DEFAULT_FLOW, |id| session_key(id).max(1));
        Self { header_priority: explicit.or_else(objective), flow }
    }

    /// The request's priority once its model is known.
    pub fn priority(&self, flow_config: &FlowControlConfig, model: Option<&str>) -> i32 {
        self.header_priority
            .or_else(|| model.and_then(|m| flow_config.model_priorities.get(m).copied()))
            .unwrap_or(0)
            .clamp(-MAX_PRIORITY, MAX_PRIORITY)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> FilterConfig {
        let mut config = FilterConfig::default();
        config.flow_control.objective_priorities.insert("critical".into(), 2);
        config.flow_control.model_priorities.insert("batch-model".into(), -1);
        config
    }

    #[test]
    fn priority_comes_from_header_then_objective_then_model() {
        let config = config();
        let class = |pairs: &[(&str, &str)]| RequestClass::from_headers(&config, &HeaderMap::from_pairs(pairs));
        let flow = &config.flow_control;
        assert_eq!(class(&[("x-gateway-inference-priority", "3")]).priority(flow, Some("batch-model")), 3);
        assert_eq!(class(&[("x-gateway-inference-objective", "critical")]).priority(flow, None), 2);
        assert_eq!(class(&[]).priority(flow, Some("batch-model")), -1);
        assert_eq!(class(&[]).priority(flow, Some("other")), 0);
        assert_eq!(class(&[("x-gateway-inference-priority", "-999999")]).priority(flow, None), -MAX_PRIORITY);
    }

    #[test]
    fn tenants_are_separate_flows_and_anonymous_requests_share_one() {
        let config = config();
        let flow_of = |id: &str| {
            RequestClass::from_headers(&config, &HeaderMap::from_pairs(&[("x-llm-d-inference-fairness-id", id)])).flow
        };
        assert_ne!(flow_of("tenant-a"), flow_of("tenant-b"));
        assert_eq!(flow_of("tenant-a"), flow_of("tenant-a"));
        assert_eq!(RequestClass::from_headers(&config, &HeaderMap::default()).flow, DEFAULT_FLOW);
    }
}
