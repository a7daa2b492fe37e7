//! The scheduler: vLLM V1's engine step, who runs, who waits, and what the prefix cache
//! counters say.
//!
//! Synchronous and clock-free (the pod's step loop drives it), modelled on vLLM V1's scheduler.
//! Each step ([`Engine::plan_step`], then [`Engine::complete_step`] when its time is up) has a
//! token budget (`max_num_batched_tokens`):
//! - running sequences that need one token (decodes) are scheduled first, in admission order;
//! - then running sequences still prefilling get the next chunk of their prompt (chunked
//!   prefill), as much as the budget leaves;
//! - then waiting requests are admitted first come, first served while fewer than
//!   `max_num_seqs` run and budget is left, each starting with a chunk of its uncached prompt
//!   (cached tokens are never computed: prefill starts after the hit);
//! - the head of the queue waits, and blocks everyone behind it, while the free KV blocks cannot
//!   hold its uncached prompt (KV pressure); a request for a LoRA adapter that is not running is
//!   skipped (not blocking) while `max_loras` distinct adapters are running; admitting a request
//!   whose adapter is not resident on the GPU loads it (evicting the least recently used idle
//!   one, see [`LoraSlots`]), and the step pays the load time;
//! - on admission, `queries += prompt tokens` and `hits += cached tokens` (preempted requests are
//!   counted apart, as vLLM does, so they do not inflate the hit rate);
//! - a decode that needs a new block when none is free preempts the request that needs it: its
//!   blocks are freed (they stay cached) and it returns to the head of the queue to be
//!   recomputed. vLLM preempts the most recently admitted request instead; this simplification
//!   is documented in the README.
//!
//! A step samples one token for every sequence whose prompt is fully computed at its end; the
//! request that reaches `max_tokens` finishes there and frees its blocks.

use std::collections::{BTreeSet, VecDeque};

use crate::kv_cache::block_hash::{extend_block_hashes, full_block_hashes, BlockHash};
use crate::kv_cache::block_pool::BlockId;
use crate::kv_cache::KvCacheManager;

mod kv_import;
mod lora_slots;
mod step;
mod types;
pub use lora_slots::{LoraSlots, SlotUse};
pub use types::{Admission, NewRequest, PrefixCacheStats, RequestId, ScheduledChunk, StepOutput, StepPlan, StepWork};

/// One request inside the engine, waiting or running.
#[derive(Debug, Clone)]
struct Sequence {
    id: RequestId,
    /// Prompt, then every sampled token (the newest has no KV until the next step computes it).
    tokens: Vec<u32>,
    lora: Option<String>,
    /// The request's `cache_salt`, folded into its first block's hash.
    cache_salt: Option<String>,
    /// Hashes of the full blocks of `tokens` known so far.
    hashes: Vec<BlockHash>,
    /// KV blocks held (empty while waiting).
    blocks: Vec<BlockId>,
    /// Tokens whose KV is computed (or found in the cache).
    num_computed: usize,
    /// Tokens sampled so far (kept across preemptions).
    generated: usize,
    max_tokens: usize,
    stream_seed: u64,
    /// Whether it was preempted (its next admission is counted apart).
    resumed: bool,
}

impl Sequence {
    /// Tokens still to compute before the next token can be sampled.
    fn remaining(&self) -> usize {
        self.tokens.len().saturating_sub(self.num_computed)
    }
}

/// One pod's scheduler and KV cache.
#[derive(Debug, Clone)]
pub struct Engine {
    cache: KvCacheManager,
    waiting: VecDeque<Sequence>,
    /// In admission order (decodes and prefill chunks are scheduled in this order).
    running: Vec<Sequence>,
    max_num_seqs: usize,
    max_loras: usize,
    /// Adapters resident on the GPU (at most `max_loras`), loaded and evicted on admission.
    lora_slots: LoraSlots,
    prefix_stats: PrefixCacheStats,
    num_preemptions: u64,
    /// Requests enqueued since the last plan: vLLM's engine core takes new requests into its
    /// scheduler between steps, so they are not in the waiting count of the step in flight.
    enqueued_since_plan: usize,
    /// Running and waiting requests as of the end of the last step ([`Engine::gauges`]).
    gauges: Gauges,
}

/// What `vllm:num_requests_running` and `vllm:num_requests_waiting` show: vLLM sets them from
/// the scheduler's stats at the end of each step, after finished requests left the batch and
/// before requests that arrived during the step are scheduled. So a request waits in them
/// only when a step could not admit it (a full batch, no KV room, no token budget), never for
/// the few ms until the next step takes it; reading the live queue instead showed a free slot
/// as "3 running, 1 waiting" whenever a request arrived mid-step, and a router that reads
/// waiting requests as a full batch took such a pod's batch for 3.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Gauges {
    pub running: usize,
    pub waiting: usize,
}

impl Engine {
    /// An idle engine with an empty cache.
    pub fn new(num_gpu_blocks: usize, block_size: usize, max_num_seqs: usize, max_loras: usize) -> Self {
        Self {
            cache: KvCacheManager::new(num_gpu_blocks, block_size),
            waiting: VecDeque::new(),
            running: Vec::new(),
            max_num_seqs: max_num_seqs.max(1),
            max_loras: max_loras.max(1),
            lora_slots: LoraSlots::new(max_loras),
            prefix_stats: PrefixCacheStats::default(),
            num_preemptions: 0,
            enqueued_since_plan: 0,
            gauges: Gauges::default(),
        }
    }

    /// Adds a request to the tail of the waiting queue (the next step may admit it).
    pub fn enqueue(&mut self, request: NewRequest) {
        let key = extra_key(&request.lora, &request.cache_salt);
        let hashes = full_block_hashes(&request.tokens, self.cache.block_size(), &key);
        self.enqueued_since_plan += 1;
        self.waiting.push_back(Sequence {
            id: request.id,
            tokens: request.tokens,
            lora: request.lora,
            cache_salt: request.cache_salt,
            hashes,
            blocks: Vec::new(),
            num_computed: 0,
            generated: 0,
            max_tokens: request.max_tokens.max(1),
            stream_seed: request.stream_seed,
            resumed: false,
        });
    }

    /// Whether a request at the tail of the queue would find a seat at the next step if nothing
    /// else changed (used to refuse requests that would really have to wait).
    pub fn has_seat_for_one_more(&self) -> bool {
        self.running.len() + self.waiting.len() < self.max_num_seqs
    }

    /// Whether `id` is in the waiting queue.
    pub fn is_waiting(&self, id: RequestId) -> bool {
        self.waiting.iter().any(|sequence| sequence.id == id)
    }

    /// Removes a request wherever it is (client gone); `false` if unknown.
    pub fn abort(&mut self, id: RequestId) -> bool {
        if let Some(position) = self.running.iter().position(|sequence| sequence.id == id) {
            let sequence = self.running.remove(position);
            self.cache.free(&sequence.blocks);
            return true;
        }
        let Some(position) = self.waiting.iter().position(|sequence| sequence.id == id) else { return false };
        // One that arrived during the step in flight leaves the count kept out of the gauges.
        if position >= self.waiting.len().saturating_sub(self.enqueued_since_plan) {
            self.enqueued_since_plan = self.enqueued_since_plan.saturating_sub(1);
        }
        self.waiting.remove(position);
        true
    }

    /// Moves the running sequence at `position` back to the head of the queue, freeing its blocks.
    fn preempt(&mut self, position: usize) -> Option<RequestId> {
        if position >= self.running.len() {
            return None;
        }
        let mut sequence = self.running.remove(position);
        self.cache.free(&sequence.blocks);
        self.num_preemptions += 1;
        let block_size = self.cache.block_size();
        let key = extra_key(&sequence.lora, &sequence.cache_salt);
        extend_block_hashes(&mut sequence.hashes, &sequence.tokens, block_size, &key);
        sequence.blocks.clear();
        sequence.num_computed = 0;
        sequence.resumed = true;
        let id = sequence.id;
        self.waiting.push_front(sequence);
        Some(id)
    }

    fn record_lookup(&mut self, sequence: &Sequence, hit_tokens: usize) {
        let stats = &mut self.prefix_stats;
        if sequence.resumed {
            stats.preempted_queries += sequence.tokens.len() as u64;
            stats.preempted_hits += hit_tokens as u64;
        } else {
            stats.requests += 1;
            stats.queries += sequence.tokens.len() as u64;
            stats.hits += hit_tokens as u64;
        }
    }

    /// Requests in the running batch (prefilling or decoding).
    pub fn num_running(&self) -> usize {
        self.running.len()
    }

    /// Requests in the waiting queue.
    pub fn num_waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Running and waiting requests as vLLM's metrics show them: as of the end of the last step.
    pub fn gauges(&self) -> Gauges {
        self.gauges
    }

    /// KV cache usage, 0..1.
    pub fn kv_usage(&self) -> f64 {
        self.cache.usage()
    }

    /// Prefix cache counters since start (or restart).
    pub fn prefix_stats(&self) -> PrefixCacheStats {
        self.prefix_stats
    }

    /// Preemptions since start.
    pub fn num_preemptions(&self) -> u64 {
        self.num_preemptions
    }

    /// Distinct adapters of running requests, sorted.
    pub fn running_loras(&self) -> Vec<String> {
        let names: BTreeSet<&String> = self.running.iter().filter_map(|r| r.lora.as_ref()).collect();
        names.into_iter().cloned().collect()
    }

    /// Distinct adapters of waiting requests, sorted.
    pub fn waiting_loras(&self) -> Vec<String> {
        let names: BTreeSet<&String> = self.waiting.iter().filter_map(|r| r.lora.as_ref()).collect();
        names.into_iter().cloned().collect()
    }

    /// The GPU's adapter slots (resident adapters, loads, evictions).
    pub fn lora_slots(&self) -> &LoraSlots {
        &self.lora_slots
    }

    /// Forgets an adapter the server unloaded.
    pub fn forget_lora(&mut self, adapter: &str) {
        self.lora_slots.forget(adapter);
    }

    /// The KV cache, read-only.
    pub fn cache(&self) -> &KvCacheManager {
        &self.cache
    }
}

/// What a request's first block hash folds in besides tokens: its LoRA adapter and its
/// `cache_salt`, as vLLM puts both in the first block's extra keys (v1/core/kv_cache_utils.py
/// 536-539), so requests with different salts (or adapters) never share a block. Without a salt
/// the key is the adapter name alone, so unsalted hashes are what they always were.
pub fn extra_key(lora: &Option<String>, cache_salt: &Option<String>) -> String {
    let adapter = lora.as_deref().unwrap_or("");
    match cache_salt {
        // The separator cannot occur in an adapter name that the API accepts as a model.
        Some(salt) => format!("{adapter}\u{0}salt:{salt}"),
        None => adapter.to_owned(),
    }
}

#[cfg(test)]
mod tests;
