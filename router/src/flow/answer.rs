//! Answering a request that leaves the queue without a pod: 429 (TTL, capacity, evicted)
//! or 503 (no pod at all, no route), in OpenAI's error shape, with
//! `x-llm-d-request-dropped-reason` as llm-d's gateway sends it.

use std::rc::Rc;

use wasm_epp_host::Host;

use super::queue::Left;
use super::stats::DropReason;
use super::{Fate, Held};
use crate::worker::Worker;

/// The header naming why a request was not served (llm-d's name and values).
pub const DROPPED_REASON_HEADER: &str = "x-llm-d-request-dropped-reason";

/// Status and header value for each reason.
fn reply_for(reason: DropReason) -> (u32, &'static str, &'static str) {
    match reason {
        DropReason::TtlExpired => (429, "rejected-ttl-expired", "waited its TTL while every pod was saturated"),
        DropReason::NoPods => (503, "rejected-ttl-expired", "waited its TTL and no inference pod appeared"),
        DropReason::Capacity => (429, "rejected-capacity", "the gateway's wait queue is full"),
        DropReason::Evicted => (429, "evicted-for-higher-priority", "sheddable request evicted for a higher priority"),
        DropReason::ClientGone => (499, "client-gone", "the client went away"),
        DropReason::NoRoute => (503, "rejected-no-route", "no inference pod available at release"),
        DropReason::NoEndpoints => (503, "rejected-no-endpoints", "no pool member in the endpoint subset"),
    }
}

/// Answers `left` locally and counts it. `other_stream`: called from a callback that is not
/// the request's own (the tick), so the host must first act on its stream.
pub fn answer(worker: &Worker, host: &dyn Host, left: &Left<Rc<Held>>, reason: DropReason, other_stream: bool) {
    let held = &left.entry.payload;
    *held.fate.borrow_mut() = Fate::Answered;
    let metrics = &worker.stats.metrics;
    if other_stream && host.set_effective_context(held.context_id).is_err() {
        worker.flow.stats.dropped(metrics, DropReason::ClientGone);
        return;
    }
    worker.flow.stats.dropped(metrics, reason);
    let (status, header, message) = reply_for(reason);
    send_dropped(host, status, header, message);
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

fn send_dropped(host: &dyn Host, status: u32, reason: &str, message: &str) {
    let kind = if status == 429 { "rate_limit_exceeded" } else { "service_unavailable" };
    let body = serde_json::json!({"error": {"message": format!("wasm-epp: {message}"), "type": kind, "param": null, "code": status}});
    let headers =
        [("content-type", "application/json"), ("x-wasm-epp", "local-reply"), (DROPPED_REASON_HEADER, reason)];
    if let Err(error) = host.send_reply(status, &headers, body.to_string().as_bytes()) {
        log::warn!("wasm-epp: could not send local reply {status}: {error}");
    }
}
