//! The simulator's tokenizer: deterministic, documented, and trivially reproducible.
//!
//! Rules (also in the README): text is split on Unicode whitespace; each word is cut into pieces
//! of at most [`MAX_PIECE_BYTES`] bytes (never inside a UTF-8 character); each piece is one token
//! whose id is a stable hash of the piece modulo [`VOCAB_SIZE`]. Whitespace itself produces no
//! token. Benchmarks build prompts of exact token counts with [`text_of_tokens`], whose words are
//! all one token long, and generated text uses words that re-tokenize to the ids that were
//! generated, so a multi-turn conversation re-sends the same tokens it received.

use crate::hashing::{hash_bytes, mix64, SplitMix64};

/// Vocabulary size (Qwen3's), so token ids look like a real model's.
pub const VOCAB_SIZE: u32 = 151_936;
/// A word longer than this many bytes becomes several tokens.
pub const MAX_PIECE_BYTES: usize = 4;
/// Letters used by [`text_of_tokens`]; 26^4 distinct four-letter words keep prompts distinct.
const SYNTHETIC_ALPHABET: &[u8; 26] = b"abcdefghijklmnopqrstuvwxyz";
/// Words the simulated model "generates"; each is at most four bytes, hence exactly one token.
const OUTPUT_WORDS: [&str; 32] = [
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on", "not", "he",
    "this", "are", "or", "his", "from", "at", "an", "but", "have", "they", "one", "you", "all", "we", "can",
];

/// The token id of one piece (a word of at most four bytes, or a fragment of a longer word).
pub fn token_id(piece: &str) -> u32 {
    // The modulo keeps ids inside the vocabulary; the result always fits in u32.
    (hash_bytes(piece.as_bytes()) % u64::from(VOCAB_SIZE)) as u32
}

/// Tokenizes text by the rules in the module docs.
pub fn tokenize(text: &str) -> Vec<u32> {
    let mut tokens = Vec::new();
    for word in text.split_whitespace() {
        push_word_pieces(word, &mut tokens);
    }
    tokens
}

/// Number of tokens `text` has, without building the vector.
pub fn count_tokens(text: &str) -> usize {
    text.split_whitespace().map(|word| word_pieces(word).count()).sum()
}

/// Text of exactly `count` tokens, fixed by `seed`: four-letter lowercase words separated by spaces.
///
/// Concatenating two such texts with a space gives exactly the sum of their token counts, so
/// `format!("{prefix} {suffix}")` builds shared-prefix prompts whose token boundaries are known.
pub fn text_of_tokens(count: usize, seed: u64) -> String {
    let mut rng = SplitMix64::new(mix64(seed ^ 0x7465_7874)); // "text": separates this use of the seed
    let mut text = String::with_capacity(count.saturating_mul(MAX_PIECE_BYTES + 1));
    for index in 0..count {
        if index > 0 {
            text.push(' ');
        }
        for _ in 0..MAX_PIECE_BYTES {
            let letter_index = rng.next_below(SYNTHETIC_ALPHABET.len() as u64) as usize;
            let letter = SYNTHETIC_ALPHABET.get(letter_index).copied().unwrap_or(b'a');
            text.push(char::from(letter));
        }
    }
    text
}

/// The word generated at `position` of a response whose generation is seeded by `stream_seed`.
pub fn output_word(stream_seed: u64, position: u64) -> &'static str {
    let index = (mix64(stream_seed ^ mix64(position)) % OUTPUT_WORDS.len() as u64) as usize;
    OUTPUT_WORDS.get(index).copied().unwrap_or("the")
}

fn push_word_pieces(word: &str, tokens: &mut Vec<u32>) {
    tokens.extend(word_pieces(word).map(token_id));
}

/// Splits a whitespace-free word into pieces of at most [`MAX_PIECE_BYTES`] bytes on char boundaries.
fn word_pieces(word: &str) -> impl Iterator<Item = &str> {
    let mut rest = word;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut end = 0;
        for (offset, character) in rest.char_indices() {
            let next_end = offset + character.len_utf8();
            // A single character is at most 4 bytes, so the first one always fits.
            if next_end > MAX_PIECE_BYTES && end > 0 {
                break;
            }
            end = next_end;
        }
        let (piece, remainder) = rest.split_at(end);
        rest = remainder;
        Some(piece)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_tokens_and_long_words_split_into_four_byte_pieces() {
        assert_eq!(tokenize("hi there"), vec![token_id("hi"), token_id("ther"), token_id("e")]);
        assert_eq!(tokenize("  \n\t "), Vec::<u32>::new());
        assert_eq!(count_tokens("abcdefghij x"), 4);
        // Multi-byte characters are never cut: "é" is 2 bytes, so "éééé" is 8 bytes in 2 pieces.
        assert_eq!(tokenize("éééé"), vec![token_id("éé"), token_id("éé")]);
        assert_eq!(tokenize("a😀b").len(), 3);
    }

    #[test]
    fn tokenization_is_deterministic_and_in_vocabulary() {
        let text = text_of_tokens(300, 42);
        let first = tokenize(&text);
        assert_eq!(first, tokenize(&text));
        assert!(first.iter().all(|id| *id < VOCAB_SIZE));
        assert_eq!(token_id("hello"), token_id("hello"));
    }

    #[test]
    fn synthetic_text_has_exact_token_counts_and_concatenates() {
        for count in [0usize, 1, 7, 512] {
            assert_eq!(tokenize(&text_of_tokens(count, 3)).len(), count);
        }
        let prefix = text_of_tokens(512, 1);
        let suffix = text_of_tokens(128, 2);
        let prompt = format!("{prefix} {suffix}");
        assert_eq!(tokenize(&prompt).len(), 640);
        assert_ne!(text_of_tokens(16, 1), text_of_tokens(16, 2));
    }

    #[test]
    fn generated_words_retokenize_to_one_token_each() {
        let text: String = (0..50).map(|position| format!(" {}", output_word(9, position))).collect();
        assert_eq!(tokenize(&text).len(), 50);
        assert_eq!(output_word(9, 3), output_word(9, 3));
    }
}
