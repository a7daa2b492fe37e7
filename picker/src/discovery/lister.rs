//! The list cycle: every `relist_interval_ms`, read the pool from the API server, page by
//! page, and say whether it changed.
//!
//! A cycle is a short sequence of GETs, one in flight at a time: the InferencePool first
//! (when the pool is named by one), then the pod LIST, `limit` items per page, following
//! `metadata.continue`. All pages of one list belong to the snapshot named by the first
//! page's `resourceVersion`; when that equals the last complete list's (same selector and
//! port), nothing changed and the remaining pages are not read. A `410 Gone` on a
//! continued page means the snapshot was compacted away: the list restarts from the first
//! page, a bounded number of times. Any failure ends the cycle and keeps the last known
//! pool; the next cycle starts on schedule. Time comes in as `now_ms`.

use crate::address::PodAddress;
use crate::pod_table::MAX_PODS;
use crate::role::{PodRole, RoleMap};

use super::config::{KubernetesConfig, PoolSource};
use super::health::{DiscoveryError, Health, HealthChange};
use super::inference_pool::parse_inference_pool;
use super::pod_list::parse_pod_page;
use super::query;

/// Pages one list may have. With the maximum `limit` of 500 that is 32,000 Running pods
/// under one selector, far past [`MAX_PODS`]: hitting it means a selector matches far too
/// much, or a server that never stops paginating.
pub const MAX_PAGES: usize = 64;

/// Restarts of one cycle after `410 Gone` on a continued page. A restart reads a fresh
/// snapshot; failing twice in a row means the API server is compacting faster than we
/// page, and the next cycle tries again.
pub const MAX_LIST_RESTARTS: u32 = 2;

/// A GET to send to the API server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiRequest {
    /// Path and query.
    pub path: String,
}

/// The answer to an [`ApiRequest`], as the host reported it.
pub enum ApiResponse<'a> {
    Answered {
        status: u16,
        body: &'a [u8],
    },
    /// No status at all: timeout, reset, no upstream.
    NoAnswer,
    /// The body was over `max_response_bytes` and was not read.
    TooLarge(usize),
}

/// What the caller does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// Nothing to do now.
    Idle,
    /// Send this request, then report its token with [`PoolDiscovery::sent`].
    Fetch(ApiRequest),
    /// A list completed; `changed` is the new pool when it differs from the last one.
    Listed { changed: Option<Vec<PodAddress>> },
    /// The cycle failed; the last known pool stays in use.
    Failed(DiscoveryError),
}

struct ListInProgress {
    selector: String,
    ports: Vec<u16>,
    continue_token: Option<String>,
    /// `resourceVersion` of the first page: the snapshot every page belongs to.
    snapshot: Option<String>,
    ready: Vec<PodAddress>,
    /// Ready pods' `llm-d.ai/role` labels (bounded with `ready`).
    roles: Vec<(PodAddress, PodRole)>,
    pages: usize,
    restarts: u32,
}

impl ListInProgress {
    fn new(selector: String, ports: Vec<u16>, restarts: u32) -> Self {
        Self {
            selector,
            ports,
            continue_token: None,
            snapshot: None,
            ready: Vec::new(),
            roles: Vec::new(),
            pages: 0,
            restarts,
        }
    }
}

enum Step {
    InferencePool,
    Pods(ListInProgress),
}

struct InFlight {
    step: Step,
    token: Option<u32>,
    started_ms: u64,
}

/// What the last complete list was read from, to recognise an unchanged one.
#[derive(PartialEq, Eq)]
struct Snapshot {
    resource_version: String,
    selector: String,
    ports: Vec<u16>,
}

pub struct PoolDiscovery {
    config: KubernetesConfig,
    source: PoolSource,
    in_flight: Option<InFlight>,
    cycle_started_ms: u64,
    next_cycle_ms: u64,
    last_snapshot: Option<Snapshot>,
    pool: Vec<PodAddress>,
    /// The last complete list's role labels.
    roles: RoleMap,
    health: Health,
}

impl PoolDiscovery {
    pub fn new(config: KubernetesConfig) -> Result<Self, String> {
        let source = config.validate()?;
        Ok(Self {
            config,
            source,
            in_flight: None,
            cycle_started_ms: 0,
            next_cycle_ms: 0,
            last_snapshot: None,
            pool: Vec::new(),
            roles: RoleMap::default(),
            health: Health::default(),
        })
    }

    pub fn config(&self) -> &KubernetesConfig {
        &self.config
    }

    /// The last known pool, sorted.
    pub fn pool(&self) -> &[PodAddress] {
        &self.pool
    }

    /// The last complete list's `llm-d.ai/role` labels.
    pub fn roles(&self) -> &RoleMap {
        &self.roles
    }

    /// True while the last cycle failed: the pool in use may be out of date.
    pub fn is_failing(&self) -> bool {
        self.health.is_failing()
    }

    /// A state change worth one log line, at most once per change.
    pub fn take_health_change(&mut self) -> Option<HealthChange> {
        self.health.take_change()
    }

    /// Called on every tick: starts a cycle when one is due, and gives up on a call the
    /// host never answered (it should have, after `timeout_ms`; never wait forever).
    pub fn tick(&mut self, now_ms: u64) -> Progress {
        if let Some(flight) = &self.in_flight {
            let grace = self.config.timeout_ms.saturating_mul(2);
            // Stamped before the wall clock stepped back, a call would be waited for the step out.
            if !crate::clock::within_last(now_ms, flight.started_ms, grace) {
                return self.fail(DiscoveryError::NoAnswer);
            }
            return Progress::Idle;
        }
        // Likewise a cycle scheduled before a step back is due now, not the step later.
        if crate::clock::not_due_yet(now_ms, self.next_cycle_ms, self.config.relist_interval_ms) {
            return Progress::Idle;
        }
        self.cycle_started_ms = now_ms;
        let step = match &self.source {
            PoolSource::Selector { selector, ports } => {
                Step::Pods(ListInProgress::new(selector.clone(), ports.clone(), 0))
            }
            PoolSource::InferencePool { .. } => Step::InferencePool,
        };
        self.begin(step, now_ms)
    }

    /// The request from the last [`Progress::Fetch`] was dispatched with this token.
    pub fn sent(&mut self, token: u32) {
        if let Some(flight) = self.in_flight.as_mut() {
            flight.token = Some(token);
        }
    }

    /// The request from the last [`Progress::Fetch`] could not be dispatched.
    pub fn not_sent(&mut self, reason: String) -> Progress {
        self.fail(DiscoveryError::NotSent(reason))
    }

    /// The call with this token is ours.
    pub fn owns(&self, token: u32) -> bool {
        self.in_flight.as_ref().is_some_and(|flight| flight.token == Some(token))
    }

    pub fn on_response(&mut self, token: u32, response: ApiResponse<'_>, now_ms: u64) -> Progress {
        if !self.owns(token) {
            return Progress::Idle; // A late answer to a call already given up on.
        }
        let Some(flight) = self.in_flight.take() else { return Progress::Idle };
        let body = match response {
            ApiResponse::NoAnswer => return self.fail(DiscoveryError::NoAnswer),
            ApiResponse::TooLarge(bytes) => return self.fail(DiscoveryError::ResponseTooLarge(bytes)),
            ApiResponse::Answered { status: 200, body } => body,
            ApiResponse::Answered { status, .. } => return self.on_error_status(flight.step, status, now_ms),
        };
        match flight.step {
            Step::InferencePool => self.on_inference_pool(body, now_ms),
            Step::Pods(list) => self.on_page(list, body, now_ms),
        }
    }

    fn on_error_status(&mut self, step: Step, status: u16, now_ms: u64) -> Progress {
        match step {
            Step::Pods(list) if status == 410 && list.continue_token.is_some() => {
                if list.restarts >= MAX_LIST_RESTARTS {
                    return self.fail(DiscoveryError::Expired);
                }
                let restarted = ListInProgress::new(list.selector, list.ports, list.restarts.saturating_add(1));
                self.begin(Step::Pods(restarted), now_ms)
            }
            _ => self.fail(DiscoveryError::from_status(status)),
        }
    }

    fn on_inference_pool(&mut self, body: &[u8], now_ms: u64) -> Progress {
        let spec = match parse_inference_pool(body) {
            Ok(spec) => spec,
            Err(reason) => return self.fail(DiscoveryError::Invalid(reason)),
        };
        let ports = match &self.source {
            PoolSource::InferencePool { port_override: Some(ports), .. } => ports.clone(),
            _ => spec.target_ports,
        };
        self.begin(Step::Pods(ListInProgress::new(spec.selector, ports, 0)), now_ms)
    }

    fn on_page(&mut self, mut list: ListInProgress, body: &[u8], now_ms: u64) -> Progress {
        let page = match parse_pod_page(body, &list.ports) {
            Ok(page) => page,
            Err(reason) => return self.fail(DiscoveryError::Invalid(reason)),
        };
        if list.pages == 0 {
            let snapshot = Snapshot {
                resource_version: page.resource_version.clone(),
                selector: list.selector.clone(),
                ports: list.ports.clone(),
            };
            if !snapshot.resource_version.is_empty() && self.last_snapshot.as_ref() == Some(&snapshot) {
                return self.finish_unchanged();
            }
            list.snapshot = Some(page.resource_version);
        }
        list.pages = list.pages.saturating_add(1);
        list.ready.extend(page.ready);
        list.roles.extend(page.roles);
        if list.ready.len() > MAX_PODS {
            return self.fail(DiscoveryError::PoolTooLarge(format!("more than {MAX_PODS} ready pods match")));
        }
        match page.continue_token {
            Some(_) if list.pages >= MAX_PAGES => {
                self.fail(DiscoveryError::PoolTooLarge(format!("the list has more than {MAX_PAGES} pages")))
            }
            Some(token) => {
                list.continue_token = Some(token);
                self.begin(Step::Pods(list), now_ms)
            }
            None => self.finish(list),
        }
    }

    fn begin(&mut self, step: Step, now_ms: u64) -> Progress {
        let namespace = self.config.namespace.as_str();
        let path = match (&step, &self.source) {
            (Step::InferencePool, PoolSource::InferencePool { name, api, .. }) => {
                query::inference_pool(namespace, name, *api)
            }
            (Step::InferencePool, PoolSource::Selector { .. }) => {
                return self.fail(DiscoveryError::Invalid("no InferencePool configured".into()))
            }
            (Step::Pods(list), _) => {
                query::pods_page(namespace, &list.selector, self.config.page_size, list.continue_token.as_deref())
            }
        };
        self.in_flight = Some(InFlight { step, token: None, started_ms: now_ms });
        Progress::Fetch(ApiRequest { path })
    }

    fn finish(&mut self, list: ListInProgress) -> Progress {
        let mut ready = list.ready;
        ready.sort();
        ready.dedup();
        self.last_snapshot = list.snapshot.filter(|rv| !rv.is_empty()).map(|resource_version| Snapshot {
            resource_version,
            selector: list.selector,
            ports: list.ports,
        });
        self.end_cycle();
        self.health.success();
        let roles = RoleMap::new(list.roles);
        // A relabelled pod is a change too: its role decides which requests it gets.
        if ready == self.pool && roles == self.roles {
            return Progress::Listed { changed: None };
        }
        self.roles = roles;
        self.pool = ready.clone();
        Progress::Listed { changed: Some(ready) }
    }

    fn finish_unchanged(&mut self) -> Progress {
        self.end_cycle();
        self.health.success();
        Progress::Listed { changed: None }
    }

    fn fail(&mut self, error: DiscoveryError) -> Progress {
        self.end_cycle();
        self.health.failure(&error);
        Progress::Failed(error)
    }

    /// Cycles start on a fixed cadence from the start of the last one.
    fn end_cycle(&mut self) {
        self.in_flight = None;
        self.next_cycle_ms = self.cycle_started_ms.saturating_add(self.config.relist_interval_ms);
    }
}

#[cfg(test)]
mod tests;
