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
pub mod ring;
pub mod worker;

pub use events::RoutingEvent;
pub use hash::{hash_prompt, HashParams};
pub use index::PrefixIndex;
pub use ring::{RingReader, RingWriter, StartAt};
pub use worker::{session_key, WorkerPrefix};

/// Segments in the ring. The writer appends about once per singleton tick (a large batch takes
/// a few segments) and each worker reads on its own tick, so a reader is normally one or two
/// segments behind; 64 lets a worker stall for dozens of ticks before it loses events, gives a
/// starting worker that much history to replay, and keeps the worst-case shared memory at
/// 64 × 64 KiB = 4 MiB, in 65 keys that exist forever.
pub const RING_SEGMENTS: usize = 64;

/// The shared queue on which workers send their decisions to the singleton.
pub const EVENT_QUEUE: &str = "wasm-epp/v1/prefix-events";

/// The ring's head: the sequence number of the newest segment (see [`ring`]).
pub const RING_HEAD_KEY: &str = "wasm-epp/v1/prefix-ring/head";

/// The ring's segments; segment `s` lives at `RING_SEGMENT_KEYS[s % RING_SEGMENTS]`. Spelled out,
/// like the keys in [`crate::keys`], so the whole key set can be read in one place.
pub const RING_SEGMENT_KEYS: [&str; RING_SEGMENTS] = [
    "wasm-epp/v1/prefix-ring/0",
    "wasm-epp/v1/prefix-ring/1",
    "wasm-epp/v1/prefix-ring/2",
    "wasm-epp/v1/prefix-ring/3",
    "wasm-epp/v1/prefix-ring/4",
    "wasm-epp/v1/prefix-ring/5",
    "wasm-epp/v1/prefix-ring/6",
    "wasm-epp/v1/prefix-ring/7",
    "wasm-epp/v1/prefix-ring/8",
    "wasm-epp/v1/prefix-ring/9",
    "wasm-epp/v1/prefix-ring/10",
    "wasm-epp/v1/prefix-ring/11",
    "wasm-epp/v1/prefix-ring/12",
    "wasm-epp/v1/prefix-ring/13",
    "wasm-epp/v1/prefix-ring/14",
    "wasm-epp/v1/prefix-ring/15",
    "wasm-epp/v1/prefix-ring/16",
    "wasm-epp/v1/prefix-ring/17",
    "wasm-epp/v1/prefix-ring/18",
    "wasm-epp/v1/prefix-ring/19",
    "wasm-epp/v1/prefix-ring/20",
    "wasm-epp/v1/prefix-ring/21",
    "wasm-epp/v1/prefix-ring/22",
    "wasm-epp/v1/prefix-ring/23",
    "wasm-epp/v1/prefix-ring/24",
    "wasm-epp/v1/prefix-ring/25",
    "wasm-epp/v1/prefix-ring/26",
    "wasm-epp/v1/prefix-ring/27",
    "wasm-epp/v1/prefix-ring/28",
    "wasm-epp/v1/prefix-ring/29",
    "wasm-epp/v1/prefix-ring/30",
    "wasm-epp/v1/prefix-ring/31",
    "wasm-epp/v1/prefix-ring/32",
    "wasm-epp/v1/prefix-ring/33",
    "wasm-epp/v1/prefix-ring/34",
    "wasm-epp/v1/prefix-ring/35",
    "wasm-epp/v1/prefix-ring/36",
    "wasm-epp/v1/prefix-ring/37",
    "wasm-epp/v1/prefix-ring/38",
    "wasm-epp/v1/prefix-ring/39",
    "wasm-epp/v1/prefix-ring/40",
    "wasm-epp/v1/prefix-ring/41",
    "wasm-epp/v1/prefix-ring/42",
    "wasm-epp/v1/prefix-ring/43",
    "wasm-epp/v1/prefix-ring/44",
    "wasm-epp/v1/prefix-ring/45",
    "wasm-epp/v1/prefix-ring/46",
    "wasm-epp/v1/prefix-ring/47",
    "wasm-epp/v1/prefix-ring/48",
    "wasm-epp/v1/prefix-ring/49",
    "wasm-epp/v1/prefix-ring/50",
    "wasm-epp/v1/prefix-ring/51",
    "wasm-epp/v1/prefix-ring/52",
    "wasm-epp/v1/prefix-ring/53",
    "wasm-epp/v1/prefix-ring/54",
    "wasm-epp/v1/prefix-ring/55",
    "wasm-epp/v1/prefix-ring/56",
    "wasm-epp/v1/prefix-ring/57",
    "wasm-epp/v1/prefix-ring/58",
    "wasm-epp/v1/prefix-ring/59",
    "wasm-epp/v1/prefix-ring/60",
    "wasm-epp/v1/prefix-ring/61",
    "wasm-epp/v1/prefix-ring/62",
    "wasm-epp/v1/prefix-ring/63",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_keys_are_distinct_numbered_and_in_the_ring_namespace() {
        for (i, key) in RING_SEGMENT_KEYS.iter().enumerate() {
            assert_eq!(*key, format!("wasm-epp/v1/prefix-ring/{i}"));
        }
        assert!(RING_HEAD_KEY.starts_with("wasm-epp/v1/prefix-ring/"));
        assert!(!crate::keys::INFLIGHT.starts_with("wasm-epp/v1/prefix-ring"));
    }
}
