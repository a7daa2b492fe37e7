//! Prefix-cache-aware routing: which pods probably hold a prompt's prefix in their KV cache.
//!
//! The filter cuts each prompt into blocks and chains their hashes ([`hash`]), seeded by model
//! and `cache_salt`, as vLLM names its cached blocks: equal leading hashes mean an equal prefix.
//! Every worker keeps its own replica of a [`index::PrefixIndex`] ("pod P holds block H"),
//! because a lookup per request must not cross the shared-data boundary: it asks how many
//! leading blocks each candidate pod holds, and the scheduler prefers long matches.
//!
//! The index learns from routing decisions, not from the engines (their KV events travel over
//! ZMQ, which Proxy-Wasm cannot open). A worker records its own decision at once, and sends it
//! as a [`events::RoutingEvent`] to the singleton over a shared queue, in batches. The singleton
//! appends the batches to a ring in shared data ([`ring`]), one writer; every worker polls the
//! ring on its tick and records the other workers' decisions (its own come back too, a harmless
//! second touch). So all replicas agree within a tick or two.
//!
//! Bounds: at most [`hash::MAX_BLOCKS`] blocks per request and per event; per pod, entries up
//! to its real KV capacity in blocks, evicted least recently used; all pods together up to the
//! index's `max_entries` (~56 bytes each, see [`index`]); a fixed set of 1 + [`RING_SEGMENTS`]
//! shared-data keys of at most 64 KiB each. A pod that restarts has a new epoch: its entries are
//! void. Nothing here needs to be complete: a lost segment, an evicted entry or a stale replica
//! costs some cache hits, never a wrong destination (addresses are validated on decode, and
//! the filter only routes to pods in its pool).

mod chat;
pub mod events;
pub mod hash;
pub mod index;
mod json;
pub mod keyed;
#[cfg(test)]
mod messages_tests;
#[cfg(test)]
mod responses_tests;
pub mod ring;
mod system;
pub mod worker;

pub use events::RoutingEvent;
pub use hash::{hash_prompt, hash_prompt_as, hash_prompt_noting_replies, HashParams, ReplySpan};
pub use index::PrefixIndex;
pub use ring::{RingReader, RingWriter, StartAt};
pub use worker::{session_key, WorkerPrefix};

/// Segments in the ring. The writer appends about once per singleton tick (a large batch takes
/// a few segments) and each worker reads on its own tick, so a reader is normally one or two
/// segments behind; 64 lets a worker stall for dozens of ticks before it loses events, gives a
/// starting worker that much history to replay, and keeps the worst-case shared memory at
/// 64 × 64 KiB = 4 MiB, in 65 keys that exist forever.
pub const RING_SEGMENTS: usize = 64;

pub use crate::keys::{EVENT_QUEUE, RING_HEAD_KEY, RING_SEGMENT_KEYS};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_keys_are_distinct_numbered_and_in_the_ring_namespace() {
        for (i, key) in RING_SEGMENT_KEYS.iter().enumerate() {
            assert_eq!(*key, format!("wasm-epp/v1/prefix-ring/{i}"));
        }
        assert!(RING_HEAD_KEY.starts_with("wasm-epp/v1/prefix-ring/"));
        assert!(!crate::keys::INFLIGHT_SLOT_KEYS[0].starts_with("wasm-epp/v1/prefix-ring"));
    }
}
