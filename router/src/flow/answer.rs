//! Answering a request that leaves the queue without a pod: 429 (TTL, capacity, evicted),
//! 503 (no pod at all, no route) or 404 (its model gone), in OpenAI's error shape, with
//! `x-llm-d-request-dropped-reason` (see [`DroppedReason`] for whose values).

use std::rc::Rc;

use wasm_epp_host::Host;

use super::queue::Left;
use super::stats::DropReason;
use super::{Fate, Held};
use crate::reply::{send_dropped, send_model_not_found, DroppedReason};
use crate::worker::Worker;

/// Status, header value and message for each reason, as llm-d answers the same outcome
/// (a request routed at once that finds no pod gets the same 503); `None` for a model no pod
/// serves, answered as a request for it routed at once is: 404, naming the model.
fn reply_for(reason: DropReason) -> Option<(u32, DroppedReason, &'static str)> {
    let reply = match reason {
        DropReason::TtlExpired => {
            (429, DroppedReason::RejectedTtlExpired, "waited its TTL while every pod was saturated")
        }
        DropReason::NoPods => (503, DroppedReason::RejectedNoEndpoints, "waited its TTL and no inference pod appeared"),
        DropReason::Capacity => (429, DroppedReason::RejectedSaturated, "the gateway's wait queue is full"),
        DropReason::Evicted => {
            (429, DroppedReason::EvictedForHigherPriority, "sheddable request evicted for a higher priority")
        }
        DropReason::ClientGone => (499, DroppedReason::RejectedContextCancelled, "the client went away"),
        DropReason::NoRoute => (503, DroppedReason::RejectedNoEndpoints, "no inference pod available at release"),
        DropReason::NoEndpoints => (503, DroppedReason::RejectedNoEndpoints, "no pool member in the endpoint subset"),
        DropReason::UnknownModel => return None,
    };
    Some(reply)
}

/// Answers `left` locally and counts it. `other_stream`: called from a callback that is not
/// the request's own (the tick), so the host must first act on its stream.
pub fn answer(worker: &Worker, host: &dyn Host, left: &Left<Rc<Held>>, reason: DropReason, other_stream: bool) {
    let held = &left.entry.payload;
    let metrics = &worker.stats.metrics;
    let fate = held.fate.borrow().clone();
    match fate {
        Fate::Waiting => {}
        // Sent to a pod already (no path answers such a request; were one to, taking its fate
        // would leave its place in flight for ever: its stream's end releases it by its fate).
        Fate::Routed(_) => return,
        // Its stream ended meanwhile (`on_done`: an evicted request's client left before the
        // tick that answers it). Envoy may still take `set_effective_context` on it until it
        // frees the stream, and a reply then would run the response callbacks of a context
        // the SDK has deleted (the VM fails).
        Fate::Answered => {
            worker.flow.stats.dropped(metrics, DropReason::ClientGone);
            return;
        }
    }
    *held.fate.borrow_mut() = Fate::Answered;
    if other_stream && host.set_effective_context(held.context_id).is_err() {
        worker.flow.stats.dropped(metrics, DropReason::ClientGone);
        return;
    }
    worker.flow.stats.dropped(metrics, reason);
    let Some((status, header, message)) = reply_for(reason) else {
        // Its model's pods all left while it waited.
        worker.stats.increment(worker.stats.model_unknown);
        send_model_not_found(host, held.routed_model().unwrap_or_default());
        return;
    };
    let kind = if status == 429 { "rate_limit_exceeded" } else { "service_unavailable" };
    send_dropped(host, status, header, kind, &format!("wasm-epp: {message}"));
}

/// Answers a request that would have to wait but cannot be held (its body is not buffered
/// whole: over `max_body_bytes`, past `max_buffered_bytes`) as a full queue answers:
/// 429 `rejected-saturated`, counted as `capacity`. From its own stream's callback.
pub fn refuse_unheld(worker: &Worker, host: &dyn Host) {
    worker.flow.stats.dropped(&worker.stats.metrics, DropReason::Capacity);
    send_dropped(
        host,
        429,
        DroppedReason::RejectedSaturated,
        "rate_limit_exceeded",
        "wasm-epp: every inference pod is busy or other requests wait, and this request cannot wait in the \
         gateway's queue (its body is over the plugin's buffering limits)",
    );
}

/// Answers the requests evicted since the last tick.
pub fn answer_pending(worker: &Worker, host: &dyn Host) {
    let pending = match worker.flow.pending.try_borrow_mut() {
        Ok(mut pending) => std::mem::take(&mut *pending),
        Err(_) => return,
    };
    for (left, reason) in &pending {
        answer(worker, host, left, *reason, true);
    }
}
