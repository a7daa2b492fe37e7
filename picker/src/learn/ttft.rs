//! A time-to-first-token model per pod, learned online from the responses this worker sees.
//!
//! TTFT ≈ overhead + tokens ahead ÷ prefill rate, where "tokens ahead" is the uncached prompt
//! tokens in flight to the pod when the request was sent (every worker's, whose prompts the
//! pod has not answered yet) plus the request's own uncached tokens: the pod must prefill all
//! of them before this request's first token, so waiting behind them is the queueing term.
//! Each pod's line is a least-squares fit of `(tokens ahead, observed time to first byte)`
//! with exponential forgetting ([`FORGET`]): five sums per pod, O(1) per observation, and
//! recent behaviour (a pod that degraded) outweighs old.
//!
//! A pod with few observations, or all at similar load, cannot pin its own slope; so its
//! slope is pulled (ridge) towards the pool's slope scaled by the pod's speed ratio, the pod's
//! mean observed TTFT over what the pool's line predicts at the pod's loads. Two or three
//! answers are enough to see that a pod is 2–3 × slower than the rest; a pod never seen is
//! predicted by the pool's line; a pool never seen by the configured prior.
//!
//! Observations are per worker: each Envoy worker learns from the answers it proxies (about
//! 1/N of the traffic with N workers, plenty at any rate where routing matters) and needs no
//! shared data per response. The token load the model is applied to is shared across
//! workers ([`crate::inflight`]).

use hashbrown::HashMap;

use crate::pod_table::MAX_PODS;

/// Weight kept by older observations at each new one: a memory of ~50 answers per pod, a few
/// seconds of traffic at the rates where the model matters, long enough to average jitter.
pub const FORGET: f64 = 0.98;

/// Ridge strength, in observations at [`X_SCALE`] tokens: how strongly a pod's slope is held
/// to its prior until its own observations spread over enough load to pin it.
const RIDGE_OBSERVATIONS: f64 = 2.0;

/// A typical prompt's uncached tokens, the scale at which the ridge is expressed.
const X_SCALE: f64 = 2048.0;

/// Observed TTFTs above this are not fed in (a stalled stream, a client that paused reading):
/// ten minutes is past any sane time to first byte.
const MAX_OBSERVED_MS: f64 = 600_000.0;

/// Slopes below this are not believed (a rate over 100M tokens/s); keeps predictions ordered.
const MIN_SLOPE_MS_PER_TOKEN: f64 = 1e-5;

/// What the model assumes before any answer: the configured overhead and prefill cost.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Prior {
    pub overhead_ms: f64,
    pub ms_per_token: f64,
}

/// Exponentially weighted sums of one line's observations.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Sums {
    weight: f64,
    x: f64,
    y: f64,
    xx: f64,
    xy: f64,
}

impl Sums {
    fn add(&mut self, x: f64, y: f64) {
        for sum in [&mut self.weight, &mut self.x, &mut self.y, &mut self.xx, &mut self.xy] {
            *sum *= FORGET;
        }
        self.weight += 1.0;
        self.x += x;
        self.y += y;
        self.xx += x * x;
        self.xy += x * y;
    }

    /// The ridge fit of `y = a + b x`, with `b` pulled towards `slope_prior`.
    fn line(&self, slope_prior: f64) -> Line {
        if self.weight <= 0.0 {
            return Line { overhead_ms: 0.0, ms_per_token: slope_prior };
        }
        let (mean_x, mean_y) = (self.x / self.weight, self.y / self.weight);
        let cxx = (self.xx - self.weight * mean_x * mean_x).max(0.0);
        let cxy = self.xy - self.weight * mean_x * mean_y;
        let ridge = RIDGE_OBSERVATIONS * X_SCALE * X_SCALE;
        let slope = ((cxy + ridge * slope_prior) / (cxx + ridge)).max(MIN_SLOPE_MS_PER_TOKEN);
        Line { overhead_ms: (mean_y - slope * mean_x).max(0.0), ms_per_token: slope }
    }
}

/// A fitted line: predicted TTFT for `tokens` ahead.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Line {
    pub overhead_ms: f64,
    pub ms_per_token: f64,
}

impl Line {
    pub fn predict(&self, tokens_ahead: f64) -> f64 {
        self.overhead_ms + self.ms_per_token * tokens_ahead.max(0.0)
    }
}

/// Every pod's model, plus the pool's (all pods' observations together).
#[derive(Debug, Clone)]
pub struct TtftModels {
    prior: Prior,
    pool: Sums,
    pods: HashMap<String, Sums>,
}

impl TtftModels {
    pub fn new(prior: Prior) -> Self {
        Self { prior, pool: Sums::default(), pods: HashMap::new() }
    }

    /// The pod answered its first byte `ttft_ms` after being sent a request with
    /// `tokens_ahead` uncached prompt tokens ahead of (and including) its own.
    pub fn observe(&mut self, pod: &str, tokens_ahead: f64, ttft_ms: f64) {
        if !(tokens_ahead.is_finite() && (0.0..=MAX_OBSERVED_MS).contains(&ttft_ms)) {
            return;
        }
        let x = tokens_ahead.max(0.0);
        self.pool.add(x, ttft_ms);
        if let Some(sums) = self.pods.get_mut(pod) {
            sums.add(x, ttft_ms);
        } else if self.pods.len() < MAX_PODS {
            let mut sums = Sums::default();
            sums.add(x, ttft_ms);
            self.pods.insert(pod.to_string(), sums);
        }
    }

    /// The pool's line: every pod's answers, the slope held to the prior until they pin it.
    pub fn pool_line(&self) -> Line {
        if self.pool.weight <= 0.0 {
            return Line { overhead_ms: self.prior.overhead_ms, ms_per_token: self.prior.ms_per_token };
        }
        self.pool.line(self.prior.ms_per_token)
    }

    /// The pod's line (the pool's for a pod never observed).
    pub fn line(&self, pod: &str) -> Line {
        let pool = self.pool_line();
        let Some(sums) = self.pods.get(pod) else { return pool };
        // How much slower than the pool line this pod was at the loads it was seen at.
        let expected = pool.overhead_ms * sums.weight + pool.ms_per_token * sums.x;
        let speed_ratio = if expected > 0.0 { (sums.y / expected).clamp(0.05, 20.0) } else { 1.0 };
        sums.line(pool.ms_per_token * speed_ratio)
    }

    /// Predicted TTFT on `pod` with `tokens_ahead` uncached tokens before the first token.
    pub fn predict(&self, pod: &str, tokens_ahead: f64) -> f64 {
        self.line(pod).predict(tokens_ahead)
    }

    /// Answers observed for `pod`, discounted by age (0 for a pod never observed).
    pub fn weight(&self, pod: &str) -> f64 {
        self.pods.get(pod).map_or(0.0, |s| s.weight)
    }

    /// Forgets pods that left the pool.
    pub fn retain_pods(&mut self, keep: impl Fn(&str) -> bool) {
        self.pods.retain(|pod, _| keep(pod));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PRIOR: Prior = Prior { overhead_ms: 30.0, ms_per_token: 0.02 };

    /// A pod whose true TTFT is `overhead + slope × x`.
    fn feed(models: &mut TtftModels, pod: &str, overhead: f64, slope: f64, loads: &[f64]) {
        for &x in loads {
            models.observe(pod, x, overhead + slope * x);
        }
    }

    #[test]
    fn learns_a_pods_line_from_spread_observations() {
        let mut models = TtftModels::new(PRIOR);
        let loads: Vec<f64> = (0..60).map(|i| f64::from(i % 10) * 2_000.0).collect();
        feed(&mut models, "a", 50.0, 0.1, &loads);
        let line = models.line("a");
        assert!((line.ms_per_token - 0.1).abs() < 0.005, "{line:?}");
        assert!((line.overhead_ms - 50.0).abs() < 10.0, "{line:?}");
        assert!((models.predict("a", 10_000.0) - 1_050.0).abs() < 60.0);
    }

    #[test]
    fn a_slow_pod_is_told_apart_after_a_few_answers() {
        let mut models = TtftModels::new(PRIOR);
        let loads = [1_000.0, 3_000.0, 2_000.0, 4_000.0, 1_500.0, 2_500.0];
        for pod in ["fast-1", "fast-2", "fast-3"] {
            feed(&mut models, pod, 30.0, 0.02, &loads);
        }
        feed(&mut models, "slow", 30.0, 0.06, &loads[..3]);
        let (fast, slow) = (models.predict("fast-1", 4_000.0), models.predict("slow", 4_000.0));
        assert!(slow > 2.0 * fast, "slow {slow} vs fast {fast}");
        let unseen = models.predict("new", 4_000.0);
        assert!((unseen - fast).abs() < 0.5 * fast, "a pod never seen is predicted like the pool: {unseen}");
    }

    #[test]
    fn recent_answers_outweigh_old_ones_and_nonsense_is_ignored() {
        let mut models = TtftModels::new(PRIOR);
        let loads: Vec<f64> = (0..100).map(|i| f64::from(i % 5) * 1_000.0).collect();
        feed(&mut models, "a", 30.0, 0.02, &loads);
        feed(&mut models, "a", 30.0, 0.08, &loads); // the pod degraded
        assert!(models.line("a").ms_per_token > 0.06, "{:?}", models.line("a"));
        let before = models.line("a");
        models.observe("a", f64::NAN, 5.0);
        models.observe("a", 10.0, -1.0);
        models.observe("a", 10.0, 1e12);
        assert_eq!(models.line("a"), before);
    }

    #[test]
    fn without_answers_the_prior_decides_and_pods_are_bounded() {
        let mut models = TtftModels::new(PRIOR);
        assert_eq!(models.predict("x", 1_000.0), 50.0);
        for i in 0..(MAX_PODS + 10) {
            models.observe(&format!("pod-{i}"), 100.0, 40.0);
        }
        assert_eq!(models.pods.len(), MAX_PODS);
        models.retain_pods(|pod| pod == "pod-1");
        assert_eq!(models.pods.len(), 1);
    }
}
