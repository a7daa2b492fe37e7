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
/// queue scorer does): the emptiest queue scores 1, the longest 0. A queue counts at most
/// [`outlier_cap`], so that one pod cannot set the scale for all the others.
pub struct QueueScorer;

/// How far past the others' mean one pod's load counts ([`outlier_cap`]). A pod's queue is
/// what its page says: one page saying a billion (a lying or broken exporter, read at
/// `metrics_text`'s bound) made the range a billion, so every other pod's queue scored within
/// 1e-8 of 1, under the pick's tie tolerance, and the honest pods' queues stopped counting
/// (learning on, such a pod stays a candidate; learning off, when every queue is full); and
/// the mean that rendezvous placement bounds loads by, so every pod passed it. Far past an
/// honest pool's spread (a busy pod beside idle ones: 16), so such a pool scores and places as
/// before; the honest pods then keep about an eighth of the scale at least.
const OUTLIER_FACTOR: f64 = 8.0;
const OUTLIER_SLACK: f64 = 16.0;

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

/// The most a value of `values` counts when the pods are compared: [`OUTLIER_FACTOR`] × the
/// mean of the others (all but the largest) plus [`OUTLIER_SLACK`]; infinite with fewer than
/// two values. Only one pod's value is so far from the rest: a pool where most pods lie is
/// beyond repair by scoring.
pub(super) fn outlier_cap(values: impl Iterator<Item = f64>) -> f64 {
    let (count, sum, top) =
        values.fold((0usize, 0.0, f64::NEG_INFINITY), |(n, sum, top), v| (n + 1, sum + v.max(0.0), top.max(v)));
    if count < 2 {
        return f64::INFINITY;
    }
    let others_mean = (sum - top.max(0.0)) / (count - 1) as f64;
    OUTLIER_FACTOR * others_mean + OUTLIER_SLACK
}

impl Scorer for QueueScorer {
    fn add_scores(&self, candidates: &[&Candidate<'_>], weight: f64, totals: &mut [f64]) {
        let cap = outlier_cap(candidates.iter().map(|c| c.waiting));
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
    fn only_a_queue_far_past_the_others_is_bounded_so_honest_pools_score_as_before() {
        assert_eq!(outlier_cap([].into_iter()), f64::INFINITY);
        assert_eq!(outlier_cap([7.0].into_iter()), f64::INFINITY, "one pod: nothing to compare");
        assert_eq!(outlier_cap([0.0, 1e9, 0.0].into_iter()), 16.0, "queued against empty queues");
        let scores = |waiting: &[f64]| {
            let pods: Vec<_> = waiting.iter().map(|&w| candidate(w, None, 0)).collect();
            QueueScorer.score(&pods.iter().collect::<Vec<_>>())
        };
        for honest in [&[0.0, 0.0, 3.0][..], &[6.0, 10.0, 40.0], &[6.0, 40.0], &[0.0, 0.0, 0.0, 16.0]] {
            let max = honest.iter().copied().fold(0.0, f64::max);
            let min = honest.iter().copied().fold(f64::INFINITY, f64::min);
            let plain: Vec<f64> = honest.iter().map(|w| (max - w) / (max - min)).collect();
            assert_eq!(scores(honest), plain, "{honest:?}");
        }
        // A page saying a billion beside 0 and 5: it counts as 8 × 2.5 + 16 = 36.
        assert_eq!(scores(&[0.0, 5.0, 1e9]), vec![1.0, 31.0 / 36.0, 0.0]);
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
