//! `FILTER_CONFIG=path.json make run`: a filter configuration to start with (learning, flow
//! control, weights...), its fields laid over the configuration `make run` writes, whose own
//! fields (the pool it started, a pool's name) stay. Checked as the plugin checks its
//! configuration before anything starts, so a typo is one line naming the file and the field,
//! not a refused Envoy or a VM that will not start.

use std::path::{Path, PathBuf};

use picker::config::{parse_json, FilterConfig};
use serde_json::{Map, Value};

use crate::envoy::EnvoyOptions;

/// A filter configuration file's fields.
#[derive(Debug, Clone, PartialEq)]
pub struct FilterFile {
    pub path: PathBuf,
    fields: Map<String, Value>,
}

impl FilterFile {
    /// Reads `path`: a JSON object (docs/configuration.md), e.g. `{"learning": {"enabled": true}}`.
    pub fn read(path: &Path) -> Result<Self, String> {
        let named = |reason: String| format!("FILTER_CONFIG {}: {reason}", path.display());
        let text = std::fs::read_to_string(path).map_err(|e| named(e.to_string()))?;
        let fields = match serde_json::from_str(&text) {
            Ok(Value::Object(fields)) => fields,
            Ok(_) => return Err(named("not a JSON object (the filter's configuration is one)".into())),
            Err(error) => return Err(named(format!("not JSON ({error})"))),
        };
        // Fields and types now, so the line and column are the file's; bounds with the pool
        // (`check`).
        parse_json::<FilterConfig>(text.as_bytes()).map_err(|e| named(format!("the plugin would refuse it: {e}")))?;
        Ok(Self { path: path.to_path_buf(), fields })
    }

    /// This file's fields over `base` (a filter configuration `make run` wrote), `base`'s own
    /// fields kept: Envoy's cluster and the singleton have the pods `make run` started.
    pub fn over(&self, base: &Value) -> Value {
        let mut merged = self.fields.clone();
        for (key, value) in base.as_object().into_iter().flatten() {
            merged.insert(key.clone(), value.clone());
        }
        Value::Object(merged)
    }

    /// Lays this file over every filter configuration of `options` (the one pool's, or each
    /// of several pools'), and has the pool cluster follow its `destination_header`.
    pub fn apply(&self, options: &mut EnvoyOptions) {
        if options.pools.is_empty() {
            options.filter_config = self.over(&options.filter_config);
        }
        for pool in &mut options.pools {
            pool.filter_config = self.over(&pool.filter_config);
        }
        if let Some(header) = self.fields.get("destination_header").and_then(Value::as_str) {
            options.destination_header = header.to_string();
        }
    }
}

/// Whether the plugin would start with every filter configuration of `options`; the reason
/// it would not, in its own words.
pub fn check(options: &EnvoyOptions) -> Result<(), String> {
    let configs = match options.pools.is_empty() {
        true => vec![&options.filter_config],
        false => options.pools.iter().map(|pool| &pool.filter_config).collect(),
    };
    for config in configs {
        let parsed: FilterConfig = parse_json(config.to_string().as_bytes())?;
        parsed.validate().map_err(|reason| format!("invalid configuration: {reason}"))?;
        options.serves_filter(config)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envoy::ServedPool;
    use serde_json::json;

    fn file(name: &str, text: &str) -> PathBuf {
        let path = crate::paths::run_dir(&format!("filter-file-{name}")).unwrap().join("filter.json");
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn the_files_fields_go_over_make_runs_which_keep_the_pods_it_started() {
        let text = r#"{"learning": {"enabled": true}, "pool": ["10.9.9.9:80"], "destination_header": "x-to"}"#;
        let learning = FilterFile::read(&file("over", text)).unwrap();
        let pods = ["127.0.0.1:8001".to_string()];
        let mut options = EnvoyOptions::for_pool(&pods, 10_000, 9_901);
        learning.apply(&mut options);
        let expected = json!({"learning": {"enabled": true}, "pool": pods, "destination_header": "x-to"});
        assert_eq!(options.filter_config, expected);
        assert_eq!(options.destination_header, "x-to", "the pool cluster follows the header the filter writes");
        assert_eq!(check(&options), Ok(()));

        let alpha = ServedPool::by_header("alpha", &pods, "x-pool");
        let mut several = EnvoyOptions::for_pools(vec![alpha], 10_000, 9_901);
        learning.apply(&mut several);
        let config = &several.pools[0].filter_config;
        assert_eq!((config["pool"].clone(), config["pool_name"].clone()), (json!(pods), json!("alpha")));
        assert_eq!(config["learning"], json!({"enabled": true}));
        assert_eq!(several.filter_config, Value::Null, "several pools have no top-level filter");
    }

    #[test]
    fn a_file_the_plugin_would_refuse_is_named_with_its_reason() {
        let pods = ["127.0.0.1:8001".to_string()];
        let refusal = |name: &str, text: &str| {
            let path = file(name, text);
            let mut options = EnvoyOptions::for_pool(&pods, 10_000, 9_901);
            let read = FilterFile::read(&path).map(|f| f.apply(&mut options));
            read.and_then(|()| check(&options)).unwrap_err()
        };
        assert!(refusal("typo", r#"{"lerning": {}}"#).contains("unknown field `lerning`"));
        let wrong_type =
            refusal("type", "{\n  \"weights\": {\"queue\": 1},\n  \"learning\": {\"enabled\": \"yes\"}\n}");
        assert!(wrong_type.contains("expected a boolean at line 3"), "the file's own line: {wrong_type}");
        assert!(refusal("bounds", r#"{"weights": {"queue": 500}}"#).contains("weights.queue = 500"));
        // The plugin takes 32 MiB; make run's listener does not (Envoy's 413 in between).
        let large = refusal("large-bodies", r#"{"max_body_bytes": 33554432, "max_buffered_bytes": 268435456}"#);
        assert!(large.contains("max_body_bytes = 33554432") && large.contains("413"), "{large}");
        let not_json = refusal("not-json", "{learning: on}");
        assert!(not_json.starts_with("FILTER_CONFIG ") && not_json.contains("filter.json: not JSON"), "{not_json}");
        assert!(refusal("array", "[]").contains("not a JSON object"));
        let missing = FilterFile::read(Path::new("/nonexistent/filter.json")).unwrap_err();
        assert!(missing.starts_with("FILTER_CONFIG /nonexistent/filter.json: "), "{missing}");
    }
}
