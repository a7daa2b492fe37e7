//! (d) A burst: every request is released at the same instant, far more than the pool runs at
//! once (4 pods × 4 sequences), so most of it queues and the drain order decides the tail.
//! Half of each prompt is one of 8 shared 512-token prefixes: a prefix-aware router is
//! tempted to pile a group onto the pod that has it cached, which is exactly what must not
//! leave another pod idle while this one queues.

use super::{pod_args, Job, Size, Workload, WorkloadName};
use crate::prompts::{text_of_tokens, SeededRandom};

const PODS: usize = 4;
const PREFIXES: usize = 8;
const PREFIX_TOKENS: usize = 512;
const MIN_SUFFIX_TOKENS: usize = 64;
const MAX_SUFFIX_TOKENS: usize = 512;
const MIN_OUTPUT_TOKENS: usize = 16;
const MAX_OUTPUT_TOKENS: usize = 256;
/// Small on purpose: the pool runs 16 requests at once and the rest wait.
const MAX_NUM_SEQS: usize = 4;
const NUM_GPU_BLOCKS: usize = 16_384;
const MAX_MODEL_LEN: usize = 4096;

pub fn build(size: Size, seed: u64) -> Workload {
    let requests = size.pick(200, 64);
    let mut random = SeededRandom::new(seed ^ 0xd);
    let prefixes: Vec<String> =
        (0..PREFIXES).map(|group| text_of_tokens(PREFIX_TOKENS, seed ^ (4000 + group as u64))).collect();
    let jobs: Vec<Job> = (0..requests)
        .map(|index| {
            let prefix = prefixes.get(random.between(0, PREFIXES - 1)).cloned().unwrap_or_default();
            let suffix_tokens = random.between(MIN_SUFFIX_TOKENS, MAX_SUFFIX_TOKENS);
            let suffix = text_of_tokens(suffix_tokens, seed ^ (400_000 + index as u64));
            let max_tokens = random.between(MIN_OUTPUT_TOKENS, MAX_OUTPUT_TOKENS);
            Job::Completion { prompt: format!("{prefix} {suffix}"), max_tokens }
        })
        .collect();
    Workload {
        name: WorkloadName::Burst,
        pods: PODS,
        pod_args: pod_args(MAX_NUM_SEQS, NUM_GPU_BLOCKS, MAX_MODEL_LEN),
        concurrency: jobs.len().max(1),
        jobs,
        stages: Vec::new(),
    }
}
