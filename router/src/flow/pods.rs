//! The pods as the saturation detector reads them: the worker's table (or, without one,
//! the static pool, whose pods have no data) with the in-flight counts of every worker.

use picker::config::StaleMetricsPolicy;
use picker::inflight::WorkerInflight;
use picker::models::index::ModelIndex;
use picker::outliers::{pass_over, PassOver};
use picker::pod_table::PodTable;
use wasm_epp_host::Host;

use super::saturation::{pod_saturated, pool_room, PodLoad, PoolRoom};
use crate::worker::Worker;

/// The table the pods were read from, for the pods each request may go to (`None`: no
/// usable table; the static pool's pods serve any model).
#[derive(Clone, Copy)]
pub struct Shape<'t> {
    pub table: &'t PodTable,
    pub models: &'t ModelIndex,
}

/// Calls `f` with every pod's load as of `now`, the pods left out for failing requests and
/// the table they come from; `None` if the worker state is busy.
pub fn with_pods<R>(
    worker: &Worker,
    host: &dyn Host,
    now: u64,
    f: impl FnOnce(&[PodLoad<'_>], &WorkerInflight, &[&str], Option<Shape<'_>>) -> R,
) -> Option<R> {
    let mut cache = worker.table.try_borrow_mut().ok()?;
    // As the decision reads it: an expired table no longer says who is in the pool.
    let expired = worker.table_expired_for_request(&mut cache, host, now);
    let table = if expired { None } else { cache.table() };
    let mut inflight = worker.inflight.try_borrow_mut().ok()?;
    inflight.refresh_others(host, now);
    // Under P/D requests go to the decode pods (`decision::decide`, when the table has pods of
    // both roles): the prefill pods' places are no room for them.
    let split = worker.pd.is_some() && table.is_some_and(picker::disaggregation::splits);
    let mut pods: Vec<PodLoad<'_>> = match table.filter(|t| !t.pods.is_empty()) {
        Some(table) => table
            .pods
            .iter()
            .enumerate()
            .filter(|(_, pod)| !split || pod.role.decodes())
            .map(|(position, pod)| PodLoad {
                address: pod.address.as_str(),
                position,
                known: true,
                healthy: pod.healthy,
                fresh: pod.fresh_at(now, worker.config.stale_after_ms),
                waiting: pod.waiting,
                kv_usage: pod.kv_usage,
                inflight: inflight.count(pod.address.as_str()),
            })
            .collect(),
        None => worker
            .fallback_pool
            .iter()
            .enumerate()
            .map(|(position, address)| PodLoad {
                address: address.as_str(),
                position,
                known: false,
                healthy: true,
                fresh: false,
                waiting: 0.0,
                kv_usage: None,
                inflight: inflight.count(address.as_str()),
            })
            .collect(),
    };
    // Pods out of rotation for failing requests are no room, by the decision's own rule
    // (`picker::outliers::pass_over`): the room counted is where released requests will go.
    let mut outliers = worker.outliers.try_borrow_mut().ok();
    let epoch_of = |pod: &str| table.and_then(|t| t.epoch_of(pod));
    let ejected = outliers.as_mut().map_or(&[][..], |outliers| outliers.ejected(now, &epoch_of));
    let is_ejected = |pod: &PodLoad<'_>| ejected.iter().any(|e| e == pod.address);
    let rule = (!ejected.is_empty()).then(|| {
        pass_over(
            pods.iter().any(|pod| pod.healthy && pod.fresh && !is_ejected(pod)),
            pods.iter().any(|pod| pod.healthy && pod.fresh),
            pods.iter().any(|pod| pod.healthy && !is_ejected(pod)),
        )
    });
    // Allocated only when a pod is left out (ejected pods are rare).
    let mut left_out: Vec<&str> = Vec::new();
    if rule == Some(PassOver::Unusable) {
        left_out.extend(pods.iter().filter(|pod| is_ejected(pod)).map(|pod| pod.address));
        pods.retain(|pod| !is_ejected(pod));
    }
    if !pods.iter().any(|pod| pod.healthy && pod.fresh) {
        // No usable data for any pod (every scrape failing, or the pool service silent):
        // as routing fails open, so does the detector, unless stale data means saturated.
        let ignore = worker.config.flow_control.stale_metrics == StaleMetricsPolicy::Ignore;
        for pod in &mut pods {
            pod.known = !ignore;
            pod.healthy = true;
            pod.fresh = false;
        }
    }
    if rule == Some(PassOver::LeftOut) && pods.iter().any(|pod| !is_ejected(pod)) {
        left_out.extend(pods.iter().filter(|pod| is_ejected(pod)).map(|pod| pod.address));
        pods.retain(|pod| !is_ejected(pod));
    }
    drop(outliers);
    let shape = table.filter(|t| !t.pods.is_empty()).map(|table| Shape { table, models: cache.models() });
    Some(f(&pods, &inflight, &left_out, shape))
}

/// Sets the saturation gauges: per pod (0/1; a pod left out for failing requests has no
/// room: 1) and for the pool. Returns whether any of them is 1 (false when there are no pods
/// to judge).
pub fn publish_saturation(worker: &Worker, host: &dyn Host, now: u64) -> bool {
    let metrics = &worker.stats.metrics;
    let stats = &worker.flow.stats;
    with_pods(worker, host, now, |pods, _, left_out, _| {
        let config = &worker.config.flow_control;
        for pod in left_out {
            stats.saturation(metrics, pod, true);
        }
        let mut any = !left_out.is_empty();
        for pod in pods {
            let saturated = pod_saturated(pod, &worker.config.saturation, config);
            stats.saturation(metrics, pod.address, saturated);
            any |= saturated;
        }
        let room = pool_room(pods, &worker.config.saturation, config);
        let pool_saturated = !matches!(room, PoolRoom::Free(_));
        stats.pool_saturated(metrics, pool_saturated);
        any || pool_saturated
    })
    .unwrap_or(false)
}
