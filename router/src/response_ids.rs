//! Stateful Responses API conversations: a request naming `previous_response_id` must reach the
//! pod that stored that response (vLLM keeps stored responses in the pod's memory, and another
//! pod answers 404). The id is learned when the answer passes: its first bytes carry it (a
//! whole answer's `id`, a stream's `response.created` event), and the pod that answered
//! (after Envoy's retries, [`crate::served::answering_pod`]) is recorded as the session of that
//! id, which the prefix machinery shares with the other workers and replicas like any session.
//! The follow-up is then routed with that session (`stream.rs`), so it sticks to the pod,
//! unless saturated, as sessions do.
//!
//! The ring takes a sync interval or two to reach the other workers, and an agent may send its
//! next turn at once, so the noting worker also writes the id to a shared-data slot
//! ([`picker::response_id::SLOTS`] keys, one entry each), which a worker that has not heard of
//! an id reads before routing ([`learn_from_slot`]).
//!
//! A retrieval (`GET /v1/responses/{id}`, how a background request is polled), a cancel and
//! `input_items` name the id in their path, and go to that pod the same way ([`follow_path`]).
//!
//! Cost: per Responses answer one header lookup, one copy of at most [`HEAD_BYTES`] of its
//! head, nearly always of the first chunk alone (both shared with learning's watch when it is on) and one shared-data write; per request naming a stored response a shared-data
//! read when the ring has not brought it yet; nothing for other endpoints or with
//! `prefix.follow_response_ids` off.

use picker::address::PodAddress;
use picker::prefix::session_key;
use picker::response_id::{decode_slot, encode_slot, find_response_id, slot_key};
use wasm_epp_host::Host;

use crate::worker::Worker;

/// Bytes of the answer's head searched for the id: a whole answer starts with it, a stream's
/// first event has it after ~70 bytes of event name and type.
pub const HEAD_BYTES: usize = 1024;

/// One Responses API answer being watched for its id.
#[derive(Debug, Default)]
pub struct ResponseIdWatch {
    /// The pod that answered, once the response headers came.
    answered_by: Option<PodAddress>,
    /// The head read so far, when its first chunks held no id: the id may come in a later
    /// chunk (an `event:` line alone in the first, a comment or `retry:` line before it).
    head: Vec<u8>,
    done: bool,
}

impl ResponseIdWatch {
    /// The answer's headers came from `upstream` (the pod that answered, as
    /// [`crate::served::answering_pod`] found it) or, when the host did not say,
    /// `routed_to` (the pick).
    pub fn on_headers(&mut self, upstream: Option<&[u8]>, routed_to: Option<&PodAddress>) {
        let answering =
            upstream.and_then(|bytes| std::str::from_utf8(bytes).ok()).and_then(|text| PodAddress::parse(text).ok());
        self.answered_by = answering.or_else(|| routed_to.cloned());
    }

    /// Whether the answer's next chunk is still to be read for the id.
    pub fn reading(&self) -> bool {
        !self.done
    }

    /// The answer cannot be read (its encoding): no id is noted.
    pub fn stop(&mut self) {
        self.done = true;
        self.head = Vec::new();
    }

    /// A body chunk of the answer's first [`HEAD_BYTES`]: the id found there, if any, becomes
    /// the answering pod's session. `chunk` is the chunk when learning copied it already;
    /// else what the head still lacks is copied here.
    pub fn on_body(&mut self, worker: &Worker, host: &dyn Host, chunk_size: usize, chunk: Option<&[u8]>) {
        if self.done || chunk_size == 0 {
            return;
        }
        if self.answered_by.is_none() {
            self.done = true;
            return;
        }
        let wanted = HEAD_BYTES.saturating_sub(self.head.len());
        let copied;
        let part = match chunk {
            Some(chunk) => chunk.get(..wanted).unwrap_or(chunk),
            None => {
                copied = host.response_body(0, chunk_size.min(wanted)).unwrap_or_default();
                copied.as_slice()
            }
        };
        // Nearly always the first chunk holds the id: searched where it is, no copy.
        let found = if self.head.is_empty() {
            find_response_id(part).map(session_key)
        } else {
            self.head.extend_from_slice(part);
            find_response_id(&self.head).map(session_key)
        };
        let Some(key) = found else {
            if self.head.is_empty() {
                self.head.extend_from_slice(part);
            }
            // A copy the host refused ends the watch: no host call per chunk to the end.
            self.done = part.is_empty() || self.head.len() >= HEAD_BYTES;
            return;
        };
        self.done = true;
        self.head = Vec::new();
        let Some(pod) = self.answered_by.take() else { return };
        let epoch = match worker.table.try_borrow() {
            Ok(cache) => cache.table().and_then(|t| t.epoch_of(pod.as_str())),
            Err(_) => None,
        };
        // A pod not in the table (gone since) has no epoch to note its session under.
        let (Some(epoch), Ok(mut prefix)) = (epoch, worker.prefix.try_borrow_mut()) else { return };
        prefix.record_session(pod.as_str(), epoch, key);
        // For the other workers until the ring brings it: a follow-up may come at once.
        if let Err(error) = host.set(&slot_key(key), &encode_slot(key, epoch, pod.as_str()), None) {
            log::debug!("wasm-epp: cannot share a response id: {error:?}");
        }
        worker.stats.increment(worker.stats.response_ids_noted);
    }
}

/// Response ids are followed (`prefix.follow_response_ids`, with the prefix machinery on).
pub fn following(worker: &Worker) -> bool {
    let prefix = &worker.config.prefix;
    prefix.enabled && prefix.follow_response_ids
}

/// A request naming stored response `id`: its session key, the pod learned from the slot if
/// the ring has not brought it yet.
pub fn follow(worker: &Worker, host: &dyn Host, id: &str) -> u64 {
    let key = session_key(id);
    learn_from_slot(worker, host, key);
    worker.stats.increment(worker.stats.response_ids_followed);
    key
}

/// The session of a path naming a stored response (`/v1/responses/{id}` and its sub-paths;
/// [`picker::response_id::id_in_path`]), when ids are followed.
pub fn follow_path(worker: &Worker, host: &dyn Host, path: &str) -> Option<u64> {
    let id = picker::response_id::id_in_path(path).filter(|_| following(worker))?;
    Some(follow(worker, host, id))
}

/// Before a request naming a stored response is routed: if this worker has not heard of the
/// id through the ring yet, the worker that noted it left it in its shared-data slot.
pub fn learn_from_slot(worker: &Worker, host: &dyn Host, key: u64) {
    let Ok(mut prefix) = worker.prefix.try_borrow_mut() else { return };
    if prefix.session_pod(key).is_some() {
        return;
    }
    if let Ok((Some(value), _)) = host.get(&slot_key(key)) {
        if let Some((pod, epoch)) = decode_slot(&value, key) {
            prefix.learn_session(key, pod, epoch);
        }
    }
}
