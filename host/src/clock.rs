//! Host time in milliseconds since the epoch.

use std::time::UNIX_EPOCH;

use proxy_wasm::hostcalls;

/// The host's wall clock; 0 if the host cannot tell (callers treat 0 as "long ago").
pub fn now_ms() -> u64 {
    hostcalls::get_current_time()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The host's clock in nanoseconds, to seed tie-breaking differently on every worker.
pub fn seed() -> u64 {
    hostcalls::get_current_time()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0x5eed, |d| d.as_nanos() as u64)
}
