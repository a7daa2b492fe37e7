//! (f) A heterogeneous pool (issue 14): four pods, two of them 3× slower at prefill (an older
//! GPU type, a degraded node), serving unrelated prompts of 1,000 to 3,000 tokens. Prefill is
//! made to matter (0.1 ms per token: a larger model than the small preset's): a 2,000-token
//! prompt takes 200 ms to prefill on a fast pod and 600 ms on a slow one. Request counts and
//! queue lengths look alike on all four pods; only answer times tell them apart.

use super::{pod_args, Job, Size, Workload, WorkloadName};
use crate::prompts::{text_of_tokens, SeededRandom};

const PODS: usize = 4;
/// Per pod, in start order: two fast, two 3× slower at prefill. Each pod is its own
/// simulator process, so each gets its own value ([`prefill_slowdown_args`]).
const PREFILL_SLOWDOWN: [&str; PODS] = ["1", "1", "3", "3"];
const PREFILL_MS_PER_TOKEN: &str = "0.1";
const MIN_PROMPT_TOKENS: usize = 1000;
const MAX_PROMPT_TOKENS: usize = 3000;
const MIN_OUTPUT_TOKENS: usize = 16;
const MAX_OUTPUT_TOKENS: usize = 64;
/// Enough to keep every pod busy (about three each), not enough to saturate the pool.
const CONCURRENCY: usize = 12;
const MAX_NUM_SEQS: usize = 8;
const NUM_GPU_BLOCKS: usize = 16_384;
const MAX_MODEL_LEN: usize = 4096;

pub fn build(size: Size, seed: u64) -> Workload {
    let requests = size.pick(240, 72);
    let mut random = SeededRandom::new(seed ^ 0xf);
    let jobs = (0..requests)
        .map(|index| {
            let prompt_tokens = random.between(MIN_PROMPT_TOKENS, MAX_PROMPT_TOKENS);
            let max_tokens = random.between(MIN_OUTPUT_TOKENS, MAX_OUTPUT_TOKENS);
            Job::Completion { prompt: text_of_tokens(prompt_tokens, seed ^ (600_000 + index as u64)), max_tokens }
        })
        .collect();
    let mut args = pod_args(MAX_NUM_SEQS, NUM_GPU_BLOCKS, MAX_MODEL_LEN);
    args.extend(["--prefill-per-token-ms", PREFILL_MS_PER_TOKEN].map(String::from));
    Workload {
        name: WorkloadName::Heterogeneous,
        pods: PODS,
        pod_args: args,
        concurrency: CONCURRENCY,
        jobs,
        stages: Vec::new(),
    }
}

/// Pod `index`'s own slowdown flag.
pub fn prefill_slowdown_args(index: usize) -> Vec<String> {
    PREFILL_SLOWDOWN
        .get(index)
        .map(|slowdown| vec!["--prefill-slowdown".to_string(), slowdown.to_string()])
        .unwrap_or_default()
}
