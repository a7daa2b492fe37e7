//! Deterministic prompt text and popularity draws, so every target sees the same requests.
//!
//! The simulator's tokenizer (simulator/README.md) makes every whitespace-separated word of at
//! most four bytes exactly one token. Prompts are built from four-letter lowercase words, so
//! "512 tokens" here is 512 tokens in the pod's prefix cache too, and shared prefixes end on
//! known token boundaries. Nothing depends on the simulator crate being built.

/// Reproducible across builds (`std` promises no such thing): the picker's SplitMix64.
#[derive(Debug, Clone)]
pub struct SeededRandom {
    inner: picker::random::TieBreaker,
}

impl SeededRandom {
    pub fn new(seed: u64) -> Self {
        Self { inner: picker::random::TieBreaker::new(seed) }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.inner.next_u64()
    }

    /// Uniform in `[0, 1)`.
    pub fn next_unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `low..=high` (returns `low` when the range is empty).
    pub fn between(&mut self, low: usize, high: usize) -> usize {
        if high <= low {
            return low;
        }
        let span = (high - low) as u64 + 1;
        low + (self.next_u64() % span) as usize
    }

    /// Fisher-Yates shuffle.
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for index in (1..items.len()).rev() {
            let other = (self.next_u64() % (index as u64 + 1)) as usize;
            items.swap(index, other);
        }
    }
}

const LETTERS: &[u8; 26] = b"abcdefghijklmnopqrstuvwxyz";
/// Each word is this many letters: at most four bytes, so exactly one simulator token.
const LETTERS_PER_WORD: usize = 4;

/// Text of exactly `tokens` simulator tokens, fixed by `seed`.
pub fn text_of_tokens(tokens: usize, seed: u64) -> String {
    let mut random = SeededRandom::new(seed ^ 0x7072_6f6d_7074); // "prompt": separates this use of seeds
    let mut text = String::with_capacity(tokens * (LETTERS_PER_WORD + 1));
    for index in 0..tokens {
        if index > 0 {
            text.push(' ');
        }
        for _ in 0..LETTERS_PER_WORD {
            let letter = LETTERS.get((random.next_u64() % LETTERS.len() as u64) as usize).copied().unwrap_or(b'a');
            text.push(char::from(letter));
        }
    }
    text
}

/// Draws ranks `0..n` with probability proportional to `1 / (rank + 1)^exponent`.
#[derive(Debug, Clone)]
pub struct Zipf {
    cumulative: Vec<f64>,
}

impl Zipf {
    pub fn new(n: usize, exponent: f64) -> Self {
        let mut total = 0.0;
        let mut cumulative = Vec::with_capacity(n);
        for rank in 0..n {
            total += 1.0 / ((rank + 1) as f64).powf(exponent);
            cumulative.push(total);
        }
        for value in &mut cumulative {
            *value /= total;
        }
        Self { cumulative }
    }

    pub fn draw(&self, random: &mut SeededRandom) -> usize {
        let unit = random.next_unit();
        let rank = self.cumulative.partition_point(|bound| *bound <= unit);
        rank.min(self.cumulative.len().saturating_sub(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_has_one_short_word_per_token_and_is_reproducible() {
        let text = text_of_tokens(512, 3);
        let words: Vec<&str> = text.split_whitespace().collect();
        assert_eq!(words.len(), 512);
        assert!(words.iter().all(|word| word.len() == 4));
        assert_eq!(text, text_of_tokens(512, 3));
        assert_ne!(text, text_of_tokens(512, 4));
        assert_eq!(text_of_tokens(0, 1), "");
    }

    #[test]
    fn the_simulator_counts_exactly_these_tokens() {
        let prefix = text_of_tokens(512, 1);
        assert_eq!(vllm_sim::tokenize(&prefix).len(), 512);
        let prompt = format!("{prefix} {}", text_of_tokens(128, 2));
        assert_eq!(vllm_sim::tokenize(&prompt).len(), 640);
        assert!(vllm_sim::tokenize(&prompt).starts_with(&vllm_sim::tokenize(&prefix)));
    }

    #[test]
    fn zipf_prefers_low_ranks_and_stays_in_range() {
        let zipf = Zipf::new(64, 1.1);
        let mut random = SeededRandom::new(1);
        let mut counts = [0u32; 64];
        for _ in 0..20_000 {
            counts[zipf.draw(&mut random)] += 1;
        }
        // Rank 0 has about 25% of the mass for s = 1.1 and 64 ranks.
        assert!((4_000..6_000).contains(&counts[0]), "{}", counts[0]);
        assert!(counts[0] > counts[1] && counts[1] > counts[10]);
    }

    #[test]
    fn between_and_shuffle_stay_in_bounds() {
        let mut random = SeededRandom::new(9);
        for _ in 0..1000 {
            let value = random.between(3, 7);
            assert!((3..=7).contains(&value));
        }
        assert_eq!(random.between(5, 5), 5);
        let mut items: Vec<u32> = (0..50).collect();
        random.shuffle(&mut items);
        let mut sorted = items.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..50).collect::<Vec<_>>());
    }
}
