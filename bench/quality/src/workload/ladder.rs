//! (g) llm-d's "optimized baseline" shape, scaled to the simulator (issue 14): many long
//! shared system prompts, each request one of them plus its own question, sent open loop at a
//! Poisson rate that climbs a ladder of stages up to past round robin's saturation.
//!
//! llm-d's run: 150 system prompts of 6k tokens, 1.2k-token questions, on real H100s; at its
//! top rate the cache-aware scheduler serves what arrives while round robin serves its
//! capacity (+112 % output tokens/s), so the top rate is about 2.1 × round robin's capacity
//! and below the cache-keeping capacity. Here the same is done on the simulator's pods: both
//! capacities are derived from the pods' own speeds and KV size ([`capacities`], worked out
//! in bench/results/learning/README.md), and the rates are multiples of round robin's.
//!
//! Pool: 4 small-preset pods, 0.1 ms per prefilled token, 16 running sequences, 8,192 blocks
//! of 16 tokens (131k tokens) each; 48 system prompts of 6,000 tokens (288k tokens: all fit
//! in the pool when each stays on one pod, none fits on every pod).

use super::{pod_args, Job, Size, Stage, Workload, WorkloadName};
use crate::prompts::{text_of_tokens, SeededRandom};
use vllm_sim::engine::StepWork;
use vllm_sim::latency::LatencyParams;
use vllm_sim::Preset;

const PODS: usize = 4;
const SYSTEM_PROMPTS: usize = 48;
const SYSTEM_TOKENS: usize = 6000;
const QUESTION_TOKENS: usize = 1200;
const OUTPUT_TOKENS: usize = 32;
const PREFILL_MS_PER_TOKEN: f64 = 0.1;
const MAX_NUM_SEQS: usize = 16;
/// 8,192 blocks of 16 tokens: 131k tokens per pod (see the module docs).
const NUM_GPU_BLOCKS: usize = 8192;
const MAX_MODEL_LEN: usize = 8192;
/// vLLM's block size, as `pod_args` sets it.
const BLOCK_TOKENS: usize = 16;
/// A full batch of distinct prompts fits the KV cache (the derivation in [`capacities`]
/// assumes no preemption).
const _: () = assert!(MAX_NUM_SEQS * (SYSTEM_TOKENS + QUESTION_TOKENS) < NUM_GPU_BLOCKS * BLOCK_TOKENS);
/// Each stage's rate as a multiple of round robin's capacity: two stages below it (both
/// routers keep up), one at it, one past it, and the top at 2.5 × (llm-d's top rate is where
/// round robin serves ≤ 1/2.1 of what arrives; 2.5 leaves room for the noise of a shared box
/// and stays under the cache-keeping capacity, see the test).
const RATE_MULTIPLES: [f64; 5] = [0.25, 0.5, 1.0, 1.5, 2.5];

/// Requests per second the pool sustains: (round robin, a router that keeps each system
/// prompt on one pod). A pod's busy time per request is its prefill (uncached tokens at the
/// prefill rate, cached ones at the cache rate) plus its share of 31 decode steps run with a
/// full batch of `MAX_NUM_SEQS`. Round robin finds a request's system prompt cached only if
/// another running request holds it (running sequences pin ~all of the KV cache at
/// saturation: 16 × 7.2k = 115k of 131k tokens): `1 − (1 − 1/48)^16` ≈ 29 % of the time.
pub fn capacities() -> (f64, f64) {
    let latency = LatencyParams { prefill_per_token_ms: PREFILL_MS_PER_TOKEN, ..Preset::Small.latency() };
    let context = SYSTEM_TOKENS + QUESTION_TOKENS;
    let full_batch =
        StepWork { decode_seqs: MAX_NUM_SEQS, context_tokens: MAX_NUM_SEQS * context, ..StepWork::default() };
    let decode_ms = (OUTPUT_TOKENS - 1) as f64 * latency.step_ms(&full_batch) / MAX_NUM_SEQS as f64;
    let prefill_ms = |cached: usize| {
        let work = StepWork { prefill_tokens: context - cached, cached_tokens: cached, ..StepWork::default() };
        latency.step_ms(&work) - latency.decode_base_ms
    };
    let held = 1.0 - (1.0 - 1.0 / SYSTEM_PROMPTS as f64).powi(MAX_NUM_SEQS as i32);
    let round_robin_ms = held * prefill_ms(SYSTEM_TOKENS) + (1.0 - held) * prefill_ms(0) + decode_ms;
    let keeping_ms = prefill_ms(SYSTEM_TOKENS) + decode_ms;
    (PODS as f64 * 1000.0 / round_robin_ms, PODS as f64 * 1000.0 / keeping_ms)
}

pub fn build(size: Size, seed: u64) -> Workload {
    let stage_ms = size.pick(30_000, 8_000) as f64;
    let (round_robin, _) = capacities();
    // Rates rounded to 0.1 requests/s so the report reads plainly.
    let stages: Vec<(f64, f64)> =
        RATE_MULTIPLES.iter().map(|multiple| ((multiple * round_robin * 10.0).round() / 10.0, stage_ms)).collect();
    build_on(WorkloadName::Ladder, &stages, seed)
}

/// The top stage's rate: 2.5 × round robin's capacity (see [`RATE_MULTIPLES`]). Other ladders
/// on this pool scale their own top to it, so their top stages compare with (g)'s.
pub fn top_rate() -> f64 {
    let (round_robin, _) = capacities();
    let top = RATE_MULTIPLES.iter().copied().fold(0.0, f64::max);
    (top * round_robin * 10.0).round() / 10.0
}

/// (g)'s pool and prompts with the ladder `stages` (requests per second, milliseconds each,
/// in order), reported as workload `name`.
pub fn build_on(name: WorkloadName, stages: &[(f64, f64)], seed: u64) -> Workload {
    let systems: Vec<String> =
        (0..SYSTEM_PROMPTS).map(|index| text_of_tokens(SYSTEM_TOKENS, seed ^ (9_000 + index as u64))).collect();
    let mut random = SeededRandom::new(seed ^ 0x9);
    let mut jobs = Vec::new();
    let mut windows = Vec::with_capacity(stages.len());
    let mut stage_start = 0.0;
    for &(rate, stage_ms) in stages {
        windows.push(Stage { rate_per_s: rate, start_ms: stage_start as u64, end_ms: (stage_start + stage_ms) as u64 });
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
        stage_start += stage_ms;
    }
    let mut args = pod_args(MAX_NUM_SEQS, NUM_GPU_BLOCKS, MAX_MODEL_LEN);
    args.extend(["--prefill-per-token-ms".to_string(), PREFILL_MS_PER_TOKEN.to_string()]);
    // Open loop: every request has its own client slot and leaves at its scheduled time.
    Workload { name, pods: PODS, pod_args: args, concurrency: jobs.len(), jobs, stages: windows }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_top_stage_saturates_round_robin_but_not_a_cache_keeping_router() {
        let (round_robin, keeping) = capacities();
        let top = RATE_MULTIPLES.iter().copied().fold(0.0, f64::max) * round_robin;
        assert!((5.0..9.0).contains(&round_robin), "round robin {round_robin:.1} req/s");
        assert!(top > 2.1 * round_robin && top < 0.85 * keeping, "top {top:.1}, keeping {keeping:.1} req/s");
    }

    #[test]
    fn stages_follow_the_ladder() {
        let workload = build(Size::Quick, 3);
        assert_eq!(workload.stages.len(), RATE_MULTIPLES.len());
        assert!(workload.stages.windows(2).all(|pair| pair[0].rate_per_s < pair[1].rate_per_s));
        assert!(workload.stages.windows(2).all(|pair| pair[0].end_ms == pair[1].start_ms));
    }
}
