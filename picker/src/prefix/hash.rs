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
//! hashes `tools` and then each whole message object (role included, as the chat template puts
//! role tokens in the engine's prompt too), so a chat and a completions request of the same words
//! never share blocks. Media parts (images, audio, video, files) are the exception: each hashes
//! as a short placeholder naming its type and the hash of its URL or data, so a 1 MB base64
//! image costs one hash, not the whole block budget, and its JSON whitespace does not matter.
//!
//! A shape the OpenAI API does not define (a numeric prompt, messages that are not a list of
//! objects, a float among token ids) hashes nothing: the request is routed by load alone.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed, Xxh3};

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
const SEPARATOR: u8 = 0;

/// Separates the lists of a batch of token-id prompts: no vocabulary has 2^32 - 1 tokens.
const SEPARATOR_TOKEN: u32 = u32::MAX;

/// Fields of a content part that carry media rather than text (OpenAI and vLLM's extensions).
const MEDIA_FIELDS: [&str; 6] = ["image_url", "input_audio", "video_url", "audio_url", "file", "image_pil"];

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
        if self.text_block_bytes() > MAX_BLOCK_BYTES || self.token_block_bytes() > MAX_BLOCK_BYTES {
            return Err(format!("a prefix block may hold at most {MAX_BLOCK_BYTES} bytes: {self:?}"));
        }
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
pub struct ShapeError(&'static str);

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
    out.clear();
    let seed = chain_seed(request.model.as_deref().unwrap_or(""), request.cache_salt.as_deref().unwrap_or(""));
    let mut chain = BlockChain::new(out, seed, params);
    let outcome = match (endpoint, request.prompt, request.messages) {
        (Endpoint::Completions, Some(prompt), _) => hash_completion(prompt, params, &mut chain),
        (Endpoint::ChatCompletions, _, Some(messages)) => hash_chat(messages, request.tools, &mut chain),
        _ => Ok(()),
    };
    match outcome {
        Ok(()) => Ok(out.len()),
        Err(error) => {
            out.clear();
            Err(error)
        }
    }
}

/// Cuts a stream of bytes, fed in pieces, into blocks and chains their hashes into `out`.
struct BlockChain<'o> {
    out: &'o mut Vec<u64>,
    previous: u64,
    block_len: usize,
    max_blocks: usize,
    /// A block that spans two pieces is gathered here; one within a piece is hashed in place.
    pending: [u8; MAX_BLOCK_BYTES],
    pending_len: usize,
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
    fn feed(&mut self, mut bytes: &[u8]) -> bool {
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
}

/// `prompt`: a string, a list of strings, a list of token ids, or a list of token-id lists.
fn hash_completion(prompt: &RawValue, params: &HashParams, chain: &mut BlockChain<'_>) -> Result<(), ShapeError> {
    let text = prompt.get().trim_ascii();
    if let Some(contents) = string_contents(text) {
        chain.feed(contents.as_bytes());
        return Ok(());
    }
    if !text.starts_with('[') {
        return Err(ShapeError("prompt is neither a string nor a list"));
    }
    // Token ids are cut into blocks of exactly `block_tokens` ids, whatever bytes_per_token says.
    let mut kind = None;
    let mut first = true;
    for_each_element(text, |element: &RawValue| {
        let element = element.get();
        let this = match element.as_bytes().first() {
            Some(b'"') => ListKind::Strings,
            Some(b'[') => ListKind::TokenLists,
            _ => ListKind::Tokens,
        };
        if *kind.get_or_insert(this) != this {
            return Err(ShapeError("prompt list mixes strings, token ids and lists"));
        }
        if first && this != ListKind::Strings {
            chain.block_len = params.token_block_bytes();
        }
        let more = match this {
            ListKind::Strings => {
                let separated = first || chain.feed(&[SEPARATOR]);
                separated && chain.feed(string_contents(element).unwrap_or_default().as_bytes())
            }
            ListKind::Tokens => {
                let id: u32 = element.parse().map_err(|_| ShapeError("prompt token id is not a u32"))?;
                chain.feed(&id.to_le_bytes())
            }
            ListKind::TokenLists => {
                let separated = first || chain.feed(&SEPARATOR_TOKEN.to_le_bytes());
                separated && hash_token_list(element, chain)?
            }
        };
        first = false;
        Ok(more)
    })
}

/// The kind of a prompt list, fixed by its first element.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ListKind {
    Strings,
    Tokens,
    TokenLists,
}

/// One list of a batch of token-id prompts; returns false once the chain is full.
fn hash_token_list(list: &str, chain: &mut BlockChain<'_>) -> Result<bool, ShapeError> {
    let mut more = true;
    for_each_element(list, |id: u32| {
        more = chain.feed(&id.to_le_bytes());
        Ok(more)
    })
    .map_err(|_| ShapeError("prompt token list holds something other than u32 ids"))?;
    Ok(more)
}

/// `tools` (as written) then every message, in order.
fn hash_chat(messages: &RawValue, tools: Option<&RawValue>, chain: &mut BlockChain<'_>) -> Result<(), ShapeError> {
    let messages = messages.get().trim_ascii();
    if !messages.starts_with('[') {
        return Err(ShapeError("messages is not a list"));
    }
    if let Some(tools) = tools.map(|t| t.get().trim_ascii()).filter(|t| *t != "null") {
        chain.feed(tools.as_bytes());
    }
    for_each_element(messages, |message: &RawValue| hash_message(message.get(), chain))
}

/// The message object as written, except a list `content`, whose parts are hashed one by one
/// so media parts become placeholders.
fn hash_message(message: &str, chain: &mut BlockChain<'_>) -> Result<bool, ShapeError> {
    #[derive(Deserialize)]
    struct MessageView<'a> {
        #[serde(borrow, default)]
        content: Option<&'a RawValue>,
    }
    if !message.starts_with('{') {
        return Err(ShapeError("a message is not an object"));
    }
    let view: MessageView<'_> = serde_json::from_str(message).map_err(|_| ShapeError("a message is not an object"))?;
    let parts = view.content.map(RawValue::get).filter(|c| c.starts_with('['));
    let Some((parts, (start, end))) = parts.and_then(|p| Some((p, span_of(message, p)?))) else {
        return Ok(chain.feed(message.as_bytes()));
    };
    if !chain.feed(message.get(..start).unwrap_or_default().as_bytes()) {
        return Ok(false);
    }
    let mut more = true;
    for_each_element(parts, |part: &RawValue| {
        more = hash_part(part.get(), chain)?;
        Ok(more)
    })?;
    Ok(more && chain.feed(message.get(end..).unwrap_or_default().as_bytes()))
}

/// A text part as written; a media part as `NUL type NUL hash(url or data)`.
fn hash_part(part: &str, chain: &mut BlockChain<'_>) -> Result<bool, ShapeError> {
    #[derive(Deserialize)]
    struct PartView<'a> {
        #[serde(rename = "type", borrow, default)]
        kind: Option<Cow<'a, str>>,
        #[serde(borrow, default)]
        image_url: Option<&'a RawValue>,
        #[serde(borrow, default)]
        input_audio: Option<&'a RawValue>,
        #[serde(borrow, default)]
        video_url: Option<&'a RawValue>,
        #[serde(borrow, default)]
        audio_url: Option<&'a RawValue>,
        #[serde(borrow, default)]
        file: Option<&'a RawValue>,
        #[serde(borrow, default)]
        image_pil: Option<&'a RawValue>,
    }
    let view: PartView<'_> = serde_json::from_str(part).map_err(|_| ShapeError("a content part is not an object"))?;
    let media = [view.image_url, view.input_audio, view.video_url, view.audio_url, view.file, view.image_pil];
    let Some((field, payload)) = MEDIA_FIELDS.iter().zip(media).find_map(|(name, value)| Some((*name, value?))) else {
        return Ok(chain.feed(part.as_bytes()));
    };
    let kind = view.kind.as_deref().unwrap_or(field);
    Ok(chain.feed(&[SEPARATOR])
        && chain.feed(kind.as_bytes())
        && chain.feed(&[SEPARATOR])
        && chain.feed(&media_identity(payload.get()).to_le_bytes()))
}

/// What names a media payload: its URL or inline data, whichever it carries, so the same image
/// sent with other whitespace or another `detail` hashes the same.
fn media_identity(payload: &str) -> u64 {
    #[derive(Deserialize)]
    struct MediaView<'a> {
        #[serde(borrow, default)]
        url: Option<&'a RawValue>,
        #[serde(borrow, default)]
        data: Option<&'a RawValue>,
        #[serde(borrow, default)]
        file_data: Option<&'a RawValue>,
        #[serde(borrow, default)]
        file_id: Option<&'a RawValue>,
    }
    if let Some(contents) = string_contents(payload) {
        return xxh3_64(contents.as_bytes());
    }
    let identity = serde_json::from_str::<MediaView<'_>>(payload)
        .ok()
        .and_then(|v| v.url.or(v.data).or(v.file_data).or(v.file_id))
        .and_then(|v| string_contents(v.get()));
    xxh3_64(identity.unwrap_or(payload).as_bytes())
}

/// The text between the quotes of a raw JSON string, escapes as written.
fn string_contents(raw: &str) -> Option<&str> {
    raw.strip_prefix('"')?.strip_suffix('"')
}

/// Where `inner`, a slice borrowed from `outer`, lies in it. serde_json hands out raw values as
/// slices of its input, and this is the only way to splice around one without copying.
fn span_of(outer: &str, inner: &str) -> Option<(usize, usize)> {
    let start = (inner.as_ptr() as usize).checked_sub(outer.as_ptr() as usize)?;
    let end = start.checked_add(inner.len())?;
    (end <= outer.len()).then_some((start, end))
}

/// Calls `each` on the elements of the JSON array `array`, in order, without collecting them.
/// `each` returns `Ok(false)` to stop early. Errors: `array` is not an array of `T`, or `each`'s.
fn for_each_element<'de, T, F>(array: &'de str, each: F) -> Result<(), ShapeError>
where
    T: Deserialize<'de>,
    F: FnMut(T) -> Result<bool, ShapeError>,
{
    let mut walk = ElementWalk { each, stopped: None, element: PhantomData };
    let mut deserializer = serde_json::Deserializer::from_str(array);
    let parsed = (&mut deserializer).deserialize_seq(&mut walk);
    match (walk.stopped, parsed) {
        (Some(outcome), _) => outcome,
        (None, Ok(())) => Ok(()),
        (None, Err(_)) => Err(ShapeError("a list holds elements of the wrong type")),
    }
}

/// The serde visitor behind [`for_each_element`]. An early stop leaves elements unread, which
/// serde_json reports as an error; `stopped` tells that apart from a real one.
struct ElementWalk<T, F> {
    each: F,
    stopped: Option<Result<(), ShapeError>>,
    element: PhantomData<fn() -> T>,
}

impl<'de, T, F> Visitor<'de> for &mut ElementWalk<T, F>
where
    T: Deserialize<'de>,
    F: FnMut(T) -> Result<bool, ShapeError>,
{
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(element) = seq.next_element::<T>()? {
            match (self.each)(element) {
                Ok(true) => {}
                Ok(false) => {
                    self.stopped = Some(Ok(()));
                    break;
                }
                Err(error) => {
                    self.stopped = Some(Err(error));
                    break;
                }
            }
        }
        Ok(())
    }
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
    fn chat_and_completions_of_the_same_words_differ() {
        // Chat hashes whole message objects: the engine's chat template adds role tokens too.
        let words = text(256, 6);
        let chat = format!(r#"{{"model":"m","messages":[{{"role":"user","content":"{words}"}}]}}"#);
        let chat = hashes_of(&chat, Endpoint::ChatCompletions, &HashParams::default()).unwrap();
        let plain = completion(&format!("\"{words}\""));
        assert!(!chat.is_empty() && !plain.is_empty());
        assert!(chat.iter().all(|h| !plain.contains(h)));
    }

    #[test]
    fn chat_shares_the_prefix_of_a_longer_conversation() {
        let system = format!(r#"{{"role":"system","content":"{}"}}"#, text(300, 7));
        let turn = |seed| format!(r#"{{"role":"user","content":"{}"}}"#, text(300, seed));
        let body = |messages: String| format!(r#"{{"model":"m","tools":[{{"x":1}}],"messages":[{messages}]}}"#);
        let params = HashParams::default();
        let short = hashes_of(&body(format!("{system},{}", turn(8))), Endpoint::ChatCompletions, &params).unwrap();
        let long =
            hashes_of(&body(format!("{system},{},{}", turn(8), turn(9))), Endpoint::ChatCompletions, &params).unwrap();
        assert_eq!(long[..short.len()], short[..]);
        assert!(long.len() > short.len());
    }

    #[test]
    fn media_parts_hash_by_content_not_whitespace() {
        let message = |space: &str, data: &str| {
            format!(
                r#"{{"model":"m","messages":[{{"role":"user","content":[{{"type":"text","text":"{}"}},
                {{"type":"image_url",{space}"image_url":{space}{{"url":"data:image/png;base64,{data}","detail":"low"}}}},
                {{"type":"text","text":"{}"}}]}}]}}"#,
                text(100, 10),
                text(300, 11)
            )
        };
        let params = HashParams::default();
        let big_image = "QUJD".repeat(50_000);
        let a = hashes_of(&message("", &big_image), Endpoint::ChatCompletions, &params).unwrap();
        let b = hashes_of(&message("   ", &big_image), Endpoint::ChatCompletions, &params).unwrap();
        let other = hashes_of(&message("", "RUZH"), Endpoint::ChatCompletions, &params).unwrap();
        assert_eq!(a, b, "whitespace around an image does not matter");
        assert!(a.len() < 20, "a 200 KB image is one placeholder, not 3,000 blocks: {}", a.len());
        assert_eq!(a[0], other[0], "the text before the image is shared");
        assert_ne!(a.last(), other.last(), "another image is another prefix");
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
            r#"{"messages": [{"content": "a", "content": "b"}]}"#,
        ] {
            assert!(hashes_of(body, Endpoint::ChatCompletions, &params).is_err(), "{body}");
        }
        assert_eq!(hashes_of(r#"{"prompt": []}"#, Endpoint::Completions, &params), Ok(vec![]));
        assert_eq!(hashes_of(r#"{"prompt": "x"}"#, Endpoint::Other, &params), Ok(vec![]));
    }
}
