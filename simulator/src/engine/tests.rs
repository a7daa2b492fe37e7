//! Scheduler and counting rules, each checked against what vLLM V1 does.

use super::*;

const BLOCK: usize = 16;

fn request(id: RequestId, start: u32, len: usize) -> NewRequest {
    NewRequest { id, tokens: (start..start + len as u32).collect(), lora: None }
}

fn lora_request(id: RequestId, adapter: &str) -> NewRequest {
    NewRequest { lora: Some(adapter.to_owned()), ..request(id, 0, 20) }
}

fn ids(admissions: &[Admission]) -> Vec<RequestId> {
    admissions.iter().map(|admission| admission.id).collect()
}

#[test]
fn at_most_max_num_seqs_run_and_the_rest_wait_in_order() {
    let mut engine = Engine::new(1000, BLOCK, 2, 1);
    for id in 1..=4 {
        engine.enqueue(request(id, id as u32 * 1000, 20));
    }
    assert_eq!(ids(&engine.schedule()), vec![1, 2]);
    assert_eq!((engine.num_running(), engine.num_waiting()), (2, 2));
    assert!(engine.finish(2));
    assert_eq!(ids(&engine.schedule()), vec![3], "first come, first served");
    assert!(engine.schedule().is_empty());
}

#[test]
fn queries_and_hits_count_tokens_at_admission_like_vllm() {
    let mut engine = Engine::new(1000, BLOCK, 8, 1);
    let shared: Vec<u32> = (0..512).collect();
    let with_suffix = |id: RequestId, suffix_start: u32| {
        let mut tokens = shared.clone();
        tokens.extend(suffix_start..suffix_start + 128);
        NewRequest { id, tokens, lora: None }
    };
    engine.enqueue(with_suffix(1, 10_000));
    engine.enqueue(with_suffix(2, 20_000));
    let admitted = engine.schedule();
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
    engine.schedule();
    engine.finish(1);
    engine.enqueue(request(2, 0, 64));
    assert_eq!(engine.schedule()[0].cached_tokens, 48);
    engine.enqueue(request(3, 0, 70));
    assert_eq!(engine.schedule()[0].cached_tokens, 64);
    assert_eq!(engine.prefix_stats().hits, 112);
    assert_eq!(engine.prefix_stats().queries, 198);
}

#[test]
fn kv_pressure_blocks_the_head_and_everyone_behind_it() {
    // 10 blocks: request 1 pins 8, request 2 needs 4, request 3 needs 1.
    let mut engine = Engine::new(10, BLOCK, 8, 1);
    engine.enqueue(request(1, 0, 128));
    engine.enqueue(request(2, 1000, 64));
    engine.enqueue(request(3, 2000, 10));
    assert_eq!(ids(&engine.schedule()), vec![1]);
    assert_eq!(engine.num_waiting(), 2, "request 3 would fit but FCFS keeps it behind request 2");
    engine.finish(1);
    assert_eq!(ids(&engine.schedule()), vec![2, 3]);
}

#[test]
fn lora_requests_wait_for_an_adapter_slot_without_blocking_others() {
    let mut engine = Engine::new(1000, BLOCK, 8, 1);
    engine.enqueue(lora_request(1, "a"));
    engine.enqueue(lora_request(2, "b"));
    engine.enqueue(request(3, 500, 20));
    engine.enqueue(lora_request(4, "a"));
    assert_eq!(ids(&engine.schedule()), vec![1, 3, 4], "b is skipped while a holds the only slot");
    assert_eq!(engine.running_loras(), vec!["a".to_owned()]);
    assert_eq!(engine.waiting_loras(), vec!["b".to_owned()]);
    engine.finish(1);
    assert!(engine.schedule().is_empty(), "request 4 still runs adapter a");
    engine.finish(4);
    assert_eq!(ids(&engine.schedule()), vec![2]);
}

#[test]
fn adapters_do_not_share_cache_with_the_base_model() {
    let mut engine = Engine::new(1000, BLOCK, 8, 2);
    engine.enqueue(request(1, 0, 64));
    engine.enqueue(NewRequest { lora: Some("a".to_owned()), ..request(2, 0, 64) });
    let admitted = engine.schedule();
    assert_eq!(admitted[1].cached_tokens, 0);
}

#[test]
fn decode_allocates_blocks_and_caches_generated_tokens() {
    let mut engine = Engine::new(100, BLOCK, 8, 1);
    engine.enqueue(request(1, 0, 16));
    engine.schedule();
    for token in 0..17u32 {
        assert_eq!(engine.append_token(1, 5000 + token), StepOutcome::Appended);
    }
    // 33 tokens, 32 with KV: two full blocks, the second made of generated tokens.
    engine.finish(1);
    let mut follow_up: Vec<u32> = (0..16).collect();
    follow_up.extend(5000..5017);
    engine.enqueue(NewRequest { id: 2, tokens: follow_up, lora: None });
    assert_eq!(engine.schedule()[0].cached_tokens, 32);
}

#[test]
fn a_decode_step_without_a_free_block_preempts_and_requeues_at_the_head() {
    let mut engine = Engine::new(2, BLOCK, 8, 1);
    engine.enqueue(request(1, 0, 16));
    engine.enqueue(request(2, 100, 16));
    assert_eq!(engine.schedule().len(), 2);
    engine.enqueue(request(3, 200, 4));
    assert_eq!(engine.append_token(1, 7), StepOutcome::Appended, "16 tokens of KV still fit");
    assert_eq!(engine.append_token(1, 8), StepOutcome::Preempted);
    assert_eq!(engine.num_preemptions(), 1);
    assert_eq!(engine.append_token(1, 9), StepOutcome::Unknown);
    engine.finish(2);
    let admitted = engine.schedule();
    assert_eq!(admitted[0].id, 1, "the preempted request goes first");
    assert!(admitted[0].resumed);
    assert_eq!(admitted[0].num_tokens, 18);
    assert_eq!(admitted[0].cached_tokens, 16, "its freed prompt block was still cached");
    let stats = engine.prefix_stats();
    assert_eq!((stats.queries, stats.preempted_queries, stats.preempted_hits), (32, 18, 16));
}

#[test]
fn abort_removes_waiting_and_running_requests() {
    let mut engine = Engine::new(100, BLOCK, 1, 1);
    engine.enqueue(request(1, 0, 20));
    engine.enqueue(request(2, 100, 20));
    engine.schedule();
    assert!(engine.abort(2));
    assert!(engine.abort(1));
    assert!(!engine.abort(1));
    assert_eq!((engine.num_running(), engine.num_waiting()), (0, 0));
    assert_eq!(engine.kv_usage(), 0.0);
}
