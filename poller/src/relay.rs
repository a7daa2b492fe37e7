//! Relays routing decisions into the prefix ring: the workers' own (from their shared
//! queue) and, through [`crate::peers`], other replicas'.
//!
//! Workers enqueue encoded batches on a shared queue registered here; each wake drains the
//! queue (bounded) and the service appends what it held to the ring in one go, so the ring's
//! 64 segments hold as much history as possible. The pool service is the ring's only writer.

use picker::prefix::events::{
    decode_batch, encode_batch, join_batch, RoutingEvent, BATCH_VERSION, MAX_EVENTS_PER_BATCH,
};
use picker::prefix::{RingWriter, EVENT_QUEUE};
use wasm_epp_host::{Counter, Host, Metrics};

/// Queue messages drained per wake; more wait for the next wake (each enqueue makes one).
const MAX_MESSAGES_PER_WAKE: usize = 256;

pub struct EventRelay {
    queue: u32,
    writer: RingWriter,
    appended: Counter,
    dropped: Counter,
}

impl EventRelay {
    /// Registers the queue and resumes the ring after any head already in shared data.
    pub fn start(host: &dyn Host, metrics: &Metrics) -> Result<Self, String> {
        let queue = host.register_queue(EVENT_QUEUE).map_err(|e| format!("register {EVENT_QUEUE}: {e}"))?;
        let writer = RingWriter::resume(host).map_err(|e| format!("prefix ring: {e:?}"))?;
        Ok(Self {
            queue,
            writer,
            appended: metrics.counter("wasm_epp.prefix_ring_appends"),
            dropped: metrics.counter("wasm_epp.prefix_ring_dropped_bytes"),
        })
    }

    pub fn queue(&self) -> u32 {
        self.queue
    }

    /// The workers' decisions waiting in the queue (bounded per wake).
    pub fn take_queued(&self, host: &dyn Host) -> Vec<RoutingEvent> {
        let mut events = Vec::new();
        for _ in 0..MAX_MESSAGES_PER_WAKE {
            match host.dequeue(self.queue) {
                Ok(Some(batch)) => events.extend(decode_batch(&batch)),
                Ok(None) | Err(_) => break,
            }
            if events.len() >= MAX_EVENTS_PER_BATCH {
                break;
            }
        }
        events
    }

    /// The workers' batches waiting in the queue (bounded per wake), joined into one batch
    /// without decoding them: what the ring gets when no other replica needs the events
    /// themselves. Workers decode (and check) each event when they read the ring.
    pub fn take_queued_joined(&self, host: &dyn Host) -> Vec<u8> {
        let mut joined = vec![BATCH_VERSION];
        for _ in 0..MAX_MESSAGES_PER_WAKE {
            match host.dequeue(self.queue) {
                Ok(Some(batch)) => join_batch(&mut joined, &batch),
                Ok(None) | Err(_) => break,
            }
        }
        joined
    }

    /// Appends an encoded batch (from [`Self::take_queued_joined`]) to the ring.
    pub fn append_batch(&mut self, host: &dyn Host, metrics: &Metrics, batch: &[u8]) {
        if batch.len() <= 1 {
            return;
        }
        match self.writer.append(host, batch) {
            Ok(appended) => {
                metrics.increment(self.appended);
                metrics.add(self.dropped, appended.dropped_bytes as u64);
            }
            Err(error) => log::warn!("wasm-epp pool service: prefix ring append failed: {error:?}"),
        }
    }

    /// Appends decisions to the ring for every worker to learn.
    pub fn append(&mut self, host: &dyn Host, metrics: &Metrics, events: &[RoutingEvent]) {
        if !events.is_empty() {
            self.append_batch(host, metrics, &encode_batch(events));
        }
    }
}
