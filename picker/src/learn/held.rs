//! What a pod demonstrably holds, in index blocks: the floor under its index capacity.
//!
//! Why a floor: the feedback factor only hears about a pod's misses. When a pod evicts a
//! prompt by plain LRU (unused for a while, aged out by other requests' question blocks), the
//! miss lowers the pod's capacity; once the capacity is below what the pod really holds, the
//! index forgets prompts the pod still has, they are routed elsewhere as new, and no answer
//! ever comes back to say the pod had them: nothing pushes the capacity up again, and every
//! further eviction pushes it down (issue 14's cascade). So the capacity must not go below
//! what the answers themselves prove the pod holds.
//!
//! The proof is LRU's: a pod that still holds prefix X, last used at answer `u`, holds
//! everything it was sent since `u` too (all of it is more recent than X). So a confirmed hit on
//! X proves the pod holds X's blocks + the blocks of every other prefix used since + the new
//! (unmatched) blocks of every request answered since; a miss on X proves it holds less than
//! that. The floor is raised to the first on a hit and lowered to the second on a miss, so a pod
//! that really evicts most of what the index predicted (misses only) has no floor at all.
//! No decay by time is needed: a floor set too high makes the index predict hits the pod no
//! longer has, requests go there, and their misses lower it. (Too low is what cannot be seen,
//! which is why the floor exists.)
//! (Why not evict only the missed blocks from the index instead: after a miss the pod computed
//! them again and holds them, so the index entry is right; what was wrong is the capacity.)
//!
//! Bounded: [`HELD_PREFIXES`] prefixes per pod, the least recently used replaced first (a
//! forgotten prefix only makes the floor lower, never wrong the other way).

/// Prefixes remembered per pod: 32 × 32 bytes = 1 KiB per pod (at most `MAX_PODS` pods: 1 MiB
/// per worker, allocated as pods are first answered). More prefixes than this per pod
/// only make the floor an underestimate.
pub const HELD_PREFIXES: usize = 32;

/// One prefix the pod answered as cached.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
struct Prefix {
    /// Hash of its last index block (0: slot unused).
    key: u64,
    /// When it was last used, in the pod's answer count.
    last_use: u64,
    /// The pod's new-block count at that time.
    fresh_at: u64,
    /// Index blocks it spans.
    blocks: u32,
}

/// One pod's held prefixes and the floor they prove.
#[derive(Debug, Clone, PartialEq)]
pub struct Held {
    prefixes: [Prefix; HELD_PREFIXES],
    /// Answers seen (the clock of `last_use`).
    answers: u64,
    /// Blocks sent to the pod that no prefix matched (questions, new prompts), summed.
    fresh: u64,
    /// Index blocks the pod is proven to hold.
    floor: u64,
}

impl Default for Held {
    fn default() -> Self {
        Self { prefixes: [Prefix::default(); HELD_PREFIXES], answers: 0, fresh: 0, floor: 0 }
    }
}

/// One answer, as the floor sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Answer {
    /// Hash of the last block the pod was matched on (none: not predicted as cached).
    pub key: Option<u64>,
    pub matched_blocks: u32,
    pub hashed_blocks: u32,
    /// The pod confirmed the match (reported at least the prediction, within a block).
    pub confirmed: bool,
}

impl Held {
    /// Index blocks the pod is proven to hold.
    pub fn floor(&self) -> u64 {
        self.floor
    }

    pub fn answered(&mut self, answer: Answer) {
        self.answers = self.answers.saturating_add(1);
        let new_blocks = answer.hashed_blocks.saturating_sub(answer.matched_blocks);
        if let Some(key) = answer.key.filter(|&k| k != 0 && answer.matched_blocks > 0) {
            self.judge(key, answer.matched_blocks, new_blocks, answer.confirmed);
        }
        self.fresh = self.fresh.saturating_add(u64::from(new_blocks));
    }

    /// Raises (hit) or lowers (miss) the floor by what the prefix's last use proves, then
    /// records its use now (after a miss the pod computed it again, so it holds it now).
    /// `new_blocks` (this request's own question) count as sent with it, not after it.
    fn judge(&mut self, key: u64, blocks: u32, new_blocks: u32, confirmed: bool) {
        let slot = match self.prefixes.iter().position(|p| p.key == key) {
            Some(slot) => slot,
            None => {
                // Never seen here: nothing proven about older blocks, only that it is held now.
                if confirmed {
                    self.floor = self.floor.max(u64::from(blocks));
                }
                self.oldest_slot()
            }
        };
        if let Some(prefix) = self.prefixes.get(slot).copied().filter(|p| p.key == key) {
            let newer = self.sent_since(prefix.last_use, self.fresh.saturating_sub(prefix.fresh_at));
            if confirmed {
                self.floor = self.floor.max(newer.saturating_add(u64::from(blocks)));
            } else {
                // It held less than X and all since (X is gone), not less than what is since:
                // the floor stays at the pod's LRU boundary instead of a prefix below it.
                self.floor = self.floor.min(newer.saturating_add(u64::from(blocks)).saturating_sub(1));
                // LRU: what was used before it is gone too.
                for older in self.prefixes.iter_mut().filter(|p| p.last_use <= prefix.last_use) {
                    *older = Prefix::default();
                }
            }
        }
        if let Some(entry) = self.prefixes.get_mut(slot) {
            let fresh_at = self.fresh.saturating_add(u64::from(new_blocks));
            *entry = Prefix { key, last_use: self.answers, fresh_at, blocks };
        }
    }

    /// `base` plus the blocks of every remembered prefix used after answer `since`.
    fn sent_since(&self, since: u64, base: u64) -> u64 {
        let prefixes: u64 =
            self.prefixes.iter().filter(|p| p.key != 0 && p.last_use > since).map(|p| u64::from(p.blocks)).sum();
        base.saturating_add(prefixes)
    }

    /// An unused slot, else the least recently used one.
    fn oldest_slot(&self) -> usize {
        let by_age = |p: &Prefix| if p.key == 0 { 0 } else { p.last_use.saturating_add(1) };
        (0..HELD_PREFIXES).min_by_key(|&i| self.prefixes.get(i).map_or(u64::MAX, by_age)).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(key: u64, confirmed: bool) -> Answer {
        Answer { key: Some(key), matched_blocks: 100, hashed_blocks: 110, confirmed }
    }

    #[test]
    fn a_hit_proves_every_prefix_used_since_its_last_use() {
        let mut held = Held::default();
        for key in 1..=4 {
            held.answered(answer(key, true));
        }
        assert_eq!(held.floor(), 100, "first sight proves only itself");
        held.answered(answer(1, true));
        // Prefixes 2..4 (300) + the new blocks of answers 2..4 (30) + prefix 1 (100).
        assert_eq!(held.floor(), 430);
    }

    #[test]
    fn a_miss_caps_the_floor_and_forgets_older_prefixes() {
        let mut held = Held::default();
        for key in [1, 2, 3, 1, 2, 3] {
            held.answered(answer(key, true));
        }
        // Since prefix 3's last use: prefixes 1, 2, their 20 new blocks, and prefix 3.
        assert_eq!(held.floor(), 320);
        held.answered(answer(1, false));
        // Less than prefix 1 and what was sent since (prefixes 2, 3, their 20 new blocks).
        assert_eq!(held.floor(), 319);
        held.answered(answer(9, false));
        assert_eq!(held.floor(), 319, "a miss on an unknown prefix proves nothing");
    }
}
