//! (g) llm-d's "optimized baseline" shape, scaled to the simulator (issue 14): many long
//! shared system prompts, each request one of them plus its own question, sent open loop at a
//! Poisson rate that steps up a ladder past what the pool can prefill without its cache.
//!
//! llm-d's run: 150 system prompts of 6k tokens, 1.2k-token questions, on real H100s. Here: 48
//! system prompts of 6,000 tokens (288k tokens: all fit in the pool's 4 × 131k-token KV cache
//! when each stays on one pod, none fits on every pod), 1,200-token questions, 0.1 ms per
//! prefilled token. A request whose system prompt is cached prefills 1,200 tokens (120 ms); one
//! that is not, 7,200 (720 ms): round robin saturates near 5.5 requests/s, a cache-keeping
//! router near 30. The ladder climbs 1 → 12 requests/s.

use super::{pod_args, Job, Size, Workload, WorkloadName};
use crate::prompts::{text_of_tokens, SeededRandom};

const PODS: usize = 4;
const SYSTEM_PROMPTS: usize = 48;
const SYSTEM_TOKENS: usize = 6000;
const QUESTION_TOKENS: usize = 1200;
const OUTPUT_TOKENS: usize = 32;
const PREFILL_MS_PER_TOKEN: &str = "0.1";
/// Requests per second of each stage, in order.
const RATES: [f64; 5] = [1.0, 2.0, 4.0, 8.0, 12.0];
const MAX_NUM_SEQS: usize = 16;
/// 8,192 blocks of 16 tokens: 131k tokens per pod (see the module docs).
const NUM_GPU_BLOCKS: usize = 8192;
const MAX_MODEL_LEN: usize = 8192;

pub fn build(size: Size, seed: u64) -> Workload {
    let stage_ms = size.pick(30_000, 8_000) as f64;
    let systems: Vec<String> =
        (0..SYSTEM_PROMPTS).map(|index| text_of_tokens(SYSTEM_TOKENS, seed ^ (9_000 + index as u64))).collect();
    let mut random = SeededRandom::new(seed ^ 0x9);
    let mut jobs = Vec::new();
    for (stage, rate) in RATES.iter().enumerate() {
        let stage_start = stage as f64 * stage_ms;
        let mut at = stage_start;
        loop {
            // Poisson arrivals: exponential gaps of mean 1/rate.
            at += -(1.0 - random.next_unit()).ln() / rate * 1000.0;
            if at >= stage_start + stage_ms {
                break;
            }
            let system = systems.get(random.between(0, SYSTEM_PROMPTS - 1)).cloned().unwrap_or_default();
            let question = text_of_tokens(QUESTION_TOKENS, seed ^ 0x9000_0000 ^ jobs.len() as u64);
            let job = Job::Completion { prompt: format!("{system} {question}"), max_tokens: OUTPUT_TOKENS };
            jobs.push(Job::Scheduled { at_ms: at as u64, job: Box::new(job) });
        }
    }
    let mut args = pod_args(MAX_NUM_SEQS, NUM_GPU_BLOCKS, MAX_MODEL_LEN);
    args.extend(["--prefill-per-token-ms", PREFILL_MS_PER_TOKEN].map(String::from));
    // Open loop: every request has its own client slot and leaves at its scheduled time.
    Workload { name: WorkloadName::Ladder, pods: PODS, pod_args: args, concurrency: jobs.len(), jobs }
}
