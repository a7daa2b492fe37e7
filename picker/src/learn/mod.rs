//! Learning from every response: what each pod answered tells the picker how fast it is,
//! how long prompts really are, and how much of a prompt it really had cached.
//!
//! - [`usage`]: the `usage` object, found in the answer as it streams past (never buffered);
//!   [`readers`]: which streams are read for it; [`allowance`]: the budgets (per event and per
//!   second) that bound what reading answers costs at high rates.
//! - [`tokens`]: a prompt's size in tokens from the body, corrected by reported prompt tokens.
//! - [`ttft`]: a per-pod time-to-first-token model, fitted online.
//! - [`tail`]: how much of a prompt past the index's hashed part the pods hold cached.
//! - [`Learner`]: one worker's learned state; [`Dispatch`]: what a request remembers of its
//!   decision until its answer comes back. The prefix index's self-correction lives here too:
//!   a pod that reports fewer cached tokens than the index predicted evicts sooner than its KV
//!   size says (answers' own tokens and running requests take blocks the index does not
//!   count), so the capacity the index grants it shrinks ([`Learner::capacity`]). Two parts:
//!   the share of the pod's cached blocks that are prompt blocks (answers are cached too, and
//!   `usage` says how long they were), and a feedback factor moved by each answer's relative
//!   error, up when the pod reports more than predicted, down when less, so it settles where
//!   errors balance. Never above the pod's KV size, and never below what the pod's own
//!   answers prove it holds ([`held`]): misses alone would otherwise shrink a pod that only
//!   evicts now and then until the index forgets prompts it still has.

pub mod allowance;
pub mod batch;
pub mod first_token;
pub mod held;
pub mod readers;
pub mod shared_models;
pub mod tail;
pub mod tokens;
pub mod ttft;
pub mod usage;

use hashbrown::HashMap;

use crate::pod_table::MAX_PODS;
pub use first_token::{FirstOutput, OutputEventFinder};
use held::{Answer, Held};
pub use readers::UsageReaders;
pub use tail::{TailReport, TailShare};
pub use tokens::{prompt_size, PromptSize, TextRatio, MEDIA_PART_TOKENS};
pub use ttft::{Fit, Load, Prior, TtftModels};
pub use usage::{Usage, UsageScanner};

/// Share of an answer's relative error (reported vs predicted cached tokens) applied to the
/// pod's index capacity: an answer reporting nothing of a predicted hit takes 25 % off, so
/// an evicting pod's entries go within a handful of answers, and one noisy answer moves little.
const CAPACITY_STEP: f64 = 0.05;

/// Weight of the newest answer in a pod's prompt share of cached tokens: ~20 answers.
const PROMPT_SHARE_STEP: f64 = 0.05;

/// The index never grants a pod less than this share of its KV size.
const MIN_CAPACITY_SCALE: f64 = 0.05;

/// The feedback factor stays within these: it corrects what the prompt share and the text
/// ratio leave (block boundaries, pinned blocks), not orders of magnitude.
const FEEDBACK_BOUNDS: (f64, f64) = (0.25, 2.0);

/// What a request remembers of its decision until its answer.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Dispatch {
    /// The prompt's size as estimated (for the text ratio).
    pub prompt: PromptSize,
    /// Prompt tokens the chosen pod was predicted to hold cached.
    pub predicted_cached_tokens: u32,
    /// Prompt tokens the index covers (its hashed blocks): only these are compared with the
    /// pod's report, as past them the index knows nothing.
    pub indexed_tokens: u32,
    /// Index blocks the pod was matched on, and blocks hashed (for [`held`]).
    pub matched_blocks: u32,
    pub hashed_blocks: u32,
    /// Hash of the last matched block: names the prefix the pod was predicted to hold.
    pub prefix_key: Option<u64>,
    /// Tokens per block the prompt was hashed and predicted with: the pool's `block_size`,
    /// or the configured one when the pods report none. The pod's report is judged in these.
    pub block_tokens: u32,
    /// Prompt tokens it must compute: counted in flight until its first byte.
    pub uncached_tokens: u32,
    /// The pod's load when sent, this request's tokens included (the model's input).
    pub load: Load,
    pub sent_ms: u64,
    /// The client asked for a stream: its first byte is the first token (a whole answer's
    /// first byte comes after the generation, so it is no TTFT sample).
    pub streamed: bool,
    /// The answer will carry `usage`: always a whole answer's and a Responses API stream's; a
    /// chat or completions stream's only when the client asked (`stream_options.include_usage`),
    /// else its chunks are not scanned.
    pub usage_expected: bool,
    /// A Responses API answer: a stream's first token is its first output event, after the
    /// events it opens with ([`first_token`]), not its first byte.
    pub responses_api: bool,
    /// A chat or completions answer: vLLM writes its `prompt_tokens_details` only when
    /// something was cached (and it runs with `--enable-prompt-tokens-details`). A Responses
    /// answer always carries its cached tokens; a Messages one never does.
    pub details_only_on_hits: bool,
    /// The pod's cached-token figure will not be this prompt's: a batch of prompts (vLLM
    /// reports the last one's), a request for the prompt's logprobs (computed without the
    /// prefix cache) or a whole answer of `n` > 1 choices (the last child's, a sibling's hit).
    /// Its `usage` still tells the prompt's size; its cached tokens are not compared with the
    /// prediction.
    pub cached_report_unrelated: bool,
}

/// Index accuracy: predicted vs reported cached tokens, summed over answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheReport {
    pub predicted: u64,
    pub reported: u64,
}

/// One worker's learned state.
#[derive(Debug, Clone)]
pub struct Learner {
    pub models: TtftModels,
    pub text_ratio: TextRatio,
    /// The share of a prompt past the index's hashed part found cached, for prompts matched
    /// to the end of that part.
    pub tail_share: TailShare,
    /// Share of its KV size the index grants each pod (1 unless it under-reported).
    capacity_scale: HashMap<String, CapacityScale>,
    /// Each pod's epoch as the pod table last showed it ([`Learner::saw_epochs`]).
    epochs: HashMap<String, u32>,
}

/// Per pod: the share of its cached tokens that are prompt tokens, the feedback factor, and
/// what its answers prove it holds (the floor).
#[derive(Debug, Clone, PartialEq)]
struct CapacityScale {
    prompt_share: f64,
    feedback: f64,
    held: Held,
    /// A chat or completions answer of the pod carried cached tokens: it runs with
    /// `--enable-prompt-tokens-details`, so one of them without is a full miss.
    writes_details: bool,
}

impl Default for CapacityScale {
    fn default() -> Self {
        Self { prompt_share: 1.0, feedback: 1.0, held: Held::default(), writes_details: false }
    }
}

impl Learner {
    pub fn new(prior: Prior) -> Self {
        Self {
            models: TtftModels::new(prior),
            text_ratio: TextRatio::default(),
            tail_share: TailShare::default(),
            capacity_scale: HashMap::new(),
            epochs: HashMap::new(),
        }
    }

    /// The pod's first response bytes arrived at `now_ms`.
    ///
    /// A request counted at a free slot when sent, on a pod that a scrape since showed with
    /// requests waiting, is taken as one that may have waited for a slot: the counts missed a
    /// request (two workers placing a burst at once), and its wait says nothing of the pod's
    /// speed (workload c: one such answer, 1.6 s, priced its pod 2–4 × slower for a run).
    pub fn first_byte(&mut self, pod: &str, dispatch: &Dispatch, now_ms: u64) {
        let ttft = now_ms.saturating_sub(dispatch.sent_ms) as f64;
        let mut load = dispatch.load;
        if load.requests <= 0.0 && self.models.queued_after(pod, dispatch.sent_ms) {
            load.requests = 1.0;
        }
        self.models.observe(pod, load, ttft, now_ms);
    }

    /// The pod reported `usage` for a request sent as `dispatch`. Returns the cached tokens
    /// predicted and reported, when the pod reports cached tokens.
    pub fn answered(
        &mut self,
        pod: &str,
        dispatch: &Dispatch,
        usage: &Usage,
        block_tokens: u32,
    ) -> Option<CacheReport> {
        self.text_ratio.observe(dispatch.prompt, usage.prompt_tokens);
        if dispatch.cached_report_unrelated {
            return None;
        }
        let indexed = u64::from(dispatch.indexed_tokens);
        // vLLM writes a chat or completions answer's `prompt_tokens_details` only when something
        // was cached (and it runs with `--enable-prompt-tokens-details`): from a pod whose such
        // answers have carried cached tokens, one without had none cached. Read as "no figure",
        // every full miss (a pod that evicted the whole prompt: what the index most needs to
        // hear) went unheard. (Its Responses answers always carry them, flag or not: they say
        // nothing of the flag.)
        let on_hits_only = dispatch.details_only_on_hits;
        let cached = match usage.cached_tokens {
            Some(cached) => cached,
            None if on_hits_only && self.capacity_scale.get(pod).is_some_and(|s| s.writes_details) => 0,
            None => return None,
        };
        if dispatch.hashed_blocks > 0 && dispatch.matched_blocks >= dispatch.hashed_blocks {
            self.tail_share.observe(TailReport {
                indexed_tokens: indexed,
                prompt_tokens: usage.prompt_tokens,
                cached_tokens: cached,
                block_tokens: u64::from(block_tokens),
            });
        }
        let reported = cached.min(indexed);
        let predicted = u64::from(dispatch.predicted_cached_tokens).min(indexed);
        if !self.capacity_scale.contains_key(pod) && self.capacity_scale.len() < MAX_PODS {
            self.capacity_scale.insert(pod.to_string(), CapacityScale::default());
        }
        let Some(scale) = self.capacity_scale.get_mut(pod) else {
            return Some(CacheReport { predicted, reported });
        };
        scale.writes_details |= on_hits_only;
        // Less than a block apart is rounding (text blocks are estimated), not eviction.
        let total = usage.prompt_tokens.saturating_add(usage.completion_tokens);
        if total > 0 {
            let share = usage.prompt_tokens as f64 / total as f64;
            scale.prompt_share += PROMPT_SHARE_STEP * (share - scale.prompt_share);
        }
        let error = reported as f64 - predicted as f64;
        let block = f64::from(block_tokens.max(1));
        scale.held.answered(Answer {
            key: dispatch.prefix_key,
            matched_blocks: dispatch.matched_blocks,
            hashed_blocks: dispatch.hashed_blocks,
            confirmed: error > -block,
        });
        if error.abs() >= block {
            let relative = error / (reported.max(predicted) as f64);
            let moved = scale.feedback * (1.0 + CAPACITY_STEP * relative);
            scale.feedback = moved.clamp(FEEDBACK_BOUNDS.0, FEEDBACK_BOUNDS.1);
        }
        Some(CacheReport { predicted, reported })
    }

    /// The blocks the prefix index may hold for `pod`, given its KV size in blocks.
    ///
    /// The index counts text in blocks of `block_tokens` *estimated* tokens, so a pod's KV
    /// size in index blocks is its size in engine blocks ÷ the text ratio; of that, answers
    /// take their share, and the feedback factor corrects the rest. Never below the blocks the
    /// pod's answers prove it holds (see [`held`]), nor above its KV size.
    pub fn capacity(&self, pod: &str, kv_blocks: usize) -> usize {
        let scale = self.capacity_scale.get(pod);
        let (share, feedback) = scale.map_or((1.0, 1.0), |s| (s.prompt_share, s.feedback));
        let text_blocks = 1.0 / self.text_ratio.value().clamp(0.25, 4.0);
        let kv_size = (kv_blocks as f64) * text_blocks;
        let floor = (scale.map_or(0, |s| s.held.floor()) as f64).min(kv_size);
        // The feedback may exceed 1 (the prompt share underestimated what prompts keep), but
        // no pod holds more than its KV cache: past it only a pod over-reporting its cached
        // tokens pushes the factor, and its prefixes would outlive any engine's memory.
        let corrected = (kv_blocks as f64) * (share * feedback * text_blocks).max(MIN_CAPACITY_SCALE);
        corrected.min(kv_size).max(floor).round().max(1.0) as usize
    }

    /// Pods anything is remembered of (their epochs, index capacity, speed or batches).
    pub fn pods_remembered(&self) -> usize {
        self.epochs.len().max(self.capacity_scale.len()).max(self.models.pods_remembered())
    }

    /// Forgets pods that left the pool.
    pub fn retain_pods(&mut self, keep: impl Fn(&str) -> bool) {
        self.models.retain_pods(&keep);
        self.capacity_scale.retain(|pod, _| keep(pod));
        self.epochs.retain(|pod, _| keep(pod));
    }

    /// A new pod table: each pod's address and epoch. A pod whose epoch changed restarted (or
    /// rejoined): this worker's observations of its speed and of its cache are forgotten, as
    /// the prefix index forgets its blocks; an engine that was slow or evicting is no guide
    /// to the one that replaced it. O(pods), once per published table.
    pub fn saw_epochs<'a>(&mut self, pods: impl Iterator<Item = (&'a str, u32)>) {
        for (pod, epoch) in pods {
            let room = self.epochs.len() < MAX_PODS;
            match self.epochs.get_mut(pod) {
                Some(known) if *known != epoch => {
                    *known = epoch;
                    self.models.forget(pod);
                    self.capacity_scale.remove(pod);
                }
                Some(_) => {}
                None if room => {
                    self.epochs.insert(pod.to_owned(), epoch);
                }
                None => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PRIOR: Prior = Prior { overhead_ms: 30.0, ms_per_token: 0.02 };

    #[test]
    fn an_evicting_pod_loses_index_capacity_and_regains_it() {
        let mut learner = Learner::new(PRIOR);
        let dispatch = Dispatch { predicted_cached_tokens: 1_024, indexed_tokens: 4_096, ..Dispatch::default() };
        let evicted = Usage { prompt_tokens: 2_000, completion_tokens: 1, cached_tokens: Some(0) };
        for _ in 0..30 {
            let report = learner.answered("a", &dispatch, &evicted, 16);
            assert_eq!(report, Some(CacheReport { predicted: 1_024, reported: 0 }));
        }
        let shrunk = learner.capacity("a", 10_000);
        assert!(shrunk < 5_000, "{shrunk}");
        assert_eq!(learner.capacity("b", 10_000), 10_000, "other pods keep theirs");
        let confirmed = Usage { cached_tokens: Some(1_024), ..evicted };
        learner.answered("a", &dispatch, &confirmed, 16);
        assert_eq!(learner.capacity("a", 10_000), shrunk, "a confirmed prediction changes nothing");
        // The shrunk index now predicts half of what the pod holds: capacity comes back.
        let under = Dispatch { predicted_cached_tokens: 512, ..dispatch };
        for _ in 0..200 {
            learner.answered("a", &under, &confirmed, 16);
        }
        assert!(learner.capacity("a", 10_000) <= 20_000);
        let silent = Usage { cached_tokens: None, ..evicted };
        assert_eq!(
            learner.answered("c", &dispatch, &silent, 16),
            None,
            "no cached figure from this pod yet: no report"
        );
        // vLLM leaves a chat or completions answer's details out when nothing was cached: from
        // a pod whose such answers carry them, silence is a full miss.
        let chat = Dispatch { details_only_on_hits: true, ..dispatch };
        assert_eq!(learner.answered("a", &chat, &silent, 16), None, "only Responses-like answers so far");
        learner.answered("a", &chat, &confirmed, 16);
        let report = learner.answered("a", &chat, &silent, 16);
        assert_eq!(report, Some(CacheReport { predicted: 1_024, reported: 0 }));
        // A Responses answer always carries its cached tokens, flag or not: it proves nothing.
        let responses = Dispatch { details_only_on_hits: false, ..dispatch };
        learner.answered("d", &responses, &confirmed, 16);
        assert_eq!(learner.answered("d", &chat, &silent, 16), None);
    }

    #[test]
    fn a_pod_reporting_every_prompt_cached_gets_no_more_index_than_its_kv_cache_holds() {
        // A lying (or broken) pod: `cached_tokens` = the whole prompt, whatever was predicted.
        // Its feedback factor climbs to its bound, and the index kept twice the prompts any
        // engine of its size could, and the traffic that sticks to them.
        let mut learner = Learner::new(PRIOR);
        let dispatch = Dispatch { predicted_cached_tokens: 512, indexed_tokens: 4_096, ..Dispatch::default() };
        let all_cached = Usage { prompt_tokens: 4_096, completion_tokens: 1, cached_tokens: Some(4_096) };
        for _ in 0..300 {
            learner.answered("liar", &dispatch, &all_cached, 16);
        }
        assert_eq!(learner.capacity("liar", 10_000), 10_000);
        // Prompts estimated at half their real tokens: its KV size is half as many index blocks.
        for _ in 0..100 {
            learner.text_ratio.observe(PromptSize { tokens: 1_000, exact: false }, 2_000);
        }
        assert_eq!(learner.capacity("liar", 10_000), 5_000);
    }

    #[test]
    fn a_pod_that_evicts_a_prompt_now_and_then_keeps_index_capacity_for_all_it_holds() {
        // Workload (g)'s shape: 12 shared 6k-token prompts (375 blocks of 16) per pod, each
        // request adding 5 question blocks; every 10th answer finds its prompt evicted (LRU).
        let mut learner = Learner::new(PRIOR);
        let (prompt_blocks, question_blocks) = (375u32, 5u32);
        for i in 0..600u64 {
            let dispatch = Dispatch {
                predicted_cached_tokens: prompt_blocks * 16,
                indexed_tokens: (prompt_blocks + question_blocks) * 16,
                matched_blocks: prompt_blocks,
                hashed_blocks: prompt_blocks + question_blocks,
                prefix_key: Some(1 + i % 12),
                ..Dispatch::default()
            };
            let cached = if i % 10 == 9 { 0 } else { prompt_blocks * 16 };
            let prompt_tokens = u64::from(dispatch.indexed_tokens);
            let usage = Usage { prompt_tokens, completion_tokens: 1, cached_tokens: Some(u64::from(cached)) };
            learner.answered("a", &dispatch, &usage, 16);
        }
        let capacity = learner.capacity("a", 8_192);
        assert!(capacity >= 12 * prompt_blocks as usize, "{capacity}: the index must keep all 12 prompts");
        assert!(capacity < 8_192, "{capacity}: the misses still correct the index");
    }

    #[test]
    fn only_the_indexed_part_of_a_prompt_is_judged() {
        let mut learner = Learner::new(PRIOR);
        let dispatch = Dispatch { predicted_cached_tokens: 7_000, indexed_tokens: 4_096, ..Dispatch::default() };
        let usage = Usage { prompt_tokens: 7_200, completion_tokens: 8, cached_tokens: Some(6_000) };
        let report = learner.answered("a", &dispatch, &usage, 16);
        assert_eq!(
            report,
            Some(CacheReport { predicted: 4_096, reported: 4_096 }),
            "past the hashed part, nobody knows"
        );
    }

    #[test]
    fn answers_matched_to_the_end_of_the_index_teach_how_much_of_the_rest_is_cached() {
        let mut learner = Learner::new(PRIOR);
        // 4,096 tokens indexed of a 6,000-token shared prompt, then a 1,200-token question.
        let partly = Dispatch { indexed_tokens: 4_096, matched_blocks: 10, hashed_blocks: 256, ..Dispatch::default() };
        let usage = Usage { prompt_tokens: 7_200, completion_tokens: 8, cached_tokens: Some(6_000) };
        for _ in 0..20 {
            learner.answered("a", &partly, &usage, 16);
        }
        assert_eq!(learner.tail_share, TailShare::default(), "a match that ended inside the index says nothing");
        let whole = Dispatch { matched_blocks: 256, ..partly };
        for _ in 0..20 {
            learner.answered("a", &whole, &usage, 16);
        }
        let share = learner.tail_share.value();
        assert!((0.55..0.75).contains(&share), "{share}: 1,904 of the 3,104 tokens past the index");
    }

    #[test]
    fn long_answers_take_index_capacity_from_prompts() {
        let mut learner = Learner::new(PRIOR);
        let dispatch = Dispatch { predicted_cached_tokens: 512, indexed_tokens: 4_096, ..Dispatch::default() };
        let usage = Usage { prompt_tokens: 512, completion_tokens: 512, cached_tokens: Some(512) };
        for _ in 0..200 {
            learner.answered("a", &dispatch, &usage, 16);
        }
        assert_eq!(learner.capacity("a", 10_000), 5_000, "half of what the pod caches is answers");
    }

    #[test]
    fn a_wait_the_pods_metrics_showed_does_not_make_it_look_slow() {
        let mut learner = Learner::new(PRIOR);
        let free =
            |sent_ms: u64| Dispatch { load: Load { tokens: 500.0, requests: 0.0 }, sent_ms, ..Dispatch::default() };
        for i in 0..5u64 {
            for pod in ["a", "b", "c", "d"] {
                learner.first_byte(pod, &free(i * 100), i * 100 + 70);
            }
        }
        // "d" got a request too many of a burst: scrapes during its wait showed one waiting.
        learner.models.saw_batches([("d", 4.0, 1.0, 1_500)].into_iter());
        learner.first_byte("d", &free(1_000), 2_600);
        let load = Load { tokens: 500.0, requests: 0.0 };
        let (a, d) = (learner.models.predict("a", load), learner.models.predict("d", load));
        assert!(d < a + 20.0, "d {d} vs a {a}");
        // Without such a scrape, the same answer is the pod's own slowness.
        let mut unseen = learner.clone();
        unseen.first_byte("c", &free(3_000), 4_600);
        assert!(unseen.models.predict("c", load) > a + 40.0);
    }

    #[test]
    fn a_restarted_pod_is_learned_anew() {
        let mut learner = Learner::new(PRIOR);
        learner.saw_epochs([("a", 3), ("b", 7)].into_iter());
        let slow = Dispatch { load: Load { tokens: 500.0, requests: 0.0 }, sent_ms: 0, ..Dispatch::default() };
        let evicted = Usage { prompt_tokens: 2_000, completion_tokens: 1, cached_tokens: Some(0) };
        let missed = Dispatch { predicted_cached_tokens: 1_024, indexed_tokens: 4_096, ..slow };
        for pod in ["a", "b"] {
            for _ in 0..5 {
                learner.first_byte(pod, &slow, 900);
                learner.answered(pod, &missed, &evicted, 16);
            }
        }
        // Both seen with requests waiting behind full batches of 8; b comes back with 2.
        learner.models.saw_batches([("a", 8.0, 1.0, 0), ("b", 8.0, 1.0, 0)].into_iter());
        assert!(learner.models.fitted("a") && learner.capacity("a", 10_000) < 10_000);
        learner.saw_epochs([("a", 3), ("b", 8)].into_iter());
        assert_eq!(learner.models.batch_size("a"), Some(8.0), "the same engine");
        learner.models.saw_batches([("b", 2.0, 1.0, 10)].into_iter());
        assert_eq!(learner.models.batch_size("b"), Some(2.0), "b's new engine's batch, not 8 stepping down");
        assert!(learner.models.fitted("a") && learner.capacity("a", 10_000) < 10_000, "the same engine");
        assert!(!learner.models.fitted("b"), "b restarted: its speed is no longer known");
        assert_eq!(learner.capacity("b", 10_000), 10_000, "nor what its cache evicted");
    }

    #[test]
    fn first_bytes_feed_the_pods_model() {
        let mut learner = Learner::new(PRIOR);
        for i in 0..20u32 {
            let load = Load { tokens: f64::from(i) * 1_000.0, requests: 0.0 };
            let dispatch = Dispatch { load, sent_ms: 1_000, ..Dispatch::default() };
            learner.first_byte("slow", &dispatch, 1_000 + 30 + u64::from(i) * 100);
        }
        assert!(learner.models.predict("slow", Load { tokens: 10_000.0, requests: 0.0 }) > 900.0);
    }
}
