//! KV blocks that arrive from another pod (prefill/decode disaggregation): how many a prompt
//! still lacks here, and storing them as cached so the prompt's admission counts them as a
//! prefix hit, as vLLM's NIXL connector makes the transferred blocks part of the request.

use super::Engine;
use crate::kv_cache::block_hash::full_block_hashes;

impl Engine {
    /// Tokens of `tokens`' full blocks not cached here (what a transfer has to carry).
    /// `extra_key` is [`super::extra_key`] of the request (its adapter and salt).
    pub fn uncached_block_tokens(&self, tokens: &[u32], extra_key: &str) -> usize {
        let block_size = self.cache.block_size();
        let hashes = full_block_hashes(tokens, block_size, extra_key);
        let hit = self.cache.find_longest_hit(&hashes, tokens.len().saturating_add(1));
        hashes.len().saturating_sub(hit.block_ids.len()) * block_size
    }

    /// Stores the full blocks of `tokens` as cached (transferred); returns the tokens added.
    pub fn import_prompt(&mut self, tokens: &[u32], extra_key: &str) -> usize {
        let block_size = self.cache.block_size();
        let hashes = full_block_hashes(tokens, block_size, extra_key);
        self.cache.import_prefix(&hashes) * block_size
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::NewRequest;

    #[test]
    fn imported_blocks_are_a_prefix_hit_at_admission() {
        let mut engine = Engine::new(64, 16, 8, 1);
        let prompt: Vec<u32> = (0..100).collect();
        assert_eq!(engine.uncached_block_tokens(&prompt, ""), 96);
        assert_eq!(engine.import_prompt(&prompt, ""), 96);
        assert_eq!(engine.uncached_block_tokens(&prompt, ""), 0);
        assert_eq!(engine.import_prompt(&prompt, ""), 0, "a second import adds nothing");
        engine.enqueue(NewRequest {
            id: 1,
            tokens: prompt,
            lora: None,
            cache_salt: None,
            max_tokens: 1,
            stream_seed: 0,
        });
        let plan = engine.plan_step(8192);
        assert_eq!(plan.admitted.first().map(|admission| admission.cached_tokens), Some(96));
    }

    #[test]
    fn an_import_into_a_full_pool_stops_without_evicting_pinned_blocks() {
        let mut engine = Engine::new(4, 16, 8, 1);
        let prompt: Vec<u32> = (0..200).collect();
        assert_eq!(engine.import_prompt(&prompt, ""), 64, "only four blocks fit");
    }
}
