//! Cache behaviour that routing quality depends on, checked against vLLM V1's rules.

use super::block_hash::full_block_hashes;
use super::*;

const BLOCK: usize = 16;

fn prompt(start: u32, len: usize) -> Vec<u32> {
    (start..start + len as u32).collect()
}

/// Admits a prompt and returns (hit tokens, block table).
fn admit(cache: &mut KvCacheManager, tokens: &[u32]) -> (usize, Vec<BlockId>) {
    let hashes = full_block_hashes(tokens, BLOCK, "");
    let hit = cache.find_longest_hit(&hashes, tokens.len());
    let blocks = cache.allocate_prompt(&hit, &hashes, tokens.len()).expect("fits");
    (hit.tokens, blocks)
}

#[test]
fn a_fully_cached_block_multiple_prompt_recomputes_its_last_block() {
    let mut cache = KvCacheManager::new(64, BLOCK);
    let tokens = prompt(0, 64); // exactly 4 blocks
    let (first_hit, blocks) = admit(&mut cache, &tokens);
    assert_eq!(first_hit, 0);
    cache.free(&blocks);
    let (second_hit, blocks) = admit(&mut cache, &tokens);
    // max_cache_hit_length = 63 tokens -> 3 full blocks.
    assert_eq!(second_hit, 48);
    assert_eq!(blocks.len(), 4);
    cache.free(&blocks);
    // One more token makes all four blocks hittable.
    let mut longer = tokens.clone();
    longer.push(999);
    assert_eq!(admit(&mut cache, &longer).0, 64);
}

#[test]
fn only_full_blocks_are_shared_between_prompts() {
    let mut cache = KvCacheManager::new(64, BLOCK);
    let mut first = prompt(0, 40); // 2 full blocks + 8 tokens
    let (_, blocks) = admit(&mut cache, &first);
    cache.free(&blocks);
    // Same first 40 tokens, then different: the partial third block is never cached.
    first.extend(prompt(500, 30));
    assert_eq!(admit(&mut cache, &first).0, 32);
}

#[test]
fn different_prefixes_share_nothing_and_a_divergence_stops_the_hit() {
    let mut cache = KvCacheManager::new(64, BLOCK);
    let base = prompt(0, 80);
    let (_, blocks) = admit(&mut cache, &base);
    let mut diverged = base.clone();
    diverged[40] = 7777; // inside block 2
    let (hit, other_blocks) = admit(&mut cache, &diverged);
    assert_eq!(hit, 32, "blocks 0 and 1 hit, block 2 differs, block 3 has a different parent");
    cache.free(&blocks);
    cache.free(&other_blocks);
    assert_eq!(admit(&mut cache, &prompt(1000, 80)).0, 0);
}

#[test]
fn pinned_blocks_survive_pressure_and_free_ones_are_evicted_lru() {
    // 8 blocks: a running request pins 3; an old finished request's 3 blocks are cached but free.
    let mut cache = KvCacheManager::new(8, BLOCK);
    let running = prompt(0, 48);
    let (_, running_blocks) = admit(&mut cache, &running);
    let finished = prompt(100, 48);
    let (_, finished_blocks) = admit(&mut cache, &finished);
    cache.free(&finished_blocks);
    assert_eq!(cache.pool().num_free(), 5);
    // A new 64-token prompt needs 4 blocks: 2 never-used ones, then 2 of the finished request's,
    // taken last block first (its tail goes before its head).
    let (_, pressure_blocks) = admit(&mut cache, &prompt(200, 64));
    let finished_hashes = full_block_hashes(&finished, BLOCK, "");
    assert_eq!(cache.pool().lookup(finished_hashes[0]), Some(finished_blocks[0]), "the head survives");
    assert_eq!(cache.pool().lookup(finished_hashes[2]), None, "the tail was evicted first");
    // The running request's blocks were never handed out.
    assert!(running_blocks.iter().all(|block| !pressure_blocks.contains(block)));
    let running_hashes = full_block_hashes(&running, BLOCK, "");
    assert_eq!(cache.find_longest_hit(&running_hashes, 49).tokens, 48);
}

#[test]
fn a_request_that_does_not_fit_changes_nothing() {
    let mut cache = KvCacheManager::new(4, BLOCK);
    let (_, held) = admit(&mut cache, &prompt(0, 48));
    let too_big = prompt(300, 40); // needs 3 blocks, 1 free
    let hashes = full_block_hashes(&too_big, BLOCK, "");
    let hit = cache.find_longest_hit(&hashes, too_big.len());
    assert!(!cache.can_allocate(&hit, too_big.len()));
    assert!(cache.allocate_prompt(&hit, &hashes, too_big.len()).is_none());
    assert_eq!(cache.pool().num_free(), 1);
    cache.free(&held);
    assert_eq!(cache.pool().num_free(), 4);
}

#[test]
fn a_hit_on_free_blocks_counts_them_against_capacity() {
    let mut cache = KvCacheManager::new(4, BLOCK);
    let tokens = prompt(0, 48);
    let (_, blocks) = admit(&mut cache, &tokens);
    cache.free(&blocks);
    // 4 free blocks, 3 of them holding our prefix: touching a hit uses up a free block too.
    let mut longer = tokens.clone();
    longer.extend(prompt(900, 20)); // 68 tokens: 5 blocks, more than the pool
    let hashes = full_block_hashes(&longer, BLOCK, "");
    let hit = cache.find_longest_hit(&hashes, longer.len());
    assert_eq!(hit.tokens, 48);
    assert!(!cache.can_allocate(&hit, longer.len()));
    let fitting = &longer[..60]; // 4 blocks: 3 hits + 1 new
    let hashes = full_block_hashes(fitting, BLOCK, "");
    let hit = cache.find_longest_hit(&hashes, fitting.len());
    assert!(cache.can_allocate(&hit, fitting.len()));
}

#[test]
fn growth_allocates_one_block_per_block_size_tokens() {
    let mut cache = KvCacheManager::new(4, BLOCK);
    let (_, mut blocks) = admit(&mut cache, &prompt(0, 16));
    assert_eq!(blocks.len(), 1);
    assert!(cache.grow(&mut blocks, 17));
    assert_eq!(blocks.len(), 2);
    assert!(cache.grow(&mut blocks, 64));
    assert_eq!(blocks.len(), 4);
    assert!(!cache.grow(&mut blocks, 65), "the pool is exhausted");
    assert!((cache.usage() - 1.0).abs() < 1e-9);
}
