//! (e) Shared-prefix chat under KV pressure, the shape issue 12 measured gateway replicas on:
//! 16 system prompts of about 1,000 tokens shared by 400 single-turn streaming chats, 16 in
//! flight, on 4 pods of 400 blocks of 16 tokens (6,400 tokens: six system prompts when idle,
//! four beside their running requests). A router that keeps each system prompt on one pod
//! keeps all 16 cached across the pool; one that spreads them makes every pod evict.

use super::{pod_args, Job, Size, Workload, WorkloadName};
use crate::prompts::{text_of_tokens, SeededRandom};

const PODS: usize = 4;
const SYSTEM_PROMPTS: usize = 16;
const SYSTEM_TOKENS: usize = 1000;
const USER_TOKENS: usize = 64;
const OUTPUT_TOKENS: usize = 64;
const CONCURRENCY: usize = 16;
/// The pressure of the measurement (see the module docs).
const NUM_GPU_BLOCKS: usize = 400;
const MAX_NUM_SEQS: usize = 8;
const MAX_MODEL_LEN: usize = 4096;

pub fn build(size: Size, seed: u64) -> Workload {
    let requests = size.pick(400, 160);
    let systems: Vec<String> =
        (0..SYSTEM_PROMPTS).map(|index| text_of_tokens(SYSTEM_TOKENS, seed ^ (3000 + index as u64))).collect();
    let mut random = SeededRandom::new(seed ^ 0xe);
    let jobs = (0..requests)
        .map(|index| {
            let system = systems.get(random.between(0, SYSTEM_PROMPTS - 1)).cloned().unwrap_or_default();
            let user = text_of_tokens(USER_TOKENS, seed ^ 0xe000_0000 ^ index as u64);
            Job::Chat { system, user_turns: vec![user], think_ms: Vec::new(), max_tokens: OUTPUT_TOKENS }
        })
        .collect();
    Workload {
        name: WorkloadName::SharedChat,
        pods: PODS,
        pod_args: pod_args(MAX_NUM_SEQS, NUM_GPU_BLOCKS, MAX_MODEL_LEN),
        concurrency: CONCURRENCY,
        jobs,
        stages: Vec::new(),
    }
}
