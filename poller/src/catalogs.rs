//! Fetching each pod's `/v1/models` on its slower schedule (see
//! `picker::models::catalog_poll`), through the same metrics cluster as the scrapes, and
//! telling the operator once per pod and kind when a list cannot be had.

use picker::address::PodAddress;
use picker::models::catalog::parse_catalog;
use picker::models::catalog_failures::{CatalogFailure, FailuresTold};
use picker::models::catalog_poll::CatalogSchedule;
use picker::poller::PoolPoller;
use wasm_epp_host::Host;

use crate::pod_api_key::PodApiKey;

/// The model-list fetches in flight and the failures already told of.
#[derive(Debug, Default)]
pub struct Catalogs {
    schedule: CatalogSchedule,
    told: FailuresTold,
}

impl Catalogs {
    /// Fetches every `interval_ms` (0: never).
    pub fn new(interval_ms: u64) -> Self {
        Self { schedule: CatalogSchedule::new(interval_ms), told: FailuresTold::default() }
    }

    /// Whether `token` is a fetch of ours.
    pub fn owns(&self, token: u32) -> bool {
        self.schedule.owns(token)
    }

    /// Asks every pod that is due for its model list (with the pods' API key, if any).
    pub fn dispatch(&mut self, host: &dyn Host, poller: &PoolPoller, api_key: Option<&PodApiKey>, now: u64) {
        let config = poller.config();
        let pool = poller.addresses();
        let due = self.schedule.due(now, config.timeout_ms, &pool);
        if due.is_empty() {
            return;
        }
        self.told.retain(&pool);
        for address in due {
            let mut headers = vec![
                (":method", "GET"),
                (":path", config.models_path.as_str()),
                (":authority", address.as_str()),
                (config.destination_header.as_str(), address.as_str()),
                ("accept", "application/json"),
            ];
            if let Some(key) = api_key {
                headers.push(("authorization", key.authorization()));
            }
            match host.dispatch_call(&config.metrics_cluster, &headers, &[], config.timeout_ms) {
                Ok(token) => self.schedule.started(token, address, now),
                Err(error) => log::debug!("wasm-epp pool service: /v1/models of {address} not asked: {error}"),
            }
        }
    }

    /// A model list arrived (or did not): a good one goes into the pod's state. A pod whose
    /// list fails keeps the models its metrics name; the failure is returned to be counted,
    /// and told of once per pod and kind.
    pub fn on_answer(
        &mut self,
        host: &dyn Host,
        poller: &mut PoolPoller,
        api_key: Option<&PodApiKey>,
        token: u32,
        size: usize,
    ) -> Result<(), CatalogFailure> {
        let Some(address) = self.schedule.finished(token) else { return Ok(()) };
        let result = read_catalog(host, poller, &address, size);
        if let Err(failure) = result {
            if self.told.first_time(&address, failure) {
                log::warn!("wasm-epp pool service: {}", explain(poller, &address, failure, api_key));
            } else {
                log::debug!("wasm-epp pool service: /v1/models of {address}: {failure:?} again");
            }
        }
        result
    }
}

fn read_catalog(
    host: &dyn Host,
    poller: &mut PoolPoller,
    address: &PodAddress,
    size: usize,
) -> Result<(), CatalogFailure> {
    let limit = usize::try_from(poller.config().max_models_bytes).unwrap_or(usize::MAX);
    match host.call_response_status() {
        None => return Err(CatalogFailure::NoAnswer),
        Some(200) => {}
        Some(status) => return Err(CatalogFailure::Status(status)),
    }
    if size > limit {
        poller.catalog_too_large(address);
        return Err(CatalogFailure::TooLarge);
    }
    let body = host.call_response_body(size, limit).unwrap_or_default();
    match parse_catalog(&body, limit, poller.config().names_per_pod()) {
        Ok(catalog) => {
            poller.set_catalog(address, catalog);
            Ok(())
        }
        Err(reason) => {
            log::debug!("wasm-epp pool service: /v1/models of {address}: {reason}");
            Err(CatalogFailure::Unreadable)
        }
    }
}

/// What the failure costs and what to do about it, for the one warning per pod and kind.
fn explain(poller: &PoolPoller, address: &PodAddress, failure: CatalogFailure, api_key: Option<&PodApiKey>) -> String {
    let config = poller.config();
    let path = &config.models_path;
    let cost = "its LoRA adapters and other served names stay unknown to the gateway, which answers \
                requests for them 404 (models.unknown_model) without asking any pod";
    match failure {
        CatalogFailure::Status(status) if failure.is_refused() => match api_key {
            None => format!(
                "pod {address} refused {path} with {status}: {cost}. A pod started with --api-key (or \
                 VLLM_API_KEY) wants that key on /v1 paths: name the environment variable holding it in \
                 the pool service's pods_api_key_env (docs/deployment.md, \"Pods with an API key\")"
            ),
            Some(key) => format!(
                "pod {address} refused {path} with {status} and the key in {}: {cost}. Check that it \
                 is the pod's --api-key",
                key.variable()
            ),
        },
        CatalogFailure::Status(status) => format!(
            "pod {address} answered {path} with {status}: {cost}; set models_interval_ms to 0 if its \
             server lists no models"
        ),
        CatalogFailure::NoAnswer => {
            format!("pod {address} did not answer {path} within timeout_ms ({} ms): {cost}", config.timeout_ms)
        }
        CatalogFailure::TooLarge => format!(
            "pod {address}'s {path} is over max_models_bytes ({}): the names it lists past its metrics' stay \
             unknown to the gateway, which sends requests for names no pod lists to this pod (and any other \
             such) by load, without adapter affinity; raise max_models_bytes (and max_names_per_pod)",
            config.max_models_bytes
        ),
        CatalogFailure::Unreadable => format!("pod {address}'s {path} is not a model list: {cost}"),
    }
}
