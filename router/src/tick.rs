//! The worker's tick: refresh the pod table, publish this worker's in-flight counts and read
//! the others' (and likewise its learned TTFTs and its ejections of failing pods), share this
//! worker's routing decisions and learn everyone's, release or expire requests waiting in the
//! flow-control queue, flush the stats.
//!
//! Decisions go to the pool service over a shared queue, one batch per tick (each enqueue
//! wakes Envoy's main thread, so never one per request). The service appends them to the
//! ring in shared data, which every worker reads here. A shared queue has no bound of its
//! own, so a worker queues only while the service's heartbeat is recent: with the service
//! gone, batches are dropped and counted, and the worker routes on its own decisions.

use picker::address::PodAddress;
use picker::departed::Departed;
use picker::pod_table::{PodTable, MAX_PODS};
use picker::prefix::EVENT_QUEUE;
use wasm_epp_host::{Host, HostError, HostResult};

use crate::profile::Phase;
use crate::worker::Worker;

/// A heartbeat older than this means nobody drains the queue: stop adding to it. Twenty
/// poll intervals of the default 100 ms: a busy main thread does not trip it.
pub const QUEUE_STALE_AFTER_MS: u64 = 2_000;

/// The pool service's heartbeat written at `seen_ms` is young enough at `now_ms` to queue
/// anything for it.
pub fn heartbeat_fresh(seen_ms: u64, now_ms: u64) -> bool {
    now_ms.saturating_sub(seen_ms) <= QUEUE_STALE_AFTER_MS
}

pub fn on_tick(worker: &Worker, host: &dyn Host) {
    let span = crate::profile::span(host, Phase::Tick);
    worker.clock_ms.set(host.now_ms());
    sync(worker, host);
    // After the sync: releases see the table and the other workers' counts just read.
    crate::flow::on_tick(worker, host);
    let flushing = crate::profile::span(host, Phase::TickStats);
    worker.stats.metrics.flush(host);
    flushing.end();
    span.end();
    crate::profile::flush(host);
}

fn sync(worker: &Worker, host: &dyn Host) {
    // The peer listener's filter routes nothing: no table, counts or prefix replica.
    if !worker.serving.get() || worker.config.peer_receiver.is_some() {
        return;
    }
    let Ok(mut cache) = worker.table.try_borrow_mut() else { return };
    // The table is refreshed here, not per request: a new one is published at most once per
    // poll interval, and a tick is shorter than that.
    let refreshing = crate::profile::span(host, Phase::TickTable);
    worker.refresh_table(&mut cache, host);
    refreshing.end();
    if let Some(seen) = cache.service_seen_ms() {
        let age = host.now_ms().saturating_sub(seen);
        worker.stats.metrics.set(worker.stats.service_heartbeat_age_ms, age);
    }
    if let Ok(mut inflight) = worker.inflight.try_borrow_mut() {
        let _span = crate::profile::span(host, Phase::TickInflight);
        // One clock read for the counts and the records shared after them.
        let now = host.now_ms();
        // Prefills estimated done end their pods' holds before the counts are published (a
        // whole answer's headers, which end them otherwise, come after its decode).
        crate::prefill_hold::release_due(worker, &mut inflight, now);
        let report = inflight.sync(host, now, worker.config.inflight_expiry_ms);
        if !report.published {
            worker.stats.increment(worker.stats.inflight_update_failed);
        }
        if report.slots_full {
            log::warn!(
                "wasm-epp: Envoy runs more than {slots} worker threads: this worker's requests in flight are \
                 not seen by the other workers' picks (run Envoy with --concurrency {slots} or less)",
                slots = picker::inflight::MAX_SLOTS
            );
        }
        let (slot, slots) = (inflight.slot(), inflight.claimed_slots());
        drop(inflight);
        crate::learning_share::share(worker, host, slot, slots, now);
        crate::outliers_share::share(worker, host, cache.table(), slot, slots, now);
    }
    let now = host.now_ms();
    let Ok(mut departed) = worker.departed.try_borrow_mut() else { return };
    let pool = note_departures(&mut departed, cache.take_pod_change(), cache.table(), now);
    // Searched, not walked: each check below runs once per entry of a per-pod table (1,024
    // pods checked against 1,024 by a walk each are a million comparisons).
    let keep =
        |pod: &str| pool.as_ref().is_some_and(|sorted| sorted.binary_search(&pod).is_ok()) || departed.contains(pod);
    if let (Some(_), Ok(mut outliers)) = (&pool, worker.outliers.try_borrow_mut()) {
        outliers.retain_pods(|pod| keep(pod.as_str()));
    }
    // Learning runs with or without prefix routing: its tables forget departed pods either way.
    if let (Some(_), Ok(mut learner)) = (&pool, worker.learning.try_borrow_mut()) {
        learner.retain_pods(keep);
    }
    if !worker.config.prefix.enabled {
        return;
    }
    let Ok(mut prefix) = worker.prefix.try_borrow_mut() else { return };
    if pool.is_some() {
        prefix.retain_pods(keep);
    }
    let service_alive = cache.service_seen_ms().is_some_and(|seen| heartbeat_fresh(seen, now));
    if let Some(batch) = prefix.take_batch() {
        let _span = crate::profile::span(host, Phase::TickSend);
        if !service_alive {
            worker.stats.increment(worker.stats.prefix_send_skipped);
        } else {
            match send(worker, host, &batch) {
                Ok(()) => worker.stats.increment(worker.stats.prefix_events_sent),
                Err(_) => worker.stats.increment(worker.stats.prefix_send_failed),
            }
        }
    }
    let default_capacity = worker.config.prefix.default_capacity_blocks;
    let table = cache.table();
    let capacity_of =
        |pod: &str| worker.index_capacity(pod, table.and_then(|t| t.capacity_blocks(pod)).unwrap_or(default_capacity));
    let reading = crate::profile::span(host, Phase::TickRing);
    let synced = prefix.sync_from_ring(host, &capacity_of);
    reading.end();
    match synced {
        Ok(report) => {
            worker.stats.add(worker.stats.prefix_events_learned, report.events as u64);
            worker.stats.add(worker.stats.prefix_ring_lost, report.lost_segments);
        }
        Err(error) => log::debug!("wasm-epp: prefix ring not readable: {error:?}"),
    }
}

/// Notes at `now_ms` the pods that left (`left`, from the table cache: `Some` after a change
/// of membership) and forgets those gone past [`picker::departed::GRACE_MS`], or past the
/// room the pool leaves under [`MAX_PODS`] (every per-pod table holds the pool and the
/// departed pods together). Returns the pool, sorted, when the worker's per-pod tables are to
/// be trimmed to it and the departed pods: its membership changed, or a departure expired.
///
/// A pod NotReady for a few seconds (a readiness probe timing out under load) leaves the
/// discovered pool and comes back with its cache warm: what this worker knew of it is kept
/// meanwhile. It cannot be picked while out of the table (picks read the table's pods), and
/// what is kept is void if it comes back as another engine: prefix entries and sessions are
/// of an epoch, the learner forgets a pod whose epoch changed, and an ejection ends then too.
fn note_departures<'a>(
    departed: &mut Departed<()>,
    left: Option<Vec<PodAddress>>,
    table: Option<&'a PodTable>,
    now_ms: u64,
) -> Option<Vec<&'a str>> {
    let pods = table.map_or(&[][..], |t| t.pods.as_slice());
    let sorted = || {
        let mut sorted: Vec<&str> = pods.iter().map(|p| p.address.as_str()).collect();
        sorted.sort_unstable();
        sorted
    };
    let room = MAX_PODS.saturating_sub(pods.len());
    match left {
        Some(left) => {
            let pool = sorted();
            left.into_iter().for_each(|pod| departed.insert(pod, (), now_ms));
            departed.remove_listed(|pod| pool.binary_search(&pod).is_ok());
            departed.expire(now_ms, room);
            Some(pool)
        }
        None => departed.expire(now_ms, room).then(sorted),
    }
}

/// Enqueues a batch for the pool service, resolving its queue on first use.
fn send(worker: &Worker, host: &dyn Host, batch: &[u8]) -> HostResult<()> {
    let queue = match worker.event_queue.get() {
        Some(queue) => queue,
        None => {
            let queue = host
                .resolve_queue(&worker.vm_id, EVENT_QUEUE)?
                .ok_or(HostError { call: "resolve_shared_queue (not registered yet)", status: 1 })?;
            worker.event_queue.set(Some(queue));
            queue
        }
    };
    let result = host.enqueue(queue, batch);
    if result.is_err() {
        // The service may have restarted with a new queue: resolve again next time.
        worker.event_queue.set(None);
    }
    result
}
