//! Flow control: when the pool is saturated, a request waits in the gateway, as a paused
//! Envoy stream, instead of in some engine's queue where it can no longer be moved.
//!
//! In request order:
//! 1. [`class`]: the request's priority (band) and flow (tenant), from its headers and model.
//! 2. [`admit`] (from the stream, body read): sent on at once if nothing waiting goes before
//!    it and its pods ([`reach`]: its model's, within its subset hint) have room
//!    ([`saturation`]) within this worker's share ([`share`]); else held in the worker's
//!    [`queue`] (bounded; full → 429, or a sheddable request evicted).
//! 3. [`release`] (from the root's tick, fast while anything waits, and when a request of
//!    this worker ends): expired requests answered 429 (503 with no pod at all); then the
//!    first request in release order whose pods have room is routed by the picker as of
//!    now (so it still gets prefix affinity), as its rewrite target and within its subset
//!    hint, and its stream resumed; again while one may go.
//! 4. The stream's end removes it from the queue at once if it was still waiting.

pub mod answer;
pub mod class;
pub mod pods;
pub mod queue;
pub mod reach;
pub mod release;
pub mod saturation;
pub mod share;
pub mod stats;

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use picker::address::PodAddress;
use picker::config::FlowControlConfig;
use picker::request::Endpoint;
use wasm_epp_host::Metrics;

use self::queue::{QueueLimits, WaitQueue};
use self::share::WorkerShare;
use self::stats::FlowStats;

pub use self::class::RequestClass;
pub use self::reach::Reach;
pub use self::release::{abandon, admit, admit_unheld, hold, on_tick, release_ready, Admitted};

/// Added to the in-flight count of a pod at its bound ([`routing_bound`]) when routing reads
/// it: the pod then looks like one with a long queue (far above any `queue_threshold`), so the
/// pick leaves it, affinity and rendezvous placement included, while another pod has room.
/// Without it a released request could go to a full pod and wait in its engine's queue.
pub const FULL_POD_PENALTY: u32 = 1_000;

/// A pod's in-flight count as routing reads it for a request of `weight` sequences (`full_at`:
/// [`routing_bound`]): a pod the request would take past its bound is full to it. A request
/// heavier than a whole pod's bound is full only to pods with anything in flight: an idle pod
/// takes it (see [`admission_need`]).
pub fn routing_inflight(count: u32, full_at: Option<u32>, weight: u32) -> u32 {
    match full_at {
        Some(bound) if count.saturating_add(admission_need(weight, bound)) > bound => {
            count.saturating_add(FULL_POD_PENALTY)
        }
        _ => count,
    }
}

/// The bound routing reads a pod's count against ([`routing_inflight`]), for a request flow
/// control admitted in `band` (`None`: not one it admits): `max_inflight_per_pod`, less the
/// `reserved_per_pod` places for a band below `reserved_min_priority`, as admission counts
/// them (`release::Look::fits`). Admitted because some pod has an open place for it, such a
/// request must not take another pod's reserved place (prefix affinity would): the reserve
/// is kept per pod for the bands above, which would otherwise find it taken. `None` with
/// flow control off.
pub fn routing_bound(config: &FlowControlConfig, band: Option<i32>) -> Option<u32> {
    if !config.enabled {
        return None;
    }
    let reserve_kept = config.reserved_per_pod > 0 && band.is_some_and(|band| band < config.reserved_min_priority);
    let reserved = if reserve_kept { config.reserved_per_pod } else { 0 };
    Some(config.max_inflight_per_pod.saturating_sub(reserved).max(1))
}

/// The places a request of `weight` sequences needs free to be admitted under a bound of
/// `per_pod` places per pod: its weight, at most one whole pod's places (so a request of more
/// choices than a pod runs at once is admitted when a pod's worth is free, not never).
pub fn admission_need(weight: u32, per_pod: u32) -> u32 {
    weight.min(per_pod).max(1)
}

/// What became of a held request (shared by the queue entry and its stream).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fate {
    Waiting,
    /// Released to this pod: its in-flight count is the stream's to release at the end.
    Routed(PodAddress),
    /// Answered locally (TTL, capacity, no route) or its client went away.
    Answered,
}

/// A request held in the queue: what routing it at release needs (its body is kept: the
/// prompt is hashed at release time, against the prefix index as it is then). It is routed
/// as a request routed at once would be: as its rewrite target, within its subset hint.
#[derive(Debug)]
pub struct Held {
    pub context_id: u32,
    pub body: Vec<u8>,
    pub endpoint: Endpoint,
    pub session: Option<u64>,
    /// The session is a stored response's id (see `decision::Prompt::session_pinned`).
    pub session_pinned: bool,
    /// The rewrite target drawn when it arrived (its body's `model` is replaced at release).
    pub target: Option<String>,
    /// The model it is routed as: its rewrite target, else its body's `model`, as had it been
    /// routed at once (`RequestStream::route_model`). Its pods' room is what it waits for.
    pub model: Option<String>,
    /// `model` and `subset` hashed ([`reach_key`]): the release scan tells requests that may go
    /// to the same pods apart by it, and looks at their pods once.
    pub reach_key: u64,
    /// The gateway's subset hint (`None`: no hint).
    pub subset: Option<Vec<PodAddress>>,
    pub fate: RefCell<Fate>,
    /// How long it waited, set when it is released (`flow_control.queue_duration_header`).
    pub waited_ms: Cell<u64>,
    /// The comparison's arm that routed it at release, for its stream to time.
    pub compared: Cell<Option<crate::comparison_stats::Compared>>,
    /// The destination header written at release (the pick, then fallbacks), for outlier
    /// detection to judge the answer by.
    pub destination: RefCell<String>,
    /// The client's TTFT objective (learning's SLO header), in ms.
    pub slo_ttft_ms: Option<f64>,
    /// Learning's record of the pick made at release, for its stream to observe the answer
    /// with (and release the prompt's tokens in flight at its first byte).
    pub dispatch: Cell<Option<picker::learn::Dispatch>>,
    /// The hold on the prefill pod named at release (P/D), in flight until its stream releases
    /// it when the decode pod answers, or the prefill's estimated end, as for a request routed
    /// at once.
    pub prefill: RefCell<Option<crate::prefill_hold::PrefillHold>>,
    /// The sequences it weighs in flight (its `n`, see `InferenceRequest::sequences`): the
    /// places its release needs and takes.
    pub weight: u32,
}

impl Held {
    /// Its body read again (at release, or to answer it): as its stream read it, a body its
    /// endpoint's parse refuses for its model alone (`RequestStream::read_for_model_alone`).
    pub fn request(&self) -> Option<picker::request::InferenceRequest<'_>> {
        let body = self.body.as_slice();
        picker::request::parse_request(body, self.endpoint).or_else(|_| picker::request::parse_model_only(body)).ok()
    }

    /// The model it is routed as (see [`Held::model`]).
    pub fn routed_model(&self) -> Option<&str> {
        self.model.as_deref()
    }
}

/// The key of a waiting request's pods ([`Held::reach_key`]): of the model it is routed as and
/// its subset hint, each told apart from its absence. Equal keys, equal pods (a hint listing
/// the same pods in another order has another key: its requests are only looked at apart).
pub fn reach_key(model: Option<&str>, subset: Option<&[PodAddress]>) -> u64 {
    use xxhash_rust::xxh3::xxh3_64_with_seed;
    let mut key = model.map_or(0, |model| xxh3_64_with_seed(model.as_bytes(), 1));
    if let Some(subset) = subset {
        key = xxh3_64_with_seed(b"subset", key);
        for address in subset {
            key = xxh3_64_with_seed(address.as_str().as_bytes(), key);
        }
    }
    key
}

/// One worker's flow-control state.
pub struct FlowState {
    pub queue: RefCell<WaitQueue<Rc<Held>>>,
    share: RefCell<WorkerShare>,
    pub stats: FlowStats,
    /// The tick runs at `waiting_tick_ms` (something waits or just waited).
    fast_tick: Cell<bool>,
    /// The saturation gauges this worker last set showed a pod or the pool without room:
    /// they are set again on each tick until they read 0, so a pool that went idle after its
    /// queue emptied does not go on showing its last busy moment.
    saturation_shown: Cell<bool>,
    /// Requests evicted from the queue, answered on the next tick (at most the queue's
    /// `max_queued_requests`, as each was in it).
    pending: RefCell<Vec<(queue::Left<Rc<Held>>, stats::DropReason)>>,
    /// The version of the table (or the static pool) every waiting request was last checked
    /// against for a pod that may take it. A request no pod will take only appears in the
    /// queue when the table changes (one arriving so is sent on at once to be answered): until
    /// it does, a release scan may stop where nothing after can go ([`release`]).
    swept: Cell<Option<u64>>,
}

impl FlowState {
    pub fn new(config: &FlowControlConfig, metrics: &Metrics) -> Self {
        let limits = QueueLimits {
            band_requests: config.max_band_requests,
            band_bytes: config.max_band_bytes,
            total_requests: config.max_queued_requests,
            total_bytes: config.max_queued_bytes,
            flows_per_band: config.max_flows_per_band,
        };
        Self {
            queue: RefCell::new(WaitQueue::new(limits)),
            share: RefCell::new(WorkerShare::new(config.waiting_tick_ms)),
            stats: FlowStats::define(metrics),
            fast_tick: Cell::new(false),
            saturation_shown: Cell::new(false),
            pending: RefCell::new(Vec::new()),
            swept: Cell::new(None),
        }
    }

    /// Requests waiting on this worker.
    pub fn waiting(&self) -> usize {
        self.queue.try_borrow().map_or(0, |q| q.len())
    }
}
