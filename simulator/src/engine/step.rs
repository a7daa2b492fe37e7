//! One engine step: plan it (decodes, prefill chunks, admissions within the token budget) and
//! complete it (advance computed tokens, sample, finish).
//!
//! Planning and completing are separate calls because a step takes time: the pod's step loop
//! plans, sleeps for the step's modelled duration, then completes. A request aborted in between
//! is simply skipped at completion.

use std::collections::{BTreeSet, VecDeque};

use super::{extra_key, Admission, Engine, Gauges, ScheduledChunk, StepOutput, StepPlan};
use crate::kv_cache::block_hash::extend_block_hashes;
use crate::tokenizer::{output_word, token_id};

impl Engine {
    /// Plans the next step with at most `token_budget` tokens (`max_num_batched_tokens`).
    ///
    /// KV blocks are taken now (decode growth, prompts of admitted requests), as vLLM allocates
    /// slots when it schedules.
    pub fn plan_step(&mut self, token_budget: usize) -> StepPlan {
        self.enqueued_since_plan = 0;
        let mut plan = StepPlan::default();
        let mut budget = token_budget;
        self.schedule_decodes(&mut budget, &mut plan);
        self.schedule_prefill_chunks(&mut budget, &mut plan);
        // vLLM V1 admits nobody in a step that had to preempt: memory is short.
        if plan.preempted.is_empty() {
            self.admit_waiting(&mut budget, &mut plan);
        }
        plan
    }

    /// Running sequences that need exactly one token, in admission order.
    fn schedule_decodes(&mut self, budget: &mut usize, plan: &mut StepPlan) {
        let mut position = 0;
        // Each pass schedules, skips or preempts one sequence, so `running` bounds the loop.
        while position < self.running.len() && *budget > 0 {
            let Some(sequence) = self.running.get_mut(position) else { break };
            if sequence.remaining() != 1 {
                position += 1;
                continue;
            }
            // The token sampled last step gets its KV slot in this step.
            let needed = sequence.tokens.len();
            if !self.cache.grow(&mut sequence.blocks, needed) {
                plan.preempted.extend(self.preempt(position));
                continue;
            }
            plan.chunks.push(ScheduledChunk { id: sequence.id, num_tokens: 1, context_tokens: needed });
            *budget -= 1;
            position += 1;
        }
    }

    /// Running sequences still prefilling: the next chunk of each, as the budget allows.
    fn schedule_prefill_chunks(&mut self, budget: &mut usize, plan: &mut StepPlan) {
        for sequence in &self.running {
            if *budget == 0 {
                break;
            }
            let remaining = sequence.remaining();
            if remaining <= 1 {
                continue;
            }
            let num_tokens = remaining.min(*budget);
            let context_tokens = sequence.num_computed + num_tokens;
            plan.chunks.push(ScheduledChunk { id: sequence.id, num_tokens, context_tokens });
            *budget -= num_tokens;
        }
    }

    /// Admits waiting requests in FCFS order while seats, budget and KV blocks allow.
    fn admit_waiting(&mut self, budget: &mut usize, plan: &mut StepPlan) {
        let mut skipped_for_lora = VecDeque::new();
        let mut running_loras: BTreeSet<String> = self.running.iter().filter_map(|r| r.lora.clone()).collect();
        // Each pass admits, skips or stops, so the queue length bounds the loop.
        for _ in 0..self.waiting.len() {
            if self.running.len() >= self.max_num_seqs || *budget == 0 {
                break;
            }
            let Some(head) = self.waiting.front() else { break };
            if let Some(lora) = &head.lora {
                if !running_loras.contains(lora) && running_loras.len() >= self.max_loras {
                    skipped_for_lora.extend(self.waiting.pop_front());
                    continue;
                }
            }
            let hit = self.cache.find_longest_hit(&head.hashes, head.tokens.len());
            let Some(blocks) = self.cache.allocate_prompt(&hit, &head.hashes, head.tokens.len()) else {
                break; // KV pressure: the head waits and so does everyone behind it.
            };
            let Some(mut sequence) = self.waiting.pop_front() else { break };
            self.record_lookup(&sequence, hit.tokens);
            if let Some(lora) = &sequence.lora {
                // Fewer than `max_loras` adapters run (checked above), so a slot is free or idle.
                let in_use = |name: &str| running_loras.contains(name);
                if self.lora_slots.acquire(lora, &in_use) == Some(super::SlotUse::Loaded) {
                    plan.adapter_loads += 1;
                }
                running_loras.insert(lora.clone());
            }
            sequence.blocks = blocks;
            sequence.num_computed = hit.tokens;
            let num_tokens = sequence.remaining().min(*budget);
            *budget -= num_tokens;
            plan.chunks.push(ScheduledChunk { id: sequence.id, num_tokens, context_tokens: hit.tokens + num_tokens });
            plan.admitted.push(Admission {
                id: sequence.id,
                num_tokens: sequence.tokens.len(),
                cached_tokens: hit.tokens,
                resumed: sequence.resumed,
                running: self.running.len() + 1,
            });
            self.running.push(sequence);
        }
        // Skipped requests keep their place at the head, in their original order.
        while let Some(sequence) = skipped_for_lora.pop_back() {
            self.waiting.push_front(sequence);
        }
    }

    /// Completes a planned step: the scheduled tokens now have KV; every sequence whose tokens
    /// are all computed samples one token; those that reach `max_tokens` finish and leave.
    pub fn complete_step(&mut self, plan: &StepPlan) -> Vec<StepOutput> {
        let mut outputs = Vec::new();
        let mut finished_any = false;
        let block_size = self.cache.block_size();
        // Chunks follow running order (decodes, then prefills, then admissions), so searching from
        // the previous match finds each one in O(1) amortised.
        let mut hint = 0;
        for chunk in &plan.chunks {
            let Some(position) = self.find_running(chunk.id, hint) else {
                continue; // aborted since the plan
            };
            hint = position;
            let Some(sequence) = self.running.get_mut(position) else { continue };
            sequence.num_computed = (sequence.num_computed + chunk.num_tokens).min(sequence.tokens.len());
            let first_new = sequence.hashes.len();
            let computed = sequence.tokens.get(..sequence.num_computed).unwrap_or_default();
            let key = extra_key(&sequence.lora, &sequence.cache_salt);
            extend_block_hashes(&mut sequence.hashes, computed, block_size, &key);
            self.cache.register_full_blocks(&sequence.blocks, &sequence.hashes, first_new);
            if sequence.remaining() > 0 {
                continue; // a prefill chunk that is not the last one samples nothing
            }
            let index = sequence.generated;
            sequence.tokens.push(token_id(output_word(sequence.stream_seed, index as u64)));
            sequence.generated += 1;
            let last = sequence.generated >= sequence.max_tokens;
            outputs.push(StepOutput { id: chunk.id, index, last });
            if last {
                self.cache.free(&sequence.blocks);
                sequence.blocks.clear();
                finished_any = true;
            }
        }
        if finished_any {
            self.running.retain(|sequence| sequence.generated < sequence.max_tokens);
        }
        let arrived_during_step = self.enqueued_since_plan.min(self.waiting.len());
        self.gauges = Gauges { running: self.running.len(), waiting: self.waiting.len() - arrived_during_step };
        outputs
    }

    /// Position of a running request, searching from `hint` onwards, then before it.
    fn find_running(&self, id: u64, hint: usize) -> Option<usize> {
        let after = self.running.iter().skip(hint).position(|sequence| sequence.id == id).map(|offset| hint + offset);
        after.or_else(|| self.running.iter().take(hint).position(|sequence| sequence.id == id))
    }
}
