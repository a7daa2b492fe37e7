//! From what a worker knows (the pod table, in-flight counts, its prefix index, the fallback
//! pool) to one pod address, plus runners-up, for one request.
//!
//! The addresses written into the destination header always come out of here, and always
//! pass [`PodAddress::parse`] on the way: only pool members, only literal `ip:port`.

use crate::address::PodAddress;
use crate::comparison::{draw_arm, Arm, PodSplit};
use crate::config::UnknownModelPolicy;
use crate::models::index::ModelIndex;
use crate::outliers::{pass_over, PassOver};
use crate::pod_table::PodTable;
use crate::prefix::index::PodId;
use crate::prefix::PrefixIndex;
use crate::random::TieBreaker;
use crate::scheduler::{pick_placed, Candidate, Placement, Policy};

mod predict;
pub use predict::{LearningQuery, Predicted};

/// The request's prefix and session, and where to look them up.
pub struct PrefixQuery<'a> {
    pub index: &'a PrefixIndex,
    /// The prompt's chained block hashes (may be empty: a cold or unhashable request).
    pub hashes: &'a [u64],
    /// The pod (and its epoch then) the request's session last went to, if any.
    pub session_pod: Option<(&'a str, u32)>,
    /// The session names state only that pod holds (a stored response, `previous_response_id`):
    /// the request goes there whatever its load, while it is usable.
    pub session_pinned: bool,
    /// This worker's pick counter per pod (see [`Candidate::last_picked`]).
    pub last_picked: &'a dyn Fn(&str) -> u64,
    /// Share of recent prompts that matched a known prefix (see [`Placement::reuse`]).
    pub reuse: f64,
}

/// Everything one routing decision reads.
pub struct RoutingView<'a> {
    /// The singleton's latest table, if one was ever published.
    pub table: Option<&'a PodTable>,
    /// Used when there is no table or it lists no pod.
    pub fallback_pool: &'a [PodAddress],
    /// Requests this Envoy has in flight to a pod (see [`crate::inflight::WorkerInflight`]).
    pub inflight: &'a dyn Fn(&str) -> u32,
    pub prefix: Option<PrefixQuery<'a>>,
    pub now_ms: u64,
    pub stale_after_ms: u64,
    /// Learning on: token load and predicted TTFT per candidate.
    pub learning: Option<LearningQuery<'a>>,
    /// The request's model and the gateway's subset hint.
    pub models: ModelQuery<'a>,
    /// Pods this worker has taken out of rotation for failing requests ([`crate::outliers`]):
    /// passed over while another eligible pod is usable.
    pub ejected: &'a [PodAddress],
}

/// Which pods may serve this request at all: those serving its model, within the subset.
#[derive(Debug, Clone, Copy, Default)]
pub struct ModelQuery<'a> {
    /// The body's `model` (after any rewrite); `None` = any pod.
    pub model: Option<&'a str>,
    pub unknown_model: UnknownModelPolicy,
    /// The gateway's subset hint: only these pods; `None` = no hint.
    pub subset: Option<&'a [PodAddress]>,
    /// The table's model index (built per publish by the worker); built here when `None`.
    pub index: Option<&'a ModelIndex>,
    /// A pod outside the routed table names `model` (under P/D, a decode pod, for the prefill
    /// pick among the prefill pods): a name no pod here lists is then known to be another
    /// pod's, so a pod whose lists were cut is not presumed to serve it, nor is any pod by
    /// load. Pods that name no model still may.
    pub named_elsewhere: bool,
    /// Pods that answered this worker's requests for `model` with the engine's "model does
    /// not exist" 404 although they list it (a stale or lying listing): left out of the pods
    /// naming it while another pod names it; with none other, their 404 is the answer.
    pub disowned: &'a [PodAddress],
}

/// Where one request goes, and how the choice was made.
#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    pub address: PodAddress,
    /// The chosen pod's epoch in the table (0 without a table), for the prefix index.
    pub epoch: u32,
    /// Runners-up, best first: Envoy's override_host policy retries on them in order.
    pub fallbacks: Vec<PodAddress>,
    /// How many of `fallbacks` (the first) passed the scheduler's filters, as the chosen pod
    /// did ([`crate::scheduler::Decision::fallbacks_in_field`]).
    pub fallbacks_in_field: usize,
    /// No pod had fresh, healthy data: chosen by in-flight counts alone.
    pub fail_open: bool,
    /// Every pod with usable data is saturated (see [`crate::saturation::SaturationLimits`]).
    pub pool_saturated: bool,
    /// The chosen pod's share of the prompt's prefix blocks.
    pub prefix_match: f64,
    /// Session or prefix affinity decided the field.
    pub affinity: bool,
    pub score: f64,
    /// The chosen pod's index in the table (`None` when it came from the fallback pool).
    pub table_index: Option<usize>,
    /// Learning on: the chosen pod's predicted cache hit, work and TTFT.
    pub predicted: Option<Predicted>,
    /// How many pods of the routed table (or fallback pool) this request may go to at all:
    /// serving its model, in its subset (ejected or not, in either comparison arm); 1 for a
    /// stored response's pod. Fewer than the pool's: a retry past the list could land where
    /// it must not.
    pub may_serve: usize,
}

/// The pod's queue as best known now. The polled `waiting` is up to a poll interval old; a
/// burst dispatched since then is in this proxy's exact in-flight count. What this proxy has in
/// flight beyond what the engine reported running is, at least, waiting: so a burst saturates a
/// pod (and releases its affinity) at once, not a poll later.
fn estimated_waiting(waiting: f64, running: f64, inflight: u32) -> f64 {
    waiting.max(f64::from(inflight) - running)
}

/// The gateway's subset hint, asked once per pod. The hint may list the whole pool (a
/// gateway restricting to its healthy endpoints): a walk of it per pod cost pods × hint
/// comparisons (1 ms per pick natively at 1,024 of each), so a sorted hint, as
/// `subset_hint` gives it, is searched.
struct SubsetHint<'a> {
    addresses: &'a [PodAddress],
    sorted: bool,
}

impl<'a> SubsetHint<'a> {
    fn new(addresses: &'a [PodAddress]) -> Self {
        Self { addresses, sorted: addresses.is_sorted() }
    }

    fn holds(&self, address: &PodAddress) -> bool {
        if self.sorted {
            self.addresses.binary_search(address).is_ok()
        } else {
            self.addresses.contains(address)
        }
    }
}

/// The table's pods a request of `query` may go to, by position in table order: what the pick
/// chooses among (flow control counts their room, not the pool's, for a request waiting).
pub fn eligible_positions(table: &PodTable, query: &ModelQuery<'_>) -> Result<Vec<usize>, NoRoute> {
    eligible_pods(query, table).map(|pods| pods.into_iter().map(|(i, _)| i).collect())
}

/// The table's pods this request may go to, with their LoRA tiers: in the subset hint, and
/// serving its model (or, if none says it does, those that do not tell). Table order.
fn eligible_pods(query: &ModelQuery<'_>, table: &PodTable) -> Result<Vec<(usize, u8)>, NoRoute> {
    let subset = query.subset.map(SubsetHint::new);
    let in_subset = |i: usize| -> bool {
        subset.as_ref().is_none_or(|subset| table.pods.get(i).is_some_and(|pod| subset.holds(&pod.address)))
    };
    let everyone = || -> Result<Vec<(usize, u8)>, NoRoute> {
        // One allocation: a filter's collect would grow by doubling (five times for 64 pods).
        let mut all: Vec<(usize, u8)> = Vec::with_capacity(table.pods.len());
        all.extend((0..table.pods.len()).filter(|&i| in_subset(i)).map(|i| (i, 0)));
        if all.is_empty() {
            return Err(NoRoute::SubsetEmpty);
        }
        Ok(all)
    };
    let Some(model) = query.model else { return everyone() };
    let built;
    let index = match query.index {
        Some(index) => index,
        None => {
            built = ModelIndex::build(table, &|_| true);
            &built
        }
    };
    let serving: Vec<(usize, u8)> = index
        .servers(model)
        .into_iter()
        .flatten()
        .map(|(i, tier)| (i as usize, tier))
        .chain(index.silent().iter().map(|&i| (i as usize, u8::MAX)))
        .filter(|&(i, _)| in_subset(i))
        .collect();
    // Pods naming the model, else those that name none (tier u8::MAX marks them).
    let named: Vec<(usize, u8)> = serving.iter().copied().filter(|&(_, tier)| tier != u8::MAX).collect();
    if !named.is_empty() {
        return Ok(without_disowned(query.disowned, table, named));
    }
    if !serving.is_empty() {
        return Ok(serving.into_iter().map(|(i, _)| (i, 0)).collect());
    }
    // As for a table where another pod lists the name: its lists say who serves it.
    if query.named_elsewhere {
        return Err(NoRoute::UnknownModel);
    }
    if query.unknown_model == UnknownModelPolicy::RouteByLoad {
        // Any pod may serve it (one whose lists were cut among them): by load over all.
        return everyone();
    }
    // Instead of the gateway's 404: a name no pod lists may still be served by a pod whose
    // lists were cut at their bound; it answers for itself (its own 404 if it does not).
    let cut: Vec<(usize, u8)> = index.cut().iter().map(|&i| (i as usize, 0)).filter(|&(i, _)| in_subset(i)).collect();
    if !cut.is_empty() {
        return Ok(cut);
    }
    // Pods outside the gateway's hint serve it, or may: no pod, not a 404.
    if query.subset.is_some() && index.may_be_served(model) {
        return Err(NoRoute::SubsetEmpty);
    }
    Err(NoRoute::UnknownModel)
}

/// `named` (the pods naming the request's model) without those that `disowned` it, unless
/// that leaves none: a pod whose 404 is the only answer to be had gives it.
fn without_disowned(disowned: &[PodAddress], table: &PodTable, named: Vec<(usize, u8)>) -> Vec<(usize, u8)> {
    if disowned.is_empty() {
        return named;
    }
    let owned = |i: usize| table.pods.get(i).is_some_and(|pod| !disowned.contains(&pod.address));
    if !named.iter().any(|&(i, _)| owned(i)) {
        return named;
    }
    named.into_iter().filter(|&(i, _)| owned(i)).collect()
}

/// What a caller keeps of the routed table's pods in table order (built once per published
/// table), so [`choose_at`] reads each pod's by its position instead of by its address.
pub struct TableOrder<'a> {
    /// In-flight count of table pod `i` (whose address is given too): what
    /// [`RoutingView::inflight`] gives for that address.
    pub inflight_at: &'a dyn Fn(usize, &str) -> u32,
    /// The prefix index's id of each table pod, by position, looked up under the index's
    /// current [`PrefixIndex::pods_generation`]; `None` (or a list of another length): the
    /// pods are looked up by address.
    pub index_ids: Option<&'a [Option<PodId>]>,
}

// Inlined where it is called (the decision and each arm of a comparison): called from three
// places, LLVM kept it out of line, and `decision/chat/32KB/64pods` took 0.45 µs (2.8 %) more.
#[inline(always)]
fn table_candidates<'a>(
    view: &RoutingView<'a>,
    table: &'a PodTable,
    eligible: &[(usize, u8)],
    order: &TableOrder<'_>,
    ejected: &[PodAddress],
) -> Vec<Candidate<'a>> {
    let inflight_at = order.inflight_at;
    let mut matched = Vec::new();
    if let Some(query) = &view.prefix {
        matched.reserve_exact(table.pods.len());
        match order.index_ids.filter(|ids| ids.len() == table.pods.len()) {
            Some(ids) => {
                let pods: Vec<(Option<PodId>, u32)> =
                    ids.iter().zip(&table.pods).map(|(&id, p)| (id, p.epoch)).collect();
                query.index.matched_blocks_each_by_id(query.hashes, &pods, &mut matched);
            }
            None => {
                let pods: Vec<(&str, u32)> = table.pods.iter().map(|p| (p.address.as_str(), p.epoch)).collect();
                query.index.matched_blocks_each(query.hashes, &pods, &mut matched);
            }
        }
    }
    let blocks = view.prefix.as_ref().map_or(0, |q| q.hashes.len());
    let session_match = |address: &str, epoch: u32| {
        view.prefix
            .as_ref()
            .and_then(|q| q.session_pod)
            .is_some_and(|(session_pod, session_epoch)| session_pod == address && session_epoch == epoch)
    };
    // Pick recency only places cold requests (no candidate holds any of the prefix or the
    // session, see `scheduler::pick_placed`): a warm request skips its lookup per pod.
    let cold = eligible.iter().all(|&(i, _)| {
        let prefix_matched = blocks > 0 && matched.get(i).is_some_and(|&m| m > 0);
        !prefix_matched && table.pods.get(i).is_none_or(|pod| !session_match(pod.address.as_str(), pod.epoch))
    });
    let mut candidates = Vec::with_capacity(eligible.len());
    let built = eligible.iter().filter_map(|&(i, lora_tier)| table.pods.get(i).map(|pod| (i, lora_tier, pod))).map(
        |(i, lora_tier, pod)| {
            let address = pod.address.as_str();
            let session_match = session_match(address, pod.epoch);
            let inflight = inflight_at(i, address);
            let predicted =
                view.learning.as_ref().map(|l| (l, l.predict(address, matched.get(i).copied().unwrap_or(0), inflight)));
            Candidate {
                address,
                // A pinned session's state is on that pod alone: it is not passed over.
                usable: pod.usable_at(view.now_ms, view.stale_after_ms)
                    && (!is_ejected(ejected, address)
                        || (session_match && view.prefix.as_ref().is_some_and(|q| q.session_pinned))),
                waiting: estimated_waiting(pod.waiting, pod.running, inflight),
                running: pod.running,
                kv_usage: pod.kv_usage,
                inflight,
                prefix_match: match (matched.get(i), blocks) {
                    (Some(&m), b) if b > 0 => m as f64 / b as f64,
                    _ => 0.0,
                },
                session_match,
                // Its pod up at its last scrape (fresh or not: see `scheduler::filtered`).
                session_pinned: session_match && pod.healthy && view.prefix.as_ref().is_some_and(|q| q.session_pinned),
                last_picked: view.prefix.as_ref().filter(|_| cold).map_or(0, |q| (q.last_picked)(address)),
                lora_tier,
                predicted_ttft_ms: predicted.map(|(_, p)| p.ttft_ms),
                predicted_prefill_ms: predicted.map(|(_, p)| p.prefill_ms),
                ttft_fitted: predicted.is_some_and(|(_, p)| p.fitted),
                ttft_scale_ms: predicted.map_or(0.0, |(l, _)| l.ttft_scale_ms),
                ttft_margin_ms: predicted.map_or(0.0, |(l, _)| l.ttft_margin_ms),
                typical_ttft_ms: predicted.map_or(0.0, |(l, _)| l.typical_ttft_ms),
                meets_slo: predicted.is_none_or(|(l, p)| l.meets_slo(p.ttft_ms)),
                // Read only where it is used: cold placements with learning's home balance.
                indexed_blocks: view
                    .prefix
                    .as_ref()
                    .filter(|_| cold && view.learning.is_some())
                    .map_or(0, |q| q.index.pod_len(address)),
            }
        },
    );
    // Sized once: a filter_map's collect would grow by doubling.
    candidates.extend(built);
    candidates
}

fn is_ejected(ejected: &[PodAddress], address: &str) -> bool {
    ejected.iter().any(|pod| pod == address)
}

/// Why no pod could be chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoRoute {
    /// Neither the table nor the fallback pool names any pod.
    EmptyPool,
    /// No pod serves the request's model (and the policy is to reject it).
    UnknownModel,
    /// The gateway's subset hint names no pool member.
    SubsetEmpty,
}

/// Chooses a pod among the table's pods (or, without any, the fallback pool's). Candidates
/// are built in the table's (or pool's) order, so the chosen index names the pod directly:
/// its validated address and epoch are taken, never re-parsed or searched for.
pub fn choose(view: &RoutingView<'_>, policy: &Policy, random: &mut TieBreaker) -> Result<Route, NoRoute> {
    let by_address = TableOrder { inflight_at: &|_, address| (view.inflight)(address), index_ids: None };
    choose_at(view, &by_address, policy, random)
}

/// [`choose`], reading what `order` keeps of each table pod by its table position (a caller
/// that keeps counts and index ids in table order saves two lookups per pod): the same pick,
/// provided `order` gives what the view would. The fallback pool is still counted through
/// `view.inflight`.
pub fn choose_at(
    view: &RoutingView<'_>,
    order: &TableOrder<'_>,
    policy: &Policy,
    random: &mut TieBreaker,
) -> Result<Route, NoRoute> {
    match view.table.filter(|t| !t.pods.is_empty()) {
        Some(table) => {
            let eligible = eligible_pods(&view.models, table)?;
            choose_among(view, table, eligible, order, policy, random)
        }
        None => choose_in_fallback_pool(view, policy, random),
    }
}

/// A live comparison ([`crate::comparison`]): the table's split into arms, the baseline's
/// policy, and the request's key (its session or conversation, which keeps it in one arm).
pub struct Comparison<'a> {
    pub split: &'a PodSplit,
    pub baseline: &'a Policy,
    pub key: Option<u64>,
}

/// [`choose_at`] within one arm of a comparison: the request's eligible pods are those of the
/// arm drawn for it ([`draw_arm`], by each arm's count of eligible pods), chosen by the picker
/// (`policy`, with everything the view knows) or by the baseline (its policy, blind to
/// prefixes, sessions and predictions). The arm is `None` when the request is not compared:
/// no table, one arm has none of the pods it may go to (a model on one arm's pods), or the
/// drawn arm has no usable one (healthy, with fresh data); it is then chosen as
/// [`choose_at`] would.
pub fn choose_compared(
    view: &RoutingView<'_>,
    order: &TableOrder<'_>,
    policy: &Policy,
    comparison: &Comparison<'_>,
    random: &mut TieBreaker,
) -> Result<(Route, Option<Arm>), NoRoute> {
    let Some(table) = view.table.filter(|t| !t.pods.is_empty()) else {
        return choose_in_fallback_pool(view, policy, random).map(|route| (route, None));
    };
    let eligible = eligible_pods(&view.models, table)?;
    let arm_of = |i: usize| comparison.split.arm_at(i);
    // Drawn by the eligible pods, up or down, so a conversation keeps its arm while pods come
    // and go; an arm with no pod the scheduler would trust (down, or not yet scraped) does not
    // route blind: the request is then not compared.
    let usable = |i: usize| {
        table.pods.get(i).is_some_and(|pod| {
            pod.usable_at(view.now_ms, view.stale_after_ms) && !is_ejected(view.ejected, pod.address.as_str())
        })
    };
    let baseline = eligible.iter().filter(|&&(i, _)| arm_of(i) == Arm::Baseline).count();
    let arm = draw_arm(baseline, eligible.len() - baseline, comparison.key, random)
        .filter(|&arm| eligible.iter().any(|&(i, _)| arm_of(i) == arm && usable(i)));
    let Some(arm) = arm else {
        return choose_among(view, table, eligible, order, policy, random).map(|route| (route, None));
    };
    // An arm is no bound on who may serve the request: a retry past its list may go anywhere.
    let may_serve = eligible.len();
    let in_arm: Vec<(usize, u8)> = eligible.into_iter().filter(|&(i, _)| arm_of(i) == arm).collect();
    let route = match arm {
        Arm::Picker => choose_among(view, table, in_arm, order, policy, random)?,
        Arm::Baseline => {
            let blind = RoutingView { prefix: None, learning: None, ..*view };
            let order = TableOrder { inflight_at: order.inflight_at, index_ids: None };
            choose_among(&blind, table, in_arm, &order, comparison.baseline, random)?
        }
    };
    Ok((Route { may_serve, ..route }, Some(arm)))
}

/// Chooses among `eligible` of the table's pods (with their LoRA tiers).
fn choose_among(
    view: &RoutingView<'_>,
    table: &PodTable,
    eligible: Vec<(usize, u8)>,
    order: &TableOrder<'_>,
    policy: &Policy,
    random: &mut TieBreaker,
) -> Result<Route, NoRoute> {
    // Ejected pods left out still may serve it (a retry past the list may go there).
    let may_serve = eligible.len();
    let (eligible, ejected) = passing_over_ejected(view, table, eligible);
    let candidates = table_candidates(view, table, &eligible, order, ejected);
    let indices: Vec<usize> = eligible.into_iter().map(|(i, _)| i).collect();
    pick_route(view, Some(table), &candidates, &indices, may_serve, policy, random)
}

/// How the pods this worker ejected ([`crate::outliers`]) are passed over among `eligible`
/// ([`pass_over`]'s rule): marked unusable, ignored, or left out while another pod remains
/// (a pinned session's pod is kept: only it holds the session's state). Returns the pods to
/// choose among and the addresses to mark unusable.
fn passing_over_ejected<'v>(
    view: &RoutingView<'v>,
    table: &PodTable,
    eligible: Vec<(usize, u8)>,
) -> (Vec<(usize, u8)>, &'v [PodAddress]) {
    if view.ejected.is_empty() {
        return (eligible, &[]);
    }
    let pod_at = |i: usize| table.pods.get(i);
    let ejected_at = |i: usize| pod_at(i).is_some_and(|pod| is_ejected(view.ejected, pod.address.as_str()));
    let usable_at = |i: usize| pod_at(i).is_some_and(|pod| pod.usable_at(view.now_ms, view.stale_after_ms));
    let up_at = |i: usize| pod_at(i).is_some_and(|pod| pod.healthy);
    let rule = pass_over(
        eligible.iter().any(|&(i, _)| usable_at(i) && !ejected_at(i)),
        eligible.iter().any(|&(i, _)| usable_at(i)),
        eligible.iter().any(|&(i, _)| up_at(i) && !ejected_at(i)),
    );
    match rule {
        PassOver::Unusable => (eligible, view.ejected),
        PassOver::Ignored => (eligible, &[]),
        PassOver::LeftOut => {
            let pinned = view.prefix.as_ref().filter(|q| q.session_pinned).and_then(|q| q.session_pod);
            let pinned_at = |i: usize| {
                pinned
                    .zip(pod_at(i))
                    .is_some_and(|((address, epoch), pod)| pod.address == *address && pod.epoch == epoch)
            };
            let kept: Vec<(usize, u8)> =
                eligible.iter().copied().filter(|&(i, _)| !ejected_at(i) || pinned_at(i)).collect();
            (if kept.is_empty() { eligible } else { kept }, &[])
        }
    }
}

/// Chooses among the fallback pool's pods (no table): by in-flight counts.
fn choose_in_fallback_pool(view: &RoutingView<'_>, policy: &Policy, random: &mut TieBreaker) -> Result<Route, NoRoute> {
    let subset = view.models.subset.map(SubsetHint::new);
    let allowed: Vec<usize> = (0..view.fallback_pool.len())
        .filter(|&i| view.fallback_pool.get(i).is_some_and(|a| subset.as_ref().is_none_or(|s| s.holds(a))))
        .collect();
    if subset.is_some() && allowed.is_empty() && !view.fallback_pool.is_empty() {
        return Err(NoRoute::SubsetEmpty);
    }
    let may_serve = allowed.len();
    // Pods failing requests are left out while another remains.
    let ejected = |i: &usize| view.fallback_pool.get(*i).is_some_and(|a| is_ejected(view.ejected, a.as_str()));
    let allowed = if allowed.iter().any(|i| !ejected(i)) {
        allowed.into_iter().filter(|i| !ejected(i)).collect()
    } else {
        allowed
    };
    let candidates: Vec<Candidate<'_>> = allowed
        .iter()
        .filter_map(|&i| view.fallback_pool.get(i))
        .map(|a| Candidate::with_load(a.as_str(), false, 0.0, None, (view.inflight)(a.as_str())))
        .collect();
    pick_route(view, None, &candidates, &allowed, may_serve, policy, random)
}

/// Picks among `candidates` (built in the order of `indices`, positions in the table or, with
/// none, in the fallback pool) and names the chosen pod by its validated address and epoch;
/// `may_serve` pods may take the request (see [`Route::may_serve`]).
fn pick_route(
    view: &RoutingView<'_>,
    table: Option<&PodTable>,
    candidates: &[Candidate<'_>],
    indices: &[usize],
    may_serve: usize,
    policy: &Policy,
    random: &mut TieBreaker,
) -> Result<Route, NoRoute> {
    let pod = |index: usize| -> Option<(PodAddress, u32)> {
        let index = *indices.get(index)?;
        match table {
            Some(table) => table.pods.get(index).map(|p| (p.address.clone(), p.epoch)),
            None => view.fallback_pool.get(index).map(|a| (a.clone(), 0)),
        }
    };
    let placement = view
        .prefix
        .as_ref()
        .and_then(|q| q.hashes.first().map(|&key| Placement { key, reuse: q.reuse, blocks: q.hashes.len() }));
    let decision = pick_placed(candidates, policy, random, placement).ok_or(NoRoute::EmptyPool)?;
    let chosen = candidates.get(decision.index).ok_or(NoRoute::EmptyPool)?;
    let (address, epoch) = pod(decision.index).ok_or(NoRoute::EmptyPool)?;
    let blocks = view.prefix.as_ref().map_or(0, |q| q.hashes.len());
    let matched = (chosen.prefix_match * blocks as f64).round() as usize;
    let predicted = view.learning.as_ref().map(|l| l.predict(address.as_str(), matched, chosen.inflight));
    let named = |from: &[usize]| -> Vec<PodAddress> { from.iter().filter_map(|&i| pod(i)).map(|(a, _)| a).collect() };
    let (in_field, rest) = decision.fallbacks.split_at(decision.fallbacks_in_field.min(decision.fallbacks.len()));
    let mut fallbacks = named(in_field);
    let fallbacks_in_field = fallbacks.len();
    fallbacks.extend(named(rest));
    Ok(Route {
        address,
        epoch,
        fallbacks,
        fallbacks_in_field,
        fail_open: decision.fail_open,
        pool_saturated: policy.saturation.pool_saturated(candidates),
        prefix_match: chosen.prefix_match,
        affinity: decision.affinity,
        score: decision.score,
        table_index: table.and(indices.get(decision.index).copied()),
        predicted,
        // A pinned pod, when there is one, is the only one the scheduler may choose.
        may_serve: if chosen.session_pinned { 1 } else { may_serve },
    })
}

pub mod explain;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod estimate_tests {
    #[test]
    fn in_flight_beyond_running_counts_as_waiting() {
        assert_eq!(super::estimated_waiting(0.0, 4.0, 20), 16.0, "a burst the poll has not seen");
        assert_eq!(super::estimated_waiting(3.0, 4.0, 5), 3.0, "the engine's own queue when larger");
        assert_eq!(super::estimated_waiting(0.0, 10.0, 2), 0.0, "other clients' load is not ours");
    }
}

#[cfg(test)]
mod model_tests;
