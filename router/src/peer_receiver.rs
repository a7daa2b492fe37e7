//! The filter on the internal peer listener: other replicas post their messages here; the
//! secret is checked, the body handed to this Envoy's pool service over the `peer-inbox`
//! queue (which decodes it and refuses replays), and the request answered at once. A
//! replica that starts asks a peer for a snapshot (`GET <path>/snapshot`): the newest
//! decisions of this replica's ring, with the epochs they are under, so it does not route
//! cold. Nothing on this listener is ever routed to a pod.

use picker::config::{PeerReceiverConfig, PEER_REPLICA_HEADER, PEER_SECRET_HEADER};
use picker::keys::{PEER_INBOX, POD_TABLE, REPLICA_ID, SERVICE_HEARTBEAT};
use picker::peer::{PeerMessage, PeerPod, MAX_MESSAGE_BYTES};
use picker::pod_table::{decode_version, PodTable};
use picker::prefix::events::{count_within, encode_batch};
use picker::prefix::RING_SEGMENTS;
use picker::prefix::{RingReader, StartAt};
use wasm_epp_host::{HeaderMap, Host};

use crate::reply::send_error;
use crate::worker::Worker;

/// Compares without an early exit, so the time taken says nothing about the secret.
fn same_secret(given: &[u8], expected: &[u8]) -> bool {
    let mut difference = given.len() ^ expected.len();
    for (index, byte) in expected.iter().enumerate() {
        difference |= usize::from(byte ^ given.get(index).copied().unwrap_or(!byte));
    }
    difference == 0
}

/// Headers of a peer request: `true` to wait for the body, `false` when already answered.
pub fn accept_headers(worker: &Worker, host: &dyn Host, config: &PeerReceiverConfig, headers: &HeaderMap) -> bool {
    let path = headers.get_text(":path").unwrap_or_default();
    let method = headers.get_text(":method");
    let snapshot = path.strip_prefix(config.path.as_str()) == Some("/snapshot") && method == Some("GET");
    if !snapshot && (path != config.path || method != Some("POST")) {
        worker.stats.increment(worker.stats.peer_refused);
        send_error(host, 404, "not_found", "wasm-epp peer listener: no such endpoint");
        return false;
    }
    if !same_secret(headers.get(PEER_SECRET_HEADER).unwrap_or_default(), config.secret.as_bytes()) {
        worker.stats.increment(worker.stats.peer_refused);
        send_error(host, 403, "forbidden", "wasm-epp peer listener: wrong or missing secret");
        return false;
    }
    if snapshot {
        send_snapshot(worker, host);
        return false;
    }
    true
}

/// Answers a starting replica with this replica's newest decisions and their epochs.
fn send_snapshot(worker: &Worker, host: &dyn Host) {
    let events = RingReader::new(StartAt::Oldest).poll(host, RING_SEGMENTS).map(|r| r.events).unwrap_or_default();
    let table = host.get(POD_TABLE).ok().and_then(|(bytes, _)| PodTable::decode(&bytes?).ok()).unwrap_or_default();
    let pods = table
        .pods
        .iter()
        .map(|p| PeerPod { address: p.address.clone(), epoch: p.epoch, inflight: 0, tokens: 0 })
        .collect();
    // Replica 0, sequence 0: a snapshot is an answer to the asker's own call, not a message.
    let message = PeerMessage {
        replica: 0,
        seq: 0,
        sent_ms: host.now_ms(),
        pods,
        events: Vec::new(),
        waiting_workers: 0,
        waiting_top: None,
    };
    // The asker reads at most MAX_MESSAGE_BYTES (and Envoy cuts larger answers): the newest
    // decisions that fit are counted from the newest back, then sent oldest first, since the
    // asker appends them in order (the newest most recent in its index) and its decoder keeps
    // a batch's first events.
    let fitting = count_within(events.iter().rev(), message.batch_budget());
    let newest = events.get(events.len().saturating_sub(fitting)..).unwrap_or_default();
    let body = message.encode(&encode_batch(newest));
    worker.stats.increment(worker.stats.peer_snapshots);
    // Named like a message's answer, so a replica that asked its own listener knows itself.
    let replica = own_replica(host);
    let headers = [("content-type", "application/octet-stream"), (PEER_REPLICA_HEADER, replica.as_str())];
    if let Err(error) = host.send_reply(200, &headers, &body) {
        log::debug!("wasm-epp peer listener: snapshot reply failed: {error}");
    }
}

/// The whole body arrived (or grew too large): hand it over and answer.
pub fn accept_body(worker: &Worker, host: &dyn Host, body_size: usize) {
    if body_size > MAX_MESSAGE_BYTES {
        worker.stats.increment(worker.stats.peer_refused);
        send_error(host, 413, "too_large", "wasm-epp peer listener: message too large");
        return;
    }
    let body = host.request_body(0, body_size).unwrap_or_default();
    if !body.starts_with(b"WEPP") {
        worker.stats.increment(worker.stats.peer_refused);
        send_error(host, 400, "invalid_request_error", "wasm-epp peer listener: not a peer message");
        return;
    }
    let queue = match worker.peer_inbox.get() {
        Some(queue) => Some(queue),
        None => host.resolve_queue(&worker.vm_id, PEER_INBOX).ok().flatten(),
    };
    worker.peer_inbox.set(queue);
    // A queue outlives its reader (the workers' VMs keep it): with the pool service gone,
    // messages of up to 1 MiB from every peer would pile up in it unread.
    let queue = queue.filter(|_| !pool_service_gone(host));
    match queue.map(|q| host.enqueue(q, &body)) {
        Some(Ok(())) => {
            worker.stats.increment(worker.stats.peer_accepted);
            let replica = own_replica(host);
            let headers = [("x-wasm-epp", "peer-accepted"), (PEER_REPLICA_HEADER, replica.as_str())];
            if let Err(error) = host.send_reply(204, &headers, &[]) {
                log::debug!("wasm-epp peer listener: reply failed: {error}");
            }
        }
        _ => {
            worker.peer_inbox.set(None);
            worker.stats.increment(worker.stats.peer_refused);
            send_error(host, 503, "service_unavailable", "wasm-epp peer listener: no pool service to take it");
        }
    }
}

/// The pool service that registered the inbox stopped writing its heartbeat (as the workers
/// check before they queue their own decisions for it). None written yet is a service that
/// has not ticked since it started: it will read the queue.
fn pool_service_gone(host: &dyn Host) -> bool {
    let beat = match host.get(SERVICE_HEARTBEAT) {
        Ok((Some(bytes), _)) => decode_version(&bytes),
        _ => None,
    };
    beat.is_some_and(|seen| !crate::tick::heartbeat_fresh(seen, host.now_ms()))
}

/// This Envoy's replica id as the pool service published it (empty until it has). Read per
/// message, not cached: a restarted pool service is a new replica with a new id.
fn own_replica(host: &dyn Host) -> String {
    match host.get(REPLICA_ID) {
        Ok((Some(bytes), _)) => String::from_utf8(bytes).unwrap_or_default(),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::same_secret;

    #[test]
    fn secrets_compare_whole() {
        assert!(same_secret(b"0123456789abcdef", b"0123456789abcdef"));
        assert!(!same_secret(b"0123456789abcdeX", b"0123456789abcdef"));
        assert!(!same_secret(b"0123456789abcdef0", b"0123456789abcdef"));
        assert!(!same_secret(b"", b"0123456789abcdef"));
    }
}
