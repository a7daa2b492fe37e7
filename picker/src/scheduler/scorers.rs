//! Scorers: each maps every candidate to 0..1, higher is better.

use super::Candidate;

/// Score used when a scorer has no data for a pod: neither favoured nor avoided.
const NEUTRAL: f64 = 0.5;

/// Predictions below a millisecond are taken as one, so the proportion stays finite.
const MIN_PREDICTED_TTFT_MS: f64 = 1.0;

pub trait Scorer {
    /// Adds `weight` × each candidate's score to its total: no list per scorer, since the
    /// decision sums every scorer's on each request.
    fn add_scores(&self, candidates: &[&Candidate<'_>], weight: f64, totals: &mut [f64]);

    /// Each candidate's score, as a list, to read one scorer on its own (the tests do); the
    /// decision uses [`Scorer::add_scores`].
    fn score(&self, candidates: &[&Candidate<'_>]) -> Vec<f64> {
        let mut scores = vec![0.0; candidates.len()];
        self.add_scores(candidates, 1.0, &mut scores);
        scores
    }
}

/// Adds `weight` × `scores` to `totals`, pairwise.
fn add_each(scores: impl Iterator<Item = f64>, weight: f64, totals: &mut [f64]) {
    for (total, score) in totals.iter_mut().zip(scores) {
        *total += weight * score;
    }
}

/// Fewer waiting requests is better, min-max normalised over the candidates (as llm-d's
/// queue scorer does): the emptiest queue scores 1, the longest 0. The longest queue is read
/// at most at [`OUTLIER_FACTOR`] × the next longest, plus one, so that one pod cannot set the
/// scale for all the others ([`capped_longest`]).
pub struct QueueScorer;

/// How far past the next longest queue the longest one counts when normalising. A pod's queue
/// is what its page says: one page saying a billion (a lying or broken exporter, read at
/// `metrics_text`'s bound) made the range a billion, so every other pod's queue scored within
/// 1e-8 of 1, under the pick's tie tolerance, and the honest pods' queues stopped counting
/// (learning on, such a pod stays a candidate; learning off, when every queue is full). Read
/// at twice the next longest, the longest still scores 0 and the others keep at least half
/// their spread. Only the one largest value is bounded so: a pool where most pods lie is
/// beyond repair by scoring.
const OUTLIER_FACTOR: f64 = 2.0;

/// More free KV cache is better: `1 - usage`.
pub struct KvCacheScorer;

/// Fewer requests in flight from this proxy is better, min-max normalised.
pub struct InflightScorer;

/// More of the prompt's prefix probably cached on the pod is better: matched share, 0..1.
pub struct PrefixScorer;

/// Lower predicted time to first token is better, in proportion (best ÷ own), or with the
/// candidates' `ttft_scale_ms` by the time lost against the best beyond `ttft_margin_ms`, on
/// that scale (`learning.ttft_score: lead`); neutral without a prediction.
pub struct TtftScorer;

fn add_min_max_lower_is_better(values: impl Iterator<Item = f64> + Clone, weight: f64, totals: &mut [f64]) {
    let min = values.clone().fold(f64::INFINITY, f64::min);
    let max = values.clone().fold(f64::NEG_INFINITY, f64::max);
    let range = max - min;
    add_each(values.map(|v| if range > 0.0 { (max - v) / range } else { 1.0 }), weight, totals);
}

/// The largest of `values` may count at most this much (infinite with fewer than two values):
/// [`OUTLIER_FACTOR`] × the second largest, plus one (a pod with queued requests against a pool
/// of empty queues still scores 0, and the empty ones 1). Below the second largest it never
/// is, so the order of the values is kept.
fn capped_longest(values: impl Iterator<Item = f64>) -> f64 {
    let (_, second) = values.fold((f64::NEG_INFINITY, f64::NEG_INFINITY), |(first, second), v| {
        if v > first {
            (v, first)
        } else {
            (first, second.max(v))
        }
    });
    if second.is_finite() {
        OUTLIER_FACTOR * second.max(0.0) + 1.0
    } else {
        f64::INFINITY
    }
}

impl Scorer for QueueScorer {
    fn add_scores(&self, candidates: &[&Candidate<'_>], weight: f64, totals: &mut [f64]) {
        let cap = capped_longest(candidates.iter().map(|c| c.waiting));
        add_min_max_lower_is_better(candidates.iter().map(|c| c.waiting.min(cap)), weight, totals);
    }
}

impl Scorer for KvCacheScorer {
    fn add_scores(&self, candidates: &[&Candidate<'_>], weight: f64, totals: &mut [f64]) {
        add_each(candidates.iter().map(|c| c.kv_usage.map_or(NEUTRAL, |u| 1.0 - u.clamp(0.0, 1.0))), weight, totals);
    }
}

impl Scorer for InflightScorer {
    fn add_scores(&self, candidates: &[&Candidate<'_>], weight: f64, totals: &mut [f64]) {
        add_min_max_lower_is_better(candidates.iter().map(|c| f64::from(c.inflight)), weight, totals);
    }
}

impl Scorer for TtftScorer {
    /// Proportional, not min-max: the best predicted TTFT over each pod's. Min-max would give
    /// a 62 ms vs 77 ms difference (one prefill chunk) the scorer's whole weight, outvoting the
    /// request counts that show a pod's running batch is full; the model is linear in requests
    /// and cannot see that cliff (workload c: a pod with every slot decoding looked fastest,
    /// and the next request waited seconds for a slot). A pod predicted 3 × slower still loses
    /// two thirds of the weight.
    fn add_scores(&self, candidates: &[&Candidate<'_>], weight: f64, totals: &mut [f64]) {
        let floor = |t: f64| t.max(MIN_PREDICTED_TTFT_MS);
        let best = candidates.iter().filter_map(|c| c.predicted_ttft_ms).map(floor).fold(f64::INFINITY, f64::min);
        let scores = candidates.iter().map(|c| match c.predicted_ttft_ms {
            Some(t) if best.is_finite() && c.ttft_scale_ms > 0.0 => {
                let lead = (floor(t) - best - c.ttft_margin_ms.max(0.0)).max(0.0);
                (1.0 - lead / c.ttft_scale_ms).max(0.0)
            }
            Some(t) if best.is_finite() => best / floor(t),
            _ => NEUTRAL,
        });
        add_each(scores, weight, totals);
    }
}

impl Scorer for PrefixScorer {
    fn add_scores(&self, candidates: &[&Candidate<'_>], weight: f64, totals: &mut [f64]) {
        add_each(candidates.iter().map(|c| c.prefix_match.clamp(0.0, 1.0)), weight, totals);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(waiting: f64, kv: Option<f64>, inflight: u32) -> Candidate<'static> {
        Candidate::with_load("x", true, waiting, kv, inflight)
    }

    #[test]
    fn the_ttft_lead_is_scored_on_the_pools_scale_or_in_proportion() {
        let predicted = |ttft: f64, scale: f64| Candidate {
            predicted_ttft_ms: Some(ttft),
            ttft_scale_ms: scale,
            ..Candidate::with_load("x", true, 0.0, None, 0)
        };
        // A short prompt: 200 ms against 300 on a pool whose answers take 400 ms.
        let short = [predicted(200.0, 400.0), predicted(300.0, 400.0)];
        // A long one: 600 against 1,000.
        let long = [predicted(600.0, 400.0), predicted(1_000.0, 400.0)];
        let score = |pods: &[Candidate<'static>]| TtftScorer.score(&pods.iter().collect::<Vec<_>>());
        assert_eq!(score(&short), vec![1.0, 0.75]);
        assert_eq!(score(&long), vec![1.0, 0.0]);
        let proportional = [predicted(600.0, 0.0), predicted(1_000.0, 0.0)];
        assert_eq!(score(&proportional), vec![1.0, 0.6]);
        assert_eq!(score(&[predicted(600.0, 0.0), Candidate::with_load("y", true, 0.0, None, 0)]), vec![1.0, NEUTRAL]);
    }

    #[test]
    fn a_lead_within_the_margin_counts_for_nothing_and_beyond_it_from_the_margin_on() {
        let predicted = |ttft: f64| Candidate {
            predicted_ttft_ms: Some(ttft),
            ttft_scale_ms: 400.0,
            ttft_margin_ms: 40.0,
            ..Candidate::with_load("x", true, 0.0, None, 0)
        };
        let score = |pods: &[Candidate<'static>]| TtftScorer.score(&pods.iter().collect::<Vec<_>>());
        // 30 ms behind: within the models' noise, request counts decide.
        assert_eq!(score(&[predicted(200.0), predicted(230.0)]), vec![1.0, 1.0]);
        // 240 ms behind: 200 ms past the margin, half the pool's typical TTFT.
        assert_eq!(score(&[predicted(600.0), predicted(840.0)]), vec![1.0, 0.5]);
    }

    #[test]
    fn only_the_longest_queue_is_bounded_and_the_order_is_kept() {
        assert_eq!(capped_longest([].into_iter()), f64::INFINITY);
        assert_eq!(capped_longest([7.0].into_iter()), f64::INFINITY, "one pod: nothing to compare");
        assert_eq!(capped_longest([0.0, 1e9, 0.0].into_iter()), 1.0, "queued against empty queues");
        assert_eq!(capped_longest([3.0, 1e9, 1e9].into_iter()), 2e9 + 1.0, "two alike: not one outlier");
        let scores = |waiting: &[f64]| {
            let pods: Vec<_> = waiting.iter().map(|&w| candidate(w, None, 0)).collect();
            QueueScorer.score(&pods.iter().collect::<Vec<_>>())
        };
        assert_eq!(scores(&[0.0, 0.0, 3.0]), vec![1.0, 1.0, 0.0]);
        assert_eq!(scores(&[6.0, 40.0]), vec![1.0, 0.0], "two pods: as plain min-max");
        assert_eq!(scores(&[0.0, 5.0, 1e9]), vec![1.0, 6.0 / 11.0, 0.0]);
    }

    #[test]
    fn scores_are_normalised() {
        let pods = [candidate(0.0, Some(0.2), 4), candidate(10.0, None, 0), candidate(5.0, Some(1.5), 2)];
        let refs: Vec<_> = pods.iter().collect();
        assert_eq!(QueueScorer.score(&refs), vec![1.0, 0.0, 0.5]);
        assert_eq!(KvCacheScorer.score(&refs), vec![0.8, NEUTRAL, 0.0]);
        assert_eq!(InflightScorer.score(&refs), vec![0.0, 1.0, 0.5]);
        let equal = [candidate(3.0, None, 1), candidate(3.0, None, 1)];
        assert_eq!(QueueScorer.score(&equal.iter().collect::<Vec<_>>()), vec![1.0, 1.0]);
    }
}
