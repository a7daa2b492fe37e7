//! A small deterministic random source for tie-breaking.
//!
//! Ties between equally good pods must break at random, not by list order, or the first
//! pod of the list takes every tie. The filter seeds this from the host clock; tests seed
//! it with a constant, so their outcomes repeat.

/// SplitMix64: tiny, fast, good enough to spread ties; not for anything secret.
#[derive(Debug, Clone)]
pub struct TieBreaker {
    state: u64,
}

impl TieBreaker {
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform index below `len` (0 when `len` is 0).
    pub fn below(&mut self, len: usize) -> usize {
        if len == 0 {
            return 0;
        }
        (self.next_u64() % len as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spreads_over_every_index() {
        let mut random = TieBreaker::new(7);
        let mut seen = [0u32; 4];
        for _ in 0..4000 {
            seen[random.below(4)] += 1;
        }
        assert!(seen.iter().all(|&n| n > 800), "{seen:?}");
        assert_eq!(random.below(0), 0);
    }
}
