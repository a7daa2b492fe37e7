//! Chained block hashes, as vLLM's prefix caching keys its blocks.
//!
//! The hash of block `i` covers the hash of block `i - 1` and the tokens of block `i`, so equal
//! hashes mean equal prefixes. The chain starts from a root that folds in the extra key (the LoRA
//! adapter name, empty for the base model), so adapters never share blocks with each other or
//! with the base model. Only full blocks get a hash: a partial block is never cached.

use crate::hashing::StableHasher;

/// A block's content hash (covers its whole prefix).
pub type BlockHash = u64;

/// Seed separating block hashes from every other use of the stable hasher.
const BLOCK_HASH_SEED: u64 = 0x0062_6c6f_636b; // "block"

/// The parent hash of the first block for a given extra key (LoRA adapter name or "").
pub fn root_hash(extra_key: &str) -> BlockHash {
    let mut hasher = StableHasher::with_seed(BLOCK_HASH_SEED);
    hasher.write_bytes(extra_key.as_bytes());
    hasher.finish()
}

/// Hash of one block given its parent's hash and its tokens.
pub fn chain_hash(parent: BlockHash, block_tokens: &[u32]) -> BlockHash {
    let mut hasher = StableHasher::with_seed(parent);
    for token in block_tokens {
        hasher.write_u32(*token);
    }
    hasher.finish()
}

/// Hashes of every full block of `tokens`, in order.
pub fn full_block_hashes(tokens: &[u32], block_size: usize, extra_key: &str) -> Vec<BlockHash> {
    let mut hashes = Vec::with_capacity(tokens.len() / block_size.max(1));
    extend_block_hashes(&mut hashes, tokens, block_size, extra_key);
    hashes
}

/// Appends hashes for the full blocks of `tokens` not yet in `hashes` (used as a request grows).
pub fn extend_block_hashes(hashes: &mut Vec<BlockHash>, tokens: &[u32], block_size: usize, extra_key: &str) {
    if block_size == 0 {
        return;
    }
    let mut parent = hashes.last().copied().unwrap_or_else(|| root_hash(extra_key));
    let already_hashed_tokens = hashes.len() * block_size;
    let unhashed = tokens.get(already_hashed_tokens..).unwrap_or_default();
    for block_tokens in unhashed.chunks_exact(block_size) {
        parent = chain_hash(parent, block_tokens);
        hashes.push(parent);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_full_blocks_are_hashed() {
        let tokens: Vec<u32> = (0..40).collect();
        assert_eq!(full_block_hashes(&tokens, 16, "").len(), 2);
        assert_eq!(full_block_hashes(&tokens[..32], 16, "").len(), 2);
        assert!(full_block_hashes(&tokens[..15], 16, "").is_empty());
    }

    #[test]
    fn equal_hashes_mean_equal_prefixes() {
        let a: Vec<u32> = (0..48).collect();
        let mut b = a.clone();
        b[20] = 999; // differs inside block 1
        let hashes_a = full_block_hashes(&a, 16, "");
        let hashes_b = full_block_hashes(&b, 16, "");
        assert_eq!(hashes_a[0], hashes_b[0]);
        assert_ne!(hashes_a[1], hashes_b[1]);
        // Block 2 has equal tokens but a different parent, so it differs too.
        assert_ne!(hashes_a[2], hashes_b[2]);
    }

    #[test]
    fn extra_key_separates_adapters() {
        let tokens: Vec<u32> = (0..16).collect();
        assert_ne!(full_block_hashes(&tokens, 16, ""), full_block_hashes(&tokens, 16, "adapter-a"));
    }

    #[test]
    fn extending_matches_hashing_all_at_once() {
        let tokens: Vec<u32> = (0..70).collect();
        let mut grown = full_block_hashes(&tokens[..20], 16, "x");
        extend_block_hashes(&mut grown, &tokens, 16, "x");
        assert_eq!(grown, full_block_hashes(&tokens, 16, "x"));
    }
}
