//! The fixed set of shared-data keys, versioned.
//!
//! Envoy's shared data has no delete: every key ever written stays until the VM id goes
//! away. So the key set is a short, fixed list, never a key per request, pod or prefix.
//! The `v1` in every key lets a future layout live beside this one during an upgrade.
//! This module is the whole list: every key and queue either side uses is named here.

/// The pod table published by the singleton (see [`crate::pod_table`]).
pub const POD_TABLE: &str = "wasm-epp/v1/pod-table";
/// A tiny key holding the pod table's version, read on each worker tick before the large table.
pub const POD_TABLE_VERSION: &str = "wasm-epp/v1/pod-table-version";
/// Per-worker in-flight slots: worker `i` publishes its own counts under
/// `INFLIGHT_SLOT_KEYS[i]` on its tick and reads the others' (see [`crate::inflight`]).
pub const INFLIGHT_SLOT_KEYS: [&str; crate::inflight::MAX_SLOTS] = [
    "wasm-epp/v1/inflight/0",
    "wasm-epp/v1/inflight/1",
    "wasm-epp/v1/inflight/2",
    "wasm-epp/v1/inflight/3",
    "wasm-epp/v1/inflight/4",
    "wasm-epp/v1/inflight/5",
    "wasm-epp/v1/inflight/6",
    "wasm-epp/v1/inflight/7",
    "wasm-epp/v1/inflight/8",
    "wasm-epp/v1/inflight/9",
    "wasm-epp/v1/inflight/10",
    "wasm-epp/v1/inflight/11",
    "wasm-epp/v1/inflight/12",
    "wasm-epp/v1/inflight/13",
    "wasm-epp/v1/inflight/14",
    "wasm-epp/v1/inflight/15",
    "wasm-epp/v1/inflight/16",
    "wasm-epp/v1/inflight/17",
    "wasm-epp/v1/inflight/18",
    "wasm-epp/v1/inflight/19",
    "wasm-epp/v1/inflight/20",
    "wasm-epp/v1/inflight/21",
    "wasm-epp/v1/inflight/22",
    "wasm-epp/v1/inflight/23",
    "wasm-epp/v1/inflight/24",
    "wasm-epp/v1/inflight/25",
    "wasm-epp/v1/inflight/26",
    "wasm-epp/v1/inflight/27",
    "wasm-epp/v1/inflight/28",
    "wasm-epp/v1/inflight/29",
    "wasm-epp/v1/inflight/30",
    "wasm-epp/v1/inflight/31",
];

/// Per-worker learned TTFT observations: the worker in in-flight slot `i` publishes its own
/// under `<prefix><i>` and reads the others' (see [`crate::learn::shared_models`]); at most
/// [`crate::inflight::MAX_SLOTS`] keys.
pub const LEARNED_TTFT_PREFIX: &str = "wasm-epp/v1/learned-ttft/";

/// Per-worker ejections of failing pods: the worker in in-flight slot `i` publishes the pods
/// it holds ejected under `<prefix><i>` and adopts the others' (see
/// [`crate::outliers::shared`]); at most [`crate::inflight::MAX_SLOTS`] keys.
pub const EJECTED_PREFIX: &str = "wasm-epp/v1/ejected/";

/// The key of in-flight slot `slot`'s record under a per-slot `prefix` ([`FLOW_WAITING_PREFIX`],
/// [`LEARNED_TTFT_PREFIX`], [`EJECTED_PREFIX`]).
pub fn per_slot(prefix: &str, slot: usize) -> String {
    format!("{prefix}{slot}")
}

/// The workers' decision counter: bumped by compare-and-swap after each pick's publish while
/// decisions are linearized, so the later of two crossing decisions learns of the earlier
/// (see [`crate::inflight::WorkerInflight::confirm_decision`]). Holds the last bump's time.
pub const INFLIGHT_DECISIONS: &str = "wasm-epp/v1/inflight/decisions";

/// Milliseconds since the epoch at which the pool service last ran its tick (8 bytes, LE):
/// workers stop queueing decisions when it is old (nobody drains the queue) and bound how
/// long they fail open on a table nobody refreshes.
pub const SERVICE_HEARTBEAT: &str = "wasm-epp/v1/service-heartbeat";

/// This Envoy's replica id in the peer exchange (hex), written by the pool service at start so
/// the peer listener can name its replica in answers: a replica that lists itself among its
/// peers (a label selector matches its own pod) learns so from the first answer and stops
/// sending to itself.
pub const REPLICA_ID: &str = "wasm-epp/v1/replica-id";

/// The shared queue on which the peer listener's filter hands other replicas' messages to
/// the pool service (see [`crate::peer`]).
pub const PEER_INBOX: &str = "wasm-epp/v1/peer-inbox";

/// Flow control: how many requests each worker holds waiting and its highest waiting band,
/// one key per in-flight slot (`<prefix><slot>`, so at most [`crate::inflight::MAX_SLOTS`]
/// keys), read by the others to share the pool fairly and in priority order (see
/// `router/src/flow/share.rs`).
pub const FLOW_WAITING_PREFIX: &str = "wasm-epp/v1/flow-waiting/";

/// Flow control: how many workers of other gateway replicas wait, summed over the live
/// peers, and the highest band they wait at, as the pool service last heard (see
/// [`crate::flow_share`]).
pub const FLOW_PEER_WAITING: &str = "wasm-epp/v1/flow-peer-waiting";

/// Responses API answers' ids and the pods that answered them, one entry per slot
/// (`<prefix><slot>`, [`crate::response_id::SLOTS`] keys): a follow-up naming an id reaches the
/// worker that noted it only through the prefix ring, a sync interval or two later; another
/// worker finds it here at once (see [`crate::response_id`]).
pub const RESPONSE_ID_PREFIX: &str = "wasm-epp/v1/response-id/";

/// Requests other gateway replicas have in flight per pod, summed, as the pool service last
/// heard (same layout as an in-flight slot; workers add it to their view).
pub const PEER_INFLIGHT: &str = "wasm-epp/v1/peer-inflight";

/// The no-singleton lease: who runs the pool service, until when (see [`crate::lease`]).
pub const LEASE_KEY: &str = "wasm-epp/v1/poller-lease";

/// A counter every VM increments by CAS to get an id no other VM of this Envoy holds
/// (lease contenders, in-flight slot owners; see [`crate::vm_id`]).
pub const VM_IDS: &str = "wasm-epp/v1/vm-ids";

/// The shared queue on which workers send their decisions to the singleton.
pub const EVENT_QUEUE: &str = "wasm-epp/v1/prefix-events";

/// The ring's head: the sequence number of the newest segment (see `crate::prefix::ring`).
pub const RING_HEAD_KEY: &str = "wasm-epp/v1/prefix-ring/head";

/// The ring's segments; segment `s` lives at `RING_SEGMENT_KEYS[s % crate::prefix::RING_SEGMENTS]`. Spelled out,
/// so the whole key set can be read in one place.
pub const RING_SEGMENT_KEYS: [&str; crate::prefix::RING_SEGMENTS] = [
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
