//! The KV cache manager: prefix lookups, allocation for prompts and growth, and freeing.
//!
//! It follows vLLM V1's `KVCacheManager` rules, which decide both routing quality and the
//! `vllm:prefix_cache_*` counters:
//! - a lookup matches the longest run of full cached blocks from the start of the prompt, capped
//!   at `num_tokens - 1` tokens (the last prompt token is always recomputed to get logits, so a
//!   fully cached prompt of a block multiple recomputes its whole last block);
//! - the full blocks of a prompt are registered as cached when the request is admitted (vLLM
//!   caches them when they are scheduled, before the forward pass), and full blocks of generated
//!   tokens as they fill;
//! - freed blocks enter the free queue last block first, so a request's tail is evicted before
//!   its head, and shared prefixes survive longest.

pub mod block_hash;
pub mod block_pool;

use block_hash::BlockHash;
use block_pool::{BlockId, BlockPool};

/// The cached prefix found for a request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CacheHit {
    /// Cached blocks, in prompt order.
    pub block_ids: Vec<BlockId>,
    /// Tokens they cover (`block_ids.len() * block_size`).
    pub tokens: usize,
}

/// Prefix cache and KV block allocation for one pod.
#[derive(Debug, Clone)]
pub struct KvCacheManager {
    pool: BlockPool,
    block_size: usize,
}

impl KvCacheManager {
    /// An empty cache of `num_blocks` blocks of `block_size` tokens.
    pub fn new(num_blocks: usize, block_size: usize) -> Self {
        Self { pool: BlockPool::new(num_blocks), block_size: block_size.max(1) }
    }

    /// Tokens per block.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// Fraction of blocks pinned by requests (0..1).
    pub fn usage(&self) -> f64 {
        self.pool.usage()
    }

    /// Read access to the pool, for tests and statistics.
    pub fn pool(&self) -> &BlockPool {
        &self.pool
    }

    /// Longest cached prefix of a request of `num_tokens` tokens whose full blocks hash to `hashes`.
    pub fn find_longest_hit(&self, hashes: &[BlockHash], num_tokens: usize) -> CacheHit {
        let max_cache_hit_length = num_tokens.saturating_sub(1);
        let max_blocks = max_cache_hit_length / self.block_size;
        let block_ids: Vec<BlockId> =
            hashes.iter().take(max_blocks).map_while(|hash| self.pool.lookup(*hash)).collect();
        let tokens = block_ids.len() * self.block_size;
        CacheHit { block_ids, tokens }
    }

    /// Blocks needed to hold `num_tokens` tokens.
    pub fn blocks_for(&self, num_tokens: usize) -> usize {
        num_tokens.div_ceil(self.block_size)
    }

    /// Whether a request of `num_tokens` tokens with this hit fits in the free blocks now.
    pub fn can_allocate(&self, hit: &CacheHit, num_tokens: usize) -> bool {
        let new_blocks = self.blocks_for(num_tokens).saturating_sub(hit.block_ids.len());
        // Hit blocks sitting in the free queue stop being free once touched.
        let free_hits = hit.block_ids.iter().filter(|block_id| self.pool.is_free(**block_id)).count();
        self.pool.num_free().saturating_sub(free_hits) >= new_blocks
    }

    /// Pins the hit, allocates the rest of the prompt and registers its full blocks.
    ///
    /// Returns the request's block table, or `None` (with nothing changed) if it does not fit.
    pub fn allocate_prompt(&mut self, hit: &CacheHit, hashes: &[BlockHash], num_tokens: usize) -> Option<Vec<BlockId>> {
        if !self.can_allocate(hit, num_tokens) {
            return None;
        }
        let mut blocks = Vec::with_capacity(self.blocks_for(num_tokens));
        for block_id in &hit.block_ids {
            self.pool.touch(*block_id);
            blocks.push(*block_id);
        }
        while blocks.len() < self.blocks_for(num_tokens) {
            // can_allocate guaranteed enough free blocks; stop rather than loop if not.
            let block_id = self.pool.allocate()?;
            blocks.push(block_id);
        }
        self.register_full_blocks(&blocks, hashes, hit.block_ids.len());
        Some(blocks)
    }

    /// Grows a block table to hold `num_tokens` tokens; `false` if the pool is exhausted.
    pub fn grow(&mut self, blocks: &mut Vec<BlockId>, num_tokens: usize) -> bool {
        while blocks.len() < self.blocks_for(num_tokens) {
            match self.pool.allocate() {
                Some(block_id) => blocks.push(block_id),
                None => return false,
            }
        }
        true
    }

    /// Registers the full blocks from index `first` on that have a hash (registered ones are skipped).
    pub fn register_full_blocks(&mut self, blocks: &[BlockId], hashes: &[BlockHash], first: usize) {
        for (block_id, hash) in blocks.iter().zip(hashes).skip(first) {
            self.pool.register(*block_id, *hash);
        }
    }

    /// Stores blocks computed elsewhere (a KV transfer from a prefill pod) as cached and free,
    /// so the next request with this prefix finds them; returns how many were new here.
    ///
    /// Blocks already cached are pinned while the rest are allocated, so importing a prompt
    /// never evicts its own head; it stops early if the pool is full of pinned blocks.
    pub fn import_prefix(&mut self, hashes: &[BlockHash]) -> usize {
        let mut held = Vec::with_capacity(hashes.len());
        let mut imported = 0;
        for hash in hashes {
            if let Some(block_id) = self.pool.lookup(*hash) {
                self.pool.touch(block_id);
                held.push(block_id);
                continue;
            }
            let Some(block_id) = self.pool.allocate() else { break };
            self.pool.register(block_id, *hash);
            held.push(block_id);
            imported += 1;
        }
        self.free(&held);
        imported
    }

    /// Releases a request's blocks, last block first, so tails are evicted before prefixes.
    pub fn free(&mut self, blocks: &[BlockId]) {
        for block_id in blocks.iter().rev() {
            self.pool.release(*block_id);
        }
    }
}

#[cfg(test)]
mod tests;
