//! Fetching each pod's `/v1/models` on its slower schedule (see
//! `picker::models::catalog_poll`), through the same metrics cluster as the scrapes.

use picker::models::catalog::parse_catalog;
use picker::models::catalog_poll::CatalogSchedule;
use picker::poller::PoolPoller;
use wasm_epp_host::Host;

/// Asks every pod that is due for its model list.
pub fn dispatch(host: &dyn Host, poller: &PoolPoller, schedule: &mut CatalogSchedule, now: u64) {
    let config = poller.config();
    for address in schedule.due(now, config.timeout_ms, &poller.addresses()) {
        let headers = [
            (":method", "GET"),
            (":path", config.models_path.as_str()),
            (":authority", address.as_str()),
            (config.destination_header.as_str(), address.as_str()),
            ("accept", "application/json"),
        ];
        match host.dispatch_call(&config.metrics_cluster, &headers, &[], config.timeout_ms) {
            Ok(token) => schedule.started(token, address, now),
            Err(error) => log::debug!("wasm-epp pool service: /v1/models of {address} not asked: {error}"),
        }
    }
}

/// A model list arrived (or did not): a good one goes into the pod's state. A pod that does not
/// serve `/v1/models` keeps the models its metrics name.
pub fn on_answer(host: &dyn Host, poller: &mut PoolPoller, schedule: &mut CatalogSchedule, token: u32, size: usize) {
    let Some(address) = schedule.finished(token) else { return };
    let limit = usize::try_from(poller.config().max_models_bytes).unwrap_or(usize::MAX);
    if host.call_response_status() != Some(200) || size > limit {
        return log::debug!("wasm-epp pool service: no usable /v1/models from {address}");
    }
    let body = host.call_response_body(size, limit).unwrap_or_default();
    match parse_catalog(&body, limit) {
        Ok(catalog) => poller.set_catalog(&address, catalog),
        Err(reason) => log::debug!("wasm-epp pool service: /v1/models of {address}: {reason}"),
    }
}
