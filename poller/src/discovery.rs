//! The singleton's Kubernetes glue: sends the GETs `picker::discovery::PoolDiscovery` asks
//! for to the API server cluster, hands the answers back, and gives a changed pool to the
//! poller (pods that left are dropped from the published table; pods that joined are
//! scraped before the filter trusts them).
//!
//! The bearer token never passes through here: Envoy's credential injector on the API
//! server's cluster adds it, from a file Envoy watches (see docs/deployment.md).

use std::time::Duration;

use picker::address::PodAddress;
use picker::discovery::{ApiResponse, HealthChange, KubernetesConfig, PoolDiscovery, Progress};
use picker::poller::PoolPoller;
use proxy_wasm::hostcalls;
use proxy_wasm::types::{BufferType, MapType};
use wasm_epp_host::{Counter, Gauge};

/// Pods named in one "pool changed" log line; the rest are counted.
const MAX_PODS_LOGGED: usize = 8;

struct Stats {
    lists: Counter,
    failures: Counter,
    pool_changes: Counter,
    pods: Gauge,
    failing: Gauge,
}

pub struct Discovery {
    lister: PoolDiscovery,
    /// The pool last given to the poller, to log who joined and who left.
    given: Vec<PodAddress>,
    stats: Stats,
}

impl Discovery {
    pub fn new(config: KubernetesConfig) -> Result<Self, String> {
        let lister = PoolDiscovery::new(config).map_err(|e| format!("invalid configuration: {e}"))?;
        let stats = Stats {
            lists: Counter::define("wasm_epp.discovery_success"),
            failures: Counter::define("wasm_epp.discovery_failure"),
            pool_changes: Counter::define("wasm_epp.discovery_pool_changes"),
            pods: Gauge::define("wasm_epp.discovery_pods"),
            failing: Gauge::define("wasm_epp.discovery_failing"),
        };
        Ok(Self { lister, given: Vec::new(), stats })
    }

    pub fn describe(&self) -> String {
        let config = self.lister.config();
        let source = match (&config.label_selector, &config.inference_pool) {
            (Some(selector), _) => format!("pods '{selector}'"),
            (_, Some(pool)) => format!("InferencePool '{pool}'"),
            _ => String::new(),
        };
        format!(
            "{source} in namespace {} via cluster {}, relisted every {} ms",
            config.namespace, config.cluster, config.relist_interval_ms
        )
    }

    pub fn owns(&self, token: u32) -> bool {
        self.lister.owns(token)
    }

    pub fn on_tick(&mut self, now: u64, poller: &mut PoolPoller) {
        let progress = self.lister.tick(now);
        self.advance(progress, poller);
    }

    pub fn on_response(&mut self, token: u32, body_size: usize, now: u64, poller: &mut PoolPoller) {
        let status = hostcalls::get_map_value(MapType::HttpCallResponseHeaders, ":status")
            .ok()
            .flatten()
            .and_then(|s| s.parse::<u16>().ok());
        let limit = usize::try_from(self.lister.config().max_response_bytes).unwrap_or(usize::MAX);
        let body = match status {
            Some(_) if body_size > limit => None,
            Some(_) => hostcalls::get_buffer(BufferType::HttpCallResponseBody, 0, body_size).ok().flatten(),
            None => None,
        };
        let response = match (status, &body) {
            (None, _) => ApiResponse::NoAnswer,
            (Some(_), None) if body_size > limit => ApiResponse::TooLarge(body_size),
            (Some(status), body) => ApiResponse::Answered { status, body: body.as_deref().unwrap_or_default() },
        };
        let progress = self.lister.on_response(token, response, now);
        self.advance(progress, poller);
    }

    /// Acts on what the lister asked for. A fetch whose dispatch is refused turns into a
    /// failure, never into another fetch, so this ends after at most two steps.
    fn advance(&mut self, progress: Progress, poller: &mut PoolPoller) {
        let progress = match progress {
            Progress::Fetch(request) => match self.dispatch(&request.path) {
                Ok(token) => {
                    self.lister.sent(token);
                    Progress::Idle
                }
                Err(reason) => self.lister.not_sent(reason),
            },
            other => other,
        };
        match progress {
            Progress::Idle | Progress::Fetch(_) => {}
            Progress::Listed { changed } => {
                self.stats.lists.increment();
                if let Some(pool) = changed {
                    self.stats.pool_changes.increment();
                    log_pool_change(&self.given, &pool);
                    self.given.clone_from(&pool);
                    poller.set_pool(pool);
                }
            }
            Progress::Failed(_) => self.stats.failures.increment(),
        }
        self.stats.pods.set(self.lister.pool().len() as u64);
        self.stats.failing.set(u64::from(self.lister.is_failing()));
        match self.lister.take_health_change() {
            Some(HealthChange::Failing(error)) => log::warn!(
                "wasm-epp singleton: kubernetes discovery failing, keeping the last known pool of {} pods: {error}",
                self.lister.pool().len()
            ),
            Some(HealthChange::Up { failures: 0 }) => log::info!("wasm-epp singleton: kubernetes discovery working"),
            Some(HealthChange::Up { failures }) => {
                log::info!("wasm-epp singleton: kubernetes discovery working again after {failures} failed lists")
            }
            None => {}
        }
    }

    fn dispatch(&self, path: &str) -> Result<u32, String> {
        let config = self.lister.config();
        let headers = vec![
            (":method", "GET"),
            (":path", path),
            (":authority", config.authority.as_str()),
            ("accept", "application/json"),
            ("user-agent", "wasm-epp"),
        ];
        let timeout = Duration::from_millis(config.timeout_ms);
        hostcalls::dispatch_http_call(&config.cluster, headers, None, vec![], timeout)
            .map_err(|status| format!("dispatch to cluster {} refused: {status:?}", config.cluster))
    }
}

fn log_pool_change(before: &[PodAddress], pool: &[PodAddress]) {
    let joined: Vec<&str> = pool.iter().filter(|a| !before.contains(a)).map(PodAddress::as_str).collect();
    let left: Vec<&str> = before.iter().filter(|a| !pool.contains(a)).map(PodAddress::as_str).collect();
    log::info!(
        "wasm-epp singleton: pool is now {} pods; joined {}; left {}",
        pool.len(),
        summarise(&joined),
        summarise(&left)
    );
}

fn summarise(addresses: &[&str]) -> String {
    let shown: Vec<&str> = addresses.iter().take(MAX_PODS_LOGGED).copied().collect();
    match addresses.len().saturating_sub(shown.len()) {
        0 if shown.is_empty() => "none".into(),
        0 => shown.join(", "),
        more => format!("{} and {more} more", shown.join(", ")),
    }
}
