//! (k) Long prompts with long outputs on a pool of 2 prefill + 2 decode pods, and the
//! short-prompt check that the decider leaves alone.
//!
//! Every prompt starts with one of a few shared 2,048-token documents (so prefill pods have
//! something to hit) and goes on with its own 2k–6k tokens: 4k–8k in all, each then asking for
//! 512 tokens. On an aggregated pool every new prompt's prefill (up to a whole 8,192-token
//! step) lands in the engine steps of the pod's running decodes: their inter-token gap jumps
//! by about its prefill time. Disaggregated, decode pods only ever decode.

use std::time::Duration;

use crate::prompts::{text_of_tokens, SeededRandom};
use crate::workload::{pod_args, Job, Size};

/// Pods of each role; the aggregated targets use the same four pods alike.
pub const PREFILL_PODS: usize = 2;
pub const DECODE_PODS: usize = 2;
const SHARED_DOCUMENTS: usize = 8;
const DOCUMENT_TOKENS: usize = 2048;
const MIN_OWN_TOKENS: usize = 2048;
const MAX_OWN_TOKENS: usize = 6144;
const LONG_OUTPUT_TOKENS: usize = 512;
/// 32 streams over 4 pods: every pod runs several decodes while new prompts keep arriving.
const LONG_CONCURRENCY: usize = 32;
/// About one request's service time (512 tokens at ~35 ms) spread over the 32 slots.
const LONG_STAGGER: Duration = Duration::from_millis(550);
const BUSY_CONCURRENCY: usize = 48;
const BUSY_STAGGER: Duration = Duration::from_millis(370);
/// Prompt plus output at most 8,192 + 512 tokens, with room.
const MAX_MODEL_LEN: usize = 10_240;
const NUM_GPU_BLOCKS: usize = 16_384;
const MAX_NUM_SEQS: usize = 64;

const MIN_SHORT_PROMPT: usize = 32;
const MAX_SHORT_PROMPT: usize = 400;
const MIN_SHORT_OUTPUT: usize = 32;
const MAX_SHORT_OUTPUT: usize = 128;
const SHORT_CONCURRENCY: usize = 16;
const SHORT_STAGGER: Duration = Duration::from_millis(100);

/// The large preset (a 70B-class model: 0.06 ms per prefill token, 30 ms decode steps), where
/// P/D is deployed: one 8k-token prefill costs about 0.5 s, a dozen decode steps.
fn large_pod_args() -> Vec<String> {
    let mut args = pod_args(MAX_NUM_SEQS, NUM_GPU_BLOCKS, MAX_MODEL_LEN);
    if let Some(preset) = args.iter_mut().find(|arg| *arg == "small") {
        *preset = "large".to_string();
    }
    args
}

/// One P/D workload: its jobs and the simulator flags of its pods (roles added per pod).
#[derive(Debug, Clone)]
pub struct PdWorkload {
    pub label: &'static str,
    pub pod_args: Vec<String>,
    pub concurrency: usize,
    /// Client slot `i` starts `i ×` this late (see `paced`), in simulated time.
    pub stagger: Duration,
    pub jobs: Vec<Job>,
}

/// (k): long prompts, long outputs.
pub fn long_prompts(size: Size, seed: u64) -> PdWorkload {
    long_prompts_at(size.pick(96, 32), LONG_CONCURRENCY, LONG_STAGGER, "k-long-prompts", seed)
}

/// (k) at 1.5× the client slots: more prefills land in every aggregated pod's decode steps.
pub fn long_prompts_busy(size: Size, seed: u64) -> PdWorkload {
    long_prompts_at(size.pick(144, 48), BUSY_CONCURRENCY, BUSY_STAGGER, "k-long-prompts-busy", seed)
}

fn long_prompts_at(
    requests: usize,
    concurrency: usize,
    stagger: Duration,
    label: &'static str,
    seed: u64,
) -> PdWorkload {
    let mut random = SeededRandom::new(seed ^ 0x6b);
    let documents: Vec<String> =
        (0..SHARED_DOCUMENTS).map(|d| text_of_tokens(DOCUMENT_TOKENS, seed ^ (900_000 + d as u64))).collect();
    let jobs = (0..requests)
        .map(|index| {
            let document = documents.get(random.between(0, SHARED_DOCUMENTS - 1)).cloned().unwrap_or_default();
            let own = text_of_tokens(random.between(MIN_OWN_TOKENS, MAX_OWN_TOKENS), seed ^ (910_000 + index as u64));
            Job::Completion { prompt: format!("{document} {own}"), max_tokens: LONG_OUTPUT_TOKENS }
        })
        .collect();
    PdWorkload { label, pod_args: large_pod_args(), concurrency, stagger, jobs }
}

/// (k-short): short prompts the decider should not split.
pub fn short_prompts(size: Size, seed: u64) -> PdWorkload {
    let requests = size.pick(160, 48);
    let mut random = SeededRandom::new(seed ^ 0x6b73);
    let jobs = (0..requests)
        .map(|index| {
            let prompt =
                text_of_tokens(random.between(MIN_SHORT_PROMPT, MAX_SHORT_PROMPT), seed ^ (920_000 + index as u64));
            Job::Completion { prompt, max_tokens: random.between(MIN_SHORT_OUTPUT, MAX_SHORT_OUTPUT) }
        })
        .collect();
    PdWorkload {
        label: "k-short-prompts",
        pod_args: large_pod_args(),
        concurrency: SHORT_CONCURRENCY,
        stagger: SHORT_STAGGER,
        jobs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_prompts_are_4k_to_8k_tokens_and_reproducible() {
        let workload = long_prompts(Size::Quick, 3);
        assert_eq!(workload.jobs.len(), 32);
        for job in &workload.jobs {
            let Job::Completion { prompt, max_tokens } = job else { panic!("completions only") };
            let tokens = prompt.split_whitespace().count();
            assert!((4096..=8192).contains(&tokens), "{tokens}");
            assert_eq!(*max_tokens, 512);
        }
        let again = long_prompts(Size::Quick, 3);
        assert!(matches!((&workload.jobs[0], &again.jobs[0]),
            (Job::Completion { prompt: a, .. }, Job::Completion { prompt: b, .. }) if a == b));
    }
}
