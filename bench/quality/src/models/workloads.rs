//! The jobs and pod flags of workloads (h) and (i).

use crate::prompts::{text_of_tokens, SeededRandom, Zipf};
use crate::workload::{Job, Size, Workload, WorkloadName};

const PODS: usize = 4;
const BASE_MODEL: &str = "sim-model";
/// (h): 8 adapters, each registered on 2 of the 4 pods (pod k holds adapters 2k..2k+3 mod 8).
const ADAPTERS: usize = 8;
const ADAPTERS_PER_POD: usize = 4;
/// vLLM's `--max-loras` in (h): two adapters on a GPU at once, so a pod holding four swaps.
const MAX_LORAS: usize = 2;
/// A swap's cost: loading an adapter from host memory onto the GPU, made large enough that
/// swaps show in the latency (the simulator's default is 25 ms).
const LORA_LOAD_MS: usize = 200;
/// Popularity of the adapters (a few hot ones, a long tail).
const ZIPF_EXPONENT: f64 = 1.0;
/// Share of (h)'s requests for the base model itself.
const BASE_SHARE: f64 = 0.3;
/// (i): pods 0, 1 and 2 serve `alpha`, pod 3 `beta`; requests follow that mix.
const ALPHA_PODS: usize = 3;
const ALPHA_SHARE: f64 = 0.7;
const MIN_PROMPT_TOKENS: usize = 128;
const MAX_PROMPT_TOKENS: usize = 512;
const MIN_OUTPUT_TOKENS: usize = 16;
const MAX_OUTPUT_TOKENS: usize = 128;
/// Sequences per pod: room for the 16 client slots over 4 pods with some queueing.
const MAX_NUM_SEQS: usize = 8;
const NUM_GPU_BLOCKS: usize = 16_384;
const MAX_MODEL_LEN: usize = 4096;
const CONCURRENCY: usize = 16;

fn adapter(index: usize) -> String {
    format!("lora-{index}")
}

/// Shared flags without `--model` (each pod names its own).
fn common_args() -> Vec<String> {
    let mut args = crate::workload::pod_args(MAX_NUM_SEQS, NUM_GPU_BLOCKS, MAX_MODEL_LEN);
    if let Some(at) = args.iter().position(|flag| flag == "--model") {
        args.drain(at..(at + 2).min(args.len()));
    }
    args
}

fn completion(random: &mut SeededRandom, model: String, seed: u64) -> Job {
    let prompt = text_of_tokens(random.between(MIN_PROMPT_TOKENS, MAX_PROMPT_TOKENS), seed);
    Job::ForModel { model, prompt, max_tokens: random.between(MIN_OUTPUT_TOKENS, MAX_OUTPUT_TOKENS) }
}

/// (h) 8 adapters with Zipf popularity on 4 pods with `max_loras` 2, plus base traffic.
pub fn build_adapters(size: Size, seed: u64) -> Workload {
    let zipf = Zipf::new(ADAPTERS, ZIPF_EXPONENT);
    let mut random = SeededRandom::new(seed ^ 0x68);
    let jobs = (0..size.pick(400, 120))
        .map(|index| {
            let model =
                if random.next_unit() < BASE_SHARE { BASE_MODEL.to_owned() } else { adapter(zipf.draw(&mut random)) };
            completion(&mut random, model, seed ^ (800_000 + index as u64))
        })
        .collect();
    Workload {
        name: WorkloadName::Adapters,
        pods: PODS,
        pod_args: common_args(),
        concurrency: CONCURRENCY,
        jobs,
        stages: Vec::new(),
    }
}

pub fn adapters_pod_args(index: usize) -> Vec<String> {
    let held: Vec<String> = (0..ADAPTERS_PER_POD).map(|k| adapter((2 * index + k) % ADAPTERS)).collect();
    [
        "--model",
        BASE_MODEL,
        "--lora-adapters",
        &held.join(","),
        "--max-loras",
        &MAX_LORAS.to_string(),
        "--lora-load-ms",
        &LORA_LOAD_MS.to_string(),
    ]
    .iter()
    .map(|flag| flag.to_string())
    .collect()
}

/// (i) Two base models on a mixed pool: three pods serve `alpha`, one serves `beta`.
pub fn build_two_models(size: Size, seed: u64) -> Workload {
    let mut random = SeededRandom::new(seed ^ 0x69);
    let jobs = (0..size.pick(400, 120))
        .map(|index| {
            let model = if random.next_unit() < ALPHA_SHARE { "alpha" } else { "beta" };
            completion(&mut random, model.to_owned(), seed ^ (900_000 + index as u64))
        })
        .collect();
    Workload {
        name: WorkloadName::TwoModels,
        pods: PODS,
        pod_args: common_args(),
        concurrency: CONCURRENCY,
        jobs,
        stages: Vec::new(),
    }
}

pub fn two_models_pod_args(index: usize) -> Vec<String> {
    let model = if index < ALPHA_PODS { "alpha" } else { "beta" };
    vec!["--model".to_owned(), model.to_owned()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_adapter_is_held_by_two_pods_and_no_pod_holds_all() {
        for adapter_index in 0..ADAPTERS {
            let name = adapter(adapter_index);
            let holders =
                (0..PODS).filter(|&pod| adapters_pod_args(pod).iter().any(|a| a.split(',').any(|n| n == name)));
            assert_eq!(holders.count(), 2, "{name}");
        }
        assert!(!common_args().contains(&"--model".to_owned()));
        let workload = build_adapters(Size::Quick, 1);
        let base = workload.jobs.iter().filter(|j| matches!(j, Job::ForModel { model, .. } if model == BASE_MODEL));
        assert!(base.count() > 10, "some base-model traffic");
    }
}
