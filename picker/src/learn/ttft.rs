//! A time-to-first-token model per pod, learned online from the responses this worker sees.
//!
//! TTFT ≈ overhead + tokens ahead ÷ prefill rate + requests ahead × slot wait, where "tokens
//! ahead" is the uncached prompt tokens in flight to the pod when the request was sent (every
//! worker's, whose prompts the pod has not answered yet) plus the request's own: the pod must
//! prefill all of them before this request's first token. "Requests ahead" is every request in
//! flight to it (decoding ones too): a full running batch makes a new request wait for a slot.
//! Each pod's model is a least-squares fit of `(load, observed time to first byte)` with
//! exponential forgetting ([`FORGET`]): nine sums per pod, O(1) per observation, and recent
//! behaviour (a pod that degraded) outweighs old.
//!
//! A pod with few observations, or all at similar load, cannot pin its own slopes; so they
//! are pulled (ridge) towards the pool's slopes scaled by the pod's speed ratio, the pod's
//! mean observed TTFT over what the pool's fit predicts at the pod's loads. Two or three
//! answers are enough to see that a pod is 2–3 × slower than the rest; a pod never seen is
//! predicted by the pool's fit; a pool never seen by the configured prior.
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

/// A typical prompt's uncached tokens, the scale at which the token slope's ridge is expressed.
const X_SCALE: f64 = 2048.0;

/// A typical number of requests in flight to a pod, the scale of the per-request ridge.
const REQUEST_SCALE: f64 = 8.0;

/// Observed TTFTs above this are not fed in (a stalled stream, a client that paused reading):
/// ten minutes is past any sane time to first byte.
const MAX_OBSERVED_MS: f64 = 600_000.0;

/// Slopes below this are not believed (a rate over 100M tokens/s); keeps predictions ordered.
const MIN_SLOPE_MS_PER_TOKEN: f64 = 1e-5;

/// What the model assumes before any answer: the configured overhead and prefill cost (and
/// nothing per request ahead until answers show it).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Prior {
    pub overhead_ms: f64,
    pub ms_per_token: f64,
}

/// What a request waits behind on a pod: the model's two inputs.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Load {
    /// Uncached prompt tokens in flight and not yet answered, plus the request's own.
    pub tokens: f64,
    /// Requests in flight to the pod when it is sent (prefilling, decoding or queued for a
    /// slot): a pod whose running batch is full makes a new request wait for a slot, which
    /// tokens alone do not show.
    pub requests: f64,
}

/// Exponentially weighted sums of one line's observations.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Sums {
    weight: f64,
    t: f64,
    r: f64,
    y: f64,
    tt: f64,
    tr: f64,
    rr: f64,
    ty: f64,
    ry: f64,
}

impl Sums {
    fn add(&mut self, load: Load, y: f64) {
        let Self { weight, t, r, y: sy, tt, tr, rr, ty, ry } = self;
        for sum in [weight, t, r, sy, tt, tr, rr, ty, ry] {
            *sum *= FORGET;
        }
        let (x1, x2) = (load.tokens, load.requests);
        self.weight += 1.0;
        self.t += x1;
        self.r += x2;
        self.y += y;
        self.tt += x1 * x1;
        self.tr += x1 * x2;
        self.rr += x2 * x2;
        self.ty += x1 * y;
        self.ry += x2 * y;
    }

    /// The ridge fit of `y = a + b·tokens + c·requests`, `b` and `c` pulled towards `prior`.
    fn fit(&self, prior: Fit) -> Fit {
        if self.weight <= 0.0 {
            return prior;
        }
        let w = self.weight;
        let (m1, m2, my) = (self.t / w, self.r / w, self.y / w);
        let c11 = (self.tt - w * m1 * m1).max(0.0);
        let c22 = (self.rr - w * m2 * m2).max(0.0);
        let c12 = self.tr - w * m1 * m2;
        let (c1y, c2y) = (self.ty - w * m1 * my, self.ry - w * m2 * my);
        let (l1, l2) = (RIDGE_OBSERVATIONS * X_SCALE * X_SCALE, RIDGE_OBSERVATIONS * REQUEST_SCALE * REQUEST_SCALE);
        let (a00, a11, a01) = (c11 + l1, c22 + l2, c12);
        let (b0, b1) = (c1y + l1 * prior.ms_per_token, c2y + l2 * prior.ms_per_request);
        let det = a00 * a11 - a01 * a01;
        if det <= 0.0 || !det.is_finite() {
            return prior;
        }
        let per_token = ((b0 * a11 - a01 * b1) / det).max(MIN_SLOPE_MS_PER_TOKEN);
        let per_request = ((a00 * b1 - a01 * b0) / det).max(0.0);
        Fit {
            overhead_ms: (my - per_token * m1 - per_request * m2).max(0.0),
            ms_per_token: per_token,
            ms_per_request: per_request,
        }
    }
}

/// Answers a pod's model needs before the scheduler lets its predictions keep affinity to a
/// pod whose queue is full. Before any answer a prediction is the prior's (overhead plus a
/// per-token cost, no queueing term), which sees a burst's queue as a few hundred ms: at the
/// start of workload (d)'s burst of 200, prior-only predictions held each prefix to its pod
/// and left 27 % of the pods' time idle while others queued.
pub const MIN_FITTED_ANSWERS: f64 = 3.0;

/// A fitted model: predicted TTFT for a load.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fit {
    pub overhead_ms: f64,
    pub ms_per_token: f64,
    pub ms_per_request: f64,
}

impl Fit {
    pub fn predict(&self, load: Load) -> f64 {
        self.overhead_ms + self.ms_per_token * load.tokens.max(0.0) + self.ms_per_request * load.requests.max(0.0)
    }

    fn scaled(self, ratio: f64) -> Self {
        Self {
            overhead_ms: self.overhead_ms * ratio,
            ms_per_token: self.ms_per_token * ratio,
            ms_per_request: self.ms_per_request * ratio,
        }
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

    /// The pod answered its first byte `ttft_ms` after being sent a request under `load`.
    pub fn observe(&mut self, pod: &str, load: Load, ttft_ms: f64) {
        let finite = load.tokens.is_finite() && load.requests.is_finite();
        if !(finite && (0.0..=MAX_OBSERVED_MS).contains(&ttft_ms)) {
            return;
        }
        let load = Load { tokens: load.tokens.max(0.0), requests: load.requests.max(0.0) };
        self.pool.add(load, ttft_ms);
        if let Some(sums) = self.pods.get_mut(pod) {
            sums.add(load, ttft_ms);
        } else if self.pods.len() < MAX_PODS {
            let mut sums = Sums::default();
            sums.add(load, ttft_ms);
            self.pods.insert(pod.to_string(), sums);
        }
    }

    /// The pool's fit: every pod's answers, the slopes held to the prior until they pin them.
    pub fn pool_fit(&self) -> Fit {
        let prior =
            Fit { overhead_ms: self.prior.overhead_ms, ms_per_token: self.prior.ms_per_token, ms_per_request: 0.0 };
        self.pool.fit(prior)
    }

    /// The pod's fit (the pool's for a pod never observed).
    pub fn fit(&self, pod: &str) -> Fit {
        let pool = self.pool_fit();
        let Some(sums) = self.pods.get(pod) else { return pool };
        // How much slower than the pool's fit this pod was at the loads it was seen at.
        let expected = pool.overhead_ms * sums.weight + pool.ms_per_token * sums.t + pool.ms_per_request * sums.r;
        let speed_ratio = if expected > 0.0 { (sums.y / expected).clamp(0.05, 20.0) } else { 1.0 };
        sums.fit(pool.scaled(speed_ratio))
    }

    /// Predicted TTFT on `pod` under `load`.
    pub fn predict(&self, pod: &str, load: Load) -> f64 {
        self.fit(pod).predict(load)
    }

    /// Answers observed for `pod`, discounted by age (0 for a pod never observed).
    pub fn weight(&self, pod: &str) -> f64 {
        self.pods.get(pod).map_or(0.0, |s| s.weight)
    }

    /// The pod's model rests on at least [`MIN_FITTED_ANSWERS`] of its own answers.
    pub fn fitted(&self, pod: &str) -> bool {
        self.weight(pod) >= MIN_FITTED_ANSWERS
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

    fn tokens(tokens: f64) -> Load {
        Load { tokens, requests: 0.0 }
    }

    /// A pod whose true TTFT is `overhead + slope × tokens`.
    fn feed(models: &mut TtftModels, pod: &str, overhead: f64, slope: f64, loads: &[f64]) {
        for &x in loads {
            models.observe(pod, tokens(x), overhead + slope * x);
        }
    }

    #[test]
    fn learns_a_pods_fit_from_spread_observations() {
        let mut models = TtftModels::new(PRIOR);
        let loads: Vec<f64> = (0..60).map(|i| f64::from(i % 10) * 2_000.0).collect();
        feed(&mut models, "a", 50.0, 0.1, &loads);
        let fit = models.fit("a");
        assert!((fit.ms_per_token - 0.1).abs() < 0.005, "{fit:?}");
        assert!((fit.overhead_ms - 50.0).abs() < 10.0, "{fit:?}");
        assert!((models.predict("a", tokens(10_000.0)) - 1_050.0).abs() < 60.0);
    }

    #[test]
    fn waiting_for_a_slot_is_learned_apart_from_prefill() {
        let mut models = TtftModels::new(PRIOR);
        for i in 0..200u32 {
            let load = Load { tokens: f64::from(i % 7) * 1_000.0, requests: f64::from(i % 11) };
            models.observe("a", load, 20.0 + 0.05 * load.tokens + 40.0 * load.requests);
        }
        let fit = models.fit("a");
        assert!((fit.ms_per_token - 0.05).abs() < 0.005 && (fit.ms_per_request - 40.0).abs() < 4.0, "{fit:?}");
    }

    #[test]
    fn a_slow_pod_is_told_apart_after_a_few_answers() {
        let mut models = TtftModels::new(PRIOR);
        let loads = [1_000.0, 3_000.0, 2_000.0, 4_000.0, 1_500.0, 2_500.0];
        for pod in ["fast-1", "fast-2", "fast-3"] {
            feed(&mut models, pod, 30.0, 0.02, &loads);
        }
        feed(&mut models, "slow", 30.0, 0.06, &loads[..3]);
        let (fast, slow) = (models.predict("fast-1", tokens(4_000.0)), models.predict("slow", tokens(4_000.0)));
        assert!(slow > 2.0 * fast, "slow {slow} vs fast {fast}");
        let unseen = models.predict("new", tokens(4_000.0));
        assert!((unseen - fast).abs() < 0.5 * fast, "a pod never seen is predicted like the pool: {unseen}");
    }

    #[test]
    fn recent_answers_outweigh_old_ones_and_nonsense_is_ignored() {
        let mut models = TtftModels::new(PRIOR);
        let loads: Vec<f64> = (0..100).map(|i| f64::from(i % 5) * 1_000.0).collect();
        feed(&mut models, "a", 30.0, 0.02, &loads);
        feed(&mut models, "a", 30.0, 0.08, &loads); // the pod degraded
        assert!(models.fit("a").ms_per_token > 0.06, "{:?}", models.fit("a"));
        let before = models.fit("a");
        models.observe("a", tokens(f64::NAN), 5.0);
        models.observe("a", tokens(10.0), -1.0);
        models.observe("a", tokens(10.0), 1e12);
        assert_eq!(models.fit("a"), before);
    }

    #[test]
    fn without_answers_the_prior_decides_and_pods_are_bounded() {
        let mut models = TtftModels::new(PRIOR);
        assert_eq!(models.predict("x", tokens(1_000.0)), 50.0);
        for i in 0..(MAX_PODS + 10) {
            models.observe(&format!("pod-{i}"), tokens(100.0), 40.0);
        }
        assert_eq!(models.pods.len(), MAX_PODS);
        models.retain_pods(|pod| pod == "pod-1");
        assert_eq!(models.pods.len(), 1);
    }
}
