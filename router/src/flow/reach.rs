//! Whose room a waiting request needs: the pods routing may send it to (its model's, within
//! its subset hint), not the whole pool's. In a pool of several models, one model's full
//! pods then hold its own requests in the gateway, in their release order, while another
//! model's requests go past them to pods with room.
//!
//! The release order still holds where requests compete for the same pods: a request that
//! does not fit keeps its turn on its pods (a request of many choices waiting for them to
//! free up), so no request after it that may use any of them goes first. Requests whose
//! pods it does not share go on. With one model (or none read) every request may use every
//! pod, and this is the pool's room and the release order as before.
//!
//! Under P/D a request's pods are decode pods, but for a model only prefill pods list: it is
//! served whole on one of them (`crate::disaggregate::served_on_prefill_pods_only`), so their
//! room is the one it waits for, and they keep its turn.

use picker::address::PodAddress;
use picker::config::{FlowControlConfig, MAX_PRIORITY};
use picker::flow_share::Claim;
use picker::inflight::WorkerInflight;
use picker::route::{eligible_positions, ModelQuery, NoRoute};
use picker::saturation::SaturationLimits;

use picker::outliers::{pass_over, PassOver};

use super::pods::{fail_open, AllPods, Shape};
use super::saturation::{pod_places, FreePlaces, PodLoad};
use crate::disaggregate::served_on_prefill_pods_only;

/// Where a request may be sent, as routing reads it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Reach<'a> {
    /// The model it is routed as (its rewrite target, else its body's); `None`: any pod.
    pub model: Option<&'a str>,
    /// The gateway's subset hint.
    pub subset: Option<&'a [PodAddress]>,
}

/// Which of the looked pods' tables a position is of.
#[derive(Clone, Copy)]
enum Role {
    /// The pool's (under P/D the decode pods').
    Pool,
    /// Under P/D, the prefill pods'.
    Prefill,
}

/// What a request's pods have for it.
pub(super) enum Room {
    /// What the pods it may go to have.
    Places(OwnPods),
    /// No pod may take it (its model's pods left, its subset hint names none): it goes now, to
    /// be answered as a request arriving now would be (404, 503).
    Refused,
    /// A request before it in release order keeps its turn on one of its pods.
    Kept,
}

/// The pods a request may go to, as its room counts them.
#[derive(Debug, Clone, Copy)]
pub(super) struct OwnPods {
    /// Their free places.
    pub free: FreePlaces,
    /// This worker's places in flight on them (none: no end of its own will free one).
    pub local: u32,
    /// How many they are.
    pub pods: u32,
}

/// One pod of a look at the pool, as a request's room counts it.
#[derive(Clone, Copy)]
struct Pod {
    places: FreePlaces,
    /// This worker's places in flight on it.
    local: u32,
    /// Its places read as routing fails open (no pod of the request's has usable data).
    open: FreePlaces,
    usable: bool,
    up: bool,
    ejected: bool,
}

impl Pod {
    fn has_a_place(&self) -> bool {
        self.places.all.total > 0 || self.open.all.total > 0
    }
}

/// The pods of one look at the pool, with their free places and the turns kept on them.
pub(super) struct PodRooms<'p, 't> {
    shape: Option<Shape<'t>>,
    /// The pods looked at (their table positions and addresses are read from them).
    looked: &'p [PodLoad<'t>],
    unknown_model: picker::config::UnknownModelPolicy,
    pods: Vec<Pod>,
    /// Some pod is out of rotation for failing requests.
    any_ejected: bool,
    /// The look's index of each table position, built at the first request for a model
    /// (`u32::MAX`: not among the pods looked at).
    by_position: Vec<u32>,
    /// Where the prefill pods start among the pods looked at ([`AllPods::prefill_from`]).
    prefill_from: usize,
    /// As `by_position`, of the prefill table's positions (under P/D, built at the first
    /// request for a model only prefill pods list).
    by_prefill_position: Vec<u32>,
    /// Pods a request that could not go keeps its turn on.
    kept: Vec<bool>,
    /// Some pod's turn is kept (else `kept` need not be read).
    any_kept: bool,
    /// Pods with a free place (as counted, or as counted failing open) whose turn no request
    /// passed over keeps: while there are none, no request after may go.
    open_pods: usize,
    /// How many pods, first, `open_pods` counts: the pool's, and the prefill pods after them
    /// only where some model is theirs alone (no other request goes there: idle, as they mostly
    /// are, they would keep every scan reading the whole queue).
    open_counted: usize,
    /// The pods of the last request judged, by look index (reused).
    reached: Vec<u32>,
    /// The pods of each claim of another worker's ([`PodRooms::outranked`]), read at first use.
    claimed: Vec<Option<Vec<u32>>>,
}

impl<'p, 't> PodRooms<'p, 't> {
    pub fn new(
        all: AllPods<'p, 't>,
        inflight: &WorkerInflight,
        shape: Option<Shape<'t>>,
        limits: &SaturationLimits,
        flow: &FlowControlConfig,
        unknown_model: picker::config::UnknownModelPolicy,
    ) -> Self {
        let pods: Vec<Pod> = (all.pods.iter().enumerate())
            .map(|(i, pod)| {
                let mut open = *pod;
                fail_open(&mut open, flow.stale_metrics);
                Pod {
                    places: pod_places(pod, limits, flow),
                    local: inflight.local_count(pod.address),
                    open: pod_places(&open, limits, flow),
                    usable: pod.healthy && pod.fresh,
                    up: pod.healthy,
                    ejected: all.ejected.get(i).copied().unwrap_or(false),
                }
            })
            .collect();
        let prefill_alone = shape.and_then(|shape| shape.roles).is_some_and(|roles| roles.prefill_names_own_models());
        let open_counted = if prefill_alone { pods.len() } else { all.prefill_from };
        let open_pods = pods.iter().take(open_counted).filter(|pod| pod.has_a_place()).count();
        Self {
            shape,
            unknown_model,
            any_ejected: pods.iter().any(|pod| pod.ejected),
            kept: vec![false; pods.len()],
            pods,
            looked: all.pods,
            by_position: Vec::new(),
            prefill_from: all.prefill_from,
            by_prefill_position: Vec::new(),
            any_kept: false,
            open_pods,
            open_counted,
            reached: Vec::new(),
            claimed: Vec::new(),
        }
    }

    /// The room of the pods `reach` may go to.
    pub fn of(&mut self, reach: Reach<'_>) -> Room {
        let whole_pool = reach.model.is_none() && reach.subset.is_none();
        self.reached.clear();
        match self.shape.filter(|_| !whole_pool) {
            // The static pool's pods (no models to tell them apart by), within the hint; or,
            // for a request for any model, the pool's pods (under P/D the decode pods).
            None => {
                let looked = self.looked;
                let in_subset = |i: &usize| {
                    let address = looked.get(*i).map_or("", |pod| pod.address);
                    reach.subset.is_none_or(|subset| subset.iter().any(|hinted| hinted.as_str() == address))
                };
                let pool = self.pods.len().min(self.prefill_from);
                self.reached.extend((0..pool).filter(in_subset).filter_map(|i| u32::try_from(i).ok()));
                if self.reached.is_empty() && pool > 0 {
                    // As the decision: no pod of the pool in its hint (503).
                    return Room::Refused;
                }
            }
            Some(shape) => {
                let mut reached = std::mem::take(&mut self.reached);
                let found = self.pods_of(shape, reach, &mut reached);
                self.reached = reached;
                if found.is_err() {
                    return Room::Refused;
                }
            }
        }
        let fail_open = self.pass_over_ejected();
        let kept = &self.kept;
        if self.any_kept && self.reached.iter().any(|&i| kept.get(i as usize).copied().unwrap_or(false)) {
            return Room::Kept;
        }
        let pods = &self.pods;
        let reached = || self.reached.iter().filter_map(|&i| pods.get(i as usize));
        Room::Places(OwnPods {
            free: reached()
                .map(|pod| if fail_open { pod.open } else { pod.places })
                .fold(FreePlaces::default(), FreePlaces::with),
            local: reached().fold(0u32, |sum, pod| sum.saturating_add(pod.local)),
            pods: u32::try_from(self.reached.len()).unwrap_or(u32::MAX),
        })
    }

    /// Adds to `out` the look's index of each pod a request of `reach` is routed among, as
    /// its decision reads them (table order kept): under P/D the prefill pods for a model
    /// only they list, else the table's (the decode pods').
    fn pods_of(&mut self, shape: Shape<'_>, reach: Reach<'_>, out: &mut Vec<u32>) -> Result<(), NoRoute> {
        let query = ModelQuery {
            model: reach.model,
            unknown_model: self.unknown_model,
            subset: reach.subset,
            index: Some(shape.models),
            named_elsewhere: false,
            // (Flow control counts the room of every pod listing the model.)
            disowned: &[],
        };
        match shape.roles.filter(|roles| served_on_prefill_pods_only(roles, &query)) {
            Some(roles) => {
                let query = ModelQuery { index: Some(roles.prefill_models), ..query };
                let eligible = eligible_positions(roles.prefill, &query)?;
                self.look_indices(Role::Prefill, roles.prefill.pods.len(), &eligible, out);
            }
            None => {
                let eligible = eligible_positions(shape.table, &query)?;
                self.look_indices(Role::Pool, shape.table.pods.len(), &eligible, out);
            }
        }
        Ok(())
    }

    /// Adds to `out` the look's index of each position in `eligible` of `role`'s table (of
    /// `positions` pods) that is among the pods looked at (table order kept). The index of
    /// positions is built at first use.
    fn look_indices(&mut self, role: Role, positions: usize, eligible: &[usize], out: &mut Vec<u32>) {
        // The role's pods among those looked at, from look index `first`.
        let (by_position, first, end) = match role {
            Role::Pool => (&mut self.by_position, 0, self.prefill_from),
            Role::Prefill => (&mut self.by_prefill_position, self.prefill_from, self.looked.len()),
        };
        if by_position.is_empty() {
            by_position.resize(positions, u32::MAX);
            for (index, pod) in self.looked.get(first..end).unwrap_or_default().iter().enumerate() {
                let index = u32::try_from(first.saturating_add(index));
                if let (Some(slot), Ok(index)) = (by_position.get_mut(pod.position), index) {
                    *slot = index;
                }
            }
        }
        out.extend(eligible.iter().filter_map(|&p| by_position.get(p).copied().filter(|&i| i != u32::MAX)));
    }

    /// Every pod looked at, by look index.
    fn every_pod(&self) -> Vec<u32> {
        (0..self.pods.len()).filter_map(|i| u32::try_from(i).ok()).collect()
    }

    /// Whether a band above `priority` waiting on another worker (`claims`, the same for every
    /// call of one look) needs one of the pods of the request last judged ([`PodRooms::of`]):
    /// that band takes their places first, as priority holds across workers. A claim on a
    /// model's pods holds only requests that may use one of them: a model with pods of its own
    /// is not held by another's higher band.
    pub fn outranked(&mut self, priority: i32, claims: &[Claim]) -> bool {
        let band = priority.clamp(-MAX_PRIORITY, MAX_PRIORITY);
        if !claims.iter().any(|claim| claim.band > band) {
            return false;
        }
        (0..claims.len()).any(|i| claims.get(i).is_some_and(|claim| claim.band > band) && self.reaches(claims, i))
    }

    /// The other workers of this Envoy waiting at `priority`'s band for one of the pods of the
    /// request last judged ([`PodRooms::of`]): those it shares them with. Workers waiting for
    /// other pods only are not counted (their requests take no place on these).
    pub fn sharing(&mut self, priority: i32, claims: &[Claim]) -> u32 {
        let band = priority.clamp(-MAX_PRIORITY, MAX_PRIORITY);
        // Worker slots counted, as bits (a worker names its band once per model).
        let mut workers = 0u64;
        for i in 0..claims.len() {
            let Some(Claim { band: claimed, worker: Some(slot), .. }) = claims.get(i) else { continue };
            let bit = 1u64.checked_shl(u32::try_from(*slot).unwrap_or(u32::MAX)).unwrap_or(0);
            if *claimed == band && workers & bit == 0 && self.reaches(claims, i) {
                workers |= bit;
            }
        }
        workers.count_ones()
    }

    /// Whether claim `i` of `claims` names a pod of the request last judged: a claim on every
    /// pod does; a model's claim when one of its pods (read at first use) is one of them.
    fn reaches(&mut self, claims: &[Claim], i: usize) -> bool {
        let Some(claim) = claims.get(i) else { return false };
        let Some(model) = claim.model.as_deref() else { return true };
        if self.claimed.len() != claims.len() {
            self.claimed = vec![None; claims.len()];
        }
        if self.claimed.get(i).is_some_and(Option::is_none) {
            let pods = self.pods_of_model(model);
            if let Some(slot) = self.claimed.get_mut(i) {
                *slot = Some(pods);
            }
        }
        let Some(Some(claimed)) = self.claimed.get(i) else { return true };
        self.reached.iter().any(|pod| claimed.binary_search(pod).is_ok())
    }

    /// The look's pods serving `model` (sorted), as a request for it is routed; every pod in
    /// the static pool.
    fn pods_of_model(&mut self, model: &str) -> Vec<u32> {
        let Some(shape) = self.shape else { return self.every_pod() };
        let mut pods = Vec::new();
        if self.pods_of(shape, Reach { model: Some(model), subset: None }, &mut pods).is_err() {
            // A model this worker's table does not know (the other worker's table may be a
            // poll ahead or behind): every pod, so a higher band is never passed over.
            return self.every_pod();
        }
        pods.sort_unstable();
        pods
    }

    /// Leaves out of the request's pods those out of rotation, by the rule its decision
    /// applies among them (`picker::outliers::pass_over`): not when they are all it has. Returns
    /// whether none of what is left has usable data (its decision then fails open).
    fn pass_over_ejected(&mut self) -> bool {
        let pods = &self.pods;
        let pod = |i: &u32| pods.get(*i as usize).copied();
        let any = |reached: &[u32], test: &dyn Fn(Pod) -> bool| reached.iter().any(|i| pod(i).is_some_and(test));
        let rule = (self.any_ejected && any(&self.reached, &|pod| pod.ejected)).then(|| {
            pass_over(
                any(&self.reached, &|pod| pod.usable && !pod.ejected),
                any(&self.reached, &|pod| pod.usable),
                any(&self.reached, &|pod| pod.up && !pod.ejected),
            )
        });
        if rule == Some(PassOver::Unusable) {
            self.reached.retain(|i| pod(i).is_some_and(|pod| !pod.ejected));
        }
        let fail_open = !any(&self.reached, &|pod| pod.usable);
        if rule == Some(PassOver::LeftOut) && any(&self.reached, &|pod| !pod.ejected) {
            self.reached.retain(|i| pod(i).is_some_and(|pod| !pod.ejected));
        }
        fail_open
    }

    /// The request last judged ([`PodRooms::of`]) could not go: it keeps its turn on its pods.
    pub fn keep_turn(&mut self) {
        for &i in &self.reached {
            if let Some(kept) = self.kept.get_mut(i as usize) {
                let counted = (i as usize) < self.open_counted;
                if !*kept && counted && self.pods.get(i as usize).is_some_and(Pod::has_a_place) {
                    self.open_pods = self.open_pods.saturating_sub(1);
                }
                *kept = true;
                self.any_kept = true;
            }
        }
    }

    /// Every pod with a free place has its turn kept: no request may go now but one no pod
    /// will take.
    pub fn none_open(&self) -> bool {
        self.open_pods == 0
    }
}
