//! No-singleton mode: root contexts elect one of themselves to run the pool service
//! (discover, scrape, publish, relay), for setups that cannot install a bootstrap singleton
//! (Istio `WasmPlugin`-style, or any Envoy where only the HTTP filter is loaded).
//!
//! Every root context (one per worker, one on the main thread) contends for a lease in
//! shared data on each tick (`picker::lease`) under an id taken from a shared counter, so
//! no two VMs share one. The holder runs [`PoolService`] exactly as the singleton would;
//! the others only route. A holder that stops ticking loses the lease at expiry and another
//! root takes over with a fresh service, which publishes nothing until its first round of
//! scrapes is done: workers keep the last good table through the handover.

use picker::config::PollerConfig;
use picker::lease::{Lease, Role};
use picker::vm_id::unique_vm_id;
use wasm_epp_host::Host;

use crate::PoolService;

/// Lease lifetime in poll intervals: a leader that misses this many in a row is presumed gone.
const LEASE_POLL_INTERVALS: u64 = 5;
/// The shortest lease, whatever the poll interval: several ticks of a busy worker.
const MIN_LEASE_MS: u64 = 500;

pub struct ElectedPoller {
    /// Set once this root has a contender id (the id counter may refuse for a tick).
    lease: Option<Lease>,
    ttl_ms: u64,
    config: PollerConfig,
    service: Option<PoolService>,
}

impl ElectedPoller {
    pub fn new(config: PollerConfig) -> Self {
        let ttl_ms = config.poll_interval_ms.saturating_mul(LEASE_POLL_INTERVALS).max(MIN_LEASE_MS);
        Self { lease: None, ttl_ms, config, service: None }
    }

    pub fn tick(&mut self, host: &dyn Host, now: u64) {
        if self.lease.is_none() {
            self.lease = unique_vm_id(host).map(|id| Lease::new(id, self.ttl_ms));
        }
        let Some(lease) = &self.lease else { return };
        match lease.tick(host, now) {
            Role::Leader => {
                if self.service.is_none() {
                    let mut service = PoolService::default();
                    match service.configure_embedded(host, self.config.clone()) {
                        Ok(()) => log::info!("wasm-epp filter: elected to poll the pool (no singleton)"),
                        Err(reason) => {
                            log::error!("wasm-epp filter: elected but cannot poll: {reason}");
                            return;
                        }
                    }
                    self.service = Some(service);
                }
                if let Some(service) = self.service.as_mut() {
                    service.tick(host, now);
                }
            }
            Role::Claimed => {}
            Role::Follower => {
                if self.service.take().is_some() {
                    log::info!("wasm-epp filter: lost the poller lease; another root polls now");
                }
            }
        }
    }

    pub fn http_response(&mut self, host: &dyn Host, token: u32, body_size: usize) {
        if let Some(service) = self.service.as_mut().filter(|s| s.owns_call(token)) {
            service.http_response(host, token, body_size);
        }
    }

    pub fn queue_ready(&mut self, host: &dyn Host, queue_id: u32) {
        if let Some(service) = self.service.as_mut() {
            service.queue_ready(host, queue_id);
        }
    }

    /// Hands the lease over at shutdown, so another root takes over at once.
    pub fn release(&self, host: &dyn Host) {
        if let Some(lease) = &self.lease {
            lease.release(host);
        }
    }

    /// Whether this root runs the pool service now.
    pub fn is_leader(&self) -> bool {
        self.service.is_some()
    }
}
