//! No-singleton mode: the filter's root contexts elect one of themselves to run the pool
//! service (discover, scrape, publish, relay), for setups that cannot install a bootstrap
//! singleton (Istio `WasmPlugin`-style, or any Envoy where only the HTTP filter is loaded).
//!
//! Every root context (one per worker, one on the main thread) contends for a lease in
//! shared data on each tick (`picker::lease`). The holder runs `wasm_epp_poller::PoolService`
//! exactly as the singleton would; the others only route. A holder that stops ticking loses
//! the lease at expiry and another root takes over with a fresh service.

use picker::config::PollerConfig;
use picker::lease::{Lease, Role};
use wasm_epp_host::ProxyStore;
use wasm_epp_poller::PoolService;

/// Lease lifetime in poll intervals: a leader that misses this many in a row is presumed gone.
const LEASE_POLL_INTERVALS: u64 = 5;
/// The shortest lease, whatever the poll interval: several ticks of a busy worker.
const MIN_LEASE_MS: u64 = 500;

pub struct ElectedPoller {
    lease: Lease,
    config: PollerConfig,
    service: Option<PoolService>,
}

impl ElectedPoller {
    /// `me` identifies this root context among the contenders (non-zero, unique).
    pub fn new(me: u64, config: PollerConfig) -> Self {
        let ttl = config.poll_interval_ms.saturating_mul(LEASE_POLL_INTERVALS).max(MIN_LEASE_MS);
        Self { lease: Lease::new(me, ttl), config, service: None }
    }

    pub fn tick(&mut self, now: u64) {
        match self.lease.tick(&ProxyStore, now) {
            Role::Leader => {
                if self.service.is_none() {
                    let mut service = PoolService::default();
                    match service.configure_embedded(self.config.clone()) {
                        Ok(()) => log::info!("wasm-epp filter: elected to poll the pool (no singleton)"),
                        Err(reason) => {
                            log::error!("wasm-epp filter: elected but cannot poll: {reason}");
                            return;
                        }
                    }
                    self.service = Some(service);
                }
                if let Some(service) = self.service.as_mut() {
                    service.tick(now);
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

    pub fn http_response(&mut self, token: u32, body_size: usize) {
        if let Some(service) = self.service.as_mut().filter(|s| s.owns_call(token)) {
            service.http_response(token, body_size);
        }
    }

    pub fn queue_ready(&mut self, queue_id: u32) {
        if let Some(service) = self.service.as_mut() {
            service.queue_ready(queue_id);
        }
    }

    /// Hands the lease over at shutdown, so another root takes over at once.
    pub fn release(&self) {
        self.lease.release(&ProxyStore);
    }
}
