//! The scheduler: who runs, who waits, and what the prefix cache counters say.
//!
//! Synchronous and clock-free (the async pod layer drives it), modelled on vLLM V1's scheduler:
//! - waiting requests are admitted first come, first served while fewer than `max_num_seqs` run;
//! - the head of the queue waits, and blocks everyone behind it, while the free KV blocks cannot
//!   hold its uncached prompt (KV pressure);
//! - a request for a LoRA adapter that is not running is skipped (not blocking) while
//!   `max_loras` distinct adapters are running;
//! - on admission, `queries += prompt tokens` and `hits += cached tokens` (preempted requests are
//!   counted apart, as vLLM does, so they do not inflate the hit rate);
//! - if a decode step needs a block and none is free, the request that needs it is preempted:
//!   its blocks are freed (they stay cached) and it returns to the head of the queue to be
//!   recomputed. vLLM preempts the most recently admitted request instead; this simplification
//!   is documented in the README.

use std::collections::{BTreeSet, HashMap, VecDeque};

use crate::kv_cache::block_hash::{extend_block_hashes, full_block_hashes, BlockHash};
use crate::kv_cache::block_pool::BlockId;
use crate::kv_cache::KvCacheManager;

mod types;
pub use types::{Admission, NewRequest, PrefixCacheStats, RequestId, StepOutcome};

#[derive(Debug, Clone)]
struct QueuedRequest {
    id: RequestId,
    tokens: Vec<u32>,
    lora: Option<String>,
    hashes: Vec<BlockHash>,
    resumed: bool,
}

#[derive(Debug, Clone)]
struct RunningRequest {
    tokens: Vec<u32>,
    lora: Option<String>,
    hashes: Vec<BlockHash>,
    blocks: Vec<BlockId>,
}

/// One pod's scheduler and KV cache.
#[derive(Debug, Clone)]
pub struct Engine {
    cache: KvCacheManager,
    waiting: VecDeque<QueuedRequest>,
    running: HashMap<RequestId, RunningRequest>,
    max_num_seqs: usize,
    max_loras: usize,
    prefix_stats: PrefixCacheStats,
    num_preemptions: u64,
}

impl Engine {
    /// An idle engine with an empty cache.
    pub fn new(num_gpu_blocks: usize, block_size: usize, max_num_seqs: usize, max_loras: usize) -> Self {
        Self {
            cache: KvCacheManager::new(num_gpu_blocks, block_size),
            waiting: VecDeque::new(),
            running: HashMap::new(),
            max_num_seqs: max_num_seqs.max(1),
            max_loras: max_loras.max(1),
            prefix_stats: PrefixCacheStats::default(),
            num_preemptions: 0,
        }
    }

    /// Adds a request to the tail of the waiting queue (call [`Engine::schedule`] next).
    pub fn enqueue(&mut self, request: NewRequest) {
        let hashes = full_block_hashes(&request.tokens, self.cache.block_size(), extra_key(&request.lora));
        self.waiting.push_back(QueuedRequest {
            id: request.id,
            tokens: request.tokens,
            lora: request.lora,
            hashes,
            resumed: false,
        });
    }

    /// Admits waiting requests in FCFS order while seats and KV blocks allow.
    pub fn schedule(&mut self) -> Vec<Admission> {
        let mut admitted = Vec::new();
        let mut skipped_for_lora = VecDeque::new();
        let mut running_loras: BTreeSet<String> = self.running.values().filter_map(|r| r.lora.clone()).collect();
        // Each pass admits, skips or stops, so the queue length bounds the loop.
        for _ in 0..self.waiting.len() {
            if self.running.len() >= self.max_num_seqs {
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
            let Some(request) = self.waiting.pop_front() else { break };
            self.record_lookup(&request, hit.tokens);
            if let Some(lora) = &request.lora {
                running_loras.insert(lora.clone());
            }
            let admission = Admission {
                id: request.id,
                num_tokens: request.tokens.len(),
                cached_tokens: hit.tokens,
                resumed: request.resumed,
                running: self.running.len() + 1,
            };
            self.running.insert(
                request.id,
                RunningRequest { tokens: request.tokens, lora: request.lora, hashes: request.hashes, blocks },
            );
            admitted.push(admission);
        }
        // Skipped requests keep their place at the head, in their original order.
        while let Some(request) = skipped_for_lora.pop_back() {
            self.waiting.push_front(request);
        }
        admitted
    }

    /// Appends a generated token, allocating a block when the previous one is full.
    pub fn append_token(&mut self, id: RequestId, token: u32) -> StepOutcome {
        let Some(request) = self.running.get_mut(&id) else { return StepOutcome::Unknown };
        request.tokens.push(token);
        // The newest token's KV is written by the next step, so the cache holds one token less.
        let kv_tokens = request.tokens.len() - 1;
        if !self.cache.grow(&mut request.blocks, kv_tokens) {
            self.preempt(id);
            return StepOutcome::Preempted;
        }
        let first_new = request.hashes.len();
        let block_size = self.cache.block_size();
        let computed = request.tokens.get(..kv_tokens).unwrap_or_default();
        extend_block_hashes(&mut request.hashes, computed, block_size, extra_key(&request.lora));
        self.cache.register_full_blocks(&request.blocks, &request.hashes, first_new);
        StepOutcome::Appended
    }

    /// Removes a finished request and frees its blocks; `false` if it was not running.
    pub fn finish(&mut self, id: RequestId) -> bool {
        match self.running.remove(&id) {
            Some(request) => {
                self.cache.free(&request.blocks);
                true
            }
            None => false,
        }
    }

    /// Removes a request wherever it is (client gone); `false` if unknown.
    pub fn abort(&mut self, id: RequestId) -> bool {
        if self.finish(id) {
            return true;
        }
        let before = self.waiting.len();
        self.waiting.retain(|request| request.id != id);
        self.waiting.len() != before
    }

    fn preempt(&mut self, id: RequestId) {
        let Some(request) = self.running.remove(&id) else { return };
        self.cache.free(&request.blocks);
        self.num_preemptions += 1;
        let mut hashes = request.hashes;
        extend_block_hashes(&mut hashes, &request.tokens, self.cache.block_size(), extra_key(&request.lora));
        self.waiting.push_front(QueuedRequest {
            id,
            tokens: request.tokens,
            lora: request.lora,
            hashes,
            resumed: true,
        });
    }

    fn record_lookup(&mut self, request: &QueuedRequest, hit_tokens: usize) {
        let stats = &mut self.prefix_stats;
        if request.resumed {
            stats.preempted_queries += request.tokens.len() as u64;
            stats.preempted_hits += hit_tokens as u64;
        } else {
            stats.requests += 1;
            stats.queries += request.tokens.len() as u64;
            stats.hits += hit_tokens as u64;
        }
    }

    /// Requests in the running batch.
    pub fn num_running(&self) -> usize {
        self.running.len()
    }

    /// Requests in the waiting queue.
    pub fn num_waiting(&self) -> usize {
        self.waiting.len()
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
        let names: BTreeSet<&String> = self.running.values().filter_map(|r| r.lora.as_ref()).collect();
        names.into_iter().cloned().collect()
    }

    /// Distinct adapters of waiting requests, sorted.
    pub fn waiting_loras(&self) -> Vec<String> {
        let names: BTreeSet<&String> = self.waiting.iter().filter_map(|r| r.lora.as_ref()).collect();
        names.into_iter().cloned().collect()
    }

    /// The KV cache, read-only.
    pub fn cache(&self) -> &KvCacheManager {
        &self.cache
    }
}

fn extra_key(lora: &Option<String>) -> &str {
    lora.as_deref().unwrap_or("")
}

#[cfg(test)]
mod tests;
