//! One decision explained, for the opt-in debug header (`debug_decision_header`): every
//! candidate's score as the scorers see it, next to what was chosen and why.
//!
//! Computed only when asked for (it scores the pool a second time). The scores here are each
//! pod's weighted score over every candidate in the pool; the pick itself scores only the
//! pods its filters left (session, prefix affinity, full queues, learning's tail guard), so a
//! pod kept by affinity can be chosen over a pod scored higher here, and so can a pod within
//! the guard's bound over one predicted far past it. Both views are what an operator needs.

use super::{table_candidates, RoutingView};
use crate::scheduler::{weighted_scores, Candidate, Policy};

/// Candidates listed at most, best first: keeps the header under ~1.5 KiB on a large pool
/// (~1 KiB without learning's predicted TTFTs).
pub const MAX_EXPLAINED_CANDIDATES: usize = 16;

/// One candidate as explained: its address, weighted score, predicted TTFT (learning on) and
/// the requests this Envoy had in flight to it when it decided (every worker's, as this
/// worker saw them; the TTFT model turns them into requests ahead of a slot).
#[derive(Debug, Clone, PartialEq)]
pub struct Explained {
    pub address: String,
    pub score: f64,
    pub predicted_ttft_ms: Option<f64>,
    pub inflight: u32,
}

/// The best-scored candidates, best first, at most [`MAX_EXPLAINED_CANDIDATES`].
pub fn candidate_scores(view: &RoutingView<'_>, policy: &Policy) -> Vec<Explained> {
    let candidates: Vec<Candidate<'_>> = match view.table {
        // The pods that serve the request's model (every pod, if none would).
        Some(table) if !table.pods.is_empty() => {
            let eligible = super::eligible_pods(&view.models, table)
                .unwrap_or_else(|_| (0..table.pods.len()).map(|i| (i, 0)).collect());
            let by_address = super::TableOrder { inflight_at: &|_, address| (view.inflight)(address), index_ids: None };
            table_candidates(view, table, &eligible, &by_address, view.ejected)
        }
        _ => view
            .fallback_pool
            .iter()
            .map(|address| Candidate::with_load(address.as_str(), false, 0.0, None, (view.inflight)(address.as_str())))
            .collect(),
    };
    let all: Vec<&Candidate<'_>> = candidates.iter().collect();
    // The TTFT scorer as the pick weighs it: only when some pod has a prediction.
    let predicted = all.iter().any(|c| c.predicted_ttft_ms.is_some());
    let learning = policy.learning.filter(|_| predicted);
    let totals = weighted_scores(&all, &policy.weights, learning.map_or(0.0, |l| l.ttft_weight));
    let mut scored: Vec<Explained> = all
        .iter()
        .zip(totals)
        .map(|(c, score)| Explained {
            address: c.address.to_string(),
            score,
            predicted_ttft_ms: c.predicted_ttft_ms,
            inflight: c.inflight,
        })
        .collect();
    scored.sort_by(|a, b| b.score.total_cmp(&a.score));
    scored.truncate(MAX_EXPLAINED_CANDIDATES);
    scored
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::address::PodAddress;
    use crate::pod_table::{PodState, PodTable};

    #[test]
    fn the_emptier_pod_scores_higher_and_the_list_is_bounded() {
        let pod = |i: usize, waiting: f64| PodState {
            healthy: true,
            waiting,
            running: 0.0,
            kv_usage: Some(0.1),
            last_success_ms: 1_000,
            ..PodState::unknown(&PodAddress::parse(&format!("10.0.0.{i}:8000")).unwrap())
        };
        let pods: Vec<PodState> = (0..40).map(|i| pod(i, i as f64)).collect();
        let table = PodTable { pods, ..PodTable::default() };
        let inflight = |_: &str| 0;
        let view = RoutingView {
            table: Some(&table),
            fallback_pool: &[],
            inflight: &inflight,
            prefix: None,
            now_ms: 1_000,
            stale_after_ms: 5_000,
            ejected: &[],
            models: crate::route::ModelQuery::default(),
            learning: None,
        };
        let scores = candidate_scores(&view, &crate::config::FilterConfig::default().policy());
        assert_eq!(scores.len(), MAX_EXPLAINED_CANDIDATES);
        assert_eq!(scores.first().map(|s| s.address.as_str()), Some("10.0.0.0:8000"), "{scores:?}");
        assert!(scores.windows(2).all(|w| w[0].score >= w[1].score), "best first: {scores:?}");
        assert!(scores.iter().all(|s| s.predicted_ttft_ms.is_none()), "learning is off: {scores:?}");
    }
}
