//! A time-to-first-token model per pod, learned online from the responses this worker sees.
//!
//! TTFT ≈ overhead + tokens ahead ÷ prefill rate + requests ahead × slot wait, where "tokens
//! ahead" is the uncached prompt tokens in flight to the pod when the request was sent (every
//! worker's, whose prompts the pod has not answered yet) plus the request's own: the pod must
//! prefill all of them before this request's first token. "Requests ahead" is how many of the
//! requests in flight to it must finish before this one gets a slot in its running batch
//! ([`batch`](super::batch)): none while the batch has room, however many are decoding. A
//! slot wait is a step, not a slope: counting every request in flight instead made a pod with
//! a free slot look as slow as a full one, and one early answer that had waited for a slot
//! under a low count made its pod look slow for the rest of a run (workload c's tail).
//! The pool's model is a least-squares fit of `(load, observed time to first byte)` over every
//! pod's answers, each pod's around its own means (one intercept per pod, so pods of different
//! speed sent different prompts do not bend the slopes), with exponential forgetting
//! ([`FORGET`]): twelve sums per pod, O(1) per observation, recent behaviour outweighs old.
//!
//! A pod differs from the pool by one number, its speed ratio: its observed TTFT beyond the
//! pool's fixed overhead over what the pool's prefill cost predicts for the tokens it was
//! sent, read from its answers that had a free slot ([`FREE_SLOT_RATIO_WEIGHT`]). Its
//! prediction is the pool's with the prefill scaled by that ratio and the pool's slot wait.
//! Two or three answers are enough to see that a pod is 2–3 × slower than the rest, and a
//! slow pod seen only with short prompts is still predicted slow for a long one; a pod never
//! seen is predicted by the pool's fit; a pool never seen by the configured prior. Each pod's
//! own three-term fit (session 21) had to learn its slot wait from its own few waits, and its
//! intercept took up any wait its recorded load did not show; one ratio scaling prefill and
//! slot waits alike (sessions 22–23) let one long slot wait price its pod 2 × slower at a
//! free slot, and a ratio read from a few ms of prefill work scaled the slot wait down to
//! near nothing (workload c's tail; bench/results/learning/README.md, session 24).
//!
//! Observations are made per worker: each Envoy worker observes the answers it proxies (about
//! 1/N of the traffic with N workers) with no shared data per response, and every
//! [`super::shared_models::SHARE_EVERY_MS`] publishes its sums and adds up the other workers'
//! ([`super::shared_models`]), so each model rests on every worker's answers. The token load
//! the model is applied to is shared across workers too ([`crate::inflight`]).

use hashbrown::HashMap;

use super::batch::BatchSizes;
use super::shared_models::Learned;
use crate::pod_table::MAX_PODS;

/// Weight kept by older observations at each new one: a memory of ~50 answers per pod, a few
/// seconds of traffic at the rates where the model matters, long enough to average jitter.
pub const FORGET: f64 = 0.98;

/// Ridge strength, in observations at [`X_SCALE`] tokens: how strongly the pool's slopes are
/// held to the configured prior until its pods' observations spread over enough load to pin
/// them.
const RIDGE_OBSERVATIONS: f64 = 2.0;

/// A typical prompt's uncached tokens, the scale at which the token slope's ridge is expressed.
const X_SCALE: f64 = 2048.0;

/// A typical number of requests ahead of a slot, the scale of the per-request ridge: a pod
/// seen queueing has one or two ahead of a new request, and a couple of answers that waited
/// must be enough to learn what a slot wait costs (at 8, the scale of every request in flight,
/// two 500 ms waits among forty answers priced a full batch ~12 ms above a free slot).
const REQUEST_SCALE: f64 = 1.0;

/// An answer counts at most this many times the pool's prediction for its load (plus
/// [`SAMPLE_CAP_MS`]): a request that waited on something the load did not show (a burst two
/// workers placed before seeing each other's picks) must not brand its pod slow for the next
/// fifty answers. A pod 2–3 × slower than the pool stays well inside it. (Such an answer is
/// mostly fed as behind a full batch in the first place: the pod's scrapes show the queue it
/// waited in, see [`super::Learner::first_byte`].)
const SAMPLE_CAP_FACTOR: f64 = 4.0;
const SAMPLE_CAP_MS: f64 = 100.0;

/// An answer behind a full batch may count this much more per request ahead of its slot: a
/// slot frees when the shortest of the running requests ends, which takes as long as the
/// tokens it still has to generate, nothing the prediction knows before the first waits
/// are seen. Capped like a free-slot answer, a first wait of 0.5–2 s counted ~0.35 s and the
/// slot wait was learned as ~40 ms: full batches looked nearly free (workload c).
const SLOT_WAIT_CAP_MS: f64 = 1_000.0;

/// Observed TTFTs above this are not fed in (a stalled stream, a client that paused reading):
/// ten minutes is past any sane time to first byte.
const MAX_OBSERVED_MS: f64 = 600_000.0;

/// Slopes below this are not believed (a rate over 100M tokens/s); keeps predictions ordered.
const MIN_SLOPE_MS_PER_TOKEN: f64 = 1e-5;

/// A prediction never exceeds this (~11 days): whatever the sums (another worker's record
/// may be corrupt, and sums that contradict each other can solve to an enormous slope), a
/// prediction stays a number every comparison and mean can use.
pub const MAX_PREDICTED_MS: f64 = 1e9;

/// A pod this worker has not observed for this much of the pool's answering time (its other
/// pods answering this worker's or the other workers' requests) has this worker's
/// observations of it forgotten ([`TtftModels::forget_stale`]). A pod's sums fade only with
/// its own answers, and a pod predicted past the tail guard (`scheduler::tail_guarded`) gets
/// none: one hiccup (six 300 ms answers where its peers answer in 40) priced it at 85 ms
/// against a bound of 58 for good, and a light pool never sent it another request.
/// Forgotten, it is predicted like the pool until its next answers say otherwise: a pod that
/// really is that slow costs a request or two every 30 s to find out again.
pub const STALE_AFTER_MS: u64 = 30_000;

/// The longest gap between two of the pool's answers that counts whole in its answering time:
/// a pause of the traffic is no time the pods were seen without a pod, so a burst after an
/// idle hour starts from what was learned rather than forgetting every pod it has not reached
/// yet.
const COUNTED_GAP_MS: u64 = 1_000;

/// What the model assumes before any answer: the configured overhead and prefill cost (and
/// nothing per request ahead until answers show it).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Prior {
    pub overhead_ms: f64,
    pub ms_per_token: f64,
}

impl Prior {
    /// The prior as a fit: nothing per request ahead until answers show it.
    fn fit(self) -> Fit {
        Fit { overhead_ms: self.overhead_ms, ms_per_token: self.ms_per_token, ms_per_request: 0.0 }
    }
}

/// What a request waits behind on a pod: the model's two inputs.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Load {
    /// Uncached prompt tokens in flight and not yet answered, plus the request's own.
    pub tokens: f64,
    /// Requests in flight to the pod that must finish before this one gets a slot in its
    /// running batch ([`TtftModels::ahead_of_a_slot`]): the wait tokens alone do not show.
    pub requests: f64,
}

/// A pod's speed ratio is read from its answers that had a free slot while their weight
/// (discounted by age) is at least this, and from all its answers otherwise. How long a slot
/// takes to free depends on how much the requests ahead still had to generate, which says
/// little of how fast the pod computes: one opening answer that waited 2.2 s for a slot
/// still priced its pod at 2 × its peers' free-slot TTFT for the run, and requests went to
/// full batches instead (workload c). A pod seen only behind full batches lately (~35
/// answers since its last free slot) is judged by those.
const FREE_SLOT_RATIO_WEIGHT: f64 = 0.5;

/// Below this many requests ahead of a slot an answer counts as having had a free slot (a
/// batch size learned as 3.9 leaves 0.1 ahead of a pod with 3 in flight).
const FREE_SLOT_BELOW: f64 = 0.5;

/// Exponentially weighted sums of one line's observations. Sums of two workers' observations
/// add up to the sums of both ([`super::shared_models`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct Sums {
    weight: f64,
    t: f64,
    r: f64,
    y: f64,
    tt: f64,
    tr: f64,
    rr: f64,
    ty: f64,
    ry: f64,
    /// The same weight, tokens and TTFT sums over the answers that had a free slot: what the
    /// pod's speed ratio is read from ([`FREE_SLOT_RATIO_WEIGHT`]).
    free_weight: f64,
    free_t: f64,
    free_y: f64,
}

/// How many numbers [`Sums`] is made of (its wire form in [`super::shared_models`]).
pub(super) const SUMS_LEN: usize = 12;

impl Sums {
    pub(super) fn to_array(self) -> [f64; SUMS_LEN] {
        let Self { weight, t, r, y, tt, tr, rr, ty, ry, free_weight, free_t, free_y } = self;
        [weight, t, r, y, tt, tr, rr, ty, ry, free_weight, free_t, free_y]
    }

    /// The weight of the answers that had a free slot.
    pub(super) fn free_weight(&self) -> f64 {
        self.free_weight
    }

    pub(super) fn from_array(values: [f64; SUMS_LEN]) -> Self {
        let [weight, t, r, y, tt, tr, rr, ty, ry, free_weight, free_t, free_y] = values;
        Self { weight, t, r, y, tt, tr, rr, ty, ry, free_weight, free_t, free_y }
    }

    /// Both sets of observations as one.
    pub(super) fn plus(self, other: Self) -> Self {
        let (mut sum, other) = (self.to_array(), other.to_array());
        for (value, more) in sum.iter_mut().zip(other) {
            *value += more;
        }
        Self::from_array(sum)
    }

    fn add(&mut self, load: Load, y: f64) {
        let Self { weight, t, r, y: sy, tt, tr, rr, ty, ry, free_weight, free_t, free_y } = self;
        for sum in [weight, t, r, sy, tt, tr, rr, ty, ry, free_weight, free_t, free_y] {
            *sum *= FORGET;
        }
        if load.requests < FREE_SLOT_BELOW {
            self.free_weight += 1.0;
            self.free_t += load.tokens;
            self.free_y += y;
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

    /// Means and centred sums (`None` without observations).
    fn moments(&self) -> Option<Moments> {
        let w = self.weight;
        if w <= 0.0 {
            return None;
        }
        let (m1, m2, my) = (self.t / w, self.r / w, self.y / w);
        Some(Moments {
            weight: w,
            mean: [m1, m2, my],
            c11: (self.tt - w * m1 * m1).max(0.0),
            c22: (self.rr - w * m2 * m2).max(0.0),
            c12: self.tr - w * m1 * m2,
            c1y: self.ty - w * m1 * my,
            c2y: self.ry - w * m2 * my,
        })
    }
}

/// Observations as a least-squares fit needs them: weight, means of tokens, requests and
/// TTFT, and the centred sums of products.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Moments {
    weight: f64,
    mean: [f64; 3],
    c11: f64,
    c22: f64,
    c12: f64,
    c1y: f64,
    c2y: f64,
}

impl Moments {
    fn fit(&self, prior: Fit) -> Fit {
        let [m1, m2, my] = self.mean;
        let (l1, l2) = (RIDGE_OBSERVATIONS * X_SCALE * X_SCALE, RIDGE_OBSERVATIONS * REQUEST_SCALE * REQUEST_SCALE);
        let (a00, a11, a01) = (self.c11.max(0.0) + l1, self.c22.max(0.0) + l2, self.c12);
        let (b0, b1) = (self.c1y + l1 * prior.ms_per_token, self.c2y + l2 * prior.ms_per_request);
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
    /// Predicted TTFT in ms, in `0..=MAX_PREDICTED_MS` (NaN counts as the maximum).
    pub fn predict(&self, load: Load) -> f64 {
        let predicted =
            self.overhead_ms + self.ms_per_token * load.tokens.max(0.0) + self.ms_per_request * load.requests.max(0.0);
        if predicted.is_nan() {
            MAX_PREDICTED_MS
        } else {
            predicted.clamp(0.0, MAX_PREDICTED_MS)
        }
    }

    /// The same fixed overhead and slot wait, the prefill `ratio` × as slow. The slot wait is
    /// the pool's: it is how long the requests ahead take to finish, which a pod's few waits
    /// measure badly, and a ratio read from prompts of a few ms of prefill work swings too
    /// far to scale it (workload c: a pod with a full batch priced ~30 ms above a free one).
    fn scaled_prefill(self, ratio: f64) -> Self {
        Self {
            overhead_ms: self.overhead_ms,
            ms_per_token: self.ms_per_token * ratio,
            ms_per_request: self.ms_per_request,
        }
    }
}

/// Answers between two full recomputations of [`Reference`] (its running sums are updated
/// by subtraction, which drifts in floating point).
const REFERENCE_REBUILD_EVERY: u32 = 1024;

/// Every pod's observations pooled around each pod's own means (a regression with one
/// intercept per pod): the slopes come from how each pod's TTFT moved with its own load, so
/// pods of different speed sent different prompts do not bend them. A pod's answer changes
/// only its own term, so an answer takes its old term out and puts the new one in.
#[derive(Debug, Clone, Copy, Default)]
struct Reference {
    /// Σ over pods of weight, weight × each mean, and each centred sum.
    weight: f64,
    weighted_means: [f64; 3],
    centred: [f64; 5],
    updates: u32,
}

impl Reference {
    /// `sign` 1 adds a pod's term, -1 takes it out.
    fn add(&mut self, term: Option<Moments>, sign: f64) {
        let Some(m) = term else { return };
        self.weight += sign * m.weight;
        for (sum, mean) in self.weighted_means.iter_mut().zip(m.mean) {
            *sum += sign * m.weight * mean;
        }
        for (sum, c) in self.centred.iter_mut().zip([m.c11, m.c22, m.c12, m.c1y, m.c2y]) {
            *sum += sign * c;
        }
    }

    /// The pooled within-pod fit, its overhead the pods' mean intercept (`None` before any
    /// answer; below one answer's weight only drift is left).
    fn fit(&self, prior: Fit) -> Option<Fit> {
        if self.weight < 1.0 {
            return None;
        }
        let [s1, s2, sy] = self.weighted_means;
        let [c11, c22, c12, c1y, c2y] = self.centred;
        let moments = Moments {
            weight: self.weight,
            mean: [s1 / self.weight, s2 / self.weight, sy / self.weight],
            c11,
            c22,
            c12,
            c1y,
            c2y,
        };
        Some(moments.fit(prior))
    }
}

/// This worker's observations of one pod, and the pool's answering time at the last of them.
#[derive(Debug, Clone, Copy, Default)]
struct OwnPod {
    sums: Sums,
    answering_ms: u64,
}

/// The pool's answering time: the time between its answers (this worker's observations, and
/// shares that brought other workers' new ones), each gap counted up to [`COUNTED_GAP_MS`].
#[derive(Debug, Clone, Copy, Default)]
struct AnsweringClock {
    elapsed_ms: u64,
    last_answer_ms: Option<u64>,
}

impl AnsweringClock {
    /// The pool answered at `now_ms`; returns its answering time then.
    fn answered(&mut self, now_ms: u64) -> u64 {
        let last = self.last_answer_ms.unwrap_or(now_ms);
        let gap = now_ms.saturating_sub(last).min(COUNTED_GAP_MS);
        self.elapsed_ms = self.elapsed_ms.saturating_add(gap);
        self.last_answer_ms = Some(last.max(now_ms));
        self.elapsed_ms
    }
}

/// Every pod's model, plus the pool's (all pods' observations together).
#[derive(Debug, Clone)]
pub struct TtftModels {
    prior: Prior,
    /// This worker's own observations: the pool's and each pod's.
    pool: Sums,
    pods: HashMap<String, OwnPod>,
    /// How long the pool has been answering, as [`STALE_AFTER_MS`] counts it.
    answering: AnsweringClock,
    /// The other workers' observations as they last published them, summed: each model rests
    /// on every worker's answers ([`super::shared_models`]).
    others: Learned,
    /// What a pod is compared with ([`TtftModels::pool_fit`]).
    reference: Reference,
    /// The reference's fit, solved when an answer changes it rather than for every candidate
    /// of every request: each pod's prediction is this, scaled.
    pool_fitted: Fit,
    /// Each pod's running batch when full: where slot waits begin.
    batches: BatchSizes,
    /// Every pod's successful answers' durations (sent to end), weight and sum, discounted
    /// by age like the fits: the slot wait's prior ([`TtftModels::slot_wait_prior`]).
    durations: (f64, f64),
    /// This worker's observations, counted ([`TtftModels::observed`]).
    observed: u64,
}

impl TtftModels {
    pub fn new(prior: Prior) -> Self {
        Self {
            prior,
            pool: Sums::default(),
            pods: HashMap::new(),
            answering: AnsweringClock::default(),
            others: Learned::default(),
            reference: Reference::default(),
            pool_fitted: prior.fit(),
            batches: BatchSizes::default(),
            durations: (0.0, 0.0),
            observed: 0,
        }
    }

    /// A successful answer ended `duration_ms` after its request was sent.
    pub fn ended(&mut self, duration_ms: f64) {
        if !(0.0..=MAX_OBSERVED_MS).contains(&duration_ms) {
            return;
        }
        let (weight, sum) = self.durations;
        self.durations = (weight * FORGET + 1.0, sum * FORGET + duration_ms);
        self.observed += 1;
        // The prior is zero until a pod is seen full: no refit at every answer's end till then.
        if self.batches.pool_size().is_some() {
            self.refit_pool();
        }
    }

    /// What one request ahead of a slot costs before any answer showed it: a full batch frees
    /// a slot when the first of its requests ends, and the first of `n` requests whose ends
    /// fall anywhere within a duration `d` ends after `d / (n + 1)` on average. Zero before a
    /// pod was seen full or an answer ended. Without it, a full batch was free until the
    /// first slot wait came back (0.5–2 s later in workload c), and a pod whose opening
    /// answers happened to look slow lost its free slot to a full batch.
    fn slot_wait_prior(&self) -> f64 {
        let (weight, sum) = (self.durations.0 + self.others.durations.0, self.durations.1 + self.others.durations.1);
        match self.batches.pool_size() {
            Some(size) if weight >= 1.0 => sum / weight / (size + 1.0),
            _ => 0.0,
        }
    }

    /// The pod answered its first byte `ttft_ms` after being sent a request under `load`, at
    /// `now_ms`.
    pub fn observe(&mut self, pod: &str, load: Load, ttft_ms: f64, now_ms: u64) {
        let finite = load.tokens.is_finite() && load.requests.is_finite();
        if !(finite && (0.0..=MAX_OBSERVED_MS).contains(&ttft_ms)) {
            return;
        }
        let load = Load { tokens: load.tokens.max(0.0), requests: load.requests.max(0.0) };
        let cap = SAMPLE_CAP_FACTOR * self.pool_fit().predict(load) + SAMPLE_CAP_MS + SLOT_WAIT_CAP_MS * load.requests;
        let ttft_ms = ttft_ms.min(cap);
        self.observed += 1;
        self.pool.add(load, ttft_ms);
        let shared = self.others.pods.get(pod).copied().unwrap_or_default();
        // One lookup: a new pod is taken in while the table has room.
        let own = match self.pods.len() < MAX_PODS {
            true => Some(self.pods.entry_ref(pod).or_default()),
            false => self.pods.get_mut(pod),
        };
        let answering_ms = self.answering.answered(now_ms);
        if let Some(own) = own {
            // The pod's term in the reference is every worker's answers: only this worker's change.
            self.reference.add(own.sums.plus(shared).moments(), -1.0);
            own.sums.add(load, ttft_ms);
            self.reference.add(own.sums.plus(shared).moments(), 1.0);
            own.answering_ms = answering_ms;
        }
        self.reference.updates += 1;
        if self.reference.updates >= REFERENCE_REBUILD_EVERY {
            self.rebuild_reference();
        }
        self.refit_pool();
    }

    /// A new pod table: each pod's `(address, running, waiting, scraped_ms)` as last scraped.
    pub fn saw_batches<'a>(&mut self, pods: impl Iterator<Item = (&'a str, f64, f64, u64)>) {
        let before = self.batches.pool_size();
        for (pod, running, waiting, scraped_ms) in pods {
            self.batches.saw(pod, running, waiting, scraped_ms);
        }
        if self.batches.pool_size() != before {
            self.refit_pool();
        }
    }

    /// A scrape after `sent_ms` showed requests waiting on `pod` ([`BatchSizes::queued_after`]).
    pub fn queued_after(&self, pod: &str, sent_ms: u64) -> bool {
        self.batches.queued_after(pod, sent_ms)
    }

    /// How many requests `pod` runs at once when full, once a scrape showed it (or, failing
    /// that, any pod) with requests waiting.
    pub fn batch_size(&self, pod: &str) -> Option<f64> {
        self.batches.size(pod)
    }

    /// The model's `requests` input for a request sent to `pod` with `in_flight` requests
    /// there already: how many must finish before it gets a slot.
    pub fn ahead_of_a_slot(&self, pod: &str, in_flight: f64) -> f64 {
        self.batches.ahead_of_a_slot(pod, in_flight)
    }

    /// Sums every pod's term again (O(pods), every [`REFERENCE_REBUILD_EVERY`] answers and
    /// when pods leave).
    fn rebuild_reference(&mut self) {
        let mut reference = Reference::default();
        for pod in self.pods.keys().chain(self.others.pods.keys().filter(|pod| !self.pods.contains_key(*pod))) {
            reference.add(self.sums(pod).and_then(|sums| sums.moments()), 1.0);
        }
        self.reference = reference;
        self.refit_pool();
    }

    /// The pod's observations, every worker's (`None` for a pod no worker has observed).
    fn sums(&self, pod: &str) -> Option<Sums> {
        match (self.pods.get(pod), self.others.pods.get(pod)) {
            (None, None) => None,
            (own, others) => {
                Some(own.map(|own| own.sums).unwrap_or_default().plus(others.copied().unwrap_or_default()))
            }
        }
    }

    /// This worker's own observations as published for the other workers, at `now_ms`
    /// ([`super::shared_models`]).
    pub fn encode_own(&self, now_ms: u64) -> Vec<u8> {
        let pods = self.pods.iter().map(|(pod, own)| (pod.as_str(), own.sums));
        super::shared_models::encode(now_ms, &self.pool, pods, self.durations)
    }

    /// Pods some worker has observed.
    pub fn pods(&self) -> usize {
        self.pods.len().max(self.others.pods())
    }

    /// Pods anything is remembered of here: observed, heard of from other workers, or seen
    /// queueing (bounded; pods that leave the pool are forgotten, [`Self::retain_pods`]).
    pub fn pods_remembered(&self) -> usize {
        self.pods().max(self.batches.len())
    }

    /// Answers this worker observed (TTFT samples and ends): whether it learned something
    /// since it last published.
    pub fn observed(&self) -> u64 {
        self.observed
    }

    /// The other workers' observations, summed, replacing those set before, read at `now_ms`.
    /// Pool sums that changed since mean some worker saw an answer since the last read.
    pub fn set_others(&mut self, others: Learned, now_ms: u64) {
        if others.pool != self.others.pool {
            self.answering.answered(now_ms);
        }
        self.others = others;
        self.rebuild_reference();
    }

    /// Forgets this worker's observations of the pods it has not observed for
    /// [`STALE_AFTER_MS`] of the pool's answering time ([`STALE_AFTER_MS`] says why); on the
    /// tick that shares them, so the other workers' copies go too. O(pods).
    pub fn forget_stale(&mut self) {
        let now = self.answering.elapsed_ms;
        let before = self.pods.len();
        self.pods.retain(|_, own| now.saturating_sub(own.answering_ms) < STALE_AFTER_MS);
        if self.pods.len() != before {
            self.forgot();
        }
    }

    /// Forgets this worker's observations of `pod` (it restarted: what it was is no guide to
    /// what it is), its batch when full too.
    pub fn forget(&mut self, pod: &str) {
        let batch_forgotten = self.batches.forget(pod);
        if self.pods.remove(pod).is_some() {
            self.forgot();
        } else if batch_forgotten {
            self.refit_pool();
        }
    }

    /// Observations were dropped: the reference is summed again, and the change counts as
    /// something to publish ([`Self::observed`]).
    fn forgot(&mut self) {
        self.observed += 1;
        self.rebuild_reference();
    }

    fn refit_pool(&mut self) {
        let prior = self.prior_fit();
        self.pool_fitted = self.reference.fit(prior).unwrap_or(prior);
    }

    fn prior_fit(&self) -> Fit {
        Fit { ms_per_request: self.slot_wait_prior(), ..self.prior.fit() }
    }

    /// What the pool's pods are like: every pod's answers pooled around its own means, the
    /// slopes held to the prior until answers pin them ([`Reference`]). One regression over
    /// every answer instead confounds the pods' speeds with the loads they were sent: when the
    /// slow pods get only the short prompts, their slow short answers flatten the pooled
    /// slope (0.022 ms per token where the fast pods show 0.1, in the test below), and every
    /// pod compared with it comes out with too little per-token cost.
    pub fn pool_fit(&self) -> Fit {
        self.pool_fitted
    }

    /// The pod's fit: the pool's, its work scaled by the pod's speed ratio (the pool's for a
    /// pod never observed).
    pub fn fit(&self, pod: &str) -> Fit {
        self.fit_from(self.sums(pod))
    }

    /// [`Self::fit`] and [`Self::fitted`] of `pod` from one look at its sums (a decision
    /// asks both of every candidate).
    pub fn fit_and_fitted(&self, pod: &str) -> (Fit, bool) {
        let sums = self.sums(pod);
        (self.fit_from(sums), sums.is_some_and(|s| s.weight >= MIN_FITTED_ANSWERS))
    }

    /// [`Self::fit`] of a pod whose observations (every worker's) are `sums`.
    fn fit_from(&self, sums: Option<Sums>) -> Fit {
        let pool = self.pool_fit();
        let Some(sums) = sums else { return pool };
        // How much slower than the pool this pod prefills, from the time its answers took
        // beyond the fixed overhead (and, behind a full batch, the pool's slot wait)
        // over the pool's prefill cost for their tokens: pods differ in how fast they compute
        // (a GPU type, a degraded node), and a pod seen only at short prompts is extrapolated
        // by that. Taking the overhead into the ratio made a 3 × slower pod look 1.4 × slower.
        // Read from its free-slot answers while it has recent ones ([`FREE_SLOT_RATIO_WEIGHT`]).
        let (weight, t, r, y) = if sums.free_weight >= FREE_SLOT_RATIO_WEIGHT {
            (sums.free_weight, sums.free_t, 0.0, sums.free_y)
        } else {
            (sums.weight, sums.t, sums.r, sums.y)
        };
        let work = pool.ms_per_token * t;
        let beyond = y - pool.overhead_ms * weight - pool.ms_per_request * r;
        let speed_ratio = if work > 0.0 && beyond > 0.0 { (beyond / work).clamp(0.05, 20.0) } else { 1.0 };
        pool.scaled_prefill(speed_ratio)
    }

    /// Predicted TTFT on `pod` under `load`.
    pub fn predict(&self, pod: &str, load: Load) -> f64 {
        self.fit(pod).predict(load)
    }

    /// The pool's recent mean time to first byte (every pod's answers, discounted by age), once
    /// some pod is fitted: the scale a prediction's lead is measured on.
    pub fn typical_ms(&self) -> Option<f64> {
        let pool = self.pool.plus(self.others.pool);
        (pool.weight >= MIN_FITTED_ANSWERS).then(|| pool.y / pool.weight)
    }

    /// Answers observed for `pod` by any worker, discounted by age (0 for a pod never observed).
    pub fn weight(&self, pod: &str) -> f64 {
        self.sums(pod).map_or(0.0, |s| s.weight)
    }

    /// The pod's model rests on at least [`MIN_FITTED_ANSWERS`] of its own answers (every
    /// worker's, as last shared).
    pub fn fitted(&self, pod: &str) -> bool {
        self.weight(pod) >= MIN_FITTED_ANSWERS
    }

    /// Forgets pods that left the pool.
    pub fn retain_pods(&mut self, keep: impl Fn(&str) -> bool) {
        let before = self.pods.len() + self.others.pods.len();
        self.pods.retain(|pod, _| keep(pod));
        self.others.pods.retain(|pod, _| keep(pod));
        self.batches.retain_pods(&keep);
        if self.pods.len() + self.others.pods.len() != before {
            self.rebuild_reference();
        }
    }
}

#[cfg(test)]
mod tests;
