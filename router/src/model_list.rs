//! `GET /v1/models` (`models.list_path`) answered by the gateway with the pool's models, so
//! every call lists the same names whichever pod would have answered (see
//! `picker::models::listing` for what is listed and when there is no list).

use picker::models::listing::pool_model_list;
use serde_json::Value;
use wasm_epp_host::Host;

use crate::worker::Worker;

/// Whether a request's `:path` asks for the model list at `list_path` (a query is ignored,
/// as the pods' servers ignore it); an empty `list_path` is off.
pub fn is_list_path(path: &str, list_path: &str) -> bool {
    !list_path.is_empty() && path.split('?').next() == Some(list_path)
}

/// The pool's list from this worker's table, or `None` when the table cannot say (none yet,
/// the pool service silent past `fail_open_max_age_ms`, a pod that names no model): the
/// request is then routed to a pod as before.
pub fn pool_models(worker: &Worker, host: &dyn Host) -> Option<Value> {
    let mut cache = worker.table.try_borrow_mut().ok()?;
    if cache.table().is_none() {
        worker.refresh_table(&mut cache, host);
    }
    let now_ms = host.now_ms();
    if cache.expired(now_ms, worker.config.fail_open_max_age_ms) {
        return None;
    }
    pool_model_list(cache.table()?, &worker.config.models.rewrites, now_ms / 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_path_matches_with_or_without_a_query_and_never_when_off() {
        assert!(is_list_path("/v1/models", "/v1/models"));
        assert!(is_list_path("/v1/models?limit=5", "/v1/models"));
        for path in ["/v1/models/", "/v1/models/qwen", "/v1/modelsx", "/v2/models"] {
            assert!(!is_list_path(path, "/v1/models"), "{path}");
        }
        assert!(!is_list_path("/v1/models", ""));
    }
}
