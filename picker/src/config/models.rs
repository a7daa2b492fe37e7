//! Many models in one pool, and the Endpoint Picker Protocol's headers: unknown models, model
//! rewrites, per-model and per-objective priorities, the subset hint, the served endpoint, and
//! the header names llm-d's gateways send.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::models::rewrite::{ModelRewrite, MAX_REWRITES};

/// Header names accepted per purpose at most (aliases are a handful).
pub const MAX_HEADER_ALIASES: usize = 8;
/// Priority entries (models plus objectives) at most.
pub const MAX_PRIORITY_ENTRIES: usize = 1024;
/// Longest metadata namespace or key read for the subset hint (Envoy's filter names and
/// the protocol's key are a few dozen bytes).
pub const MAX_METADATA_NAME_BYTES: usize = 256;

/// What to do with a request whose `model` no pod serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum UnknownModelPolicy {
    /// Answer 404 in OpenAI's shape from the gateway (as vLLM would), touching no pod.
    #[default]
    Reject,
    /// Route it by load to any pod and let the pod answer.
    RouteByLoad,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelsConfig {
    pub unknown_model: UnknownModelPolicy,
    /// Public model names rewritten to weighted targets; the body's `model` is replaced.
    pub rewrites: Vec<ModelRewrite>,
    /// Priority per (target) model, used when the request sets none; below 0 = sheddable.
    pub priorities: BTreeMap<String, i64>,
    /// Priority per objective name (InferenceObjective), named by an objective header.
    pub objectives: BTreeMap<String, i64>,
    /// Headers naming the request's objective, first present wins.
    pub objective_headers: Vec<String>,
    /// Headers naming the model the request is sent as (a gateway's rewrite: the body's
    /// `model` is replaced), first present wins; they take precedence over `rewrites`.
    pub rewrite_headers: Vec<String>,
    /// More headers read as the session id, after `prefix.session_header`.
    pub session_header_aliases: Vec<String>,
    /// Request header listing the endpoints (`ip:port`, comma-separated) the gateway allows;
    /// the pick is made among them only, 503 when none is a pool member.
    pub subset_header: String,
    /// Namespace of Envoy's dynamic metadata holding the subset hint (set by a filter before
    /// this one; the protocol's is `envoy.lb.subset_hint`); empty = not read, the default:
    /// the read is a host call on every request (~2–5 µs in Envoy, docs/performance.md) and
    /// no shipped configuration has a filter that sets it. When present it wins over the
    /// header.
    pub subset_metadata_namespace: String,
    /// Key of the subset hint in that namespace: a list of `ip:port` (or one comma-separated string).
    pub subset_metadata_key: String,
    /// Response header the plugin writes with the endpoint that answered (after retries);
    /// empty = off, the default: the shipped Envoy configurations have Envoy write
    /// `x-gateway-destination-endpoint-served` itself, at no cost to the request path (the
    /// plugin's way reads an Envoy attribute and writes a header, ~4 µs per request).
    pub served_endpoint_header: String,
    /// `GET` path the gateway answers itself with the pool's models (see
    /// [`crate::models::listing`]); empty = off, the request goes to a pod.
    pub list_path: String,
}

impl Default for ModelsConfig {
    fn default() -> Self {
        Self {
            unknown_model: UnknownModelPolicy::Reject,
            rewrites: Vec::new(),
            priorities: BTreeMap::new(),
            objectives: BTreeMap::new(),
            objective_headers: vec!["x-llm-d-inference-objective".into(), "x-gateway-inference-objective".into()],
            rewrite_headers: vec!["x-llm-d-model-name-rewrite".into(), "x-gateway-model-name-rewrite".into()],
            session_header_aliases: vec!["x-session-token".into()],
            subset_header: "x-gateway-destination-endpoint-subset".into(),
            subset_metadata_namespace: String::new(),
            subset_metadata_key: "x-gateway-destination-endpoint-subset".into(),
            served_endpoint_header: String::new(),
            list_path: "/v1/models".into(),
        }
    }
}

impl ModelsConfig {
    pub fn validate(&self) -> Result<(), String> {
        if self.rewrites.len() > MAX_REWRITES {
            return Err(format!("models.rewrites: at most {MAX_REWRITES} rules"));
        }
        for (i, rule) in self.rewrites.iter().enumerate() {
            rule.validate().map_err(|e| format!("models.rewrites: {e}"))?;
            if self.rewrites.iter().take(i).any(|earlier| earlier.model == rule.model) {
                return Err(format!("models.rewrites: '{}' is listed twice", rule.model));
            }
        }
        if self.priorities.len() + self.objectives.len() > MAX_PRIORITY_ENTRIES {
            return Err(format!("models.priorities and objectives: at most {MAX_PRIORITY_ENTRIES} entries"));
        }
        for (field, list) in [
            ("objective_headers", &self.objective_headers),
            ("session_header_aliases", &self.session_header_aliases),
            ("rewrite_headers", &self.rewrite_headers),
        ] {
            super::check_header_list(&format!("models.{field}"), list)?;
        }
        super::check_optional_header("models.subset_header", &self.subset_header)?;
        super::check_optional_header("models.served_endpoint_header", &self.served_endpoint_header)?;
        for (field, name) in [
            ("subset_metadata_namespace", &self.subset_metadata_namespace),
            ("subset_metadata_key", &self.subset_metadata_key),
        ] {
            if name.len() > MAX_METADATA_NAME_BYTES || name.contains('\0') {
                return Err(format!("models.{field}: at most {MAX_METADATA_NAME_BYTES} bytes, no NUL"));
            }
        }
        let list_path = &self.list_path;
        if !list_path.is_empty() && (!super::is_absolute_visible_path(list_path) || list_path.contains('?')) {
            return Err(format!(
                "models.list_path '{list_path}': empty, or an absolute path of visible ASCII, no query"
            ));
        }
        if !self.subset_metadata_namespace.is_empty() && self.subset_metadata_key.is_empty() {
            return Err("models.subset_metadata_key: needed when subset_metadata_namespace is set".into());
        }
        Ok(())
    }

    /// The rewrite rule for `model`, if any.
    pub fn rewrite(&self, model: &str) -> Option<&ModelRewrite> {
        crate::models::rewrite::rule_for(&self.rewrites, model)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_json;

    #[test]
    fn rewrites_and_headers_are_checked() {
        let config: ModelsConfig = parse_json(
            br#"{"rewrites":[{"model":"p","targets":[{"model":"a","weight":1}]}],"unknown_model":"route_by_load"}"#,
        )
        .unwrap();
        config.validate().unwrap();
        assert!(config.rewrite("p").is_some());
        let twice: ModelsConfig = parse_json(
            br#"{"rewrites":[{"model":"p","targets":[{"model":"a","weight":1}]},{"model":"p","targets":[{"model":"b","weight":1}]}]}"#,
        )
        .unwrap();
        assert!(twice.validate().unwrap_err().contains("twice"));
        let bad: ModelsConfig = parse_json(br#"{"subset_header":"Bad Header"}"#).unwrap();
        assert!(bad.validate().is_err());
        let no_key: ModelsConfig =
            parse_json(br#"{"subset_metadata_namespace":"envoy.lb.subset_hint","subset_metadata_key":""}"#).unwrap();
        assert!(no_key.validate().unwrap_err().contains("subset_metadata_key"));
        let off: ModelsConfig = parse_json(br#"{"subset_metadata_namespace":"","subset_metadata_key":""}"#).unwrap();
        off.validate().unwrap();
        let paths =
            [("", true), ("/v1/models", true), ("v1/models", false), ("/v1/mo dels", false), ("/v1/m?a=1", false)];
        for (list_path, valid) in paths {
            let config = ModelsConfig { list_path: list_path.into(), ..ModelsConfig::default() };
            assert_eq!(config.validate().is_ok(), valid, "{list_path:?}");
        }
    }
}
