//! The pool service's root-context logic: configure, tick, scrape, publish, relay.
//!
//! As the singleton it is the root context itself. Embedded in the filter (no singleton),
//! the elected root calls [`PoolService::configure_embedded`], [`PoolService::tick`] and
//! forwards its HTTP-call answers and queue wake-ups; its tick may then run faster than
//! `poll_interval_ms`, so scrape rounds are gated by time, not by tick count.

use std::time::Duration;

use picker::config::{parse_json, PollerConfig};
use picker::poller::{PoolPoller, ScrapeOutcome, ScrapeResult};
use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, RootContext};
use proxy_wasm::types::{BufferType, ContextType, MapType};
use wasm_epp_host::{now_ms, Counter, Gauge, ProxyStore};

use crate::discovery::Discovery;
use crate::publish::publish;
use crate::relay::EventRelay;

struct Stats {
    scrapes_ok: Counter,
    scrapes_failed: Counter,
    publishes: Counter,
    pods_healthy: Gauge,
    pods_total: Gauge,
    data_age_ms: Gauge,
}

impl Stats {
    fn define() -> Self {
        Self {
            scrapes_ok: Counter::define("wasm_epp.poll_success"),
            scrapes_failed: Counter::define("wasm_epp.poll_failure"),
            publishes: Counter::define("wasm_epp.table_publishes"),
            pods_healthy: Gauge::define("wasm_epp.pods_healthy"),
            pods_total: Gauge::define("wasm_epp.pods_total"),
            data_age_ms: Gauge::define("wasm_epp.data_age_ms"),
        }
    }
}

#[derive(Default)]
pub struct PoolService {
    poller: Option<PoolPoller>,
    /// Carries the workers' routing decisions into the prefix ring.
    relay: Option<EventRelay>,
    stats: Option<Stats>,
    /// Set when the pool comes from Kubernetes instead of the static `pool`.
    discovery: Option<Discovery>,
    /// When the next scrape round may start (host ms): rounds follow `poll_interval_ms`
    /// whatever the tick period of the root context running this service.
    next_round_ms: u64,
}

impl PoolService {
    fn configure(&mut self, bytes: &[u8]) -> Result<(), String> {
        let config: PollerConfig = parse_json(bytes)?;
        hostcalls::set_tick_period(Duration::from_millis(config.poll_interval_ms))
            .map_err(|e| format!("cannot set tick period: {e:?}"))?;
        self.configure_embedded(config)
    }

    /// Starts the service from a parsed configuration without touching the tick period (the
    /// root context running it owns that; tick at least every `poll_interval_ms`).
    pub fn configure_embedded(&mut self, config: PollerConfig) -> Result<(), String> {
        let pool = config.validate().map_err(|e| format!("invalid configuration: {e}"))?;
        self.discovery = config.kubernetes.clone().map(Discovery::new).transpose()?;
        if let Some(discovery) = &self.discovery {
            log::info!("wasm-epp singleton: pool from kubernetes: {}", discovery.describe());
        }
        log::info!(
            "wasm-epp singleton configured: {} pods, scrape {} every {} ms via cluster {}",
            pool.len(),
            config.metrics_path,
            config.poll_interval_ms,
            config.metrics_cluster
        );
        self.stats = Some(Stats::define());
        self.poller = Some(PoolPoller::new(config, pool));
        if self.relay.is_none() {
            // Without the relay, workers still route on their own decisions: not fatal.
            match EventRelay::start() {
                Ok(relay) => self.relay = Some(relay),
                Err(reason) => log::warn!("wasm-epp singleton: prefix decisions not shared between workers: {reason}"),
            }
        }
        Ok(())
    }

    fn dispatch_scrapes(&mut self, now: u64) {
        let Some(poller) = self.poller.as_mut() else { return };
        let config = poller.config().clone();
        for address in poller.due(now) {
            let headers = vec![
                (":method", "GET"),
                (":path", config.metrics_path.as_str()),
                (":authority", address.as_str()),
                (config.destination_header.as_str(), address.as_str()),
                ("accept", "text/plain"),
            ];
            let timeout = Duration::from_millis(config.timeout_ms);
            match hostcalls::dispatch_http_call(&config.metrics_cluster, headers, None, vec![], timeout) {
                Ok(token) => poller.scrape_started(&address, token, now),
                Err(status) => {
                    if let Some(stats) = &self.stats {
                        stats.scrapes_failed.increment();
                    }
                    poller.scrape_not_sent(&address, &format!("dispatch refused: {status:?}"));
                }
            }
        }
    }

    fn publish_if_changed(&mut self, now: u64) {
        let Some(poller) = self.poller.as_mut() else { return };
        let Some(table) = poller.take_table(now) else { return };
        if let Err(error) = publish(&ProxyStore, &table) {
            log::warn!("wasm-epp singleton: publish failed: {error:?}");
            poller.touch();
            return;
        }
        let Some(stats) = &self.stats else { return };
        stats.publishes.increment();
        let healthy = table.pods.iter().filter(|p| p.healthy).count();
        stats.pods_healthy.set(healthy as u64);
        stats.pods_total.set(table.pods.len() as u64);
        let oldest = table.pods.iter().filter(|p| p.healthy).map(|p| now.saturating_sub(p.last_success_ms)).max();
        stats.data_age_ms.set(oldest.unwrap_or(0));
    }
}

impl PoolService {
    /// One tick: re-list the pool when due, publish what the last round learned (even if a
    /// scrape is still outstanding), start the next round when `poll_interval_ms` has passed.
    pub fn tick(&mut self, now: u64) {
        if let (Some(discovery), Some(poller)) = (self.discovery.as_mut(), self.poller.as_mut()) {
            discovery.on_tick(now, poller);
        }
        self.publish_if_changed(now);
        let Some(interval) = self.poller.as_ref().map(|p| p.config().poll_interval_ms) else { return };
        if now < self.next_round_ms {
            return;
        }
        // A tick a little early (timer jitter) still starts the round: 10% slack.
        self.next_round_ms = now.saturating_add(interval - interval / 10);
        self.dispatch_scrapes(now);
    }

    /// Routes a queue wake-up to the relay, if it is the relay's queue.
    pub fn queue_ready(&mut self, queue_id: u32) {
        if let Some(relay) = self.relay.as_mut().filter(|r| r.queue() == queue_id) {
            relay.drain();
        }
    }

    /// Whether an HTTP-call token belongs to this service (a scrape or an API server list).
    pub fn owns_call(&self, token: u32) -> bool {
        self.poller.as_ref().is_some_and(|p| p.owns_scrape(token))
            || self.discovery.as_ref().is_some_and(|d| d.owns(token))
    }

    /// An HTTP call's answer arrived (its headers and body are readable now).
    pub fn http_response(&mut self, token: u32, body_size: usize) {
        let now = now_ms();
        let Some(poller) = self.poller.as_mut() else { return };
        if let Some(discovery) = self.discovery.as_mut().filter(|d| d.owns(token)) {
            discovery.on_response(token, body_size, now, poller);
            // A pod that left must stop getting requests now, not at the next tick.
            self.publish_if_changed(now);
            return;
        }
        let status = hostcalls::get_map_value(MapType::HttpCallResponseHeaders, ":status")
            .ok()
            .flatten()
            .and_then(|s| s.parse::<u16>().ok());
        let too_big = body_size as u64 > poller.config().max_metrics_bytes;
        // Read at most one byte past the limit: enough for the poller to refuse it.
        let read_size = body_size.min(usize::try_from(poller.config().max_metrics_bytes).unwrap_or(usize::MAX) + 1);
        let body = if too_big || status != Some(200) {
            Vec::new()
        } else {
            hostcalls::get_buffer(BufferType::HttpCallResponseBody, 0, read_size).ok().flatten().unwrap_or_default()
        };
        let result = match status {
            Some(_) if too_big => ScrapeResult::Answered { status: 413, body: &[] },
            Some(status) => ScrapeResult::Answered { status, body: &body },
            None => ScrapeResult::NoAnswer,
        };
        let outcome = poller.on_scrape(token, result, now);
        if let Some(stats) = &self.stats {
            match &outcome {
                ScrapeOutcome::Success => stats.scrapes_ok.increment(),
                ScrapeOutcome::Failure(reason) => {
                    stats.scrapes_failed.increment();
                    log::debug!("wasm-epp singleton: scrape failed: {reason}");
                }
                ScrapeOutcome::Unknown => {}
            }
        }
        if poller.round_complete() {
            self.publish_if_changed(now);
        }
    }
}

impl Context for PoolService {
    fn on_http_call_response(&mut self, token: u32, _headers: usize, body_size: usize, _trailers: usize) {
        self.http_response(token, body_size);
    }
}

impl RootContext for PoolService {
    fn on_queue_ready(&mut self, queue_id: u32) {
        self.queue_ready(queue_id);
    }

    fn on_vm_start(&mut self, _size: usize) -> bool {
        true
    }

    fn on_configure(&mut self, size: usize) -> bool {
        let bytes = hostcalls::get_buffer(BufferType::PluginConfiguration, 0, size).ok().flatten().unwrap_or_default();
        match self.configure(&bytes) {
            Ok(()) => true,
            Err(reason) => {
                log::error!("wasm-epp singleton: {reason}");
                false
            }
        }
    }

    fn on_tick(&mut self) {
        self.tick(now_ms());
    }

    fn get_type(&self) -> Option<ContextType> {
        None
    }
}
