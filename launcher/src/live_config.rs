//! Live reconfiguration: the filter's configuration replaced while Envoy runs, through
//! Envoy's extension config discovery (ECDS) from a watched folder.
//!
//! With [`EnvoyOptions::live_filter_dir`] set, the rendered Envoy configuration names the
//! filter by `config_discovery` (the template's `live_filter` section) and the filter itself
//! lives in `DIR/filter.yaml` (rendered from `envoy/filter-ecds.yaml.template`). A new
//! configuration is written next to it and moved over it in one rename, which is what
//! Envoy's watched folder reacts to. Envoy then builds the new filter: the plugin's
//! `on_configure` runs on the main thread first, and if it refuses the configuration Envoy
//! rejects the update (`update_rejected`) and keeps the old filter. Requests in flight finish
//! on the filter they started with; new ones take the new filter at once. The Wasm VMs stay
//! (same `vm_id` and module), so shared data (pod table, prefix ring, in-flight counts) is
//! kept, and the new configuration's workers replay the ring's recent decisions before their
//! first request (`picker::prefix::StartAt::Oldest`).

use std::path::Path;
use std::time::Duration;

use crate::envoy::{render, Envoy, EnvoyOptions};
use crate::http;

/// The file Envoy watches (in the live folder).
pub const FILTER_FILE: &str = "filter.yaml";
/// Written first, then renamed over [`FILTER_FILE`]: Envoy never reads a half-written file.
const STAGING_FILE: &str = ".filter.yaml.next";
/// Envoy's ECDS counters for the filter, in `/stats`.
const ECDS_STATS: &str = "extension_config_discovery.http_filter.envoy.filters.http.wasm.";
/// How long Envoy may take to see the moved file and accept or refuse it (a new filter
/// compiles nothing: the module is already loaded, so this is generous on a busy machine).
pub const APPLY_TIMEOUT: Duration = Duration::from_secs(20);

/// What Envoy did with a new configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    Accepted,
    /// Refused; the old configuration stays. The reason, from the plugin's log line.
    Refused(String),
}

fn ecds_template() -> std::path::PathBuf {
    crate::paths::workspace_root().join("envoy/filter-ecds.yaml.template")
}

/// Writes `config` as the filter's configuration into `dir` (created if needed) in one rename.
pub fn write_filter_config(options: &EnvoyOptions, dir: &Path, config: &serde_json::Value) -> Result<(), String> {
    let template = std::fs::read_to_string(ecds_template()).map_err(|e| format!("ECDS template: {e}"))?;
    let mut with_config = options.clone();
    with_config.filter_config = config.clone();
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let staging = dir.join(STAGING_FILE);
    std::fs::write(&staging, render(&template, &with_config)).map_err(|e| format!("{}: {e}", staging.display()))?;
    std::fs::rename(&staging, dir.join(FILTER_FILE)).map_err(|e| format!("rename into {}: {e}", dir.display()))
}

/// `(update_success, update_rejected)` of the filter's ECDS subscription.
fn ecds_counts(envoy: &Envoy) -> Result<(u64, u64), String> {
    let reply = http::get(&envoy.admin_url("/stats?filter=extension_config_discovery"), Duration::from_secs(5))?;
    let value = |name: &str| {
        reply.body.lines().find_map(|line| {
            let (stat, value) = line.split_once(": ")?;
            (stat.strip_prefix(ECDS_STATS)? == name).then(|| value.trim().parse::<u64>().ok()).flatten()
        })
    };
    Ok((value("update_success").unwrap_or(0), value("update_rejected").unwrap_or(0)))
}

/// Hands Envoy a new filter configuration and waits until it accepted or refused it.
pub fn apply(envoy: &Envoy, options: &EnvoyOptions, config: &serde_json::Value) -> Result<Applied, String> {
    let dir = options.live_filter_dir.as_ref().ok_or("this Envoy reads its filter configuration inline")?;
    let (accepted_before, refused_before) = ecds_counts(envoy)?;
    write_filter_config(options, dir, config)?;
    let mut outcome = None;
    crate::wait_until(APPLY_TIMEOUT, || match ecds_counts(envoy) {
        Ok((accepted, _)) if accepted > accepted_before => {
            outcome = Some(Applied::Accepted);
            true
        }
        Ok((_, refused)) if refused > refused_before => {
            outcome = Some(Applied::Refused(refusal_reason(envoy)));
            true
        }
        _ => false,
    });
    outcome.ok_or_else(|| format!("Envoy neither accepted nor refused the configuration within {APPLY_TIMEOUT:?}"))
}

/// The plugin's own words for the last refusal (its `on_configure` error), else Envoy's.
fn refusal_reason(envoy: &Envoy) -> String {
    let log = envoy.log();
    let line = log
        .lines()
        .rev()
        .find(|l| l.contains("wasm-epp filter: "))
        .or_else(|| log.lines().rev().find(|l| l.contains("config update rejected")));
    line.and_then(|l| l.split("wasm-epp filter: ").nth(1).or(Some(l))).unwrap_or("refused").trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_live_variant_names_the_filter_by_discovery_and_the_file_carries_it() {
        let template = std::fs::read_to_string(crate::paths::envoy_template()).unwrap();
        let mut options = EnvoyOptions::for_pool(&["127.0.0.1:8001".to_string()], 10000, 9901);
        let inline = render(&template, &options);
        assert!(inline.contains("allow_on_headers_stop_iteration") && !inline.contains("config_discovery"));
        let dir = crate::paths::run_dir("live-config-unit").unwrap();
        options.live_filter_dir = Some(dir.clone());
        let live = render(&template, &options);
        assert!(live.contains("config_discovery") && live.contains(&format!("{}/filter.yaml", dir.display())));
        assert!(live.contains("node: { id: wasm-epp"), "ECDS needs a node identity");
        assert_eq!(
            live.matches("envoy.filters.http.wasm\n").count(),
            inline.matches("envoy.filters.http.wasm\n").count()
        );
        write_filter_config(
            &options,
            &dir,
            &serde_json::json!({"pool": ["127.0.0.1:8001"], "debug_decision_header": true}),
        )
        .unwrap();
        let file = std::fs::read_to_string(dir.join(FILTER_FILE)).unwrap();
        assert!(file.contains(r#"value: '{"debug_decision_header":true,"pool":["127.0.0.1:8001"]}'"#), "{file}");
        assert!(file.contains("allow_on_headers_stop_iteration: true") && !dir.join(STAGING_FILE).exists());
    }
}
