//! From the plugin's configuration bytes to a [`Worker`], or a reason to refuse to start.

use picker::config::{parse_json, FilterConfig};
use wasm_epp_host::{Host, HostError};
use wasm_epp_poller::pod_api_key::PodApiKey;

use crate::worker::Worker;

/// Why the filter refuses to start (logged by the glue; Envoy then fails the plugin).
#[derive(Debug)]
pub enum ConfigureError {
    /// The configuration could not be read from the host.
    Unreadable(HostError),
    /// Not JSON, or a field unknown or of the wrong type.
    Parse(String),
    /// A value out of its bounds.
    Invalid(String),
    /// The tick that refreshes tables and shares decisions could not be started.
    Tick(HostError),
}

impl std::fmt::Display for ConfigureError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unreadable(error) => write!(f, "cannot read plugin configuration: {error}"),
            Self::Parse(reason) => write!(f, "{reason}"),
            Self::Invalid(reason) => write!(f, "invalid configuration: {reason}"),
            Self::Tick(error) => write!(f, "cannot set tick period: {error}"),
        }
    }
}

/// Reads, parses and validates the configuration, starts the tick (at the shorter of the
/// prefix sync interval and, in no-singleton mode, the poll interval) and builds the worker.
pub fn configure(host: &dyn Host, size: usize, seed: u64) -> Result<Worker, ConfigureError> {
    let bytes = host.plugin_configuration(size).map_err(ConfigureError::Unreadable)?;
    let mut config: FilterConfig = parse_json(&bytes).map_err(ConfigureError::Parse)?;
    // The no-singleton pool service serves the filter's pool: it is named alike unless told.
    if let Some(poller) = config.poller.as_mut().filter(|p| p.pool_name.is_empty()) {
        poller.pool_name = config.pool_name.clone();
    }
    let pool = config.validate().map_err(ConfigureError::Invalid)?;
    // The no-singleton pool service starts only when this root is elected, and would then
    // fail on every tick: a pods' API key it cannot read is refused now, with the rest.
    if let Some(poller) = &config.poller {
        PodApiKey::from_config(host, poller).map_err(|e| ConfigureError::Invalid(format!("poller: {e}")))?;
    }
    for warning in config.warnings() {
        log::warn!("wasm-epp filter: {warning}");
    }
    host.set_tick_period_ms(tick_period_ms(&config)).map_err(ConfigureError::Tick)?;
    let vm_id = host.vm_id().unwrap_or_else(|| "wasm-epp".to_string());
    log::info!(
        "wasm-epp filter configured: fallback pool of {} pods, weights {:?}, prefix affinity {}, vm_id {vm_id}{}",
        pool.len(),
        config.weights,
        if config.prefix.enabled { "on" } else { "off (sessions and stored responses not followed)" },
        if config.pool_name.is_empty() { String::new() } else { format!(", pool {}", config.pool_name) },
    );
    let worker = Worker::new(config, pool, vm_id, seed);
    worker.clock_ms.set(host.now_ms());
    Ok(worker)
}

/// The tick period when nothing waits: the shorter of the prefix sync interval and, in
/// no-singleton mode, the poll interval (flow control ticks faster while requests wait).
pub fn tick_period_ms(config: &FilterConfig) -> u64 {
    let poll = config.poller.as_ref().map_or(u64::MAX, |p| p.poll_interval_ms);
    config.prefix.sync_interval_ms.min(poll)
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_epp_host::MockHost;

    #[test]
    fn a_no_singleton_pool_service_whose_pods_api_key_is_missing_is_refused_at_start() {
        let host = MockHost::new();
        let config = br#"{"pool": ["10.0.0.1:8000"],
                          "poller": {"pool": ["10.0.0.1:8000"], "pods_api_key_env": "VLLM_API_KEY"}}"#;
        *host.configuration.borrow_mut() = config.to_vec();
        match configure(&host, config.len(), 1) {
            Err(ConfigureError::Invalid(reason)) => assert!(reason.contains("host_env_keys"), "{reason}"),
            Err(other) => panic!("{other}"),
            Ok(_) => panic!("started without the key its pool service needs"),
        }
        host.env.borrow_mut().insert("VLLM_API_KEY".into(), "sk-pool-key".into());
        assert!(configure(&host, config.len(), 1).is_ok());
    }
}
