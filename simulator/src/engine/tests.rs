//! Scheduler, step and counting rules, each checked against what vLLM V1 does.

use super::*;
use crate::tokenizer::{output_word, token_id};

const BLOCK: usize = 16;
/// A budget no test prompt reaches (one step prefills everything).
const LARGE_BUDGET: usize = 1 << 16;

fn request(id: RequestId, start: u32, len: usize) -> NewRequest {
    let tokens = (start..start + len as u32).collect();
    NewRequest { id, tokens, lora: None, cache_salt: None, max_tokens: 1000, stream_seed: id }
}

/// vLLM puts `cache_salt` in the first block's extra keys (v1/core/kv_cache_utils.py 536-539):
/// the same prompt under another salt (or none) finds nothing cached; under the same salt, all.
#[test]
fn a_cache_salt_separates_cached_prefixes() {
    let mut engine = Engine::new(100, BLOCK, 8, 1);
    let salted = |id, salt: &str| NewRequest { cache_salt: Some(salt.to_owned()), max_tokens: 1, ..request(id, 0, 64) };
    engine.enqueue(salted(1, "tenant-a"));
    step(&mut engine, LARGE_BUDGET);
    engine.enqueue(NewRequest { max_tokens: 1, ..request(2, 0, 64) });
    assert_eq!(step(&mut engine, LARGE_BUDGET).admitted[0].cached_tokens, 0, "no salt: another key");
    engine.enqueue(salted(3, "tenant-b"));
    assert_eq!(step(&mut engine, LARGE_BUDGET).admitted[0].cached_tokens, 0, "another salt");
    engine.enqueue(salted(4, "tenant-a"));
    assert_eq!(
        step(&mut engine, LARGE_BUDGET).admitted[0].cached_tokens,
        48,
        "the same salt: three blocks, the last recomputed"
    );
}

fn lora_request(id: RequestId, adapter: &str) -> NewRequest {
    NewRequest { lora: Some(adapter.to_owned()), ..request(id, 0, 20) }
}

fn admitted_ids(plan: &StepPlan) -> Vec<RequestId> {
    plan.admitted.iter().map(|admission| admission.id).collect()
}

/// Plans and completes one step; returns the plan.
fn step(engine: &mut Engine, budget: usize) -> StepPlan {
    let plan = engine.plan_step(budget);
    engine.complete_step(&plan);
    plan
}

#[test]
fn at_most_max_num_seqs_run_and_the_rest_wait_in_order() {
    let mut engine = Engine::new(1000, BLOCK, 2, 1);
    for id in 1..=4 {
        engine.enqueue(request(id, id as u32 * 1000, 20));
    }
    assert_eq!(admitted_ids(&step(&mut engine, LARGE_BUDGET)), vec![1, 2]);
    assert_eq!((engine.num_running(), engine.num_waiting()), (2, 2));
    assert!(engine.abort(2));
    assert_eq!(admitted_ids(&step(&mut engine, LARGE_BUDGET)), vec![3], "first come, first served");
    assert!(step(&mut engine, LARGE_BUDGET).admitted.is_empty());
}

#[test]
fn the_budget_goes_to_decodes_first_then_prefill_chunks() {
    let mut engine = Engine::new(1000, BLOCK, 8, 1);
    engine.enqueue(request(1, 0, 20));
    engine.enqueue(request(2, 1000, 20));
    step(&mut engine, LARGE_BUDGET); // both prefilled, one token each
    engine.enqueue(request(3, 2000, 500));
    let plan = step(&mut engine, 100);
    let shares: Vec<(RequestId, usize)> = plan.chunks.iter().map(|chunk| (chunk.id, chunk.num_tokens)).collect();
    assert_eq!(shares, vec![(1, 1), (2, 1), (3, 98)], "two decodes, then the rest of the budget");
    assert_eq!(plan.num_batched_tokens(), 100);
    let work = plan.work();
    assert_eq!((work.decode_seqs, work.prefill_tokens), (2, 98));
    assert_eq!(work.context_tokens, 21 + 21 + 98);
}

#[test]
fn a_long_prompt_is_prefilled_in_chunks_across_steps_and_samples_once_at_the_end() {
    let mut engine = Engine::new(1000, BLOCK, 8, 1);
    engine.enqueue(request(1, 0, 250));
    let mut chunks = Vec::new();
    let mut outputs = Vec::new();
    for _ in 0..4 {
        let plan = engine.plan_step(100);
        chunks.extend(plan.chunks.iter().map(|chunk| (chunk.num_tokens, chunk.context_tokens)));
        outputs.push(engine.complete_step(&plan));
    }
    assert_eq!(chunks, vec![(100, 100), (100, 200), (50, 250), (1, 251)]);
    assert!(outputs[0].is_empty() && outputs[1].is_empty(), "partial chunks sample nothing");
    assert_eq!(outputs[2], vec![StepOutput { id: 1, index: 0, last: false }], "the last chunk samples the first token");
    assert_eq!(outputs[3], vec![StepOutput { id: 1, index: 1, last: false }]);
}

#[test]
fn cached_prompt_tokens_are_skipped_by_prefill() {
    let mut engine = Engine::new(1000, BLOCK, 8, 1);
    engine.enqueue(NewRequest { max_tokens: 1, ..request(1, 0, 640) });
    assert_eq!(step(&mut engine, LARGE_BUDGET).work().prefill_tokens, 640);
    assert_eq!(engine.num_running(), 0, "one token asked, one sampled: finished");
    let mut follow_up = request(2, 0, 512);
    follow_up.tokens.extend(9000..9128);
    engine.enqueue(follow_up);
    let plan = step(&mut engine, LARGE_BUDGET);
    assert_eq!(plan.admitted[0].cached_tokens, 512);
    let work = plan.work();
    assert_eq!((work.prefill_tokens, work.cached_tokens, work.context_tokens), (128, 512, 640));
}

#[test]
fn a_request_finishes_on_its_last_token_and_frees_its_blocks() {
    let mut engine = Engine::new(100, BLOCK, 8, 1);
    engine.enqueue(NewRequest { max_tokens: 3, ..request(1, 0, 20) });
    let outputs: Vec<StepOutput> = (0..3)
        .flat_map(|_| {
            let plan = engine.plan_step(LARGE_BUDGET);
            engine.complete_step(&plan)
        })
        .collect();
    assert_eq!(
        outputs.iter().map(|output| (output.index, output.last)).collect::<Vec<_>>(),
        vec![(0, false), (1, false), (2, true)]
    );
    assert_eq!((engine.num_running(), engine.kv_usage()), (0, 0.0));
    assert!(engine.plan_step(LARGE_BUDGET).is_empty(), "an idle engine plans nothing");
}

#[test]
fn queries_and_hits_count_tokens_at_admission_like_vllm() {
    let mut engine = Engine::new(1000, BLOCK, 8, 1);
    let shared: Vec<u32> = (0..512).collect();
    let with_suffix = |id: RequestId, suffix_start: u32| {
        let mut tokens = shared.clone();
        tokens.extend(suffix_start..suffix_start + 128);
        NewRequest { tokens, ..request(id, 0, 0) }
    };
    engine.enqueue(with_suffix(1, 10_000));
    engine.enqueue(with_suffix(2, 20_000));
    let admitted = step(&mut engine, LARGE_BUDGET).admitted;
    // Both admitted in the same step: the second already sees the first one's blocks.
    assert_eq!(admitted[0].cached_tokens, 0);
    assert_eq!(admitted[1].cached_tokens, 512);
    let stats = engine.prefix_stats();
    assert_eq!((stats.requests, stats.queries, stats.hits), (2, 1280, 512));
}

#[test]
fn a_fully_cached_prompt_never_counts_its_last_block_as_a_hit() {
    let mut engine = Engine::new(1000, BLOCK, 8, 1);
    engine.enqueue(request(1, 0, 64));
    step(&mut engine, LARGE_BUDGET);
    engine.abort(1);
    engine.enqueue(request(2, 0, 64));
    assert_eq!(step(&mut engine, LARGE_BUDGET).admitted[0].cached_tokens, 48);
    engine.enqueue(request(3, 0, 70));
    assert_eq!(step(&mut engine, LARGE_BUDGET).admitted[0].cached_tokens, 64);
    assert_eq!(engine.prefix_stats().hits, 112);
    assert_eq!(engine.prefix_stats().queries, 198);
}

#[test]
fn kv_pressure_blocks_the_head_and_everyone_behind_it() {
    // 10 blocks: request 1 pins 8, request 2 needs 4, request 3 needs 1.
    let mut engine = Engine::new(10, BLOCK, 8, 1);
    engine.enqueue(request(1, 0, 127));
    engine.enqueue(request(2, 1000, 64));
    engine.enqueue(request(3, 2000, 10));
    assert_eq!(admitted_ids(&step(&mut engine, LARGE_BUDGET)), vec![1]);
    assert_eq!(engine.num_waiting(), 2, "request 3 would fit but FCFS keeps it behind request 2");
    engine.abort(1);
    assert_eq!(admitted_ids(&step(&mut engine, LARGE_BUDGET)), vec![2, 3]);
}

#[test]
fn lora_requests_wait_for_an_adapter_slot_without_blocking_others() {
    let mut engine = Engine::new(1000, BLOCK, 8, 1);
    engine.enqueue(lora_request(1, "a"));
    engine.enqueue(lora_request(2, "b"));
    engine.enqueue(request(3, 500, 20));
    engine.enqueue(lora_request(4, "a"));
    assert_eq!(
        admitted_ids(&step(&mut engine, LARGE_BUDGET)),
        vec![1, 3, 4],
        "b is skipped while a holds the only slot"
    );
    assert_eq!(engine.running_loras(), vec!["a".to_owned()]);
    assert_eq!(engine.waiting_loras(), vec!["b".to_owned()]);
    engine.abort(1);
    assert!(step(&mut engine, LARGE_BUDGET).admitted.is_empty(), "request 4 still runs adapter a");
    engine.abort(4);
    assert_eq!(admitted_ids(&step(&mut engine, LARGE_BUDGET)), vec![2]);
}

#[test]
fn adapters_do_not_share_cache_with_the_base_model() {
    let mut engine = Engine::new(1000, BLOCK, 8, 2);
    engine.enqueue(request(1, 0, 64));
    engine.enqueue(NewRequest { lora: Some("a".to_owned()), ..request(2, 0, 64) });
    assert_eq!(step(&mut engine, LARGE_BUDGET).admitted[1].cached_tokens, 0);
}

#[test]
fn decode_allocates_blocks_and_caches_generated_tokens() {
    let mut engine = Engine::new(100, BLOCK, 8, 1);
    engine.enqueue(request(1, 0, 16));
    // Step 1 prefills and samples token 0; steps 2..=18 compute tokens 0..=16 and sample more.
    for _ in 0..18 {
        step(&mut engine, LARGE_BUDGET);
    }
    // 16 prompt + 18 sampled tokens, 33 with KV: two full blocks, the second of generated tokens.
    let generated: Vec<u32> = (0..16).map(|index| token_id(output_word(1, index))).collect();
    engine.abort(1);
    let mut follow_up = request(2, 0, 16);
    follow_up.tokens.extend(&generated);
    follow_up.tokens.push(7);
    engine.enqueue(follow_up);
    assert_eq!(step(&mut engine, LARGE_BUDGET).admitted[0].cached_tokens, 32);
}

#[test]
fn a_decode_without_a_free_block_preempts_and_the_request_is_recomputed_later() {
    // 3 blocks: two 16-token prompts take one each; the first decode to cross a block boundary
    // takes the third, the second one finds none.
    let mut engine = Engine::new(3, BLOCK, 8, 1);
    engine.enqueue(request(1, 0, 16));
    engine.enqueue(request(2, 100, 16));
    assert_eq!(step(&mut engine, LARGE_BUDGET).admitted.len(), 2);
    let plan = step(&mut engine, LARGE_BUDGET);
    assert_eq!(plan.preempted, vec![2], "request 1 took the last block; request 2 needed one too");
    assert_eq!(engine.num_preemptions(), 1);
    assert_eq!((engine.num_running(), engine.num_waiting()), (1, 1));
    assert!(plan.admitted.is_empty(), "no admission in a step that preempted (vLLM V1)");
    engine.abort(1);
    let plan = step(&mut engine, LARGE_BUDGET);
    assert_eq!(plan.admitted[0].id, 2, "the preempted request goes first");
    assert!(plan.admitted[0].resumed);
    assert_eq!(plan.admitted[0].num_tokens, 17, "prompt plus the token it had sampled");
    assert_eq!(plan.admitted[0].cached_tokens, 16, "its freed prompt block was still cached");
    assert_eq!(plan.chunks[0].num_tokens, 1, "only what the cache lost is recomputed");
    let stats = engine.prefix_stats();
    assert_eq!((stats.queries, stats.preempted_queries, stats.preempted_hits), (32, 17, 16));
}

#[test]
fn a_request_aborted_during_a_step_is_skipped_at_its_end() {
    let mut engine = Engine::new(100, BLOCK, 8, 1);
    engine.enqueue(request(1, 0, 20));
    engine.enqueue(request(2, 100, 20));
    let plan = engine.plan_step(LARGE_BUDGET);
    assert!(engine.abort(1));
    let outputs = engine.complete_step(&plan);
    assert_eq!(outputs.iter().map(|output| output.id).collect::<Vec<_>>(), vec![2]);
}

#[test]
fn abort_removes_waiting_and_running_requests() {
    let mut engine = Engine::new(100, BLOCK, 1, 1);
    engine.enqueue(request(1, 0, 20));
    engine.enqueue(request(2, 100, 20));
    step(&mut engine, LARGE_BUDGET);
    assert!(engine.is_waiting(2));
    assert!(engine.abort(2));
    assert!(engine.abort(1));
    assert!(!engine.abort(1));
    assert_eq!((engine.num_running(), engine.num_waiting()), (0, 0));
    assert_eq!(engine.kv_usage(), 0.0);
}

/// vLLM's running and waiting gauges are the scheduler's counts at the end of a step: a
/// request that arrives during a step with a free slot is not shown waiting (the next step
/// takes it), one a full batch cannot take is.
#[test]
fn the_gauges_show_a_request_waiting_only_when_a_step_could_not_admit_it() {
    let mut engine = Engine::new(1000, BLOCK, 2, 1);
    engine.enqueue(NewRequest { max_tokens: 1, ..request(1, 0, 20) });
    engine.enqueue(request(2, 1000, 20));
    let plan = engine.plan_step(LARGE_BUDGET);
    engine.enqueue(request(3, 2000, 20)); // arrives while the step runs
    engine.complete_step(&plan);
    assert_eq!((engine.num_running(), engine.num_waiting()), (1, 1), "request 1 finished, 3 is queued");
    assert_eq!(engine.gauges(), Gauges { running: 1, waiting: 0 }, "a free slot: 3 is not shown waiting");
    step(&mut engine, LARGE_BUDGET);
    engine.enqueue(request(4, 3000, 20));
    let plan = engine.plan_step(LARGE_BUDGET);
    engine.complete_step(&plan);
    assert_eq!(engine.gauges(), Gauges { running: 2, waiting: 1 }, "4 found the batch full");
}

#[test]
fn a_request_that_arrived_and_left_during_a_step_does_not_hide_one_that_waits() {
    let mut engine = Engine::new(1000, BLOCK, 1, 1);
    engine.enqueue(request(1, 0, 20));
    engine.enqueue(request(2, 1000, 20)); // the batch of 1 is full: 2 waits
    let plan = engine.plan_step(LARGE_BUDGET);
    engine.enqueue(request(3, 2000, 20));
    assert!(engine.abort(3), "its client left before the step ended");
    engine.complete_step(&plan);
    assert_eq!(engine.gauges(), Gauges { running: 1, waiting: 1 });
}
