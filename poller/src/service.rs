//! The pool service: configure, tick, scrape, publish, relay, heartbeat.
//!
//! As the singleton it is driven by `shared-state`'s root context. Embedded in the filter
//! (no singleton), the elected root calls [`PoolService::configure_embedded`],
//! [`PoolService::tick`] and forwards its HTTP-call answers and queue wake-ups; its tick may
//! then run faster than `poll_interval_ms`, so scrape rounds are gated by time, not by tick
//! count. Every host call goes through the [`Host`] passed in.

use picker::address::PodAddress;
use picker::config::{parse_json, PollerConfig};
use picker::keys;
use picker::pod_table::{encode_version, PodTable};
use picker::poller::{PodEvent, PoolPoller, ScrapeOutcome, ScrapeResult};
use wasm_epp_host::{Counter, Gauge, Host, Metrics};

use crate::discovery::{Discovery, Env};
use crate::peers::PeerExchange;
use crate::pod_api_key::PodApiKey;
use crate::pod_gauges::PodGauges;
use crate::publish::publish;
use crate::relay::EventRelay;

struct Stats {
    scrapes_ok: Counter,
    scrapes_failed: Counter,
    publishes: Counter,
    pods_healthy: Gauge,
    pods_total: Gauge,
    /// Pods naming more models or adapters than their lists keep (`max_names_per_pod`,
    /// `max_models_bytes`): requests for names no pod lists go to them, without affinity.
    pods_names_cut: Gauge,
    /// Pods whose last good page gave a series twice (a broken exporter; each is warned of
    /// once): the count stays while they do, where the warning does not.
    pods_repeating_series: Gauge,
    data_age_ms: Gauge,
    /// The pod events, for alerts (the log says which pod); listed at 0 from the start.
    pods_turned_unhealthy: Counter,
    pod_caches_dropped: Counter,
    /// Pods scraped at the plain `/metrics` after answering the filtered default with no load.
    metrics_path_fallbacks: Counter,
    /// Model-list fetches that gave nothing (a status not 200, no answer, too large, not a list).
    model_list_failures: Counter,
}

impl Stats {
    fn define(metrics: &Metrics) -> Self {
        Self {
            scrapes_ok: metrics.counter("wasm_epp.poll_success"),
            scrapes_failed: metrics.counter("wasm_epp.poll_failure"),
            publishes: metrics.counter("wasm_epp.table_publishes"),
            pods_healthy: metrics.gauge("wasm_epp.pods_healthy"),
            pods_total: metrics.gauge("wasm_epp.pods_total"),
            pods_names_cut: metrics.gauge("wasm_epp.pods_names_cut"),
            pods_repeating_series: metrics.gauge("wasm_epp.pods_repeating_series"),
            data_age_ms: metrics.gauge("wasm_epp.data_age_ms"),
            pods_turned_unhealthy: metrics.announced_counter("wasm_epp.pods_turned_unhealthy"),
            pod_caches_dropped: metrics.announced_counter("wasm_epp.pod_caches_dropped"),
            metrics_path_fallbacks: metrics.counter("wasm_epp.metrics_path_fallbacks"),
            model_list_failures: metrics.counter("wasm_epp.model_list_failures"),
        }
    }
}

/// The table already in shared data, if any (left by a previous leader or VM).
fn published_table(host: &dyn Host) -> Option<PodTable> {
    let (bytes, _) = host.get(keys::POD_TABLE).ok()?;
    PodTable::decode(&bytes?).ok()
}

#[derive(Default)]
pub struct PoolService {
    poller: Option<PoolPoller>,
    /// Carries the workers' routing decisions into the prefix ring.
    relay: Option<EventRelay>,
    /// Other gateway replicas, when configured.
    peers: Option<PeerExchange>,
    metrics: Metrics,
    stats: Option<Stats>,
    /// Set when the pool comes from Kubernetes instead of the static `pool`.
    discovery: Option<Discovery>,
    /// When the next scrape round may start (host ms): rounds follow `poll_interval_ms`
    /// whatever the tick period of the root context running this service.
    next_round_ms: u64,
    /// A service that just started (a new leader, a reloaded singleton) knows nothing yet:
    /// it publishes nothing until its first round of scrapes is done, so workers keep
    /// routing on the last good table instead of a table of unknown pods.
    first_round_done: bool,
    /// When the first round's scrapes left (or, for a pool with no pod, when it was known):
    /// the first round is taken as done `2 × timeout_ms` later even if some scrape is still
    /// in flight then, as there may always be one (pages slower than the poll interval).
    first_round_started_ms: Option<u64>,
    /// Per-pod gauges (`wasm_epp_pod_*{pod=...}`), set on each publish.
    pod_gauges: Option<PodGauges>,
    /// Each pod's `/v1/models`, fetched slower than scrapes.
    catalogs: crate::catalogs::Catalogs,
    /// The key the pods' API wants (`pods_api_key_env`), if any.
    pod_api_key: Option<PodApiKey>,
}

impl PoolService {
    /// Starts the singleton from its configuration bytes (and sets the tick period).
    pub fn configure(&mut self, host: &dyn Host, bytes: &[u8]) -> Result<(), String> {
        let config: PollerConfig = parse_json(bytes)?;
        host.set_tick_period_ms(config.poll_interval_ms).map_err(|e| format!("cannot set tick period: {e}"))?;
        self.configure_embedded(host, config)
    }

    /// Starts the service from a parsed configuration without touching the tick period (the
    /// root context running it owns that; tick at least every `poll_interval_ms`).
    pub fn configure_embedded(&mut self, host: &dyn Host, config: PollerConfig) -> Result<(), String> {
        let pool = config.validate().map_err(|e| format!("invalid configuration: {e}"))?;
        let pod_api_key = PodApiKey::from_config(host, &config).map_err(|e| format!("invalid configuration: {e}"))?;
        self.metrics.label_pool(&config.pool_name);
        self.discovery =
            config.kubernetes.clone().map(|k| Discovery::new(k, &self.metrics, "wasm_epp.discovery")).transpose()?;
        if let Some(discovery) = &self.discovery {
            log::info!("wasm-epp pool service: pool from kubernetes: {}", discovery.describe());
        }
        log::info!(
            "wasm-epp pool service configured: {} pods, scrape {} every {} ms via cluster {}",
            pool.len(),
            config.metrics_path,
            config.poll_interval_ms,
            config.metrics_cluster
        );
        self.stats = Some(Stats::define(&self.metrics));
        if self.pod_gauges.is_none() {
            self.pod_gauges = Some(PodGauges::define(&self.metrics));
        }
        if let Some(peers) = config.peers.clone() {
            self.peers = Some(PeerExchange::start(host, peers, &self.metrics)?);
        }
        self.catalogs = crate::catalogs::Catalogs::new(config.models_interval_ms);
        if let Some(key) = &pod_api_key {
            let calls = if key.on_metrics() { "model-list fetches and scrapes" } else { "model-list fetches" };
            log::info!("wasm-epp pool service: the pods' API key from {} goes with {calls}", key.variable());
        }
        self.pod_api_key = pod_api_key;
        let mut poller = PoolPoller::new(config, pool);
        if let Some(published) = published_table(host) {
            poller.resume_from(&published);
        }
        if let Some(discovery) = self.discovery.as_mut() {
            discovery.resume(poller.addresses());
        }
        self.poller = Some(poller);
        if self.relay.is_none() {
            // Without the relay, workers still route on their own decisions: not fatal.
            match EventRelay::start(host, &self.metrics) {
                Ok(relay) => self.relay = Some(relay),
                Err(reason) => {
                    log::warn!("wasm-epp pool service: prefix decisions not shared between workers: {reason}")
                }
            }
        }
        Ok(())
    }

    fn dispatch_scrapes(&mut self, host: &dyn Host, now: u64) {
        let Some(poller) = self.poller.as_mut() else { return };
        let due = poller.due(now);
        if !due.is_empty() && self.first_round_started_ms.is_none() {
            // The first round's scrapes leave now: their time runs from here.
            self.first_round_started_ms = Some(now);
        }
        for address in due {
            dispatch_scrape(host, poller, &address, self.pod_api_key.as_ref(), now, &self.metrics, self.stats.as_ref());
        }
        log_pod_events(poller, &self.metrics, self.stats.as_ref());
    }

    fn publish_if_changed(&mut self, host: &dyn Host, now: u64) {
        if !self.first_round_done {
            return;
        }
        let Some(poller) = self.poller.as_mut() else { return };
        let Some(table) = poller.take_table(now) else { return };
        if let Err(error) = publish(host, &table) {
            log::warn!("wasm-epp pool service: publish failed: {error:?}");
            poller.touch();
            return;
        }
        let Some(stats) = &self.stats else { return };
        self.metrics.increment(stats.publishes);
        let healthy = table.pods.iter().filter(|p| p.healthy).count();
        self.metrics.set(stats.pods_healthy, healthy as u64);
        self.metrics.set(stats.pods_total, table.pods.len() as u64);
        self.metrics.set(stats.pods_names_cut, table.pods.iter().filter(|p| p.names_cut).count() as u64);
        self.metrics.set(stats.pods_repeating_series, poller.pods_repeating_series() as u64);
        let oldest = table.pods.iter().filter(|p| p.healthy).map(|p| now.saturating_sub(p.last_success_ms)).max();
        self.metrics.set(stats.data_age_ms, oldest.unwrap_or(0));
        if let Some(gauges) = self.pod_gauges.as_mut() {
            gauges.record(&self.metrics, &table, &picker::inflight::envoy_loads(host, now), now);
        }
    }

    /// One tick: heartbeat, re-list the pool when due, publish what the last round learned
    /// (even if a scrape is still outstanding), start the next round when
    /// `poll_interval_ms` has passed, flush stats.
    pub fn tick(&mut self, host: &dyn Host, now: u64) {
        // Workers read it to know someone drains their queue and refreshes the table.
        if let Err(error) = host.set(keys::SERVICE_HEARTBEAT, &encode_version(now), None) {
            log::debug!("wasm-epp pool service: heartbeat not written: {error:?}");
        }
        if let (Some(discovery), Some(poller)) = (self.discovery.as_mut(), self.poller.as_mut()) {
            discovery.on_tick(&Env { host, metrics: &self.metrics }, now, poller);
        }
        // A static pool with nothing to scrape has nothing to wait for (a discovered pool
        // waits for its first list and scrapes).
        if self.discovery.is_none() && self.poller.as_ref().is_some_and(|p| p.due(u64::MAX).is_empty()) {
            self.first_round_done = true;
        }
        self.end_first_round_by_time(now);
        self.publish_if_changed(host, now);
        self.start_round_if_due(host, now);
        // Model lists once the pods have answered their first scrape (the table is up).
        if let Some(poller) = self.poller.as_ref().filter(|_| self.first_round_done) {
            self.catalogs.dispatch(host, poller, self.pod_api_key.as_ref(), now);
        }
        if let (Some(peers), Some(poller)) = (self.peers.as_mut(), self.poller.as_ref()) {
            peers.tick(host, &self.metrics, now, poller.pods(), self.first_round_done);
        }
        self.metrics.flush(host);
    }

    /// A round seen complete (no scrape in flight) is the usual end of the first; this is
    /// the bound: every scrape of the first round has answered or timed out by then. Without
    /// it a pool whose pages are slower than the poll interval (or a discovered pool that
    /// lists no pod) was never published, while the heartbeat kept the workers trusting the
    /// last table. A discovered pool with no pod yet (none resumed) waits for its first list.
    fn end_first_round_by_time(&mut self, now: u64) {
        let Some(poller) = self.poller.as_ref() else { return };
        let unknown = poller.pods().next().is_none() && self.discovery.as_ref().is_some_and(|d| !d.has_listed());
        if self.first_round_done || unknown {
            return;
        }
        // A pool with no pod has no scrape to wait for: its time runs from when it is known.
        if poller.pods().next().is_none() && self.first_round_started_ms.is_none() {
            self.first_round_started_ms = Some(now);
        }
        let Some(started) = self.first_round_started_ms else { return };
        if now.saturating_sub(started) >= poller.config().timeout_ms.saturating_mul(2) {
            self.first_round_done = true;
        }
    }

    fn start_round_if_due(&mut self, host: &dyn Host, now: u64) {
        let Some(interval) = self.poller.as_ref().map(|p| p.config().poll_interval_ms) else { return };
        // Stepped back, the wall clock would have the next round wait the step out.
        if picker::clock::not_due_yet(now, self.next_round_ms, interval) {
            return;
        }
        // A tick a little early (timer jitter) still starts the round: 10% slack.
        self.next_round_ms = now.saturating_add(interval - interval / 10);
        self.dispatch_scrapes(host, now);
    }

    /// A queue woke us: the workers' decisions (into the ring, and out to peers), or a
    /// peer's message (into the ring).
    pub fn queue_ready(&mut self, host: &dyn Host, queue_id: u32) {
        let Some(relay) = self.relay.as_mut() else { return };
        if relay.queue() == queue_id {
            match self.peers.as_mut() {
                Some(peers) => {
                    let events = relay.take_queued(host);
                    relay.append(host, &self.metrics, &events);
                    peers.queue_local(&self.metrics, &events);
                }
                // Nobody needs the events decoded: the batches go to the ring as they came.
                None => {
                    let batch = relay.take_queued_joined(host);
                    relay.append_batch(host, &self.metrics, &batch);
                }
            }
            return;
        }
        if let (Some(peers), Some(poller)) =
            (self.peers.as_mut().filter(|p| p.inbox() == queue_id), self.poller.as_ref())
        {
            let events = peers.receive(host, &self.metrics, host.now_ms(), poller.pods());
            relay.append(host, &self.metrics, &events);
        }
    }

    /// Whether an HTTP-call token belongs to this service (a scrape or an API server list).
    pub fn owns_call(&self, token: u32) -> bool {
        self.poller.as_ref().is_some_and(|p| p.owns_scrape(token))
            || self.catalogs.owns(token)
            || self.discovery.as_ref().is_some_and(|d| d.owns(token))
            || self.peers.as_ref().is_some_and(|p| p.owns(token))
    }

    /// An HTTP call's answer arrived (its headers and body are readable now).
    pub fn http_response(&mut self, host: &dyn Host, token: u32, body_size: usize) {
        let now = host.now_ms();
        if let Some(peers) = self.peers.as_mut().filter(|p| p.owns(token)) {
            let pods = self.poller.as_ref().into_iter().flat_map(PoolPoller::pods);
            let caught_up = peers.on_response(host, &self.metrics, token, body_size, pods);
            if let Some(relay) = self.relay.as_mut() {
                relay.append(host, &self.metrics, &caught_up);
            }
            return;
        }
        let Some(poller) = self.poller.as_mut() else { return };
        if self.catalogs.owns(token) {
            let answer = self.catalogs.on_answer(host, poller, self.pod_api_key.as_ref(), token, body_size);
            if let (Err(_), Some(stats)) = (answer, &self.stats) {
                self.metrics.increment(stats.model_list_failures);
            }
            return;
        }
        if let Some(discovery) = self.discovery.as_mut().filter(|d| d.owns(token)) {
            discovery.on_response(&Env { host, metrics: &self.metrics }, token, body_size, now, poller);
            // A pod that left must stop getting requests now, not at the next tick.
            self.publish_if_changed(host, now);
            return;
        }
        let status = host.call_response_status();
        let limit = usize::try_from(poller.config().max_metrics_bytes).unwrap_or(usize::MAX);
        let too_big = body_size > limit;
        let body = if too_big || status != Some(200) {
            Vec::new()
        } else {
            host.call_response_body(body_size, limit).unwrap_or_default()
        };
        let result = match status {
            Some(_) if too_big => ScrapeResult::Answered { status: 413, body: &[] },
            Some(status) => ScrapeResult::Answered { status, body: &body },
            None => ScrapeResult::NoAnswer,
        };
        let outcome = poller.on_scrape(token, result, now);
        if let Some(stats) = &self.stats {
            match &outcome {
                ScrapeOutcome::Success => self.metrics.increment(stats.scrapes_ok),
                ScrapeOutcome::Failure(reason) => {
                    self.metrics.increment(stats.scrapes_failed);
                    log::debug!("wasm-epp pool service: scrape failed: {reason}");
                }
                ScrapeOutcome::PlainPathNext(_) => self.metrics.increment(stats.metrics_path_fallbacks),
                ScrapeOutcome::Unknown => {}
            }
        }
        if let ScrapeOutcome::PlainPathNext(address) = &outcome {
            log::info!(
                "wasm-epp pool service: pod {} answered the name[]-filtered metrics path with no load metric \
                 (its server cannot filter): scraping {} from now on",
                address.as_str(),
                poller.metrics_path(address)
            );
            // At once, not a round later: this round (the first, after a handover) ends with its load.
            dispatch_scrape(host, poller, address, self.pod_api_key.as_ref(), now, &self.metrics, self.stats.as_ref());
        }
        log_pod_events(poller, &self.metrics, self.stats.as_ref());
        if poller.round_complete() {
            self.first_round_done = true;
            self.publish_if_changed(host, now);
        }
    }

    /// The metrics of this service (tests read them before a flush).
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}

/// Sends `address` its scrape, at the path the poller gives for it (with the pods' API key
/// when `pods_api_key_on_metrics` asks for it); a dispatch the host refuses is a failed scrape.
fn dispatch_scrape(
    host: &dyn Host,
    poller: &mut PoolPoller,
    address: &PodAddress,
    api_key: Option<&PodApiKey>,
    now: u64,
    metrics: &Metrics,
    stats: Option<&Stats>,
) {
    let config = poller.config();
    let mut headers = vec![
        (":method", "GET"),
        (":path", poller.metrics_path(address)),
        (":authority", address.as_str()),
        (config.destination_header.as_str(), address.as_str()),
        ("accept", "text/plain"),
    ];
    if let Some(key) = api_key.filter(|key| key.on_metrics()) {
        headers.push(("authorization", key.authorization()));
    }
    match host.dispatch_call(&config.metrics_cluster, &headers, &[], config.timeout_ms) {
        Ok(token) => poller.scrape_started(address, token, now),
        Err(error) => {
            if let Some(stats) = stats {
                metrics.increment(stats.scrapes_failed);
            }
            poller.scrape_not_sent(address, &format!("dispatch refused: {error}"));
        }
    }
}

/// Tells the operator when a pod turns unhealthy, and when what the picker knew of its cache
/// was dropped (it restarted, or answers again after failing with nothing to show it kept
/// its cache), which shows as cache misses on its next requests: a warning each, and a
/// counter each to alert on. A pod that never turned healthy gets a warning with the reason, a
/// pod reporting a load past any engine's a warning with the reading (once), a pod repeating
/// a series a warning with its metric (once).
fn log_pod_events(poller: &mut PoolPoller, metrics: &Metrics, stats: Option<&Stats>) {
    for event in poller.take_events() {
        if let Some(stats) = stats {
            let counter = match &event {
                PodEvent::Unhealthy { .. } => Some(stats.pods_turned_unhealthy),
                PodEvent::CacheDropped { .. } => Some(stats.pod_caches_dropped),
                // Never in rotation, so not taken out of it (pods_total - pods_healthy shows it).
                PodEvent::NeverHealthy { .. } => None,
                // Its reading is bounded and used; the warning is the news.
                PodEvent::Implausible { .. } => None,
                // Its repeats are skipped; the warning is the news, and the pods still repeating
                // are a gauge set at each publish (`pods_repeating_series`).
                PodEvent::RepeatedSeries { .. } => None,
            };
            if let Some(counter) = counter {
                metrics.increment(counter);
            }
        }
        match event {
            PodEvent::Unhealthy { address, failures } => {
                log::warn!("wasm-epp pool service: pod {} unhealthy after {failures} failed scrapes", address.as_str());
            }
            PodEvent::NeverHealthy { address, failures, reason } => {
                log::warn!(
                    "wasm-epp pool service: pod {} not in rotation: {failures} failed scrapes since it joined, the last: {reason}",
                    address.as_str()
                );
            }
            PodEvent::CacheDropped { address, restarted } => {
                let why = if restarted {
                    "restarted (its counters went back)"
                } else {
                    "answers again, not known to be the same engine"
                };
                log::warn!(
                    "wasm-epp pool service: pod {} {why}: what was known of its cache is dropped",
                    address.as_str()
                );
            }
            PodEvent::Implausible { address, reading } => {
                log::warn!(
                    "wasm-epp pool service: pod {} reports {reading}, past any engine's (a KV usage is 0..1, \
                     not a percent): read at the bound, so the pod counts as full while it does",
                    address.as_str()
                );
            }
            PodEvent::RepeatedSeries { address, metric, samples } => {
                log::warn!(
                    "wasm-epp pool service: pod {} gives a series again with the same labels ({samples} samples in \
                     one scrape, the first of {metric}): its exporter is broken; the first of each series is read",
                    address.as_str()
                );
            }
        }
    }
}
