//! Keyed hashing for tables whose keys a client chooses.
//!
//! Block hashes and session keys are functions of request bytes under public seeds, so a
//! client can search for many keys that land in the same bucket of a table hashed by them
//! directly, and turn every lookup into a long probe (hash flooding). Mixing each key with
//! a per-VM secret first (two rounds of a folded 64×64→128-bit multiply, as foldhash and
//! aHash do) puts a key's bucket out of the client's reach, for ~2 ns per key. The secret
//! comes from the host's clock at start and differs per worker VM; it never leaves memory.

use std::hash::{BuildHasher, Hasher};

/// Multiplies into 128 bits and folds the halves: a strong, cheap 64-bit mixer.
fn folded_multiply(a: u64, b: u64) -> u64 {
    let product = u128::from(a).wrapping_mul(u128::from(b));
    (product as u64) ^ ((product >> 64) as u64)
}

/// A 256-bit secret, expanded from a seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HashKey([u64; 4]);

impl HashKey {
    pub fn from_seed(seed: u64) -> Self {
        let mut state = seed;
        let mut next = || {
            // SplitMix64: spreads even a small seed over every key bit.
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        Self([next() | 1, next() | 1, next() | 1, next() | 1])
    }

    /// The keyed hash of a 64-bit value and a small tag (e.g. a pod id).
    pub fn hash(&self, value: u64, tag: u64) -> u64 {
        let [k0, k1, k2, k3] = self.0;
        let first = folded_multiply(value ^ k0, tag ^ k1);
        folded_multiply(first ^ k2, k3)
    }
}

impl Default for HashKey {
    fn default() -> Self {
        Self::from_seed(0)
    }
}

/// A [`BuildHasher`] for hash maps keyed by client-chosen integers or strings.
#[derive(Debug, Clone, Copy, Default)]
pub struct KeyedState(pub HashKey);

/// Hashes written values through the keyed mixer, word by word.
pub struct KeyedHasher {
    key: HashKey,
    state: u64,
}

impl Hasher for KeyedHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            for (slot, byte) in word.iter_mut().zip(chunk) {
                *slot = *byte;
            }
            self.state = self.key.hash(self.state ^ u64::from_le_bytes(word), chunk.len() as u64);
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.state = self.key.hash(self.state ^ value, 8);
    }

    fn finish(&self) -> u64 {
        self.state
    }
}

impl BuildHasher for KeyedState {
    type Hasher = KeyedHasher;

    fn build_hasher(&self) -> KeyedHasher {
        KeyedHasher { key: self.0, state: 0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn different_seeds_place_the_same_key_differently() {
        let (a, b) = (HashKey::from_seed(1), HashKey::from_seed(2));
        let moved = (0..1000u64).filter(|&v| a.hash(v, 3) & 0xFFFF != b.hash(v, 3) & 0xFFFF).count();
        assert!(moved > 990, "only {moved} of 1000 keys changed bucket");
    }

    #[test]
    fn keys_sharing_low_bits_spread_over_buckets() {
        // A flooding attempt: 4096 keys identical in their low 32 bits.
        let key = HashKey::from_seed(42);
        let mut buckets = std::collections::HashSet::new();
        for high in 0..4096u64 {
            buckets.insert(key.hash((high << 32) | 0xDEAD_BEEF, 0) & 0xFFF);
        }
        assert!(buckets.len() > 2000, "{} distinct buckets of 4096", buckets.len());
    }
}
