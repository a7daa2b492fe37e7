//! Parsing of OpenAI request bodies into prompts the engine understands.
//!
//! Accepts what vLLM accepts: `prompt` as a string, a list of strings (one choice each), a list
//! of token ids, or a list of lists of token ids; `messages` with string content or a list of
//! `text` / `image_url` parts. Sampling fields the simulator does not model (temperature, stop,
//! ...) are ignored, as sampling does not change timing; `n` is served as vLLM serves it, `n`
//! sequences per prompt (see [`MAX_N`]).

use serde::Deserialize;

use super::errors::ApiError;
use super::lax::{self, lax_int};
use crate::chat_template::{render_chat, ChatMessage, ContentPart};
use crate::tokenizer::{tokenize, VOCAB_SIZE};

/// Most prompts in one batched completion request.
pub const MAX_BATCH_PROMPTS: usize = 256;
/// Most messages in one chat request.
pub const MAX_MESSAGES: usize = 4096;
/// Largest `n`: vLLM's `VLLM_MAX_N_SEQUENCES` default (sampling_params.py
/// `_verify_num_sequences`). Each sample is an engine request, so the pod's `--max-waiting`
/// bounds what one request can queue well below this.
pub const MAX_N: usize = 16384;

/// One prompt, as given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PromptInput {
    /// Text, tokenized by the simulator's tokenizer.
    Text(String),
    /// Token ids, used as given.
    TokenIds(Vec<u32>),
}

impl PromptInput {
    /// The prompt's tokens.
    pub fn tokens(&self) -> Vec<u32> {
        match self {
            PromptInput::Text(text) => tokenize(text),
            PromptInput::TokenIds(ids) => ids.clone(),
        }
    }
}

/// Options shared by both endpoints.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommonOptions {
    /// Requested model: base model or LoRA adapter; `None` means the base model.
    pub model: Option<String>,
    /// Tokens to generate, if given.
    pub max_tokens: Option<usize>,
    /// Server-sent events instead of one JSON body.
    pub stream: bool,
    /// Final usage chunk when streaming: `stream_options.include_usage`, which is true when
    /// `stream_options` is given without it (vLLM's `StreamOptions` default).
    pub include_usage: bool,
    /// `usage` on every chunk too (`stream_options.continuous_usage_stats`, with `include_usage`).
    pub continuous_usage: bool,
    /// `cache_salt`: cached blocks are shared only among requests with the same salt.
    pub cache_salt: Option<String>,
}

/// A parsed `POST /v1/completions` body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompletionRequest {
    /// Prompts, `n` choices each.
    pub prompts: Vec<PromptInput>,
    /// Choices per prompt (`n`, at least 1).
    pub n: usize,
    /// Model, length and streaming options.
    pub options: CommonOptions,
}

/// A parsed `POST /v1/chat/completions` body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatRequest {
    /// The conversation.
    pub messages: Vec<ChatMessage>,
    /// Whether to append the assistant generation prompt (default true).
    pub add_generation_prompt: bool,
    /// Choices (`n`, at least 1).
    pub n: usize,
    /// Model, length and streaming options.
    pub options: CommonOptions,
}

impl ChatRequest {
    /// The prompt text after the chat template.
    pub fn rendered_prompt(&self) -> String {
        render_chat(&self.messages, self.add_generation_prompt)
    }
}

/// `stream_options` as vLLM's `StreamOptions` reads it: `include_usage` defaults to true,
/// `continuous_usage_stats` to false, and an explicit `null` is falsy for both.
#[derive(Deserialize)]
struct RawStreamOptions {
    #[serde(default = "absent_include_usage", deserialize_with = "lax::flag")]
    include_usage: Option<bool>,
    #[serde(default, deserialize_with = "lax::flag")]
    continuous_usage_stats: Option<bool>,
}

fn absent_include_usage() -> Option<bool> {
    Some(true)
}

/// vLLM's request validator (`validate_stream_options` in `entrypoints/openai/protocol.py`),
/// which tests the raw body: `stream_options` that is present and not empty (Python-truthy)
/// needs a truthy `stream`.
fn check_stream_options(stream: Option<bool>, stream_options: Option<&serde_json::Value>) -> Result<(), ApiError> {
    let truthy = match stream_options {
        None | Some(serde_json::Value::Null) => false,
        Some(serde_json::Value::Object(map)) => !map.is_empty(),
        Some(_) => true,
    };
    if truthy && stream != Some(true) {
        return Err(ApiError::bad_request("Stream options can only be defined when `stream=True`."));
    }
    Ok(())
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawPrompt {
    Text(String),
    Texts(Vec<String>),
    TokenIds(Vec<i64>),
    TokenIdLists(Vec<Vec<i64>>),
}

#[derive(Deserialize)]
struct RawCompletion {
    model: Option<String>,
    prompt: Option<RawPrompt>,
    #[serde(default, deserialize_with = "lax::int")]
    max_tokens: Option<i64>,
    #[serde(default, deserialize_with = "lax::flag")]
    stream: Option<bool>,
    stream_options: Option<serde_json::Value>,
    cache_salt: Option<serde_json::Value>,
    n: Option<serde_json::Value>,
    best_of: Option<serde_json::Value>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawImageUrl {
    Url(String),
    Object { url: String },
}

#[derive(Deserialize)]
struct RawPart {
    #[serde(rename = "type")]
    kind: String,
    text: Option<String>,
    image_url: Option<RawImageUrl>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawContent {
    Text(String),
    Parts(Vec<RawPart>),
}

#[derive(Deserialize)]
struct RawMessage {
    role: String,
    content: Option<RawContent>,
}

#[derive(Deserialize)]
struct RawChat {
    model: Option<String>,
    messages: Option<Vec<RawMessage>>,
    #[serde(default, deserialize_with = "lax::int")]
    max_tokens: Option<i64>,
    #[serde(default, deserialize_with = "lax::int")]
    max_completion_tokens: Option<i64>,
    #[serde(default, deserialize_with = "lax::flag")]
    stream: Option<bool>,
    stream_options: Option<serde_json::Value>,
    #[serde(default, deserialize_with = "lax::flag")]
    add_generation_prompt: Option<bool>,
    cache_salt: Option<serde_json::Value>,
    n: Option<serde_json::Value>,
    best_of: Option<serde_json::Value>,
}

/// Parses a completions body.
pub fn parse_completion(body: &[u8]) -> Result<CompletionRequest, ApiError> {
    let raw: RawCompletion = parse_json(body)?;
    let prompts = match raw.prompt {
        None => return Err(ApiError::bad_param("prompt", "Field 'prompt' is required.")),
        Some(RawPrompt::Text(text)) => vec![PromptInput::Text(text)],
        Some(RawPrompt::Texts(texts)) => texts.into_iter().map(PromptInput::Text).collect(),
        Some(RawPrompt::TokenIds(ids)) => vec![PromptInput::TokenIds(token_ids(&ids)?)],
        Some(RawPrompt::TokenIdLists(lists)) => {
            lists.iter().map(|ids| token_ids(ids).map(PromptInput::TokenIds)).collect::<Result<_, _>>()?
        }
    };
    if prompts.is_empty() {
        return Err(ApiError::bad_param("prompt", "The prompt list must not be empty."));
    }
    if prompts.len() > MAX_BATCH_PROMPTS {
        return Err(ApiError::bad_param("prompt", format!("At most {MAX_BATCH_PROMPTS} prompts per request.")));
    }
    let mut options = common_options(raw.model, raw.max_tokens, "max_tokens", raw.stream, raw.stream_options)?;
    options.cache_salt = cache_salt(raw.cache_salt)?;
    let n = check_n(raw.n.as_ref())?;
    check_best_of(raw.best_of.as_ref(), n)?;
    Ok(CompletionRequest { prompts, n, options })
}

/// Parses a chat completions body.
pub fn parse_chat(body: &[u8]) -> Result<ChatRequest, ApiError> {
    let raw: RawChat = parse_json(body)?;
    let raw_messages = raw.messages.ok_or_else(|| ApiError::bad_param("messages", "Field 'messages' is required."))?;
    if raw_messages.is_empty() || raw_messages.len() > MAX_MESSAGES {
        return Err(ApiError::bad_param("messages", format!("Between 1 and {MAX_MESSAGES} messages are required.")));
    }
    let messages = raw_messages.into_iter().map(message).collect::<Result<Vec<_>, _>>()?;
    // vLLM prefers max_completion_tokens (the newer OpenAI name) when both are given.
    let (max_tokens, param) = match raw.max_completion_tokens {
        Some(value) => (Some(value), "max_completion_tokens"),
        None => (raw.max_tokens, "max_tokens"),
    };
    let mut options = common_options(raw.model, max_tokens, param, raw.stream, raw.stream_options)?;
    options.cache_salt = cache_salt(raw.cache_salt)?;
    let n = check_n(raw.n.as_ref())?;
    check_best_of(raw.best_of.as_ref(), n)?;
    Ok(ChatRequest { messages, add_generation_prompt: raw.add_generation_prompt.unwrap_or(true), n, options })
}

/// vLLM's `check_cache_salt_support` (entrypoints/openai/protocol.py, on completions and chat):
/// a salt, if given, is a non-empty string.
fn cache_salt(raw: Option<serde_json::Value>) -> Result<Option<String>, ApiError> {
    match raw {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::String(salt)) if !salt.is_empty() => Ok(Some(salt)),
        Some(_) => {
            Err(ApiError::bad_param("cache_salt", "Parameter 'cache_salt' must be a non-empty string if provided."))
        }
    }
}

/// `n`: choices per prompt, 1 when absent or null; vLLM's bounds and messages
/// (sampling_params.py `_verify_num_sequences`): at least 1, at most [`MAX_N`]. Greedy
/// sampling (`temperature` 0) with `n` > 1 is allowed, as in vLLM. Read as vLLM's pydantic
/// models read an integer (lax mode): `2.0` and `"2"` are 2.
fn check_n(raw: Option<&serde_json::Value>) -> Result<usize, ApiError> {
    let n = match raw {
        None | Some(serde_json::Value::Null) => return Ok(1),
        Some(value) => lax_int(value).ok_or_else(|| ApiError::bad_param("n", "n must be an int."))?,
    };
    if n < 1 {
        return Err(ApiError::bad_param("n", format!("n must be at least 1, got {n}.")));
    }
    match usize::try_from(n) {
        Ok(n) if n <= MAX_N => Ok(n),
        _ => Err(ApiError::bad_param(
            "n",
            format!(
                "n must be at most {MAX_N}, got {n}. To increase this limit, set the VLLM_MAX_N_SEQUENCES \
                 environment variable."
            ),
        )),
    }
}

/// `best_of`, which vLLM's V1 engine refuses above 1 (v1/engine/processor.py
/// `_validate_supported_sampling_params`) after `SamplingParams` checked it against `n`; absent,
/// null or 0 means none (vLLM tests it for truth).
fn check_best_of(raw: Option<&serde_json::Value>, n: usize) -> Result<(), ApiError> {
    let best_of = match raw {
        None | Some(serde_json::Value::Null) => return Ok(()),
        Some(value) => lax_int(value).ok_or_else(|| ApiError::bad_param("best_of", "best_of must be an int."))?,
    };
    if best_of == 0 {
        return Ok(());
    }
    if usize::try_from(best_of).map_or(true, |best_of| best_of < n) {
        let message = format!("best_of must be greater than or equal to n, got n={n} and best_of={best_of}.");
        return Err(ApiError::bad_param("best_of", message));
    }
    if best_of > 1 {
        return Err(ApiError::bad_param("best_of", "vLLM V1 does not yet support best_of."));
    }
    Ok(())
}

fn parse_json<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|error| ApiError::bad_request(format!("Invalid request body: {error}")))
}

fn common_options(
    model: Option<String>,
    max_tokens: Option<i64>,
    param: &str,
    stream: Option<bool>,
    stream_options: Option<serde_json::Value>,
) -> Result<CommonOptions, ApiError> {
    check_stream_options(stream, stream_options.as_ref())?;
    let max_tokens = match max_tokens {
        None => None,
        Some(value) if value >= 1 => Some(usize::try_from(value).unwrap_or(usize::MAX)),
        Some(value) => return Err(ApiError::bad_param(param, format!("{param} must be at least 1, got {value}."))),
    };
    let stream = stream.unwrap_or(false);
    let stream_options = match stream_options {
        None | Some(serde_json::Value::Null) => None,
        Some(value) => Some(
            serde_json::from_value::<RawStreamOptions>(value)
                .map_err(|error| ApiError::bad_request(format!("Invalid stream_options: {error}")))?,
        ),
    };
    // As serving_chat.py / serving_completion.py: no `stream_options`, no usage in the stream.
    let include_usage = stream && stream_options.as_ref().is_some_and(|options| options.include_usage == Some(true));
    let continuous_usage =
        include_usage && stream_options.as_ref().is_some_and(|options| options.continuous_usage_stats == Some(true));
    Ok(CommonOptions { model, max_tokens, stream, include_usage, continuous_usage, cache_salt: None })
}

fn token_ids(ids: &[i64]) -> Result<Vec<u32>, ApiError> {
    ids.iter()
        .map(|id| match u32::try_from(*id) {
            Ok(valid) if valid < VOCAB_SIZE => Ok(valid),
            _ => Err(ApiError::bad_param("prompt", format!("Token id {id} is out of vocabulary"))),
        })
        .collect()
}

fn message(raw: RawMessage) -> Result<ChatMessage, ApiError> {
    let content = match raw.content {
        None => Vec::new(),
        Some(RawContent::Text(text)) => vec![ContentPart::Text(text)],
        Some(RawContent::Parts(parts)) => parts.into_iter().map(content_part).collect::<Result<_, _>>()?,
    };
    Ok(ChatMessage { role: raw.role, content })
}

fn content_part(part: RawPart) -> Result<ContentPart, ApiError> {
    match (part.kind.as_str(), part.text, part.image_url) {
        ("text", Some(text), _) => Ok(ContentPart::Text(text)),
        ("image_url", _, Some(RawImageUrl::Url(url) | RawImageUrl::Object { url })) => Ok(ContentPart::Image(url)),
        (kind, _, _) => {
            Err(ApiError::bad_param("messages", format!("Unsupported or incomplete content part {kind:?}.")))
        }
    }
}

#[cfg(test)]
mod tests;
