//! The pods as the saturation detector reads them: the worker's table (or, without one,
//! the static pool, whose pods have no data) with the in-flight counts of every worker.

use picker::config::StaleMetricsPolicy;
use picker::disaggregation::RoleSplit;
use picker::inflight::WorkerInflight;
use picker::models::index::ModelIndex;
use picker::outliers::{pass_over, PassOver};
use picker::pod_table::{PodState, PodTable};
use wasm_epp_host::Host;

use super::saturation::{pod_saturated, pool_room, PodLoad, PoolRoom};
use crate::worker::Worker;

/// The table the pods were read from, for the pods each request may go to (`None`: no
/// usable table; the static pool's pods serve any model).
#[derive(Clone, Copy)]
pub struct Shape<'t> {
    pub table: &'t PodTable,
    pub models: &'t ModelIndex,
    /// Under P/D, both roles' tables (`table` and `models` are then the decode pods'): a
    /// request for a model only prefill pods list is routed to them, so their room is its own.
    pub roles: Option<RoleSplit<'t>>,
}

/// Every pod the requests may go to, before the pool's own rule for the pods out of rotation
/// left any out: a request's pods are passed over by that rule among themselves, as its
/// decision does (a model whose pods are all out of rotation is still routed to them).
#[derive(Clone, Copy)]
pub struct AllPods<'p, 'a> {
    /// The pool's pods (under P/D the decode pods), then, under P/D, the prefill pods (their
    /// positions the prefill table's), which only requests for a model no decode pod serves
    /// go to (`crate::disaggregate::served_on_prefill_pods_only`).
    pub pods: &'p [PodLoad<'a>],
    /// Where the prefill pods start in `pods` (its length when there are none).
    pub prefill_from: usize,
    /// Whether each is out of rotation (empty: none is).
    pub ejected: &'p [bool],
}

/// Calls `f` with every pod's load as of `now` (as the pool is counted: pods out of
/// rotation for failing requests left out by the decision's rule over the whole pool), the
/// pods so left out, the table they come from and every pod ([`AllPods`]); `None` if the
/// worker state is busy.
pub fn with_pods<R>(
    worker: &Worker,
    host: &dyn Host,
    now: u64,
    f: impl FnOnce(&[PodLoad<'_>], &WorkerInflight, &[&str], Option<Shape<'_>>, AllPods<'_, '_>) -> R,
) -> Option<R> {
    let mut cache = worker.table.try_borrow_mut().ok()?;
    // As the decision reads it: an expired table no longer says who is in the pool.
    let expired = worker.table_expired_for_request(&mut cache, host, now);
    let table = if expired { None } else { cache.table() };
    let mut inflight = worker.inflight.try_borrow_mut().ok()?;
    inflight.refresh_others(host, now);
    // Under P/D requests go to the decode pods (`decision::decide`, when the table has pods of
    // both roles): the prefill pods' places are no room for them (but for a model only the
    // prefill pods list, see below).
    let split = worker.pd.is_some() && table.is_some_and(picker::disaggregation::splits);
    // Which of them a request may go to is read, as the decision reads it, in the decode pods'
    // own table (its positions theirs: the decode pods in table order) and model index.
    let mut role_tables = worker.pd.as_ref().and_then(|pd| pd.tables.try_borrow_mut().ok());
    let roles = match (split, role_tables.as_deref_mut(), table) {
        (true, Some(tables), Some(table)) => Some(tables.split(table, &|role_table| cache.model_index_of(role_table))?),
        (true, _, _) => return None,
        _ => None,
    };
    let load = |(position, pod)| pod_load(position, pod, now, worker.config.stale_after_ms, &inflight);
    let mut all: Vec<PodLoad<'_>> = match table.filter(|t| !t.pods.is_empty()) {
        Some(table) => table.pods.iter().filter(|pod| !split || pod.role.decodes()).enumerate().map(load).collect(),
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
    // The prefill pods, after the pool's: only requests for a model no decode pod serves go
    // there, so they are the room of those alone (`super::reach`), never the pool's.
    let prefill_from = all.len();
    if let Some(roles) = &roles {
        all.extend(roles.prefill.pods.iter().enumerate().map(load));
    }
    // Pods out of rotation for failing requests are no room, by the decision's own rule
    // (`picker::outliers::pass_over`): the room counted is where released requests will go.
    let mut outliers = worker.outliers.try_borrow_mut().ok();
    let epoch_of = |pod: &str| table.and_then(|t| t.epoch_of(pod));
    let ejected = outliers.as_mut().map_or(&[][..], |outliers| outliers.ejected(now, &epoch_of));
    // Allocated only when a pod is out of rotation (rare).
    let ejected: Vec<bool> = match ejected.is_empty() {
        true => Vec::new(),
        false => all.iter().map(|pod| ejected.iter().any(|e| e == pod.address)).collect(),
    };
    drop(outliers);
    let is_ejected = |i: usize| ejected.get(i).copied().unwrap_or(false);
    let rule = (!ejected.is_empty()).then(|| {
        let usable = |(i, pod): &(usize, &PodLoad<'_>)| pod.healthy && pod.fresh && !is_ejected(*i);
        let pooled = || all.iter().take(prefill_from);
        pass_over(
            pooled().enumerate().any(|pod| usable(&pod)),
            pooled().any(|pod| pod.healthy && pod.fresh),
            pooled().enumerate().any(|(i, pod)| pod.healthy && !is_ejected(i)),
        )
    });
    if !all.iter().take(prefill_from).any(|pod| pod.healthy && pod.fresh) {
        // No usable data for any pod (every scrape failing, or the pool service silent):
        // as routing fails open, so does the detector, unless stale data means saturated.
        // (The prefill pods' requests fail open by their own pods, `super::reach`.)
        for pod in all.iter_mut().take(prefill_from) {
            fail_open(pod, worker.config.flow_control.stale_metrics);
        }
    }
    // Left out while another pod is counted (the rule's `Unusable` leaves a usable one).
    let leave_out = match rule {
        Some(PassOver::Unusable) => true,
        Some(PassOver::LeftOut) => (0..prefill_from).any(|i| !is_ejected(i)),
        _ => false,
    };
    let mut left_out: Vec<&str> = Vec::new();
    let kept: Vec<PodLoad<'_>>;
    // The pool's pods, as its room and gauges count them.
    let pooled = all.get(..prefill_from).unwrap_or_default();
    let pods: &[PodLoad<'_>] = if leave_out {
        left_out.extend(pooled.iter().enumerate().filter(|(i, _)| is_ejected(*i)).map(|(_, pod)| pod.address));
        kept = pooled.iter().enumerate().filter(|(i, _)| !is_ejected(*i)).map(|(_, pod)| *pod).collect();
        &kept
    } else {
        pooled
    };
    let shape = match roles {
        Some(roles) => Some(Shape { table: roles.decode, models: roles.decode_models, roles: Some(roles) }),
        None => table.filter(|t| !t.pods.is_empty()).map(|table| Shape { table, models: cache.models(), roles: None }),
    };
    Some(f(pods, &inflight, &left_out, shape, AllPods { pods: &all, prefill_from, ejected: &ejected }))
}

/// Table pod `pod`, at `position` of its table, as the saturation detector reads it.
fn pod_load<'a>(
    position: usize,
    pod: &'a PodState,
    now: u64,
    stale_after_ms: u64,
    inflight: &WorkerInflight,
) -> PodLoad<'a> {
    PodLoad {
        address: pod.address.as_str(),
        position,
        known: true,
        healthy: pod.healthy,
        fresh: pod.fresh_at(now, stale_after_ms),
        waiting: pod.waiting,
        kv_usage: pod.kv_usage,
        inflight: inflight.count(pod.address.as_str()),
    }
}

/// A pod read with no usable data, as routing reads it failing open: by its in-flight count
/// alone, or saturated if stale data means saturated.
pub fn fail_open(pod: &mut PodLoad<'_>, policy: StaleMetricsPolicy) {
    pod.known = policy != StaleMetricsPolicy::Ignore;
    pod.healthy = true;
    pod.fresh = false;
}

/// Sets the saturation gauges: per pod (0/1; a pod left out for failing requests has no
/// room: 1) and for the pool. Returns whether any of them is 1 (false when there are no pods
/// to judge).
pub fn publish_saturation(worker: &Worker, host: &dyn Host, now: u64) -> bool {
    let metrics = &worker.stats.metrics;
    let stats = &worker.flow.stats;
    with_pods(worker, host, now, |pods, _, left_out, _, _| {
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
