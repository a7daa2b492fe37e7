//! Admitting, holding and releasing requests (see the module docs of [`crate::flow`]).
//!
//! A held request is released from a callback that is not its own: the root's tick, or
//! the end of another request on this worker. Envoy lets that callback act on the held
//! stream after `set_effective_context` (its headers are still held, so the destination
//! header can be written), and defers the `continue_stream` and any local reply until the
//! callback returns, so nothing re-enters the plugin meanwhile.

use std::ops::ControlFlow;
use std::rc::Rc;

use picker::address::PodAddress;
use picker::flow_share::{Claim, Waiting, MAX_CLAIMS};
use picker::inflight::WorkerInflight;
use picker::learn::Dispatch;
use wasm_epp_host::Host;

use super::answer::{answer, answer_pending};
use super::pods::{publish_saturation, with_pods};
use super::queue::{Admission, Entry, Left, WaitQueue};
use super::reach::{OwnPods, PodRooms, Reach, Room};
use super::saturation::{Places, PodLoad};
use super::stats::DropReason;
use super::{Fate, Held};
use crate::decision::{decide, NoPodReason, Outcome, Prompt};
use crate::destination::write_destination;
use crate::worker::Worker;

/// What the stream does with a request whose body has been read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admitted {
    /// Nothing waits and the pool has room: route it now, as without flow control.
    RouteNow,
    /// It must wait: hold it (see [`hold`]).
    Wait,
}

/// Who else waits, as of now. A request's room is counted on its own pods ([`super::reach`]),
/// in places: sequences in the pods' batches (a request of `n` choices takes `n`, see
/// `InferenceRequest::sequences`); so is this worker's share of them ([`Look::fit`]).
struct Look {
    /// The pool has no pod at all (not merely no room).
    no_pods: bool,
    /// Who else waits, by band, as of this worker's last waiting tick.
    others: Waiting,
    /// What they wait for ([`PodRooms::outranked`], [`PodRooms::sharing`]).
    claims: Rc<[Claim]>,
    /// The other replicas' part of `others` (their claims name no models).
    peers: Waiting,
    slot: Option<usize>,
}

/// Whether a request may be sent now ([`Look::fit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fit {
    Now,
    /// Its pods have not the places it needs: it keeps its turn on them.
    NoRoom,
}

impl Look {
    /// [`Look::fit`] for the request `rooms` last judged, its pods `own`: whether a higher band
    /// elsewhere needs one of them, and who shares them at its band, read from the claims.
    fn judge(
        &self,
        rooms: &mut PodRooms<'_, '_>,
        priority: i32,
        weight: u32,
        config: &picker::config::FlowControlConfig,
        own: OwnPods,
    ) -> Fit {
        let outranked = rooms.outranked(priority, &self.claims);
        let sharing = if outranked { 0 } else { rooms.sharing(priority, &self.claims) };
        self.fit(priority, weight, config, own, outranked, sharing)
    }

    /// Whether a request of `priority` weighing `weight` sequences may be sent now to pods
    /// with `free` places. Not while a higher band waiting on another worker or replica needs
    /// one of its pods (`outranked`, see `PodRooms::outranked`: priority holds across them,
    /// this worker's requests in flight end and leave their places to it; the request keeps
    /// its turn on its pods), reserved places included. Else when one pod has the places it needs
    /// free ([`super::admission_need`]: a request of more sequences than a pod's bound needs
    /// a whole pod, else it would never be admitted): it is sent to one pod, so places free
    /// on several would take the pod it lands on past its bound ([`has`]). With places
    /// reserved, the bands that may use them are not held to this worker's share: the share
    /// keeps workers' backlogs at one band from starving each other. Held to the share, a
    /// request heavier than the whole share goes when this worker has nothing in flight and
    /// its share's worth of places is free (its pod then passes its bound by up to `need` − 1).
    /// `local`: this worker's places in flight on those pods ([`has`]); `sharing`: the other
    /// workers of this Envoy waiting at its band for one of them (`PodRooms::sharing`).
    fn fit(
        &self,
        priority: i32,
        weight: u32,
        config: &picker::config::FlowControlConfig,
        own: OwnPods,
        outranked: bool,
        sharing: u32,
    ) -> Fit {
        let OwnPods { free, local, pods } = own;
        // (Pods without room fit nothing: every need is at least 1 place.)
        if outranked {
            return Fit::NoRoom;
        }
        let need = super::admission_need(weight, config.max_inflight_per_pod);
        if config.reserved_per_pod > 0 && priority >= config.reserved_min_priority {
            return room(free.all, need, local);
        }
        let open_per_pod = config.max_inflight_per_pod.saturating_sub(config.reserved_per_pod);
        let standard_need = need.min(open_per_pod.max(1));
        // The share is of the request's pods: this worker's requests of another model, on
        // other pods, do not count against it. It is shared with the workers waiting at its
        // band for them (`sharing`, this Envoy's), with the other replicas' at its band (their
        // claims are on every pod; a band of theirs above it has `outranked` it) and with the
        // workers of unknown band. A higher band waiting for other pods holds none of them.
        let capacity = pods.saturating_mul(config.max_inflight_per_pod);
        let band = priority.clamp(-picker::config::MAX_PRIORITY, picker::config::MAX_PRIORITY);
        let peers = self.peers.top.filter(|&(top, _)| top == band).map_or(0, |(_, at)| at);
        let workers = sharing.saturating_add(peers).saturating_add(self.others.unknown);
        let limit = capacity.div_ceil(workers.saturating_add(1));
        let local_need = need.min(limit.max(1));
        if limit.saturating_sub(local) < local_need {
            return Fit::NoRoom;
        }
        // Heavier than the share, with nothing of its own in flight: the other workers waiting
        // keep their shares, so only its share's worth of places will ever be free at once.
        let room_need = if local == 0 { standard_need.min(local_need) } else { standard_need };
        room(free.standard, room_need, local)
    }
}

fn room(places: Places, need: u32, local: u32) -> Fit {
    if has(places, need, local) {
        Fit::Now
    } else {
        Fit::NoRoom
    }
}

/// Whether `places` hold `need` for one request: on one pod. But with nothing of this
/// worker's own in flight on the request's pods (`local`), none of its requests will end to
/// make room there, and the other workers' (backlogged ones, held to their share;
/// closed-loop clients routed at once) may take every place as it frees, so no pod need ever
/// have its places: it then takes them across its pods, as many as it needs, rather than
/// wait out its TTL, and its pod may pass its bound by up to `need` − 1 (the engine queues
/// the excess). Its requests in flight on other pods (another model's) free none of these.
fn has(places: Places, need: u32, local: u32) -> bool {
    match local {
        0 => places.total >= need,
        _ => places.widest >= need,
    }
}

/// A request arriving while others wait: whether it would be sent now.
struct Newcomer<'a> {
    priority: i32,
    weight: u32,
    reach: Reach<'a>,
}

/// Where the scan of the queue stopped.
#[derive(Debug, Clone, Copy)]
enum Stop {
    /// At a request that may go now.
    Release(u32),
    /// At the first request of a band below the newcomer's.
    Below,
    /// Where nothing after may go now: every pod with a free place has its turn kept.
    Settled,
    /// After [`MAX_SCANNED`] requests.
    Unseen,
}

/// The most waiting requests one scan looks at (the default queue holds 1,024). The scan
/// runs on each tick while requests wait (5 ms) and at each request's end; at its worst (none
/// may go, another model's pods have room, every request looked at) it costs 7 µs natively
/// at 1,024 waiting and 17–20 µs at 4,096 (`cargo bench -p bench-cost --bench decision --
/// flow_scan`), so a queue at its largest (65,536) would cost about a quarter of a
/// millisecond on every tick. Past the cap, requests wait for those before them, as when
/// room was the pool's (a newcomer whose scan reaches the cap waits too), and the queue is
/// not counted as swept.
const MAX_SCANNED: usize = 4_096;

/// What one look at the pool and the queue found.
struct Scan {
    /// The next request to release (its id), if one may go now.
    next: Option<u32>,
    /// The newcomer goes before every waiting request of its band or higher, and may go now.
    newcomer_now: bool,
    slot: Option<usize>,
}

/// Whether a request of `priority` weighing `weight` sequences, for the pods `reach` allows,
/// goes on at once or waits.
pub fn admit(worker: &Worker, host: &dyn Host, priority: i32, weight: u32, reach: Reach<'_>) -> Admitted {
    let newcomer = Newcomer { priority, weight, reach };
    match scan(worker, host, host.now_ms(), Some(&newcomer)) {
        Some(Scan { newcomer_now: true, .. }) => {
            worker.stats.increment(worker.flow.stats.direct);
            Admitted::RouteNow
        }
        _ => Admitted::Wait,
    }
}

/// Whether a request flow control cannot hold (its body not buffered whole) goes on now:
/// when [`admit`] would route it at once, or when the pool has no pod at all (the decision
/// then answers it 503, as its wait would end). Otherwise it would have to wait, and cannot:
/// its stream answers it ([`super::answer::refuse_unheld`]).
pub fn admit_unheld(worker: &Worker, host: &dyn Host, priority: i32, subset: Option<&[PodAddress]>) -> bool {
    // Its `n` and `model` are not read: it weighs 1, and may go to any pod within its subset
    // hint (its headers'), as routing sends it: another pod's room is none of its own.
    let reach = Reach { model: None, subset };
    admit(worker, host, priority, 1, reach) == Admitted::RouteNow
        || matches!(look(worker, host, host.now_ms()), Some(Look { no_pods: true, .. }))
}

/// Queues `held` (true); else it has been answered (429 if its band or the queue is full). Sheddable
/// requests evicted to make room are answered on the next tick (answering another stream
/// from this one's callback would change how Envoy reads this callback's answer).
/// `ttl_ms`, the request's own TTL, may shorten its band's, never lengthen it (as in llm-d:
/// a client cannot hold a place longer than the operator allows).
pub fn hold(worker: &Worker, host: &dyn Host, held: Rc<Held>, priority: i32, flow: u64, ttl_ms: Option<u64>) -> bool {
    let config = &worker.config.flow_control;
    let now = host.now_ms();
    let bytes = held.body.len() as u64;
    let band_ttl = config.ttl_for(priority);
    let own_ttl = ttl_ms.filter(|&own| own < band_ttl);
    let entry = Entry {
        id: held.context_id,
        flow,
        bytes,
        enqueued_ms: now,
        deadline_ms: now.saturating_add(own_ttl.unwrap_or(band_ttl)),
        own_deadline: own_ttl.is_some(),
        payload: held,
    };
    let Ok(mut queue) = worker.flow.queue.try_borrow_mut() else {
        // Cannot happen on one thread; never leave the request paused unanswered.
        let left = Left { priority, entry };
        answer(worker, host, &left, DropReason::NoRoute, false);
        return false;
    };
    let starts_waiting = queue.is_empty();
    let admission = queue.push(priority, entry);
    drop(queue);
    let metrics = &worker.stats.metrics;
    match admission {
        Admission::Full(entry) => {
            let left = Left { priority, entry };
            answer(worker, host, &left, DropReason::Capacity, false);
            return false;
        }
        Admission::QueuedEvicting(evicted) => {
            for left in &evicted {
                worker.flow.stats.band_left(metrics, left.priority, left.entry.bytes);
            }
            if let Ok(mut pending) = worker.flow.pending.try_borrow_mut() {
                pending.extend(evicted.into_iter().map(|left| (left, DropReason::Evicted)));
            }
        }
        Admission::Queued => {}
    }
    if starts_waiting {
        // Its view of the others was dropped when its queue emptied: without one, a place
        // freed by one of its own requests before its next tick would go to this request
        // whatever band waits on another worker or replica.
        let slot = worker.inflight.try_borrow().ok().and_then(|inflight| inflight.slot());
        if let Ok(mut share) = worker.flow.share.try_borrow_mut() {
            share.look_around(host, slot, now);
        }
    }
    metrics.increment(worker.flow.stats.queued);
    worker.flow.stats.band_entered(metrics, priority, bytes);
    set_tick(worker, host, true);
    true
}

/// Its client went away while it waited: out of the queue at once.
pub fn abandon(worker: &Worker, context_id: u32) {
    let Ok(mut queue) = worker.flow.queue.try_borrow_mut() else { return };
    if let Some(left) = queue.remove(context_id) {
        let metrics = &worker.stats.metrics;
        worker.flow.stats.band_left(metrics, left.priority, left.entry.bytes);
        worker.flow.stats.dropped(metrics, DropReason::ClientGone);
    }
}

/// The root's tick: answer evicted and expired requests, release what fits, tell the
/// other workers whether this one waits, and set the tick period.
pub fn on_tick(worker: &Worker, host: &dyn Host) {
    if !worker.config.flow_control.enabled {
        return;
    }
    let now = host.now_ms();
    answer_pending(worker, host);
    let mut expired = Vec::new();
    let mut shed = Vec::new();
    if let Ok(mut queue) = worker.flow.queue.try_borrow_mut() {
        queue.expire(now, &mut expired);
        // A request of priority 0 or more that waited its band's whole TTL shows the pool
        // stayed full: the sheddable ones go first. One that gave up sooner (its own TTL)
        // shows only its client's patience, and must not empty the sheddable band.
        if expired.iter().any(|left| left.priority >= 0 && !left.entry.own_deadline) {
            queue.shed_sheddable(&mut shed);
        }
    }
    for left in &shed {
        worker.flow.stats.band_left(&worker.stats.metrics, left.priority, left.entry.bytes);
        answer(worker, host, left, DropReason::Evicted, true);
    }
    if !expired.is_empty() {
        let no_pods = matches!(look(worker, host, now), Some(Look { no_pods: true, .. }));
        let reason = if no_pods { DropReason::NoPods } else { DropReason::TtlExpired };
        for left in &expired {
            worker.flow.stats.band_left(&worker.stats.metrics, left.priority, left.entry.bytes);
            answer(worker, host, left, reason, true);
        }
    }
    release_ready(worker, host);
    let waiting = worker.flow.waiting();
    let slot = worker.inflight.try_borrow().ok().and_then(|i| i.slot());
    let queue = worker.flow.queue.try_borrow().ok();
    let top = queue.as_deref().and_then(WaitQueue::next_priority);
    let claims = queue.as_deref().map(claims_of).unwrap_or_default();
    if let Ok(mut share) = worker.flow.share.try_borrow_mut() {
        share.sync(host, slot, u32::try_from(waiting).unwrap_or(u32::MAX), top, &claims, now);
    }
    drop(queue);
    if waiting > 0 || worker.flow.fast_tick.get() || worker.flow.saturation_shown.get() {
        worker.flow.saturation_shown.set(publish_saturation(worker, host, now));
    }
    set_tick(worker, host, waiting > 0);
}

/// What this worker's waiting requests wait for, for the other workers: each distinct band
/// and model (as routed), first in release order; past [`MAX_CLAIMS`] pairs, or with a
/// request whose model was not read, every pod (`picker::flow_share::waiting_record_with_claims`).
/// A request's subset hint narrows its pods within its model's: its model's are claimed.
fn claims_of(queue: &WaitQueue<Rc<Held>>) -> Vec<(i32, Option<&str>)> {
    let mut claims: Vec<(i32, Option<&str>)> = Vec::new();
    let mut visited = 0usize;
    queue.find_in_order(|priority, entry| {
        let claim = (priority, entry.payload.routed_model());
        visited += 1;
        if visited > MAX_SCANNED {
            return ControlFlow::Break(());
        }
        if !claims.contains(&claim) {
            claims.push(claim);
            if claim.1.is_none() || claims.len() > MAX_CLAIMS {
                // Written as a claim on every pod: no need to read on.
                return ControlFlow::Break(());
            }
        }
        ControlFlow::Continue(())
    });
    claims
}

/// Releases waiting requests while their pods have room and this worker has share left, at
/// most `release_per_tick` at a time. Each release looks at the pool again: the one before
/// took places on a pod the picker chose.
pub fn release_ready(worker: &Worker, host: &dyn Host) {
    if !worker.config.flow_control.enabled || worker.flow.waiting() == 0 {
        return;
    }
    let now = host.now_ms();
    for _ in 0..worker.config.flow_control.release_per_tick {
        let Some(Scan { next: Some(id), slot, .. }) = scan(worker, host, now, None) else { break };
        let Some(left) = worker.flow.queue.try_borrow_mut().ok().and_then(|mut queue| queue.take(id)) else { break };
        worker.flow.stats.band_left(&worker.stats.metrics, left.priority, left.entry.bytes);
        release_one(worker, host, &left, now, slot);
    }
}

/// Looks at the pool and the queue: the first waiting request in release order that may go
/// now to pods with room, passing over those whose pods have none (each keeps its turn on
/// its pods: see [`super::reach`]); with a `newcomer`, whether it would go before every
/// waiting request of its band or higher, now.
fn scan(worker: &Worker, host: &dyn Host, now: u64, newcomer: Option<&Newcomer<'_>>) -> Option<Scan> {
    let config = &worker.config.flow_control;
    let queue = worker.flow.queue.try_borrow().ok()?;
    with_pods(worker, host, now, |pods, inflight, _, shape, all| {
        let look = look_at(worker, pods, inflight);
        let unknown_model = worker.config.models.unknown_model;
        let mut rooms = PodRooms::new(all, inflight, shape, &worker.config.saturation, config, unknown_model);
        // Requests of pods (a model and subset hint) found without room, sorted: the ones after
        // them are passed over without a look at their pods. A comparison per waiting request
        // (and a search among the few keys) is what a long queue costs.
        let mut passed: Vec<u64> = Vec::new();
        // Such a request (one no pod will take) only appears when the table changes (a
        // newcomer no pod takes is sent on at once): once every request was checked against
        // this table, the scan stops where nothing after may go, rather than read the rest of
        // a long queue at each arrival, tick and request end.
        let version = Some(shape.map_or(NO_TABLE, |shape| shape.table.version));
        let swept = worker.flow.swept.get() == version;
        if !swept {
            // The pods changed since the sweep: a request this scan lets in (or keeps) is
            // checked against these alone, so the sweep of the last table no longer holds when
            // it comes back with the same version (an expired table renewed; the static pool's
            // key after a table's time).
            worker.flow.swept.set(None);
        }
        let mut visited = 0usize;
        let found = queue.find_in_order(|priority, entry| {
            if newcomer.is_some_and(|newcomer| priority < newcomer.priority) {
                // Released after the newcomer anyway.
                return ControlFlow::Break(Stop::Below);
            }
            if swept && rooms.none_open() {
                return ControlFlow::Break(Stop::Settled);
            }
            visited += 1;
            if visited > MAX_SCANNED {
                return ControlFlow::Break(Stop::Unseen);
            }
            let held = &entry.payload;
            let Err(unseen) = passed.binary_search(&held.reach_key) else { return ControlFlow::Continue(()) };
            let room = rooms.of(Reach { model: held.routed_model(), subset: held.subset.as_deref() });
            let fit = match room {
                // It takes no pod's place: a newcomer's scan reads on (see below).
                Room::Refused if newcomer.is_some() => return ControlFlow::Continue(()),
                Room::Refused => return ControlFlow::Break(Stop::Release(entry.id)),
                Room::Kept => Fit::NoRoom,
                Room::Places(own) => look.judge(&mut rooms, priority, held.weight, config, own),
            };
            if fit == Fit::Now && newcomer.is_none() {
                return ControlFlow::Break(Stop::Release(entry.id));
            }
            // With a newcomer, one that may go now goes first (at the next release) and keeps
            // its pods; the scan reads on, as the requests after it of the newcomer's band or
            // higher keep theirs too (stopped here, the newcomer took a place one of them, of a
            // higher band, could take now).
            rooms.keep_turn();
            passed.insert(unseen, held.reach_key);
            ControlFlow::Continue(())
        });
        if newcomer.is_none() && found.is_none() {
            // Every waiting request was read against this table.
            worker.flow.swept.set(version);
        }
        let next = match found {
            Some(Stop::Release(id)) => Some(id),
            _ => None,
        };
        let newcomer_now = newcomer.is_some_and(|newcomer| {
            // Not when the scan stopped before every request of its band or higher was read
            // (some may use its pods); a request before it that may go now keeps its pods.
            let read = matches!(found, None | Some(Stop::Below | Stop::Settled));
            match rooms.of(newcomer.reach) {
                // No pod will take it: answered at once, whatever waits.
                Room::Refused => true,
                Room::Places(own) if read => {
                    look.judge(&mut rooms, newcomer.priority, newcomer.weight, config, own) == Fit::Now
                }
                _ => false,
            }
        });
        Scan { next, newcomer_now, slot: look.slot }
    })
}

/// The pods' version when there is no table (the static pool's, or none).
const NO_TABLE: u64 = u64::MAX;

/// Routes one held request as of now and resumes its stream.
fn release_one(worker: &Worker, host: &dyn Host, left: &Left<Rc<Held>>, now: u64, slot: Option<usize>) {
    let held = &left.entry.payload;
    if *held.fate.borrow() != Fate::Waiting {
        return;
    }
    if host.set_effective_context(held.context_id).is_err() {
        // Envoy no longer knows the stream: its client is gone.
        *held.fate.borrow_mut() = Fate::Answered;
        worker.flow.stats.dropped(&worker.stats.metrics, DropReason::ClientGone);
        return;
    }
    let request = held.request();
    // The same model and subset as had it been routed at once.
    let model = held.routed_model();
    let prompt = Prompt {
        request: request.as_ref(),
        endpoint: held.endpoint,
        session: held.session,
        session_pinned: held.session_pinned,
        sheddable: false,
        model,
        subset: held.subset.as_deref(),
        slo_ttft_ms: held.slo_ttft_ms,
        weight: held.weight,
        band: Some(left.priority),
    };
    match decide(worker, host, &prompt) {
        Outcome::Routed { address, destination, explain: _, prefiller, dispatch, compared, retries_cap, .. } => {
            // The prefill pod stays in flight until the decode pod answers (or the prefill's
            // estimated end, on the tick): the stream takes it over (`take_release`), so the
            // next picks see its load, released or not.
            let mut prefilling_at = crate::disaggregate::write_prefiller(worker, host, prefiller);
            let written = write_destination(host, &worker.config.destination_header, &destination, retries_cap);
            if let Err(error) = written {
                log::error!("wasm-epp: cannot set destination header on a released request: {error}");
                crate::prefill_hold::release_prefill(worker, host, &mut prefilling_at);
                finish_inflight(worker, host, &address, held.weight, dispatch);
                answer(worker, host, left, DropReason::NoRoute, true);
                return;
            }
            if let Some(target) = &held.target {
                // The stream's headers and buffered body are still held: both can change.
                crate::rewrite::replace_model(worker, host, &held.body, target);
            }
            *held.fate.borrow_mut() = Fate::Routed(address);
            held.compared.set(compared);
            held.dispatch.set(dispatch);
            *held.prefill.borrow_mut() = prefilling_at;
            *held.destination.borrow_mut() = destination;
            let waited_ms = now.saturating_sub(left.entry.enqueued_ms);
            held.waited_ms.set(waited_ms);
            worker.flow.stats.released_after(&worker.stats.metrics, waited_ms, slot);
            if let Err(error) = host.resume_request(held.context_id) {
                log::warn!("wasm-epp: cannot resume a released request: {error}");
            }
        }
        // The same reason as had it been routed at once.
        Outcome::NoPod(NoPodReason::SubsetEmpty) => answer(worker, host, left, DropReason::NoEndpoints, true),
        Outcome::UnknownModel => answer(worker, host, left, DropReason::UnknownModel, true),
        Outcome::Shed | Outcome::NoPod(_) => answer(worker, host, left, DropReason::NoRoute, true),
    }
}

fn finish_inflight(worker: &Worker, host: &dyn Host, address: &PodAddress, weight: u32, dispatch: Option<Dispatch>) {
    if let Ok(mut inflight) = worker.inflight.try_borrow_mut() {
        let now = host.now_ms();
        if let Some(dispatch) = dispatch {
            inflight.release_tokens(address.as_str(), dispatch.uncached_tokens);
        }
        inflight.finished(address.as_str(), weight, now);
        inflight.publish_now(host, now);
    }
}

/// The pool as flow control reads it, and this worker's share of it.
fn look(worker: &Worker, host: &dyn Host, now: u64) -> Option<Look> {
    with_pods(worker, host, now, |pods, inflight, _, _, _| look_at(worker, pods, inflight))
}

fn look_at(worker: &Worker, pods: &[PodLoad<'_>], inflight: &WorkerInflight) -> Look {
    let (others, claims, peers) =
        worker.flow.share.try_borrow().map(|share| (share.others(), share.claims(), share.peers())).unwrap_or_default();
    Look { no_pods: pods.is_empty(), others, claims, peers, slot: inflight.slot() }
}

/// Ticks fast while anything waits (releases and TTLs are checked on the tick), at the
/// normal period otherwise.
fn set_tick(worker: &Worker, host: &dyn Host, fast: bool) {
    if worker.flow.fast_tick.get() == fast {
        return;
    }
    let period = if fast {
        worker.config.flow_control.waiting_tick_ms
    } else {
        crate::configure::tick_period_ms(&worker.config)
    };
    if host.set_tick_period_ms(period).is_ok() {
        worker.flow.fast_tick.set(fast);
    }
}
