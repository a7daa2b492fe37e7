//! (l) Mixed prompt lengths (issue 14's "(e)"; `e` was taken): many short chats and a few
//! 8,000-token documents on four pods. A pod prefilling a document is busy for 800 ms (0.1 ms
//! per token) while its request count says "one": counting requests sends short chats to queue
//! behind it, counting uncached prompt tokens in flight does not.

use super::{pod_args, Job, Size, Workload, WorkloadName};
use crate::prompts::{text_of_tokens, SeededRandom};

const PODS: usize = 4;
const PREFILL_MS_PER_TOKEN: &str = "0.1";
const LONG_TOKENS: usize = 8000;
/// One request in twenty is a long document, so the TTFT p90 is the short chats' (with one in
/// ten it would be the documents' own prefill time, the same whatever the routing).
const LONG_EVERY: usize = 20;
const MIN_SHORT_TOKENS: usize = 64;
const MAX_SHORT_TOKENS: usize = 256;
const OUTPUT_TOKENS: usize = 32;
const CONCURRENCY: usize = 16;
const MAX_NUM_SEQS: usize = 8;
const NUM_GPU_BLOCKS: usize = 16_384;
/// A document plus its answer must fit.
const MAX_MODEL_LEN: usize = 12_288;

pub fn build(size: Size, seed: u64) -> Workload {
    let requests = size.pick(320, 96);
    let mut random = SeededRandom::new(seed ^ 0x1);
    let jobs = (0..requests)
        .map(|index| {
            let tokens =
                if index % LONG_EVERY == 3 { LONG_TOKENS } else { random.between(MIN_SHORT_TOKENS, MAX_SHORT_TOKENS) };
            Job::Completion {
                prompt: text_of_tokens(tokens, seed ^ (700_000 + index as u64)),
                max_tokens: OUTPUT_TOKENS,
            }
        })
        .collect();
    let mut args = pod_args(MAX_NUM_SEQS, NUM_GPU_BLOCKS, MAX_MODEL_LEN);
    args.extend(["--prefill-per-token-ms", PREFILL_MS_PER_TOKEN].map(String::from));
    Workload {
        name: WorkloadName::MixedLengths,
        pods: PODS,
        pod_args: args,
        concurrency: CONCURRENCY,
        jobs,
        stages: Vec::new(),
    }
}
