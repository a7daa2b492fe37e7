//! What the scheduler knows about each pod for one request, and the policy it applies.

use crate::config::ScorerWeights;
use crate::saturation::SaturationLimits;

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
    /// Share of the request's prefix blocks the pod probably holds (0..1).
    pub prefix_match: f64,
    /// The request's session was last sent to this pod.
    pub session_match: bool,
    /// ... and the session names state only this pod holds (a stored response: another pod
    /// answers 404), so neither a full queue nor load moves the request elsewhere.
    pub session_pinned: bool,
    /// When this worker last picked the pod (a pick counter; 0 = never). Spreads cold requests.
    pub last_picked: u64,
    /// LoRA affinity tier for the request's adapter, 0 best (see [`crate::models::affinity`]);
    /// 0 for every pod when the request names no adapter.
    pub lora_tier: u8,
    /// This request's predicted time to first token on the pod (learning on; see
    /// [`crate::learn::ttft`]).
    pub predicted_ttft_ms: Option<f64>,
    /// Of that, the pod's time to prefill this request's own uncached tokens: the work the
    /// request adds there. Moving away from a pod that holds the prompt adds the difference
    /// to the pool, which every request queued behind it on the new pod waits for too.
    pub predicted_prefill_ms: Option<f64>,
    /// The pod's model has learned from enough of its own answers to be trusted with a full
    /// queue ([`crate::learn::ttft::MIN_FITTED_ANSWERS`]); a prediction from the prior alone
    /// has no term for queueing.
    pub ttft_fitted: bool,
    /// The pool's typical TTFT (0 = not known yet): the TTFT scorer measures how much later a
    /// pod is predicted to answer than the best in these, not in proportion.
    pub ttft_scale_ms: f64,
    /// A lead on the best prediction up to this counts for nothing (with a scale): the model
    /// cannot see a full running batch, so a lead this small is noise there, and the request
    /// counts see what it misses.
    pub ttft_margin_ms: f64,
    /// The pool's typical TTFT (0 = not known yet), whatever the scorer: what
    /// [`LearningPolicy::tail_guard`] bounds predictions by.
    pub typical_ttft_ms: f64,
    /// The prediction meets the request's TTFT objective (true when it has none).
    pub meets_slo: bool,
    /// Prompt blocks the prefix index holds for the pod (0 without an index): how many
    /// prefixes call it home, weighted by their length. Balances cold placements with
    /// learning on ([`LearningPolicy::balance_homes`]).
    pub indexed_blocks: usize,
}

impl<'a> Candidate<'a> {
    /// A pod with load data only: no prefix, session or pick history.
    pub fn with_load(address: &'a str, usable: bool, waiting: f64, kv_usage: Option<f64>, inflight: u32) -> Self {
        Self {
            address,
            usable,
            waiting,
            running: 0.0,
            kv_usage,
            inflight,
            prefix_match: 0.0,
            session_match: false,
            session_pinned: false,
            last_picked: 0,
            lora_tier: 0,
            predicted_ttft_ms: None,
            predicted_prefill_ms: None,
            ttft_fitted: false,
            ttft_scale_ms: 0.0,
            ttft_margin_ms: 0.0,
            typical_ttft_ms: 0.0,
            meets_slo: true,
            indexed_blocks: 0,
        }
    }
}

/// How to choose, compiled once from the filter configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    pub weights: ScorerWeights,
    pub saturation: SaturationLimits,
    /// Prefix share at which a pod is preferred over all others unless saturated; 0 = off.
    pub affinity_threshold: f64,
    /// Of the pods over the threshold, those within this share of the best match stay.
    pub affinity_slack: f64,
    /// Runners-up to return for retries.
    pub fallbacks: usize,
    /// Where a prompt that no pod holds goes (see [`ColdPlacement`]).
    pub cold_placement: ColdPlacement,
    /// Rendezvous placement skips pods loaded above this factor of the pool's mean load.
    pub placement_load_factor: f64,
    /// Rendezvous chooses among the pods scored within this of the best (0..1 scores).
    pub placement_slack: f64,
    /// Learning from responses (`None` = off): predicted TTFT scores pods and releases affinity.
    pub learning: Option<LearningPolicy>,
}

/// How predicted TTFTs are used, when learning is on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LearningPolicy {
    /// Weight of the TTFT scorer beside the configured ones.
    pub ttft_weight: f64,
    /// Affinity is released when the sticky pods' best predicted TTFT exceeds the best other
    /// pod's by more than this plus the prefill work the move adds. It replaces "when every
    /// queue is full, load alone decides": whether moving buys time, not whether queues are
    /// full, decides.
    pub release_penalty_ms: f64,
    /// A prompt no pod holds goes to a pod within half its blocks of the fewest indexed
    /// blocks (rendezvous among those), so prefixes' homes, and with them the traffic that
    /// sticks to them, spread evenly over the pods.
    pub balance_homes: bool,
    /// A pick by load leaves out the pods predicted above this many times the pool's typical
    /// TTFT (the candidates' `typical_ttft_ms`) while another is predicted within it (0 = off).
    pub tail_guard: f64,
}

/// Where a request whose prefix no pod holds yet goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ColdPlacement {
    /// Rendezvous hashing of the prompt's first block over the pods, skipping pods loaded
    /// above `placement_load_factor` × the mean: every gateway replica (and every worker)
    /// places the same new prefix on the same pod with no communication at all.
    #[default]
    Rendezvous,
    /// The least recently picked of the best-scored pods: spreads new prefixes evenly, but
    /// each replica on its own.
    LeastRecent,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            weights: ScorerWeights::default(),
            saturation: SaturationLimits::default(),
            affinity_threshold: 0.5,
            affinity_slack: 0.05,
            fallbacks: 0,
            cold_placement: ColdPlacement::default(),
            placement_load_factor: 2.0,
            placement_slack: 1.0,
            learning: None,
        }
    }
}
