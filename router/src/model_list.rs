//! `GET /v1/models` (`models.list_path`) answered by the gateway with the pool's models, so
//! every call lists the same names whichever pod would have answered (see
//! `picker::models::listing` for what is listed and when there is no list).

use std::rc::Rc;

use picker::models::listing::{pool_model_list, ModelList, MAX_LIST_BYTES};
use wasm_epp_host::Host;

use crate::worker::Worker;

/// Whether a request's `:path` asks for the model list at `list_path` (a query is ignored,
/// as the pods' servers ignore it); an empty `list_path` is off.
pub fn is_list_path(path: &str, list_path: &str) -> bool {
    !list_path.is_empty() && path.split('?').next() == Some(list_path)
}

/// The pool's list from this worker's table (the JSON body to answer, and the names it
/// lacks), or `None` when the table cannot say (none yet, the pool service silent past
/// `fail_open_max_age_ms`, a pod that names no model): the request is then routed to a pod
/// as before. Built once per table (its `created` is then the time of the table's first list
/// request).
pub fn pool_models(worker: &Worker, host: &dyn Host) -> Option<Rc<ModelList>> {
    let mut cache = worker.table.try_borrow_mut().ok()?;
    let now_ms = host.now_ms();
    if worker.table_expired_for_request(&mut cache, host, now_ms) {
        return None;
    }
    let rewrites = &worker.config.models.rewrites;
    cache.model_list(|table| pool_model_list(table, rewrites, now_ms / 1000))
}

/// Counts a list about to be answered, and one that lacks names: a client then misses a
/// model the pool serves (inference-perf refuses to start), so the operator is told, by a
/// counter and a warning logged when lists start being cut (again), not on every answer.
pub fn count_answer(worker: &Worker, list: &ModelList) {
    let stats = &worker.stats;
    stats.increment(stats.model_lists_answered);
    let cut = list.left_out > 0;
    if cut {
        stats.increment(stats.model_lists_cut);
    }
    let told_before = worker.model_list_cut_told.replace(cut);
    if cut && !told_before {
        log::warn!(
            "wasm-epp: GET models.list_path answered without {} of the pool's model names: the list \
             is bounded at {} MiB (adapters are left out first)",
            list.left_out,
            MAX_LIST_BYTES >> 20
        );
    }
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
