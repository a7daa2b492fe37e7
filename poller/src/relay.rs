//! Relays the workers' routing decisions into the prefix ring.
//!
//! Workers enqueue encoded batches on a shared queue registered here; each wake drains the
//! queue (bounded), merges the batches and appends them to the ring in one go, so the ring's
//! 64 segments hold as much history as possible. The singleton is the ring's only writer.

use picker::prefix::events::{decode_batch, encode_batch, MAX_EVENTS_PER_BATCH};
use picker::prefix::{RingWriter, EVENT_QUEUE};
use proxy_wasm::hostcalls;
use wasm_epp_host::{Counter, ProxyStore};

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
    pub fn start() -> Result<Self, String> {
        let queue =
            hostcalls::register_shared_queue(EVENT_QUEUE).map_err(|e| format!("register {EVENT_QUEUE}: {e:?}"))?;
        let writer = RingWriter::resume(&ProxyStore).map_err(|e| format!("prefix ring: {e:?}"))?;
        Ok(Self {
            queue,
            writer,
            appended: Counter::define("wasm_epp.prefix_ring_appends"),
            dropped: Counter::define("wasm_epp.prefix_ring_dropped_bytes"),
        })
    }

    pub fn queue(&self) -> u32 {
        self.queue
    }

    /// Drains the queue and appends what it held to the ring.
    pub fn drain(&mut self) {
        let mut events = Vec::new();
        for _ in 0..MAX_MESSAGES_PER_WAKE {
            match hostcalls::dequeue_shared_queue(self.queue) {
                Ok(Some(batch)) => events.extend(decode_batch(&batch)),
                Ok(None) | Err(_) => break,
            }
            if events.len() >= MAX_EVENTS_PER_BATCH {
                break;
            }
        }
        if events.is_empty() {
            return;
        }
        match self.writer.append(&ProxyStore, &encode_batch(&events)) {
            Ok(appended) => {
                self.appended.increment();
                self.dropped.add(appended.dropped_bytes as u64);
            }
            Err(error) => log::warn!("wasm-epp singleton: prefix ring append failed: {error:?}"),
        }
    }
}
