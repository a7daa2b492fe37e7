//! A live A/B test of the picker against a plain load balancer, on the same traffic at the
//! same time (`comparison` in the filter configuration).
//!
//! An operator deciding whether wasm-epp routes their traffic better than what they run now
//! cannot learn it from our benchmarks: their prompts, rates and pods are their own. So the
//! gateway can run both: the pool's pods are split in two arms, the picker's and the
//! baseline's (`least_request` or `random`), in the configured share, and each request is
//! given to an arm with the probability of that arm's share of the pods it may go to, so both
//! arms carry the same load per pod. Each arm routes only to its own pods: the baseline's
//! placements do not spread prefixes over the picker's caches, nor the picker's queues over
//! the baseline's. Per-arm stats (requests, time to first byte, duration) show which serves
//! faster.
//!
//! A conversation stays in one arm: a request draws its arm by its session, or else by its
//! first user message ([`conversation_key`]), so the turns that resend a conversation find
//! it on their arm's pods; only a prompt with neither (a completions text) draws at random.
//!
//! The split is a pure function of the table's addresses and models (no seed), so every
//! worker and every replica splits a pool alike. Pods are split per model they serve first
//! (their first base model name), so each model's pods are shared by both arms in the
//! configured proportion: a pool of two models, two pods each, gives each arm one of each.

use std::borrow::Cow;

use serde::Deserialize;
use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::config::{BaselinePolicy, ComparisonConfig, ScorerWeights};
use crate::pod_table::PodTable;
use crate::random::TieBreaker;
use crate::request::InferenceRequest;
use crate::saturation::SaturationLimits;
use crate::scheduler::Policy;

/// Which side of the comparison routed a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arm {
    Picker,
    Baseline,
}

impl Arm {
    pub fn label(self) -> &'static str {
        match self {
            Self::Picker => "picker",
            Self::Baseline => "baseline",
        }
    }
}

/// Seeds the address hash that orders pods within a model's group (any fixed value: it only
/// has to be the same in every VM).
const SPLIT_SEED: u64 = 0x0063_6f6d_7061_7265;

/// Each pod's arm in one table, by its position there (a decision reads it per eligible pod
/// with no lookup by address).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodSplit {
    arms: Vec<Arm>,
}

impl PodSplit {
    /// Splits `table`'s pods: within each group of pods whose first base model is the same,
    /// ordered by a hash of their address, the first `share` of them (rounded, at least one
    /// and at most all but one in a group of two or more; none in a group of one) go to the
    /// baseline.
    pub fn of(table: &PodTable, share: f64) -> Self {
        let mut groups: Vec<(&str, u64, &str, usize)> = table
            .pods
            .iter()
            .enumerate()
            .map(|(position, pod)| {
                let model = pod.models.first().map_or("", String::as_str);
                let address = pod.address.as_str();
                (model, xxh3_64_with_seed(address.as_bytes(), SPLIT_SEED), address, position)
            })
            .collect();
        groups.sort_unstable_by(|a, b| (a.0, a.1, a.2).cmp(&(b.0, b.1, b.2)));
        let mut arms = vec![Arm::Picker; table.pods.len()];
        for group in groups.chunk_by(|a, b| a.0 == b.0) {
            let size = group.len();
            if size < 2 {
                continue;
            }
            let wanted = ((share * size as f64).round() as usize).clamp(1, size - 1);
            for &(_, _, _, position) in group.iter().take(wanted) {
                if let Some(arm) = arms.get_mut(position) {
                    *arm = Arm::Baseline;
                }
            }
        }
        Self { arms }
    }

    /// The arm of the table's pod at `position` (the picker's for a position the table has not).
    pub fn arm_at(&self, position: usize) -> Arm {
        self.arms.get(position).copied().unwrap_or(Arm::Picker)
    }
}

/// The arm of a request that may go to `baseline` of the baseline's pods and `picker` of the
/// picker's: the baseline with probability `baseline / (baseline + picker)`, so each arm's
/// pods see the same load. A request with a key (its session, or [`conversation_key`]) draws
/// by it, so a conversation's turns stay in one arm and on its pods; one without, at random.
/// `None` when either arm has none of its pods: it is not compared.
pub fn draw_arm(baseline: usize, picker: usize, key: Option<u64>, random: &mut TieBreaker) -> Option<Arm> {
    if baseline == 0 || picker == 0 {
        return None;
    }
    let draw = match key {
        // Mixed, so keys that differ in low bits only still spread.
        Some(key) => TieBreaker::new(key).next_u64(),
        None => random.next_u64(),
    };
    let total = (baseline + picker) as u128;
    let below = (u128::from(draw) * total) >> 64;
    Some(if below < baseline as u128 { Arm::Baseline } else { Arm::Picker })
}

/// What names a conversation with no session header: its first user message, as written
/// (chat, Anthropic's Messages and the Responses API's input items; a client resends it
/// unchanged with every turn). Conversations that open alike draw alike: where one opening
/// (a fixed template) carries much of the traffic, its arm carries more than its share, and
/// a session header is the better key. `None` for a prompt that is one text (completions, a
/// Responses `input` string) or whose messages were not cut (read the plain way, or more than
/// [`crate::request::MAX_CUT_MESSAGES`]): it draws at random.
pub fn conversation_key(request: &InferenceRequest<'_>) -> Option<u64> {
    let messages = request.messages_cut.as_deref()?;
    let first_user = messages.iter().find(|message| is_user_message(message.text))?;
    Some(xxh3_64_with_seed(first_user.text.as_bytes(), SPLIT_SEED))
}

/// Whether a message object (valid JSON, as the request's scan cut it) has the `role` "user".
/// Read from its first key when that is `role` with a plain string, as the SDKs write it:
/// serde would scan the whole object, a long system prompt included, for one short field.
fn is_user_message(text: &str) -> bool {
    #[derive(Deserialize)]
    struct Role<'a> {
        #[serde(borrow, default)]
        role: Option<Cow<'a, str>>,
    }
    match leading_role(text) {
        Some(role) => role == "user",
        None => serde_json::from_str::<Role<'_>>(text).is_ok_and(|m| m.role.as_deref() == Some("user")),
    }
}

/// The value of `role` when it is the object's first key and a string without escapes.
fn leading_role(text: &str) -> Option<&str> {
    let rest = text.strip_prefix('{')?.trim_start();
    let rest = rest.strip_prefix("\"role\"")?.trim_start();
    let rest = rest.strip_prefix(':')?.trim_start();
    let rest = rest.strip_prefix('"')?;
    let end = rest.find(['"', '\\'])?;
    rest.get(..end).filter(|_| rest.as_bytes().get(end) == Some(&b'"'))
}

/// How the baseline arm chooses: by in-flight counts alone (`least_request`) or not at all
/// (`random`, every pod scored alike), blind to queues, KV, prefixes and sessions, and never
/// counting a pod as saturated, as Envoy's own load balancers.
pub fn baseline_policy(config: &ComparisonConfig, fallbacks: usize) -> Policy {
    let inflight = match config.baseline {
        BaselinePolicy::LeastRequest => 1.0,
        BaselinePolicy::Random => 0.0,
    };
    Policy {
        weights: ScorerWeights { queue: 0.0, kv_cache: 0.0, inflight, prefix: 0.0 },
        saturation: SaturationLimits { queue_threshold: f64::INFINITY, kv_cache_threshold: f64::INFINITY },
        affinity_threshold: 0.0,
        fallbacks,
        learning: None,
        ..Policy::default()
    }
}

#[cfg(test)]
mod tests;
