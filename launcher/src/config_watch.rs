//! `make run`'s live configuration: the filter's configuration sits in a file
//! (`.run/filter-config.json`); each time it is saved, the new content is handed to Envoy
//! ([`crate::live_config`]) and the outcome printed. A file that is not JSON never reaches
//! Envoy, nor one changing what Envoy was started with ([`FIXED_AT_START`]); one the plugin
//! refuses is rejected by Envoy and the old configuration stays.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::envoy::{Envoy, EnvoyOptions};
use crate::envoy_options::DEFAULT_DESTINATION_HEADER;
use crate::live_config::{apply, Applied};
use crate::render::max_body_bytes;

/// The filter's keys that Envoy's own configuration was rendered from, which a new filter
/// configuration cannot change: the `pool` cluster's override_host policy and the header
/// strip follow the `destination_header` Envoy started with (a filter writing another one
/// would have every request routed by the cluster's fallback policy), and the cluster's
/// endpoints and the singleton's pool are the pods started (a filter naming others would
/// pick pods Envoy skips or never scrapes). Changing them takes a restart, as does raising
/// `max_body_bytes` (the pool route's buffer was sized from it: [`crate::render`]).
pub const FIXED_AT_START: [&str; 2] = ["destination_header", "pool"];

pub struct ConfigWatch {
    path: PathBuf,
    /// Modification time last looked at.
    seen: Option<SystemTime>,
    /// The configuration Envoy runs with (a save without a change is not re-sent).
    current: serde_json::Value,
}

impl ConfigWatch {
    /// Writes `initial` to `path` (pretty JSON, for editing) and watches it from now on.
    pub fn create(path: &Path, initial: &serde_json::Value) -> Result<Self, String> {
        let text = serde_json::to_string_pretty(initial).map_err(|e| e.to_string())?;
        std::fs::write(path, text + "\n").map_err(|e| format!("{}: {e}", path.display()))?;
        let seen = std::fs::metadata(path).and_then(|m| m.modified()).ok();
        Ok(Self { path: path.to_path_buf(), seen, current: initial.clone() })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Looks at the file once; if it was saved with a new configuration, applies it and
    /// returns what happened, to print.
    pub fn poll(&mut self, envoy: &Envoy, options: &EnvoyOptions) -> Option<String> {
        let config = match self.saved_change(options)? {
            Ok(config) => config,
            Err(line) => return Some(line),
        };
        Some(match apply(envoy, options, &config) {
            Ok(Applied::Accepted) => {
                self.current = config;
                "config: applied (no restart; requests in flight finish on the old one)".to_string()
            }
            Ok(Applied::Refused(reason)) => format!("config: refused, the running one stays: {reason}"),
            Err(error) => format!("config: {error}"),
        })
    }

    /// The configuration saved since the last look, if it is new and Envoy can follow it
    /// (else the line saying why not); `None` when there is nothing new.
    fn saved_change(&mut self, options: &EnvoyOptions) -> Option<Result<serde_json::Value, String>> {
        let modified = std::fs::metadata(&self.path).and_then(|m| m.modified()).ok();
        if modified == self.seen {
            return None;
        }
        self.seen = modified;
        let text = std::fs::read_to_string(&self.path).ok()?;
        let config: serde_json::Value = match serde_json::from_str(&text) {
            Ok(config) => config,
            Err(error) => {
                return Some(Err(format!(
                    "config: {} is not JSON ({error}); the running one stays",
                    self.path.display()
                )))
            }
        };
        if config == self.current {
            return None;
        }
        if let Some(reason) = unfollowable_change(&config, options) {
            return Some(Err(format!("config: refused, the running one stays: {reason}")));
        }
        Some(Ok(config))
    }
}

/// Why Envoy, as `options` started it, cannot follow the filter configuration `config`: a
/// key of [`FIXED_AT_START`] that differs from what it was rendered with.
fn unfollowable_change(config: &serde_json::Value, options: &EnvoyOptions) -> Option<String> {
    let header = config.get("destination_header").and_then(|h| h.as_str()).unwrap_or(DEFAULT_DESTINATION_HEADER);
    if header != options.destination_header {
        return Some(format!(
            "destination_header cannot change while Envoy runs: its pool cluster and header strip follow {}, \
             which it was started with (restart to change it)",
            options.destination_header
        ));
    }
    if let Err(reason) = options.serves_filter(config) {
        return Some(format!("{reason} (restart with a listener of your own to go past it)"));
    }
    // The same pods in any order: the cluster's membership is what counts.
    let mut pods: Vec<&str> = config
        .get("pool")
        .and_then(|pool| pool.as_array())
        .map(|pool| pool.iter().filter_map(|pod| pod.as_str()).collect())
        .unwrap_or_default();
    let mut started: Vec<&str> = options.pool.iter().map(String::as_str).collect();
    pods.sort_unstable();
    started.sort_unstable();
    if pods != started {
        return Some(format!(
            "pool cannot change while Envoy runs: its pool cluster and the singleton have the pods it was \
             started with, {} (restart to change them)",
            started.join(", ")
        ));
    }
    // The pool route buffers a body up to the max_body_bytes Envoy started with, plus one
    // read (request_body_buffer_limit): past it, bodies the filter would read get Envoy's 413.
    let (wanted, started) = (max_body_bytes(config), max_body_bytes(&options.filter_config));
    if wanted > started {
        return Some(format!(
            "max_body_bytes cannot grow past {started} while Envoy runs: the pool route's \
             request_body_buffer_limit was sized from it, and larger bodies would get Envoy's 413 \
             (restart to raise it)"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The watcher's answer to `config` saved into its file.
    fn save(
        watch: &mut ConfigWatch,
        options: &EnvoyOptions,
        config: serde_json::Value,
    ) -> Option<Result<serde_json::Value, String>> {
        std::fs::write(watch.path(), config.to_string()).unwrap();
        watch.seen = None; // as if the file's time had moved, whatever its resolution
        watch.saved_change(options)
    }

    #[test]
    fn a_change_envoy_cannot_follow_is_refused_before_it_reaches_envoy() {
        let pods = ["127.0.0.1:8001".to_string(), "127.0.0.1:8002".to_string()];
        let options = EnvoyOptions::for_pool(&pods, 10_000, 9_901);
        let dir = crate::paths::run_dir("config-watch-unit").unwrap();
        let mut watch = ConfigWatch::create(&dir.join("filter-config.json"), &options.filter_config).unwrap();

        let other_header = serde_json::json!({ "pool": pods, "destination_header": "x-other-endpoint" });
        let refused = save(&mut watch, &options, other_header);
        assert!(
            matches!(&refused, Some(Err(line)) if line.contains("refused") && line.contains("destination_header")),
            "{refused:?}"
        );

        let another_pod = serde_json::json!({ "pool": [pods[0], "127.0.0.1:8009"] });
        let refused = save(&mut watch, &options, another_pod);
        assert!(matches!(&refused, Some(Err(line)) if line.contains("pool cannot change")), "{refused:?}");
        let no_pool = serde_json::json!({ "weights": { "queue": 2.0 } });
        assert!(matches!(save(&mut watch, &options, no_pool), Some(Err(_))));
        let larger_bodies = serde_json::json!({ "pool": pods, "max_body_bytes": 8u64 << 20 });
        let refused = save(&mut watch, &options, larger_bodies);
        assert!(matches!(&refused, Some(Err(line)) if line.contains("max_body_bytes cannot grow")), "{refused:?}");
        let smaller_bodies = serde_json::json!({ "pool": pods, "max_body_bytes": 1u64 << 20 });
        assert!(matches!(save(&mut watch, &options, smaller_bodies), Some(Ok(_))));

        // Bodies the plugin would buffer past the listener's 16 MiB: Envoy's 413, not a route.
        let large_bodies = serde_json::json!({ "pool": pods, "max_body_bytes": 32 << 20 });
        let refused = save(&mut watch, &options, large_bodies);
        assert!(matches!(&refused, Some(Err(line)) if line.contains("max_body_bytes")), "{refused:?}");

        // The same pods in another order, the default header written out, other weights: on to Envoy.
        let followable = serde_json::json!({
            "pool": [pods[1], pods[0]],
            "destination_header": "x-gateway-destination-endpoint",
            "weights": { "queue": 2.0 }
        });
        assert!(matches!(save(&mut watch, &options, followable.clone()), Some(Ok(config)) if config == followable));
        // Unchanged, or not JSON.
        assert_eq!(save(&mut watch, &options, options.filter_config.clone()), None);
        std::fs::write(watch.path(), "{").unwrap();
        watch.seen = None;
        assert!(matches!(watch.saved_change(&options), Some(Err(line)) if line.contains("is not JSON")));
    }
}
