//! Starts and stops the pieces of a local wasm-epp setup as plain processes.
//!
//! No Docker engine exists on the machines this project is built on, so `make run`, the
//! end-to-end tests and the benchmarks all start the simulated pods ([`pods`]) and the
//! real Envoy binary ([`envoy`]) themselves on 127.0.0.1, and stop them by process id when
//! the handle is dropped ([`process`]). [`http`] is a small blocking client for checks.

#![forbid(unsafe_code)]

pub mod baseline;
pub mod compose;
pub mod config_watch;
pub mod envoy;
pub mod envoy_options;
pub mod fake_kube;
pub mod http;
pub mod live_config;
pub mod paths;
pub mod pods;
pub mod proc_stats;
pub mod process;
pub mod replicas;

/// Ports handed out by [`free_port`]: below Linux's ephemeral range (32768–60999 by
/// default), so no outgoing connection's source port and no other program's "any free port"
/// can take one between the time it is chosen and the time a server binds it (a replica
/// cluster chooses every replica's ports before starting the first).
const PORT_RANGE: std::ops::Range<u32> = 10_000..32_000;

/// A free TCP port on 127.0.0.1: free when this returns, and not returned twice by one
/// process (each call moves on; each process starts at its own place in [`PORT_RANGE`]).
pub fn free_port() -> std::io::Result<u16> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let span = PORT_RANGE.end - PORT_RANGE.start;
    let start = std::process::id().wrapping_mul(7_919) % span;
    for _ in 0..span {
        let offset = start.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed)) % span;
        let Ok(port) = u16::try_from(PORT_RANGE.start + offset) else { continue };
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    Ok(std::net::TcpListener::bind(("127.0.0.1", 0))?.local_addr()?.port())
}

/// Polls `check` every 50 ms until it is true or `timeout` passes.
pub fn wait_until(timeout: std::time::Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if check() {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
