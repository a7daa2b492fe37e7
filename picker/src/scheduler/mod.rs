//! Filter → Score → Pick, as in llm-d's scheduler.
//!
//! Filters: keep the pods whose data is trustworthy (healthy and fresh); leave out pods whose
//! queue is full while any other remains (learning off: with it, the predicted TTFT weighs the
//! queue instead); keep the best LoRA tier (adapter resident, then a
//! free adapter slot, then the rest: [`crate::models::affinity`]; a swap is never chosen while
//! a pod holding the adapter exists, saturated or not); then, "sticky until saturated", keep the pods this
//! request has affinity to (its session's pod, or pods holding at least `affinity_threshold`
//! of its prefix) if any of them is left. When every queue is full, affinity and the prefix
//! scorer step aside and load alone decides (among the pods that need no adapter swap, if
//! any): no pod should idle while another queues. Each
//! scorer gives every remaining pod a score in 0..1; the weighted mean decides. Ties break at
//! random. A cold request (its prefix matches nothing anywhere) goes by rendezvous hashing
//! of its first block among the pods scored near the best (skipping pods loaded above the
//! mean by a factor; learning on, also pods home to more indexed blocks than the fewest by
//! half the prompt's), so replicas place a new prefix on the same pod without talking; how
//! near is the configured slack scaled by how often prompts come back ([`Placement`]), so
//! unrelated prompts go by load alone. Configured so (or with nothing to hash), cold
//! requests go to the least recently picked of the best-scored pods. If no pod passes the first
//! filter, the picker fails open: every pool member stays a candidate, scored only by what
//! this proxy knows exactly (its own requests in flight), and the decision says so.

mod candidates;
mod scorers;

pub use candidates::{Candidate, ColdPlacement, LearningPolicy, Policy};
pub use scorers::{InflightScorer, KvCacheScorer, PrefixScorer, QueueScorer, Scorer, TtftScorer};

use crate::config::ScorerWeights;
use crate::models::affinity::{TIER_RESIDENT_COPY, TIER_SWAP};
use crate::random::TieBreaker;

/// Scores within this distance of the best count as a tie (totals are 0..1). A polled KV
/// usage moves by a request's blocks between scrapes, and a gap that small is noise: without
/// the tolerance, a pod scraped while one 3-token request held one block of 16,384 scored
/// 0.000009 below its peers and got none of the next 47 idle-pool requests until the next
/// scrape (`routing_by_load` e2e). 0.001 is 0.7 % of KV usage at the default weights, or one
/// request in a queue range of 140: below what one request changes.
const TIE_TOLERANCE: f64 = 1e-3;

/// The outcome of one pick.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// Index into the candidate list.
    pub index: usize,
    pub score: f64,
    /// No pod had usable data; the pick used in-flight counts only.
    pub fail_open: bool,
    /// The affinity filter narrowed the choice (session or prefix).
    pub affinity: bool,
    /// How many candidates were tied at the best score.
    pub tied: usize,
    /// Next-best candidates, best first, for Envoy to retry on when the first choice
    /// cannot be reached (override_host follows a comma-separated list in order).
    pub fallbacks: Vec<usize>,
    /// How many of `fallbacks` (the first ones) passed the filters the pick passed: the rest
    /// are usable pods the filters left out (an adapter to swap in, a full queue), fit to
    /// retry on but not to be chosen among equals.
    pub fallbacks_in_field: usize,
}

/// What the filters left, as indices into the candidate list.
struct Filtered {
    indices: Vec<usize>,
    /// No pod had usable data.
    fail_open: bool,
    /// Every usable pod's queue is full and learning cannot be trusted with that (off, or no
    /// model has learned yet): affinity is off and only load decides.
    load_only: bool,
    /// The session's or the prefix's pods narrowed the field.
    affinity: bool,
}

/// The indices `from` yields that `keep` holds for, in order, in at most one allocation, of
/// `at_most` (a bound on how many it yields), made when the first is kept: collecting a
/// filter grows a Vec by doubling, five allocations for 64 pods, and these filters run on
/// every request.
fn indices_where(from: impl Iterator<Item = usize>, at_most: usize, keep: impl Fn(usize) -> bool) -> Vec<usize> {
    let mut kept = Vec::new();
    for i in from.filter(|&i| keep(i)) {
        if kept.capacity() == 0 {
            kept.reserve_exact(at_most.max(1));
        }
        kept.push(i);
    }
    kept
}

fn filtered(candidates: &[Candidate<'_>], policy: &Policy) -> Filtered {
    // A stored response is on one pod; any other answers 404: it waits there, data fresh or
    // not (a pinned candidate's pod was up at its last scrape: a silent pool service is no
    // reason to send it where it cannot be answered). Looked for without allocating: nearly
    // every request has no pinned pod.
    if candidates.iter().any(|c| c.session_pinned) {
        let pinned = indices_where(0..candidates.len(), 1, |i| candidates.get(i).is_some_and(|c| c.session_pinned));
        // Still failing open when no pod has usable data (it is counted and logged as such).
        let fail_open = !candidates.iter().any(|c| c.usable);
        return Filtered { indices: pinned, fail_open, load_only: false, affinity: true };
    }
    let usable = indices_where(0..candidates.len(), candidates.len(), |i| candidates.get(i).is_some_and(|c| c.usable));
    if usable.is_empty() {
        return Filtered {
            indices: (0..candidates.len()).collect(),
            fail_open: true,
            load_only: false,
            affinity: false,
        };
    }
    // Pods with a full queue are left out while any other can take the request.
    let open = indices_where(usable.iter().copied(), usable.len(), |i| {
        candidates.get(i).is_some_and(|c| !policy.saturation.queue_full(c))
    });
    let pool_busy = open.is_empty();
    let trusted = trusted_learning(candidates, policy);
    let load_only = pool_busy && trusted.is_none();
    let open = match (pool_busy, trusted) {
        (true, None) => return every_queue_full(candidates, usable),
        // Learning: a full queue does not drop a pod (nor the affinity to it); the predicted
        // TTFT, which counts the queue, decides whether moving buys time (below). Dropping it
        // sent a 6k-token prompt's requests to pods without it whenever its pod had five
        // waiting, at the top of workload g's ladder: 720 ms prefills instead of 120 ms, and
        // a second copy evicting other prompts.
        (_, Some(_)) => usable.clone(),
        (false, None) => open,
    };
    // LoRA affinity (`models::affinity`): the best adapter tier among pods that can take the
    // request. A hot adapter goes to a copy or a free adapter slot once its home's queue is
    // full, but never to a pod that must evict another adapter (now, or later: a tight pool's
    // free slot) while a pod holding it exists: it queues there (load decides among those),
    // since a swap costs a load now and another one later.
    let best_tier = open.iter().filter_map(|&i| candidates.get(i)).map(|c| c.lora_tier).min().unwrap_or(0);
    let held_by = indices_where(usable.iter().copied(), usable.len(), |i| {
        candidates.get(i).is_some_and(|c| c.lora_tier <= TIER_RESIDENT_COPY)
    });
    if best_tier >= TIER_SWAP && !held_by.is_empty() {
        return Filtered { indices: held_by, fail_open: false, load_only: trusted.is_none(), affinity: true };
    }
    let open: Vec<usize> =
        open.into_iter().filter(|&i| candidates.get(i).is_some_and(|c| c.lora_tier == best_tier)).collect();
    // A TTFT objective: only the pods predicted to meet it, if any does.
    let meeting = indices_where(open.iter().copied(), open.len(), |i| candidates.get(i).is_some_and(|c| c.meets_slo));
    let open = if meeting.is_empty() { open } else { meeting };
    let sticky = |set: &[usize]| !set.is_empty() && !release_affinity(candidates, set, &open, policy);
    let having = |keep: &dyn Fn(&Candidate<'_>) -> bool| -> Vec<usize> {
        indices_where(open.iter().copied(), open.len(), |i| candidates.get(i).is_some_and(keep))
    };
    let session = having(&|c| c.session_match);
    if sticky(&session) {
        return Filtered { indices: session, fail_open: false, load_only, affinity: true };
    }
    if policy.affinity_threshold > 0.0 {
        // Only the longest matches: a pod holding the whole conversation beats one holding
        // just its system prompt, or the conversation's history is computed twice.
        let best = open.iter().filter_map(|&i| candidates.get(i)).map(|c| c.prefix_match).fold(0.0, f64::max);
        let floor = policy.affinity_threshold.max(best - policy.affinity_slack);
        let warm = having(&|c| c.prefix_match >= floor);
        if sticky(&warm) {
            return Filtered { indices: warm, fail_open: false, load_only, affinity: true };
        }
    }
    Filtered { indices: tail_guarded(candidates, open, policy), fail_open: false, load_only, affinity: false }
}

/// Every usable pod's queue is full (learning off or untrusted): load decides among them, but
/// not a pod that must evict an adapter while one that need not can queue the request (one
/// holding the adapter, or with a free slot for it): the swap would cost a load now and
/// another later, as when some queue is open.
fn every_queue_full(candidates: &[Candidate<'_>], usable: Vec<usize>) -> Filtered {
    // The common case, no adapter or no pod that must swap one in: no list to build.
    let needs_swap = |i: &usize| candidates.get(*i).is_some_and(|c| c.lora_tier >= TIER_SWAP);
    if !usable.iter().any(needs_swap) {
        return Filtered { indices: usable, fail_open: false, load_only: true, affinity: false };
    }
    let no_swap = indices_where(usable.iter().copied(), usable.len(), |i| {
        candidates.get(i).is_some_and(|c| c.lora_tier < TIER_SWAP)
    });
    let narrowed = !no_swap.is_empty() && no_swap.len() < usable.len();
    let indices = if no_swap.is_empty() { usable } else { no_swap };
    Filtered { indices, fail_open: false, load_only: true, affinity: narrowed }
}

/// Learning on, a pick by load: the pods predicted to answer within `tail_guard` × the pool's
/// typical TTFT, or within `tail_guard − 1` typical TTFTs of the best prediction where that is
/// later (all of `open` before the pool has a typical TTFT). The scores trade a pod's
/// predicted lead against its request counts, linearly; the tail is made of the picks where
/// the counts won by a little and the prediction was far out (a 3 × slower pod with a free
/// slot taking a long prompt, workload f). A bound on the prediction itself keeps those out
/// and leaves the scores to decide among the rest; a pod only a few ms past it, among pods
/// predicted alike, is not what the bound is for (workload c: 70 ms answers, 20 ms apart by
/// their token load, which the request counts weigh better). Applied after affinity: a
/// prompt's home is left only by [`release_affinity`]'s rule.
fn tail_guarded(candidates: &[Candidate<'_>], open: Vec<usize>, policy: &Policy) -> Vec<usize> {
    let Some(factor) = policy.learning.map(|l| l.tail_guard).filter(|&f| f > 0.0) else { return open };
    let guarded = || open.iter().filter_map(|&i| candidates.get(i));
    let typical = guarded().map(|c| c.typical_ttft_ms).fold(0.0, f64::max);
    let best = guarded().filter_map(|c| c.predicted_ttft_ms).fold(f64::INFINITY, f64::min);
    if typical <= 0.0 || !best.is_finite() {
        return open;
    }
    let bound = (factor * typical).max(best + (factor - 1.0) * typical);
    let within = indices_where(open.iter().copied(), open.len(), |i| {
        candidates.get(i).is_some_and(|c| c.predicted_ttft_ms.is_none_or(|t| t <= bound))
    });
    if within.is_empty() {
        open
    } else {
        within
    }
}

/// The learning policy, when its predictions can be trusted with full queues: some usable
/// pod's model has learned from its own answers. Until then (a cold start, a burst before any
/// answer) full queues are handled as without learning: dropped while another pod has room,
/// load alone deciding when every queue is full.
fn trusted_learning<'p>(candidates: &[Candidate<'_>], policy: &'p Policy) -> Option<&'p LearningPolicy> {
    policy.learning.as_ref().filter(|_| candidates.iter().any(|c| c.usable && c.ttft_fitted))
}

/// Learning on: the sticky pods' best predicted TTFT exceeds the best other pod's by more
/// than the penalty plus the prefill work the move adds, so staying costs more time than the
/// cache saves. The added work (the prompt's cached part, computed again on the other pod) is
/// waited for by every request that queues behind it there: at a saturated top stage of
/// workload g, each move of a 7,200-token prompt off its home put ~600 ms more prefill on a
/// loaded pod, and runs with 23–49 such moves had 201–286 answers over 470 ms (of 497), runs
/// with 7–16 had 90–168.
fn release_affinity(candidates: &[Candidate<'_>], sticky: &[usize], open: &[usize], policy: &Policy) -> bool {
    let Some(learning) = &policy.learning else { return false };
    let best = |indices: &mut dyn Iterator<Item = &usize>| {
        indices
            .filter_map(|&i| {
                let c = candidates.get(i)?;
                Some((c.predicted_ttft_ms?, c.predicted_prefill_ms.unwrap_or(0.0)))
            })
            .fold((f64::INFINITY, 0.0), |best, next| if next.0 < best.0 { next } else { best })
    };
    let (stay, stay_work) = best(&mut sticky.iter());
    let (moved, moved_work) = best(&mut open.iter().filter(|i| !sticky.contains(i)));
    let added_work = (moved_work - stay_work).max(0.0);
    stay.is_finite() && moved.is_finite() && stay > moved + learning.release_penalty_ms + added_work
}

/// Each candidate's score: every scorer's, weighted (the TTFT scorer by `ttft_weight`) and
/// divided by the weights' sum, so 0..1. What the pick ranks by, and what the decision header
/// explains.
pub fn weighted_scores(candidates: &[&Candidate<'_>], weights: &ScorerWeights, ttft_weight: f64) -> Vec<f64> {
    let scorers: [(&dyn Scorer, f64); 5] = [
        (&QueueScorer, weights.queue),
        (&KvCacheScorer, weights.kv_cache),
        (&InflightScorer, weights.inflight),
        (&PrefixScorer, weights.prefix),
        (&TtftScorer, ttft_weight),
    ];
    let total_weight: f64 = scorers.iter().map(|(_, w)| w.max(0.0)).sum();
    let mut totals = vec![0.0; candidates.len()];
    for (scorer, weight) in scorers {
        if weight <= 0.0 {
            continue;
        }
        scorer.add_scores(candidates, weight, &mut totals);
    }
    if total_weight > 0.0 {
        totals.iter_mut().for_each(|t| *t /= total_weight);
    }
    totals
}

/// Up to `k` best of `totals` but `chosen`, best first, equals in their order (a NaN last).
/// By selection for a few, O(n·k) with no allocation per pod (the destination's two
/// runners-up); past [`SELECTION_MAX`] by a stable sort, O(n log n): P/D's prefill pick ranks
/// every prefill pod, where selection is O(n²).
fn top_k(totals: &[f64], chosen: usize, k: usize) -> Vec<(f64, usize)> {
    let others = totals.iter().copied().enumerate().filter(|&(i, _)| i != chosen);
    if k > SELECTION_MAX {
        let last_if_nan = |t: f64| if t.is_nan() { f64::NEG_INFINITY } else { t };
        let mut all: Vec<(f64, usize)> = others.map(|(i, t)| (last_if_nan(t), i)).collect();
        all.sort_by(|a, b| b.0.total_cmp(&a.0));
        all.truncate(k);
        return all;
    }
    let mut best: Vec<(f64, usize)> = Vec::with_capacity(k + 1);
    for (i, t) in others {
        let at = best.iter().position(|&(b, _)| t > b).unwrap_or(best.len());
        if at < k {
            best.insert(at, (t, i));
            best.truncate(k);
        }
    }
    best
}

/// Most runners-up found by selection (see [`top_k`]).
const SELECTION_MAX: usize = 16;

/// Picks one candidate and up to `policy.fallbacks` runners-up; `None` when there is none.
pub fn pick(candidates: &[Candidate<'_>], policy: &Policy, random: &mut TieBreaker) -> Option<Decision> {
    pick_placed(candidates, policy, random, None)
}

/// Rendezvous weight of `pod` for `key`: stable across processes, so every replica ranks
/// the pods alike for one prompt.
fn rendezvous_weight(key: u64, pod: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64_with_seed(pod.as_bytes(), key)
}

/// The pod a cold prompt with `key` goes to: the highest rendezvous weight among the pods
/// whose load (queue and running) is within `placement_load_factor` of the mean, or the
/// least loaded if none is (consistent hashing with bounded loads). With `home_slack`, only
/// the pods among those whose indexed blocks are within it of the fewest take part.
fn rendezvous(eligible: &[&Candidate<'_>], key: u64, load_factor: f64, home_slack: Option<usize>) -> Option<usize> {
    let load = |c: &Candidate<'_>| c.waiting.max(0.0) + c.running.max(0.0);
    let mean = mean_load_past_one_outlier(eligible.iter().map(|c| load(c)));
    let bound = load_factor * mean + 1.0;
    let within =
        indices_where(0..eligible.len(), eligible.len(), |i| eligible.get(i).is_some_and(|c| load(c) <= bound));
    let homes = |i: &usize| eligible.get(*i).map_or(usize::MAX, |c| c.indexed_blocks);
    let fewest = within.iter().map(homes).min().unwrap_or(0);
    let light = |i: &usize| home_slack.is_none_or(|slack| homes(i) <= fewest.saturating_add(slack));
    within
        .iter()
        .copied()
        .filter(light)
        .max_by_key(|&i| eligible.get(i).map_or(0, |c| rendezvous_weight(key, c.address)))
}

/// The mean of `loads`, each counted at most [`scorers::outlier_cap`]: a page saying a billion
/// running made the mean so large that every other pod passed the bound, however loaded, and
/// new prefixes went by hash alone. An honest pool's mean is the plain one.
fn mean_load_past_one_outlier(loads: impl Iterator<Item = f64> + Clone) -> f64 {
    let cap = scorers::outlier_cap(loads.clone());
    let (count, sum) = loads.fold((0usize, 0.0), |(n, sum), v| (n + 1, sum + v.min(cap)));
    sum / count.max(1) as f64
}

/// How a cold prompt is placed by rendezvous: its key, and how often prompts come back.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Placement {
    /// The prompt's first block hash.
    pub key: u64,
    /// Share of this worker's recent prompts that matched a known prefix (0..1). Placing a
    /// new prefix by hash rather than by load pays only when prefixes come back (so that
    /// replicas agreeing on its pod saves prefills later): the slack the hash may overrule
    /// load by is `placement_slack` × this. Unrelated prompts (share near 0) go by load.
    pub reuse: f64,
    /// The prompt's hashed blocks: with learning's home balance, a pod may hold half this many
    /// more indexed blocks than the emptiest and still be chosen.
    pub blocks: usize,
}

impl Placement {
    /// A key for a pool whose prompts always come back (full slack).
    pub fn reused(key: u64) -> Self {
        Self { key, reuse: 1.0, blocks: 0 }
    }
}

/// [`pick`], with the prompt's placement (its first block hash) for cold prompts.
pub fn pick_placed(
    candidates: &[Candidate<'_>],
    policy: &Policy,
    random: &mut TieBreaker,
    placement: Option<Placement>,
) -> Option<Decision> {
    let Filtered { indices: eligible_indices, fail_open, load_only, affinity } = filtered(candidates, policy);
    let mut eligible: Vec<&Candidate<'_>> = Vec::with_capacity(eligible_indices.len());
    eligible.extend(eligible_indices.iter().filter_map(|&i| candidates.get(i)));
    if eligible.is_empty() {
        return None;
    }
    let fail_open_weights = ScorerWeights { queue: 0.0, kv_cache: 0.0, inflight: 1.0, prefix: 0.0 };
    // When every queue is full, a cached prefix saves less than a queue costs: balance load.
    let busy_weights = ScorerWeights { prefix: 0.0, ..policy.weights.clone() };
    // Learning on, the TTFT prediction weighs what a full queue costs against what the
    // cache saves, so the prefix scorer stays.
    let weights = if fail_open {
        &fail_open_weights
    } else if load_only {
        &busy_weights
    } else {
        &policy.weights
    };
    // Weighed only when some pod has a prediction: otherwise it would be a constant.
    let predicted = !fail_open && eligible.iter().any(|c| c.predicted_ttft_ms.is_some());
    let ttft_weight = policy.learning.filter(|_| predicted).map_or(0.0, |l| l.ttft_weight);
    let totals = weighted_scores(&eligible, weights, ttft_weight);
    let best = totals.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let tied =
        indices_where(0..totals.len(), totals.len(), |i| totals.get(i).is_some_and(|&t| best - t <= TIE_TOLERANCE));
    let cold = candidates.iter().all(|c| c.prefix_match <= 0.0 && !c.session_match);
    // Rendezvous only breaks ties among the best-scored pods: load decides first (an
    // unrelated prompt must go to the least loaded pod), then every replica agrees.
    let placed = match (cold && !fail_open, placement, policy.cold_placement) {
        (true, Some(Placement { key, reuse, blocks }), ColdPlacement::Rendezvous) => {
            let slack = policy.placement_slack * reuse.clamp(0.0, 1.0);
            let near = indices_where(0..totals.len(), totals.len(), |i| {
                totals.get(i).is_some_and(|&t| best - t <= slack + TIE_TOLERANCE)
            });
            let mut best: Vec<&Candidate<'_>> = Vec::with_capacity(near.len());
            best.extend(near.iter().filter_map(|&i| eligible.get(i)).copied());
            // Half a prompt: pods home to as many prefixes as the fewest tie (rendezvous picks
            // among them); one more prefix is too many (a full prompt's slack let 13 / 13 / 11
            // / 11 homes through on workload g, 48 prompts over 4 pods).
            let home_slack = policy.learning.filter(|l| l.balance_homes).map(|_| blocks / 2);
            rendezvous(&best, key, policy.placement_load_factor, home_slack).and_then(|i| near.get(i).copied())
        }
        _ => None,
    };
    let chosen = if let Some(placed) = placed {
        placed
    } else if cold && !fail_open {
        // Least recently picked among the tied; random among those equally old.
        let oldest = tied.iter().filter_map(|&i| eligible.get(i)).map(|c| c.last_picked).min().unwrap_or(0);
        let old = indices_where(tied.iter().copied(), tied.len(), |i| {
            eligible.get(i).is_some_and(|c| c.last_picked == oldest)
        });
        *old.get(random.below(old.len()))?
    } else {
        *tied.get(random.below(tied.len()))?
    };
    let index = *eligible_indices.get(chosen)?;
    // Top-k runners-up ([`top_k`]) and eligibility by mask. No more than the other
    // candidates: a policy asking for every pod's runners-up (P/D's prefill pick) allocates
    // for the pool it has, not the table's bound.
    let k = policy.fallbacks.min(candidates.len().saturating_sub(1));
    let mut fallbacks: Vec<usize> = Vec::with_capacity(k);
    let mut fallbacks_in_field = 0;
    if k > 0 {
        let best = top_k(&totals, chosen, k);
        fallbacks.extend(best.iter().filter_map(|&(_, i)| eligible_indices.get(i).copied()));
        fallbacks_in_field = fallbacks.len();
        // A stored response's pod has no stand-in: another pod would answer 404, hiding the
        // pod's own failure from the client. (A pinned pod, when there is one, is all that
        // `filtered` leaves.)
        let pinned = || eligible_indices.first().is_some_and(|&i| candidates.get(i).is_some_and(|c| c.session_pinned));
        if fallbacks.len() < k && !pinned() {
            let mut is_eligible = vec![false; candidates.len()];
            for &i in &eligible_indices {
                if let Some(slot) = is_eligible.get_mut(i) {
                    *slot = true;
                }
            }
            let others = (0..candidates.len()).filter(|&i| {
                !is_eligible.get(i).copied().unwrap_or(true) && candidates.get(i).is_some_and(|c| c.usable)
            });
            fallbacks.extend(others.take(k - fallbacks.len()));
        }
    }
    Some(Decision { index, score: best, fail_open, affinity, tied: tied.len(), fallbacks, fallbacks_in_field })
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod learning_tests;
