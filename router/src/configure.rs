//! From the plugin's configuration bytes to a [`Worker`], or a reason to refuse to start.

use picker::config::{parse_json, FilterConfig};
use wasm_epp_host::{Host, HostError};

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
    host.set_tick_period_ms(tick_period_ms(&config)).map_err(ConfigureError::Tick)?;
    let vm_id = host.vm_id().unwrap_or_else(|| "wasm-epp".to_string());
    log::info!(
        "wasm-epp filter configured: fallback pool of {} pods, weights {:?}, prefix affinity {}, vm_id {vm_id}{}",
        pool.len(),
        config.weights,
        if config.prefix.enabled { "on" } else { "off" },
        if config.pool_name.is_empty() { String::new() } else { format!(", pool {}", config.pool_name) },
    );
    Ok(Worker::new(config, pool, vm_id, seed))
}

/// The tick period when nothing waits: the shorter of the prefix sync interval and, in
/// no-singleton mode, the poll interval (flow control ticks faster while requests wait).
pub fn tick_period_ms(config: &FilterConfig) -> u64 {
    let poll = config.poller.as_ref().map_or(u64::MAX, |p| p.poll_interval_ms);
    config.prefix.sync_interval_ms.min(poll)
}
