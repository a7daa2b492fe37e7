//! The worker's tick: refresh the pod table, share this worker's routing decisions, learn
//! everyone's.
//!
//! Decisions go to the singleton over a shared queue, one batch per tick (each enqueue wakes
//! Envoy's main thread, so never one per request). The singleton appends them to the ring in
//! shared data, which every worker reads here. A worker whose singleton is missing keeps
//! routing on its own decisions alone.

use picker::prefix::EVENT_QUEUE;
use proxy_wasm::hostcalls;
use proxy_wasm::types::Status;
use wasm_epp_host::ProxyStore;

use crate::worker::Worker;

pub fn on_tick(worker: &Worker) {
    if !worker.serving.get() {
        return;
    }
    let store = ProxyStore;
    let Ok(mut cache) = worker.table.try_borrow_mut() else { return };
    // The table is refreshed here, not per request: a new one is published at most once per
    // poll interval, and a tick is shorter than that.
    cache.refresh_counted(&store, worker.stats.table_decode_failed);
    if !worker.config.prefix.enabled {
        return;
    }
    let Ok(mut prefix) = worker.prefix.try_borrow_mut() else { return };
    if let Some(pods) = cache.take_new_pod_list() {
        prefix.retain_pods(|pod| pods.iter().any(|p| p == pod));
    }
    if let Some(batch) = prefix.take_batch() {
        match send(worker, &batch) {
            Ok(()) => worker.stats.prefix_events_sent.increment(),
            Err(_) => worker.stats.prefix_send_failed.increment(),
        }
    }
    let default_capacity = worker.config.prefix.default_capacity_blocks;
    let table = cache.table();
    let capacity_of = |pod: &str| table.and_then(|t| t.capacity_blocks(pod)).unwrap_or(default_capacity);
    match prefix.sync_from_ring(&store, &capacity_of) {
        Ok(report) => {
            worker.stats.prefix_events_learned.add(report.events as u64);
            worker.stats.prefix_ring_lost.add(report.lost_segments);
        }
        Err(error) => log::debug!("wasm-epp: prefix ring not readable: {error:?}"),
    }
}

/// Enqueues a batch for the singleton, resolving its queue on first use.
fn send(worker: &Worker, batch: &[u8]) -> Result<(), Status> {
    let queue = match worker.event_queue.get() {
        Some(queue) => queue,
        None => {
            let queue = hostcalls::resolve_shared_queue(&worker.vm_id, EVENT_QUEUE)?.ok_or(Status::NotFound)?;
            worker.event_queue.set(Some(queue));
            queue
        }
    };
    let result = hostcalls::enqueue_shared_queue(queue, Some(batch));
    if result.is_err() {
        // The singleton may have restarted with a new queue: resolve again next time.
        worker.event_queue.set(None);
    }
    result
}
