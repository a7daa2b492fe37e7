//! Filter → Score → Pick, as in llm-d's scheduler.
//!
//! Filter keeps the pods whose data is trustworthy (healthy and fresh). Each scorer gives
//! every remaining pod a score in 0..1; the weighted mean decides and ties break at random,
//! so equal pods share traffic instead of the first one taking it all. If no pod passes the
//! filter, the picker fails open: every pool member stays a candidate, scored only by what
//! this proxy knows exactly (its own requests in flight), and the decision says so.

mod scorers;

pub use scorers::{InflightScorer, KvCacheScorer, QueueScorer, Scorer};

use crate::config::ScorerWeights;
use crate::random::TieBreaker;

/// Scores within this distance of the best count as a tie.
const TIE_EPSILON: f64 = 1e-9;

/// One pod as the scheduler sees it for one request.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate<'a> {
    pub address: &'a str,
    /// Polled data is recent and the pod answered its last scrapes.
    pub usable: bool,
    pub waiting: f64,
    pub running: f64,
    pub kv_usage: Option<f64>,
    /// Requests this proxy (all workers) has in flight to the pod now.
    pub inflight: u32,
}

/// The outcome of one pick.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// Index into the candidate list.
    pub index: usize,
    pub score: f64,
    /// No pod had usable data; the pick used in-flight counts only.
    pub fail_open: bool,
    /// How many candidates were tied at the best score.
    pub tied: usize,
    /// Next-best candidates, best first, for Envoy to retry on when the first choice
    /// cannot be reached (override_host follows a comma-separated list in order).
    pub fallbacks: Vec<usize>,
}

/// Picks one candidate and up to `fallbacks` runners-up, or `None` when there is none at all.
pub fn pick(
    candidates: &[Candidate<'_>],
    weights: &ScorerWeights,
    random: &mut TieBreaker,
    fallbacks: usize,
) -> Option<Decision> {
    let usable: Vec<usize> = (0..candidates.len()).filter(|&i| candidates.get(i).is_some_and(|c| c.usable)).collect();
    let fail_open = usable.is_empty();
    let eligible: Vec<&Candidate<'_>> = if fail_open {
        candidates.iter().collect()
    } else {
        usable.iter().filter_map(|&i| candidates.get(i)).collect()
    };
    if eligible.is_empty() {
        return None;
    }
    let fail_open_weights = ScorerWeights { queue: 0.0, kv_cache: 0.0, inflight: 1.0 };
    let weights = if fail_open { &fail_open_weights } else { weights };
    let scorers: [(&dyn Scorer, f64); 3] =
        [(&QueueScorer, weights.queue), (&KvCacheScorer, weights.kv_cache), (&InflightScorer, weights.inflight)];
    let total_weight: f64 = scorers.iter().map(|(_, w)| w).sum();

    let mut totals = vec![0.0; eligible.len()];
    for (scorer, weight) in scorers {
        if weight <= 0.0 {
            continue;
        }
        for (total, score) in totals.iter_mut().zip(scorer.score(&eligible)) {
            *total += weight * score;
        }
    }
    if total_weight > 0.0 {
        totals.iter_mut().for_each(|t| *t /= total_weight);
    }
    let best = totals.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let tied: Vec<usize> =
        (0..totals.len()).filter(|&i| totals.get(i).is_some_and(|&t| best - t <= TIE_EPSILON)).collect();
    let chosen = *tied.get(random.below(tied.len()))?;
    let to_candidate =
        |eligible_index: usize| if fail_open { Some(eligible_index) } else { usable.get(eligible_index).copied() };
    let index = to_candidate(chosen)?;
    let mut runners_up: Vec<usize> = (0..totals.len()).filter(|&i| i != chosen).collect();
    runners_up.sort_by(|&a, &b| {
        let (a, b) = (totals.get(a).copied().unwrap_or(0.0), totals.get(b).copied().unwrap_or(0.0));
        b.total_cmp(&a)
    });
    let fallbacks = runners_up.into_iter().take(fallbacks).filter_map(to_candidate).collect();
    Some(Decision { index, score: best, fail_open, tied: tied.len(), fallbacks })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(address: &str, waiting: f64, kv: f64, inflight: u32) -> Candidate<'_> {
        Candidate { address, usable: true, waiting, running: 0.0, kv_usage: Some(kv), inflight }
    }

    fn pick_address<'a>(pods: &[Candidate<'a>], seed: u64) -> (&'a str, bool) {
        let decision = pick(pods, &ScorerWeights::default(), &mut TieBreaker::new(seed), 0).unwrap();
        (pods[decision.index].address, decision.fail_open)
    }

    #[test]
    fn avoids_the_pod_with_a_long_queue() {
        let pods = [pod("a", 30.0, 0.2, 0), pod("b", 0.0, 0.2, 0), pod("c", 0.0, 0.2, 0)];
        for seed in 0..50 {
            assert_ne!(pick_address(&pods, seed).0, "a");
        }
    }

    #[test]
    fn in_flight_requests_spread_a_burst() {
        let mut pods = vec![pod("a", 0.0, 0.1, 0), pod("b", 0.0, 0.1, 0), pod("c", 0.0, 0.1, 0), pod("d", 0.0, 0.1, 0)];
        for seed in 0..8 {
            let decision = pick(&pods, &ScorerWeights::default(), &mut TieBreaker::new(seed), 0).unwrap();
            pods[decision.index].inflight += 1;
        }
        assert!(pods.iter().all(|p| p.inflight == 2), "{pods:?}");
    }

    #[test]
    fn ties_break_at_random_not_by_order() {
        let pods = [pod("a", 1.0, 0.5, 0), pod("b", 1.0, 0.5, 0)];
        let firsts = (0..200).filter(|&seed| pick_address(&pods, seed).0 == "a").count();
        assert!((60..140).contains(&firsts), "a chosen {firsts}/200");
    }

    #[test]
    fn unusable_pods_are_filtered_and_all_unusable_fails_open() {
        let mut pods = [pod("a", 0.0, 0.0, 0), pod("b", 50.0, 0.9, 9)];
        pods[0].usable = false;
        assert_eq!(pick_address(&pods, 1), ("b", false));
        pods[1].usable = false;
        assert_eq!(pick_address(&pods, 1), ("a", true), "fail open by in-flight only");
        assert!(pick(&[], &ScorerWeights::default(), &mut TieBreaker::new(0), 2).is_none());
    }

    #[test]
    fn fallbacks_are_the_next_best_usable_pods_in_order() {
        let mut pods = [pod("a", 0.0, 0.1, 0), pod("b", 10.0, 0.1, 0), pod("c", 5.0, 0.1, 0), pod("d", 0.0, 0.1, 0)];
        pods[3].usable = false;
        let decision = pick(&pods, &ScorerWeights::default(), &mut TieBreaker::new(1), 3).unwrap();
        assert_eq!(decision.index, 0);
        assert_eq!(decision.fallbacks, vec![2, 1], "c before b; d is not usable");
    }
}
