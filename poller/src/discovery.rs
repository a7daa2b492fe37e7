//! The singleton's Kubernetes glue: sends the GETs `picker::discovery::PoolDiscovery` asks
//! for to the API server cluster, hands the answers back, and gives a changed pool to the
//! poller (pods that left are dropped from the published table, their records kept for a
//! return within `picker::departed::GRACE_MS`; pods that joined are scraped before the filter
//! trusts them).
//!
//! The bearer token never passes through here: Envoy's credential injector on the API
//! server's cluster adds it, from a file Envoy watches (see docs/deployment.md).

use picker::address::PodAddress;
use picker::discovery::{ApiResponse, HealthChange, KubernetesConfig, PoolDiscovery, Progress};
use picker::poller::PoolPoller;

/// What a discovered list is given to: the pool service's poller (the pods), or the peer
/// exchange (the other gateway replicas).
pub trait DiscoveryTarget {
    /// The pool listed at `now_ms` changed.
    fn set_pool(&mut self, pool: Vec<PodAddress>, now_ms: u64);

    /// The pods' role labels (prefill/decode); only the pod poller keeps them.
    fn set_roles(&mut self, _roles: &picker::role::RoleMap) {}

    /// A list came back at `now_ms`, changed or not.
    fn listed(&mut self, _now_ms: u64) {}
}

impl DiscoveryTarget for PoolPoller {
    fn set_pool(&mut self, pool: Vec<PodAddress>, now_ms: u64) {
        PoolPoller::set_pool(self, pool, now_ms);
    }

    fn set_roles(&mut self, roles: &picker::role::RoleMap) {
        self.set_discovered_roles(roles.clone());
    }

    fn listed(&mut self, now_ms: u64) {
        self.end_resume(now_ms);
    }
}
use wasm_epp_host::{Counter, Gauge, Host, Metrics};

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
    /// A list has come back (the pool is known, if empty).
    listed: bool,
}

/// Everything a discovery step needs from its caller.
pub struct Env<'a> {
    pub host: &'a dyn Host,
    pub metrics: &'a Metrics,
}

impl Discovery {
    /// `stat_prefix` names its stats (`wasm_epp.discovery` for the pool).
    pub fn new(config: KubernetesConfig, metrics: &Metrics, stat_prefix: &str) -> Result<Self, String> {
        let lister = PoolDiscovery::new(config).map_err(|e| format!("invalid configuration: {e}"))?;
        let stats = Stats {
            lists: metrics.counter(&format!("{stat_prefix}_success")),
            failures: metrics.counter(&format!("{stat_prefix}_failure")),
            pool_changes: metrics.counter(&format!("{stat_prefix}_pool_changes")),
            pods: metrics.gauge(&format!("{stat_prefix}_pods")),
            failing: metrics.gauge(&format!("{stat_prefix}_failing")),
        };
        Ok(Self { lister, given: Vec::new(), stats, listed: false })
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

    /// The pool the poller resumed from the last published table: the first list's log line
    /// says who joined and left since.
    pub fn resume(&mut self, pool: Vec<PodAddress>) {
        self.given = pool;
    }

    /// Whether a list has come back since the start: until then the pool is not known.
    pub fn has_listed(&self) -> bool {
        self.listed
    }

    pub fn owns(&self, token: u32) -> bool {
        self.lister.owns(token)
    }

    pub fn on_tick(&mut self, env: &Env<'_>, now: u64, poller: &mut dyn DiscoveryTarget) {
        let progress = self.lister.tick(now);
        self.advance(env, progress, now, poller);
    }

    pub fn on_response(
        &mut self,
        env: &Env<'_>,
        token: u32,
        body_size: usize,
        now: u64,
        poller: &mut dyn DiscoveryTarget,
    ) {
        let status = env.host.call_response_status();
        let limit = usize::try_from(self.lister.config().max_response_bytes).unwrap_or(usize::MAX);
        let body = match status {
            Some(_) if body_size > limit => None,
            Some(_) => env.host.call_response_body(body_size, limit).ok(),
            None => None,
        };
        let response = match (status, &body) {
            (None, _) => ApiResponse::NoAnswer,
            (Some(_), None) if body_size > limit => ApiResponse::TooLarge(body_size),
            (Some(status), body) => ApiResponse::Answered { status, body: body.as_deref().unwrap_or_default() },
        };
        let progress = self.lister.on_response(token, response, now);
        self.advance(env, progress, now, poller);
    }

    /// Acts on what the lister asked for. A fetch whose dispatch is refused turns into a
    /// failure, never into another fetch, so this ends after at most two steps.
    fn advance(&mut self, env: &Env<'_>, progress: Progress, now: u64, poller: &mut dyn DiscoveryTarget) {
        let metrics = env.metrics;
        let progress = match progress {
            Progress::Fetch(request) => match self.dispatch(env.host, &request.path) {
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
                self.listed = true;
                metrics.increment(self.stats.lists);
                if let Some(pool) = changed {
                    metrics.increment(self.stats.pool_changes);
                    log_pool_change(&self.given, &pool);
                    self.given.clone_from(&pool);
                    poller.set_roles(self.lister.roles());
                    poller.set_pool(pool, now);
                }
                poller.listed(now);
            }
            Progress::Failed(_) => metrics.increment(self.stats.failures),
        }
        metrics.set(self.stats.pods, self.lister.pool().len() as u64);
        metrics.set(self.stats.failing, u64::from(self.lister.is_failing()));
        match self.lister.take_health_change() {
            Some(HealthChange::Failing(error)) => log::warn!(
                "wasm-epp pool service: kubernetes discovery failing, keeping the last known pool of {} pods: {error}",
                self.lister.pool().len()
            ),
            Some(HealthChange::Up { failures: 0 }) => log::info!("wasm-epp pool service: kubernetes discovery working"),
            Some(HealthChange::Up { failures }) => {
                log::info!("wasm-epp pool service: kubernetes discovery working again after {failures} failed lists")
            }
            None => {}
        }
    }

    fn dispatch(&self, host: &dyn Host, path: &str) -> Result<u32, String> {
        let config = self.lister.config();
        let headers = vec![
            (":method", "GET"),
            (":path", path),
            (":authority", config.authority.as_str()),
            ("accept", "application/json"),
            ("user-agent", "wasm-epp"),
        ];
        host.dispatch_call(&config.cluster, &headers, &[], config.timeout_ms)
            .map_err(|error| format!("dispatch to cluster {} refused: {error}", config.cluster))
    }
}

fn log_pool_change(before: &[PodAddress], pool: &[PodAddress]) {
    let joined: Vec<&str> = pool.iter().filter(|a| !before.contains(a)).map(PodAddress::as_str).collect();
    let left: Vec<&str> = before.iter().filter(|a| !pool.contains(a)).map(PodAddress::as_str).collect();
    log::info!(
        "wasm-epp pool service: pool is now {} pods; joined {}; left {}",
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
