//! The filter on the internal peer listener: other replicas post their messages here; the
//! secret is checked, the body handed to this Envoy's pool service over the `peer-inbox`
//! queue (which decodes it and refuses replays), and the request answered at once. Nothing
//! on this listener is ever routed to a pod.

use picker::config::{PeerReceiverConfig, PEER_SECRET_HEADER};
use picker::keys::PEER_INBOX;
use picker::peer::MAX_MESSAGE_BYTES;
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
    if path != config.path || headers.get_text(":method") != Some("POST") {
        worker.stats.increment(worker.stats.peer_refused);
        send_error(host, 404, "not_found", "wasm-epp peer listener: no such endpoint");
        return false;
    }
    if !same_secret(headers.get(PEER_SECRET_HEADER).unwrap_or_default(), config.secret.as_bytes()) {
        worker.stats.increment(worker.stats.peer_refused);
        send_error(host, 403, "forbidden", "wasm-epp peer listener: wrong or missing secret");
        return false;
    }
    true
}

/// The whole body arrived (or grew too large): hand it over and answer.
pub fn accept_body(worker: &Worker, host: &dyn Host, body_size: usize) {
    if body_size > MAX_MESSAGE_BYTES {
        worker.stats.increment(worker.stats.peer_refused);
        send_error(host, 413, "too_large", "wasm-epp peer listener: message too large");
        return;
    }
    let body = host.request_body(body_size).unwrap_or_default();
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
    match queue.map(|q| host.enqueue(q, &body)) {
        Some(Ok(())) => {
            worker.stats.increment(worker.stats.peer_accepted);
            if let Err(error) = host.send_reply(204, &[("x-wasm-epp", "peer-accepted")], &[]) {
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
