//! (a) Shared prefixes: a few long prompt prefixes (a system prompt, a document) shared by
//! many requests, on two pods. The ideal router computes each prefix once: with 5 prefixes of
//! 512 tokens and 128-token suffixes, the best possible hit rate over 100 prompts is
//! 95 × 512 / (100 × 640) = 76%; a router that spreads each prefix over both pods loses at
//! least one more prefix computation per prefix.

use super::{pod_args, Job, Size, Workload, WorkloadName};
use crate::prompts::{text_of_tokens, SeededRandom};

const PODS: usize = 2;
const PREFIXES: usize = 5;
const PREFIX_TOKENS: usize = 512;
const SUFFIX_TOKENS: usize = 128;
const OUTPUT_TOKENS: usize = 128;
const CONCURRENCY: usize = 8;
/// vLLM's default-sized pool for this model: no KV pressure here, only affinity matters.
const NUM_GPU_BLOCKS: usize = 16_384;
/// Room for all 8 clients on one pod, so piling a prefix on one pod never queues.
const MAX_NUM_SEQS: usize = 16;
const MAX_MODEL_LEN: usize = 4096;

pub fn build(size: Size, seed: u64) -> Workload {
    let prompts = size.pick(100, 40);
    let prefixes: Vec<String> =
        (0..PREFIXES).map(|group| text_of_tokens(PREFIX_TOKENS, seed ^ (1000 + group as u64))).collect();
    let mut jobs: Vec<Job> = (0..prompts)
        .map(|index| {
            let prefix = prefixes.get(index % PREFIXES).cloned().unwrap_or_default();
            let suffix = text_of_tokens(SUFFIX_TOKENS, seed ^ (100_000 + index as u64));
            Job::Completion { prompt: format!("{prefix} {suffix}"), max_tokens: OUTPUT_TOKENS }
        })
        .collect();
    SeededRandom::new(seed).shuffle(&mut jobs);
    Workload {
        name: WorkloadName::SharedPrefix,
        pods: PODS,
        pod_args: pod_args(MAX_NUM_SEQS, NUM_GPU_BLOCKS, MAX_MODEL_LEN),
        concurrency: CONCURRENCY,
        jobs,
        stages: Vec::new(),
    }
}
