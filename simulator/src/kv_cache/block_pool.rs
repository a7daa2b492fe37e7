//! The pool of KV blocks: reference counts, the LRU free queue, and the hash → block map.
//!
//! Same rules as vLLM V1's block pool: a block referenced by a running request is pinned; a
//! block whose last reference goes away joins the tail of the free queue but keeps its hash, so
//! a later request can still hit it; a hash is forgotten only when its block is taken from the
//! head of the free queue for new content (eviction on reuse). Usage counts pinned blocks only.

use std::collections::{BTreeMap, HashMap};

use super::block_hash::BlockHash;

/// Index of a block in the pool.
pub type BlockId = usize;

#[derive(Debug, Clone, Default)]
struct Block {
    ref_count: u32,
    hash: Option<BlockHash>,
    /// Position in the free queue while `ref_count == 0`.
    free_position: Option<u64>,
}

/// Fixed-size pool of blocks with prefix-cache bookkeeping.
#[derive(Debug, Clone)]
pub struct BlockPool {
    blocks: Vec<Block>,
    /// Free blocks ordered by when they were freed: the first entry is evicted first.
    free_queue: BTreeMap<u64, BlockId>,
    next_free_position: u64,
    /// Cached content: hash → the block holding it (first writer wins, as in vLLM).
    cached: HashMap<BlockHash, BlockId>,
}

impl BlockPool {
    /// A pool of `num_blocks` empty, free blocks.
    pub fn new(num_blocks: usize) -> Self {
        let mut pool = Self {
            blocks: vec![Block::default(); num_blocks],
            free_queue: BTreeMap::new(),
            next_free_position: 0,
            cached: HashMap::new(),
        };
        for block_id in 0..num_blocks {
            pool.push_free(block_id);
        }
        pool
    }

    /// Total blocks.
    pub fn num_blocks(&self) -> usize {
        self.blocks.len()
    }

    /// Blocks not referenced by any request (cached or empty).
    pub fn num_free(&self) -> usize {
        self.free_queue.len()
    }

    /// Blocks currently holding a cached hash (pinned or free).
    pub fn num_cached(&self) -> usize {
        self.cached.len()
    }

    /// Fraction of blocks pinned by requests, as `vllm:kv_cache_usage_perc` reports it.
    pub fn usage(&self) -> f64 {
        if self.blocks.is_empty() {
            return 0.0;
        }
        1.0 - self.num_free() as f64 / self.num_blocks() as f64
    }

    /// The block caching `hash`, if any.
    pub fn lookup(&self, hash: BlockHash) -> Option<BlockId> {
        self.cached.get(&hash).copied()
    }

    /// Whether the block is in the free queue (referenced by nobody).
    pub fn is_free(&self, block_id: BlockId) -> bool {
        self.blocks.get(block_id).is_some_and(|block| block.ref_count == 0)
    }

    /// Adds a reference to a cached block, taking it out of the free queue if needed.
    pub fn touch(&mut self, block_id: BlockId) {
        let Some(block) = self.blocks.get_mut(block_id) else { return };
        if let Some(position) = block.free_position.take() {
            self.free_queue.remove(&position);
        }
        block.ref_count = block.ref_count.saturating_add(1);
    }

    /// Takes the least recently freed block for new content, evicting its hash; `None` if none.
    pub fn allocate(&mut self) -> Option<BlockId> {
        let (_, block_id) = self.free_queue.pop_first()?;
        let block = self.blocks.get_mut(block_id)?;
        block.free_position = None;
        block.ref_count = 1;
        if let Some(old_hash) = block.hash.take() {
            // Another block may hold the same content (a recomputed last block); keep its entry.
            if self.cached.get(&old_hash) == Some(&block_id) {
                self.cached.remove(&old_hash);
            }
        }
        Some(block_id)
    }

    /// Drops one reference; a block nobody references joins the free queue's tail.
    pub fn release(&mut self, block_id: BlockId) {
        let Some(block) = self.blocks.get_mut(block_id) else { return };
        if block.ref_count == 0 {
            debug_assert!(false, "released a free block");
            return;
        }
        block.ref_count -= 1;
        if block.ref_count == 0 {
            self.push_free(block_id);
        }
    }

    /// Records that the block now holds the full block `hash` (makes it hittable).
    pub fn register(&mut self, block_id: BlockId, hash: BlockHash) {
        let Some(block) = self.blocks.get_mut(block_id) else { return };
        if block.hash.is_some() {
            return;
        }
        block.hash = Some(hash);
        self.cached.entry(hash).or_insert(block_id);
    }

    fn push_free(&mut self, block_id: BlockId) {
        let position = self.next_free_position;
        self.next_free_position += 1;
        if let Some(block) = self.blocks.get_mut(block_id) {
            block.free_position = Some(position);
            self.free_queue.insert(position, block_id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocation_takes_the_oldest_free_block_and_evicts_its_hash() {
        let mut pool = BlockPool::new(2);
        let first = pool.allocate().unwrap();
        pool.register(first, 11);
        pool.release(first);
        assert_eq!(pool.lookup(11), Some(first), "a freed block stays cached");
        let second = pool.allocate().unwrap();
        assert_ne!(first, second, "the never-used block was freed earlier, so it goes first");
        assert_eq!(pool.lookup(11), Some(first));
        let third = pool.allocate().unwrap();
        assert_eq!(third, first);
        assert_eq!(pool.lookup(11), None, "reusing the slot evicts the hash");
        assert!(pool.allocate().is_none());
    }

    #[test]
    fn touched_blocks_are_pinned_and_usage_counts_pins_only() {
        let mut pool = BlockPool::new(4);
        let block = pool.allocate().unwrap();
        pool.register(block, 5);
        assert!((pool.usage() - 0.25).abs() < 1e-9);
        pool.release(block);
        assert_eq!(pool.usage(), 0.0);
        pool.touch(block);
        assert!(!pool.is_free(block));
        assert_eq!(pool.num_free(), 3);
        for _ in 0..3 {
            pool.allocate().unwrap();
        }
        assert!(pool.allocate().is_none(), "the pinned block is never handed out");
        assert_eq!(pool.lookup(5), Some(block));
    }

    #[test]
    fn duplicate_content_keeps_the_first_entry() {
        let mut pool = BlockPool::new(3);
        let a = pool.allocate().unwrap();
        let b = pool.allocate().unwrap();
        pool.register(a, 9);
        pool.register(b, 9);
        assert_eq!(pool.lookup(9), Some(a));
        pool.release(b);
        pool.release(a);
        // Evicting b (freed first) must not drop a's entry.
        let _empty = pool.allocate().unwrap();
        assert_eq!(pool.allocate().unwrap(), b);
        assert_eq!(pool.lookup(9), Some(a));
        assert_eq!(pool.num_cached(), 1);
    }
}
