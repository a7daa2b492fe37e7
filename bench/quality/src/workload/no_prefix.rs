//! (c) No shared prefixes: every prompt is unrelated random text, so no router can win on
//! cache and the workload measures load balancing alone. Prompt and output lengths vary by
//! 8× and 16×, so equal request counts are not equal work, and each pod runs at most four
//! sequences, so a pod that gets more than its share queues.

use super::{pod_args, Job, Size, Workload, WorkloadName};
use crate::prompts::{text_of_tokens, SeededRandom};

const PODS: usize = 4;
const MIN_PROMPT_TOKENS: usize = 128;
const MAX_PROMPT_TOKENS: usize = 1024;
const MIN_OUTPUT_TOKENS: usize = 16;
const MAX_OUTPUT_TOKENS: usize = 256;
const CONCURRENCY: usize = 16;
/// 16 clients over 4 pods is exactly 4 per pod: any imbalance queues.
const MAX_NUM_SEQS: usize = 4;
const NUM_GPU_BLOCKS: usize = 16_384;
const MAX_MODEL_LEN: usize = 4096;

pub fn build(size: Size, seed: u64) -> Workload {
    let requests = size.pick(160, 48);
    let mut random = SeededRandom::new(seed ^ 0xc);
    let jobs = (0..requests)
        .map(|index| {
            let prompt_tokens = random.between(MIN_PROMPT_TOKENS, MAX_PROMPT_TOKENS);
            let max_tokens = random.between(MIN_OUTPUT_TOKENS, MAX_OUTPUT_TOKENS);
            Job::Completion { prompt: text_of_tokens(prompt_tokens, seed ^ (300_000 + index as u64)), max_tokens }
        })
        .collect();
    Workload {
        name: WorkloadName::NoPrefix,
        pods: PODS,
        pod_args: pod_args(MAX_NUM_SEQS, NUM_GPU_BLOCKS, MAX_MODEL_LEN),
        concurrency: CONCURRENCY,
        jobs,
        stages: Vec::new(),
    }
}
