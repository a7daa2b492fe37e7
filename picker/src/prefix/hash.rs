//! Chained block hashes of a prompt: the keys of prefix-cache-aware routing.
//!
//! vLLM caches a prompt's KV in blocks of `block_size` tokens, each named by a hash of its
//! tokens chained to the hash of the block before, so a block is reused only when the whole
//! prefix up to it matches, and only full blocks are cached. The proxy has no tokenizer, so it
//! mirrors that on bytes: a text block is `block_tokens × bytes_per_token` bytes (about the text
//! of one engine block), and token-id prompts are cut into exactly `block_tokens` ids, so their
//! blocks line up with the engine's. The chain is seeded with the model name and `cache_salt`:
//! two models, adapters or tenants never share a block.
//!
//! The bytes hashed are the request's raw JSON text as the client wrote it, not a normalised
//! form: identical clients send identical bytes, and raw slices cost no copy. A chat request
//! hashes its `tools` and whole message objects, media parts as short placeholders (the `chat`
//! module says why), so a chat and a completions request of the same words never share blocks.
//! A Responses API request hashes `tools`, its tagged `instructions`, then its `input` items
//! as chat messages.
//!
//! A shape the OpenAI API does not define (a numeric prompt, messages that are not a list of
//! objects, a float among token ids) hashes nothing: the request is routed by load alone.

use std::fmt;

use xxhash_rust::xxh3::{xxh3_64_with_seed, Xxh3};

use super::chat::{hash_chat, hash_responses};
use super::json::{for_each_element, for_each_token_id, string_contents};
use crate::request::{Endpoint, InferenceRequest};

/// Blocks hashed per request at most, whatever the configuration says. It bounds the work per
/// request, an index lookup's length and a routing event's size (8 KiB of hashes); 1024 blocks of
/// 16 tokens cover a 16k-token prefix, past which a prefix has long told the pods apart.
pub const MAX_BLOCKS: usize = 1024;

/// Bytes in one block at most: the size of the stack buffer a block spanning two JSON pieces is
/// gathered in. 4 KiB covers 1024-token blocks of token ids and 256-token blocks of text.
pub const MAX_BLOCK_BYTES: usize = 4096;

/// Token ids are hashed as little-endian `u32`s, the widest id any vocabulary uses.
const TOKEN_BYTES: usize = 4;

/// Separates strings of a prompt list and marks media placeholders. Raw JSON string contents
/// never hold a NUL byte (control characters must be escaped), so it cannot collide with text.
pub(super) const SEPARATOR: u8 = 0;

/// Separates the lists of a batch of token-id prompts: no vocabulary has 2^32 - 1 tokens.
const SEPARATOR_TOKEN: u32 = u32::MAX;

/// How prompts are cut into blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HashParams {
    /// Tokens per block: the engine's `block_size` (vLLM's default is 16).
    pub block_tokens: usize,
    /// Bytes of prompt text per token, on average (about 4 for English with common tokenizers).
    pub bytes_per_token: usize,
    /// Blocks hashed per request at most; capped at [`MAX_BLOCKS`].
    pub max_blocks: usize,
}

impl Default for HashParams {
    fn default() -> Self {
        Self { block_tokens: 16, bytes_per_token: 4, max_blocks: 256 }
    }
}

impl HashParams {
    /// Checks the parameters, for configuration time; hashing clamps whatever it is given.
    pub fn validate(&self) -> Result<(), String> {
        if self.block_tokens == 0 || self.bytes_per_token == 0 || self.max_blocks == 0 {
            return Err(format!("prefix hashing parameters must be positive: {self:?}"));
        }
        // Blocks past MAX_BLOCK_BYTES are not refused but cut to it when hashing (the sizes
        // are clamped in `text_block_bytes` and `token_block_bytes`).
        if self.max_blocks > MAX_BLOCKS {
            return Err(format!("max_blocks may be at most {MAX_BLOCKS}, not {}", self.max_blocks));
        }
        Ok(())
    }

    fn text_block_bytes(&self) -> usize {
        self.block_tokens.saturating_mul(self.bytes_per_token).clamp(1, MAX_BLOCK_BYTES)
    }

    fn token_block_bytes(&self) -> usize {
        self.block_tokens.saturating_mul(TOKEN_BYTES).clamp(TOKEN_BYTES, MAX_BLOCK_BYTES)
    }
}

/// Why a prompt was not hashed: its JSON has a shape the endpoint does not define.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShapeError(pub(super) &'static str);

impl fmt::Display for ShapeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "prompt not hashed: {}", self.0)
    }
}

/// The hash the chain starts from: model and `cache_salt`, each length-prefixed so that no two
/// different pairs read as the same bytes.
pub fn chain_seed(model: &str, cache_salt: &str) -> u64 {
    let mut hasher = Xxh3::new();
    hasher.update(&(model.len() as u64).to_le_bytes());
    hasher.update(model.as_bytes());
    hasher.update(&[SEPARATOR]);
    hasher.update(cache_salt.as_bytes());
    hasher.digest()
}

/// Hashes the prompt of `request` into `out` (cleared first), one chained hash per full block,
/// and returns how many. On a [`ShapeError`], `out` is left empty.
pub fn hash_prompt(
    request: &InferenceRequest<'_>,
    endpoint: Endpoint,
    params: &HashParams,
    out: &mut Vec<u64>,
) -> Result<usize, ShapeError> {
    hash_prompt_noting_replies(request, endpoint, params, out, &mut Vec::new())
}

/// Where an assistant message of a chat lies among the prompt's blocks: it starts in block
/// `start_block` (0-based; the blocks before it hold only what precedes it) and ends in
/// `end_block`. A pod holding exactly the `start_block` blocks before a reply most likely served
/// the conversation's previous turn, so it generated that reply and holds it too: vLLM caches
/// the full blocks of generated tokens as well as the prompt's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplySpan {
    pub start_block: u32,
    pub end_block: u32,
}

/// Replies noted per prompt at most (a conversation's turns past this are not credited).
pub const MAX_REPLY_SPANS: usize = 64;

/// [`hash_prompt`], also noting in `replies` (cleared first) where the chat's assistant messages
/// lie among the blocks hashed; none for completions.
pub fn hash_prompt_noting_replies(
    request: &InferenceRequest<'_>,
    endpoint: Endpoint,
    params: &HashParams,
    out: &mut Vec<u64>,
    replies: &mut Vec<ReplySpan>,
) -> Result<usize, ShapeError> {
    hash_prompt_as(request, request.model.as_deref(), endpoint, params, out, replies)
}

/// [`hash_prompt_noting_replies`] for the request sent as `model`: a rewrite (a canary's
/// draw, a gateway's rewrite header) sends it as another model than its body names, and the
/// engine keeps each model's and adapter's cache apart, so the chain starts from the model the
/// pod runs it as.
pub fn hash_prompt_as(
    request: &InferenceRequest<'_>,
    model: Option<&str>,
    endpoint: Endpoint,
    params: &HashParams,
    out: &mut Vec<u64>,
    replies: &mut Vec<ReplySpan>,
) -> Result<usize, ShapeError> {
    out.clear();
    replies.clear();
    let seed = chain_seed(model.unwrap_or(""), request.cache_salt.as_deref().unwrap_or(""));
    let mut chain = BlockChain::new(out, seed, params);
    chain.replies = Some(replies);
    let outcome = match (endpoint, request.prompt, request.messages) {
        (Endpoint::Completions, Some(prompt), _) => hash_completion(prompt, params, &mut chain),
        // A Messages API request is a chat with its `system` apart (`instructions`).
        (Endpoint::ChatCompletions | Endpoint::Messages, _, Some(messages)) => {
            hash_chat(messages, request.messages_cut.as_deref(), request.tools, request.instructions, &mut chain)
        }
        (Endpoint::Responses, _, _) => hash_responses(
            request.instructions,
            request.input,
            request.messages_cut.as_deref(),
            request.tools,
            &mut chain,
        ),
        _ => Ok(()),
    };
    if let (Err(_), Some(replies)) = (&outcome, chain.replies.take()) {
        replies.clear();
    }
    match outcome {
        Ok(()) => Ok(out.len()),
        Err(error) => {
            out.clear();
            Err(error)
        }
    }
}

/// Cuts a stream of bytes, fed in pieces, into blocks and chains their hashes into `out`.
pub(super) struct BlockChain<'o> {
    out: &'o mut Vec<u64>,
    previous: u64,
    block_len: usize,
    max_blocks: usize,
    /// A block that spans two pieces is gathered here; one within a piece is hashed in place.
    pending: [u8; MAX_BLOCK_BYTES],
    pending_len: usize,
    /// Where assistant messages lie, for a chat (see [`ReplySpan`]).
    replies: Option<&'o mut Vec<ReplySpan>>,
}

impl<'o> BlockChain<'o> {
    fn new(out: &'o mut Vec<u64>, seed: u64, params: &HashParams) -> Self {
        Self {
            out,
            previous: seed,
            block_len: params.text_block_bytes(),
            max_blocks: params.max_blocks.clamp(1, MAX_BLOCKS),
            pending: [0; MAX_BLOCK_BYTES],
            pending_len: 0,
            replies: None,
        }
    }

    /// The block the next byte fed lands in (0-based).
    pub(super) fn current_block(&self) -> u32 {
        u32::try_from(self.out.len()).unwrap_or(u32::MAX)
    }

    /// Notes an assistant message that began in block `start_block` and ended before the next
    /// byte to feed; only if it reached past that block (else the match gains nothing).
    pub(super) fn note_reply(&mut self, start_block: u32) {
        let end_block = self.current_block();
        if let Some(replies) = self.replies.as_deref_mut().filter(|r| r.len() < MAX_REPLY_SPANS) {
            if end_block > start_block {
                replies.push(ReplySpan { start_block, end_block });
            }
        }
    }

    fn is_full(&self) -> bool {
        self.out.len() >= self.max_blocks
    }

    fn push(&mut self, block: u64) {
        self.out.push(block);
        self.previous = block;
    }

    /// Feeds the next bytes; returns false once the chain is full, so callers stop reading.
    /// Each turn of the loop consumes at least one byte, so it ends.
    pub(super) fn feed(&mut self, mut bytes: &[u8]) -> bool {
        while !bytes.is_empty() && !self.is_full() {
            if self.pending_len == 0 {
                if let Some((block, rest)) = bytes.split_at_checked(self.block_len) {
                    self.push(xxh3_64_with_seed(block, self.previous));
                    bytes = rest;
                    continue;
                }
            }
            let take = self.block_len.saturating_sub(self.pending_len).clamp(1, bytes.len());
            let (head, rest) = bytes.split_at_checked(take).unwrap_or((bytes, &[]));
            if let Some(room) = self.pending.get_mut(self.pending_len..self.pending_len + head.len()) {
                room.copy_from_slice(head);
            }
            self.pending_len += head.len();
            bytes = rest;
            if self.pending_len >= self.block_len {
                let block = xxh3_64_with_seed(self.pending.get(..self.block_len).unwrap_or_default(), self.previous);
                self.pending_len = 0;
                self.push(block);
            }
        }
        !self.is_full()
    }

    /// Feeds one token id. Token blocks hold a whole number of ids, so an id never spans two
    /// blocks: a fixed 4-byte store, without the general path's slicing (ids come by thousands).
    fn feed_token(&mut self, id: u32) -> bool {
        let end = self.pending_len + TOKEN_BYTES;
        if let Some(room) =
            self.pending.get_mut(self.pending_len..end).and_then(|r| <&mut [u8; TOKEN_BYTES]>::try_from(r).ok())
        {
            *room = id.to_le_bytes();
        }
        self.pending_len = end;
        if self.pending_len >= self.block_len {
            let block = xxh3_64_with_seed(self.pending.get(..self.block_len).unwrap_or_default(), self.previous);
            self.pending_len = 0;
            self.push(block);
        }
        !self.is_full()
    }
}

/// `prompt`: a string, a list of strings, a list of token ids, or a list of token-id lists.
/// The first element of a list says which; token ids are cut into blocks of exactly
/// `block_tokens` ids, whatever `bytes_per_token` says.
fn hash_completion(prompt: &str, params: &HashParams, chain: &mut BlockChain<'_>) -> Result<(), ShapeError> {
    let text = prompt.trim_ascii();
    if let Some(contents) = string_contents(text) {
        chain.feed(contents.as_bytes());
        return Ok(());
    }
    let Some(inside) = text.strip_prefix('[') else {
        return Err(ShapeError("prompt is neither a string nor a list"));
    };
    match inside.trim_ascii_start().as_bytes().first() {
        Some(b'"') => hash_string_list(text, chain),
        Some(b'[') => {
            chain.block_len = params.token_block_bytes();
            hash_token_lists(text, chain)
        }
        _ => {
            chain.block_len = params.token_block_bytes();
            for_each_token_id(text, |id| chain.feed_token(id)).map(drop)
        }
    }
}

/// `["a", "b"]`: the strings' contents, separated by [`SEPARATOR`].
fn hash_string_list(list: &str, chain: &mut BlockChain<'_>) -> Result<(), ShapeError> {
    let mut first = true;
    for_each_element(list, |element| {
        let contents = string_contents(element.text).ok_or(ShapeError("prompt list mixes strings and others"))?;
        let separated = std::mem::take(&mut first) || chain.feed(&[SEPARATOR]);
        Ok(separated && chain.feed(contents.as_bytes()))
    })
}

/// `[[1, 2], [3]]`, a batch of prompts: the ids of every list, separated by [`SEPARATOR_TOKEN`].
/// Blocks line up with the engine's for the first prompt; the rest only have to be stable.
fn hash_token_lists(lists: &str, chain: &mut BlockChain<'_>) -> Result<(), ShapeError> {
    let mut first = true;
    for_each_element(lists, |list| {
        let separated = std::mem::take(&mut first) || chain.feed_token(SEPARATOR_TOKEN);
        Ok(separated && for_each_token_id(list.text, |id| chain.feed_token(id))?)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hashes_of(body: &str, endpoint: Endpoint, params: &HashParams) -> Result<Vec<u64>, ShapeError> {
        // Straight from serde, not `parse_request`: hashing must survive shapes it would refuse.
        let request: InferenceRequest<'_> = serde_json::from_str(body).unwrap();
        let mut out = vec![7, 7, 7]; // Stale contents must be cleared.
        hash_prompt(&request, endpoint, params, &mut out).map(|n| {
            assert_eq!(n, out.len());
            out
        })
    }

    fn completion(prompt: &str) -> Vec<u64> {
        hashes_of(&format!(r#"{{"model":"m","prompt":{prompt}}}"#), Endpoint::Completions, &HashParams::default())
            .unwrap()
    }

    fn text(len: usize, seed: u8) -> String {
        (0..len).map(|i| char::from(b'a' + ((i * 7 + usize::from(seed)) % 26) as u8)).collect()
    }

    #[test]
    fn is_deterministic_and_hashes_only_full_blocks() {
        let prompt = format!("\"{}\"", text(64 * 3 + 63, 0));
        assert_eq!(completion(&prompt), completion(&prompt));
        assert_eq!(completion(&prompt).len(), 3, "the partial fourth block is not hashed");
        assert!(completion("\"short\"").is_empty());
    }

    #[test]
    fn first_block_is_seeded_and_later_ones_chain() {
        let prompt = text(128, 1);
        let hashes = completion(&format!("\"{prompt}\""));
        let first = xxh3_64_with_seed(&prompt.as_bytes()[..64], chain_seed("m", ""));
        assert_eq!(hashes, vec![first, xxh3_64_with_seed(&prompt.as_bytes()[64..], first)]);
    }

    #[test]
    fn same_prefix_gives_same_leading_hashes() {
        let shared = text(64 * 4, 2);
        let a = completion(&format!("\"{shared}{}\"", text(200, 3)));
        let b = completion(&format!("\"{shared}{}\"", text(200, 4)));
        assert_eq!(a[..4], b[..4]);
        assert_ne!(a[4], b[4]);
    }

    #[test]
    fn model_and_cache_salt_separate_chains() {
        let prompt = text(128, 5);
        let params = HashParams::default();
        let body = |model: &str, salt: &str| format!(r#"{{"model":"{model}","prompt":"{prompt}"{salt}}}"#);
        let base = hashes_of(&body("m", ""), Endpoint::Completions, &params).unwrap();
        let other_model = hashes_of(&body("m2", ""), Endpoint::Completions, &params).unwrap();
        let salted = hashes_of(&body("m", r#","cache_salt":"tenant""#), Endpoint::Completions, &params).unwrap();
        assert_eq!(base.len(), 2);
        assert!(base.iter().all(|h| !other_model.contains(h) && !salted.contains(h)));
        assert_ne!(chain_seed("ab", "c"), chain_seed("a", "bc"));
    }

    #[test]
    fn token_ids_align_with_engine_blocks() {
        let params = HashParams { block_tokens: 16, bytes_per_token: 4, max_blocks: 256 };
        let ids = |n: u32| format!("[{}]", (0..n).map(|i| (i * 31).to_string()).collect::<Vec<_>>().join(", "));
        let hashes = completion(&ids(40));
        assert_eq!(hashes.len(), 2, "40 ids are two full blocks of 16");
        let first_block: Vec<u8> = (0..16u32).flat_map(|i| (i * 31).to_le_bytes()).collect();
        assert_eq!(hashes[0], xxh3_64_with_seed(&first_block, chain_seed("m", "")));
        assert_eq!(completion(&ids(32)), hashes);
        let eight = HashParams { block_tokens: 8, ..params };
        let body = format!(r#"{{"model":"m","prompt":{}}}"#, ids(40));
        assert_eq!(hashes_of(&body, Endpoint::Completions, &eight).unwrap().len(), 5);
    }

    #[test]
    fn prompt_lists_hash_in_order() {
        let (a, b) = (text(100, 12), text(100, 13));
        let list = completion(&format!(r#"["{a}", "{b}"]"#));
        assert_eq!(list.len(), 3, "201 bytes with the separator");
        assert_ne!(list, completion(&format!(r#"["{b}", "{a}"]"#)));
        let batch = completion("[[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17], [1]]");
        assert_eq!(batch.len(), 1);
        assert_eq!(batch, completion("[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]"));
    }

    #[test]
    fn max_blocks_bounds_the_work() {
        let params = HashParams { max_blocks: 5, ..HashParams::default() };
        let body = format!(r#"{{"model":"m","prompt":"{}"}}"#, text(64 * 100, 14));
        let capped = hashes_of(&body, Endpoint::Completions, &params).unwrap();
        assert_eq!(capped[..], completion(&format!("\"{}\"", text(64 * 100, 14)))[..5]);
        let ids = format!(r#"{{"prompt":[{}]}}"#, vec!["1"; 10_000].join(","));
        assert_eq!(hashes_of(&ids, Endpoint::Completions, &params).unwrap().len(), 5);
        let huge = HashParams { max_blocks: usize::MAX, block_tokens: usize::MAX, bytes_per_token: usize::MAX };
        assert!(huge.validate().is_err());
        assert!(hashes_of(&body, Endpoint::Completions, &huge).unwrap().len() <= MAX_BLOCKS);
        assert!(HashParams::default().validate().is_ok());
    }

    #[test]
    fn garbage_shapes_hash_nothing() {
        let params = HashParams::default();
        for body in [
            r#"{"prompt": 42}"#,
            r#"{"prompt": {"a": 1}}"#,
            r#"{"prompt": [1, "two"]}"#,
            r#"{"prompt": [1.5, 2]}"#,
            r#"{"prompt": [-1]}"#,
            r#"{"prompt": [[1], 2]}"#,
            r#"{"prompt": [[1, [2]]]}"#,
            r#"{"prompt": [4294967296]}"#,
        ] {
            assert!(hashes_of(body, Endpoint::Completions, &params).is_err(), "{body}");
        }
        for body in [
            r#"{"messages": "hi"}"#,
            r#"{"messages": {"role": "user"}}"#,
            r#"{"messages": ["hi"]}"#,
            r#"{"messages": [{"role": "user", "content": [1, 2]}]}"#,
            r#"{"messages": [{"content": [], "content": "b"}]}"#,
        ] {
            assert!(hashes_of(body, Endpoint::ChatCompletions, &params).is_err(), "{body}");
        }
        assert_eq!(hashes_of(r#"{"prompt": []}"#, Endpoint::Completions, &params), Ok(vec![]));
        assert_eq!(hashes_of(r#"{"prompt": "x"}"#, Endpoint::Other, &params), Ok(vec![]));
    }
}
