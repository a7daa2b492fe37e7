//! The few fields of an OpenAI-style request body that routing needs.
//!
//! Only `model`, `stream` (and `stream_options`, kept raw), the prompt (`prompt` or
//! `messages`, plus `tools`) and `cache_salt` are read; everything else is skipped unparsed. The prompt parts are kept as
//! borrowed raw JSON: prefix hashing reads their bytes directly, with no copy and no tree.
//! Raw values are skipped without recursion, so a 10,000-deep body costs no stack; it is
//! forwarded as it is for the engine to judge. Chat and completions bodies are read by a
//! validating scan of our own (`cut`, `scan`) that also notes where each message lies,
//! which spares hashing a scan of the messages; serde_json reads any body that scan is not sure
//! of, and decides its refusal. Any other endpoint's body is read for `model` alone
//! ([`parse_model_only`]), as is a body its endpoint's parse refused but vLLM may still take
//! (it reads JSON with Python and pydantic, more leniently than serde: a key given twice, `NaN`,
//! a byte order mark, completions by `prompt_embeds` without `prompt`). Flags and counts are
//! read as pydantic's lax mode reads them (`"stream": "true"` streams, `"n": "2"` is 2).

use std::borrow::Cow;

use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

mod cut;
mod fields;
mod form;
mod media;
mod messages;
mod model_place;
mod path;
mod responses;
mod scan;

pub use cut::{Message, MAX_CUT_MESSAGES};
pub use form::{form_boundary, FormModel, FormRead, FormScan, ModelWatch, Replaceable, Watched, MAX_HEADER_LINE};
pub use media::{media_in, PromptMedia, MEDIA_FIELDS};
pub use messages::{parse_messages, parse_messages_plainly};
pub use model_place::{find_model, read_model, ModelPlace, Unreadable};
pub use path::{strip_path_prefix, valid_path_prefix};
pub use responses::{parse_responses, parse_responses_plainly};

/// Which OpenAI endpoint a path names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Completions,
    ChatCompletions,
    /// The Responses API (`POST /v1/responses`: `instructions` and `input` items), which the
    /// OpenAI SDKs' `responses.create` and agents such as Codex call.
    Responses,
    /// The Anthropic Messages API (`POST /v1/messages`: `system` and `messages`), which vLLM
    /// serves for Anthropic's SDKs and agents such as Claude Code.
    Messages,
    /// Anything else: body read for `model` alone, routed by load within its pods.
    Other,
}

impl Endpoint {
    /// The endpoint a path names, as the pod will see it (a route's prefix taken off first:
    /// [`strip_path_prefix`]).
    pub fn from_path(path: &str) -> Self {
        let path = path.split('?').next().unwrap_or(path);
        match path.trim_end_matches('/') {
            "/v1/completions" => Self::Completions,
            "/v1/chat/completions" => Self::ChatCompletions,
            "/v1/responses" => Self::Responses,
            "/v1/messages" => Self::Messages,
            _ => Self::Other,
        }
    }

    /// Answers in the completions' shape (`choices`, `usage.prompt_tokens`, a stream whose first
    /// event is the first token): the endpoints P/D splits (as llm-d's sidecar does).
    pub fn answers_like_completions(self) -> bool {
        matches!(self, Self::Completions | Self::ChatCompletions)
    }

    /// Generates from a prompt the picker read: its answers are learned from. A Responses
    /// stream opens with `response.created` before any token and counts `input_tokens`;
    /// learning reads it so ([`crate::learn::first_token`]). A Messages stream's first event,
    /// `message_start`, comes with the first token (vLLM sends it on the chat's first chunk).
    pub fn generates(self) -> bool {
        self != Self::Other
    }

    /// Its answers always carry `usage`, streamed or not (a chat or completions stream only
    /// when asked: `stream_options.include_usage`): the Responses API's `response.completed`,
    /// the Messages API's `message_delta` (vLLM asks its chat for usage on every such stream).
    pub fn always_reports_usage(self) -> bool {
        matches!(self, Self::Responses | Self::Messages)
    }
}

/// The routing-relevant view of a request body, borrowing from it (`default()`: a body with
/// none of these fields).
#[derive(Debug, Default, Deserialize)]
pub struct InferenceRequest<'a> {
    #[serde(borrow, default)]
    pub model: Option<Cow<'a, str>>,
    /// Read as vLLM reads it: `"true"` and `1` stream too.
    #[serde(default, deserialize_with = "fields::lax_flag_field")]
    pub stream: Option<bool>,
    /// Kept raw, so a value of any type is forwarded for the engine to judge, as before it
    /// was read; see [`Self::includes_usage`].
    /// Raw JSON text, as written, like every raw field: a raw value's (see [`RawValue::get`]).
    #[serde(borrow, default, deserialize_with = "raw_text")]
    pub stream_options: Option<&'a str>,
    #[serde(borrow, default, deserialize_with = "raw_text")]
    pub prompt: Option<&'a str>,
    #[serde(borrow, default, deserialize_with = "raw_text")]
    pub messages: Option<&'a str>,
    #[serde(borrow, default, deserialize_with = "raw_text")]
    pub tools: Option<&'a str>,
    #[serde(borrow, default)]
    pub cache_salt: Option<Cow<'a, str>>,
    /// vLLM's `prompt_logprobs`, and `echo` and `logprobs`, raw: a request asking for its
    /// prompt's logprobs is computed without the prefix cache (see
    /// [`Self::cached_tokens_speak_for_the_prompt`]).
    #[serde(borrow, default, deserialize_with = "raw_text")]
    pub prompt_logprobs: Option<&'a str>,
    #[serde(borrow, default, deserialize_with = "raw_text")]
    pub echo: Option<&'a str>,
    #[serde(borrow, default, deserialize_with = "raw_text")]
    pub logprobs: Option<&'a str>,
    /// `n`, raw: choices per prompt (see [`Self::cached_tokens_speak_for_the_prompt`]).
    #[serde(borrow, default, deserialize_with = "raw_text")]
    pub n: Option<&'a str>,
    /// The Responses API's prompt: `instructions` (a string) and `input` (a string or a list of
    /// items), raw; set by its own parse ([`responses::parse_responses`]) only.
    #[serde(skip)]
    pub instructions: Option<&'a str>,
    #[serde(skip)]
    pub input: Option<&'a str>,
    /// The Responses API's `previous_response_id`: the stored response this one continues.
    #[serde(skip)]
    pub previous_response_id: Option<Cow<'a, str>>,
    /// Each message of `messages` (or item of a Responses `input` list) where [`parse_request`]
    /// found it, when its scan cut them all (up to [`MAX_CUT_MESSAGES`] plain objects); `None`
    /// otherwise, and when deserialized directly: hashing then finds the messages itself.
    #[serde(skip)]
    pub messages_cut: Option<Vec<Message<'a>>>,
    /// The media parts of `messages` (or of a Responses `input` list) as [`parse_request`]'s
    /// scan counted them while reading the body; `None` when serde read it ([`media_in`] then
    /// walks the list).
    #[serde(skip)]
    pub media: Option<PromptMedia>,
}

impl InferenceRequest<'_> {
    /// A streamed answer will end with a `usage` event: `stream_options` is an object whose
    /// `include_usage` is not false (vLLM's StreamOptions defaults it to true, so
    /// `"stream_options": {}` asks for usage). (vLLM sends none without `stream_options`,
    /// unless started with `--enable-force-include-usage`.)
    pub fn includes_usage(&self) -> bool {
        fn vllm_default() -> Option<bool> {
            Some(true)
        }
        #[derive(Deserialize)]
        struct StreamOptions {
            // Absent: vLLM's default; `null`: none. Read as vLLM reads a flag (`"true"`, 1).
            #[serde(default = "vllm_default", deserialize_with = "fields::lax_flag_field")]
            include_usage: Option<bool>,
        }
        let options = self.stream_options.and_then(|raw| serde_json::from_str::<StreamOptions>(raw).ok());
        options.and_then(|options| options.include_usage).unwrap_or(false)
    }

    /// The pod's `cached_tokens` for this request is the cached part of the one prompt the
    /// picker hashed: not for a batch of prompts (vLLM reports the last prompt's alone), nor
    /// for a request asking for its prompt's logprobs (`prompt_logprobs`, or `echo` with
    /// `logprobs`: vLLM computes those without its prefix cache, so it reports 0 cached).
    /// Compared with the index's prediction, such a report would read as eviction. Nor for a
    /// whole (not streamed) answer of `n` > 1 choices: vLLM V1 runs one child request per
    /// choice and reports the cached tokens of the child that finished last
    /// (v1/engine/parallel_sampling.py, output_processor.py), a sibling that found the first
    /// child's prompt blocks, so it reads as the whole prompt cached on any pod, a cold one
    /// too. (A stream reports its first output's, the first child's real hit.)
    pub fn cached_tokens_speak_for_the_prompt(&self) -> bool {
        let set = |raw: Option<&str>| raw.is_some_and(|value| value != "false");
        let prompt_logprobs = set(self.prompt_logprobs) || (self.echo == Some("true") && set(self.logprobs));
        let samples_answered_whole = self.stream != Some(true) && self.n.and_then(lax_count).is_some_and(|n| n > 1);
        !prompt_logprobs && !samples_answered_whole && !self.prompt.is_some_and(is_batch_of_prompts)
    }
}

/// The most sequences one request is counted as in flight: vLLM's default `--max-num-seqs`
/// (256), a whole pod's batch. A request of more choices fills any such batch on its own.
pub const MAX_SEQUENCES: u32 = 256;

/// The largest `n` vLLM accepts (`VLLM_MAX_N_SEQUENCES`' default): it refuses a larger one at
/// once (400), so such a request holds no seat.
const ENGINE_MAX_N: u64 = 16_384;

impl InferenceRequest<'_> {
    /// The sequences this request takes in its pod's running batch, as `endpoint` serves it:
    /// its `n`, as vLLM runs one child request per choice (v1/engine/parallel_sampling.py),
    /// each holding a seat of `--max-num-seqs` and counted in `num_requests_running`; times
    /// the prompts of a completions batch (a `prompt` list of texts or of token-id lists:
    /// vLLM runs each prompt as its own request); at most [`MAX_SEQUENCES`]. `n` is read as
    /// vLLM reads it ([`lax_count`]: `8`, `8.0` and `"8"` are all 8); it counts 1 when
    /// absent, `null`, not a count vLLM reads, below 2, or more than vLLM accepts (vLLM
    /// refuses those at once); so does the Responses and Messages APIs' request (no `n`, one
    /// prompt). (Each prompt is computed once for its choices: prompt tokens in flight are
    /// not multiplied.) Cheap: a look at raw values the parse already cut; a batch's list is
    /// walked element by element, no further than [`MAX_SEQUENCES`] of them.
    pub fn sequences(&self, endpoint: Endpoint) -> u32 {
        if !endpoint.answers_like_completions() {
            return 1;
        }
        let n = match self.n.and_then(lax_count) {
            Some(n @ 2..=ENGINE_MAX_N) => u32::try_from(n).unwrap_or(MAX_SEQUENCES).min(MAX_SEQUENCES),
            _ => 1,
        };
        let prompts = match endpoint {
            Endpoint::Completions => self.prompt.map_or(1, |prompt| prompts_in(prompt, MAX_SEQUENCES)),
            _ => 1,
        };
        n.saturating_mul(prompts).min(MAX_SEQUENCES)
    }
}

/// A raw JSON value read as a count the way vLLM reads its integer fields: its request
/// models are pydantic models in lax mode, which take a whole number in any JSON form. So a
/// JSON integer (`8`), a number with no fraction (`8.0`, `1e3`), and a string holding decimal
/// digits (`"8"`, `" +8 "`, `"8.0"`) are all counts, and vLLM runs that many choices; `None`
/// for anything else (a fraction, a negative, a string in another form, a list, `true`:
/// refused, or 1 to vLLM).
fn lax_count(raw: &str) -> Option<u64> {
    let raw = raw.trim();
    if let Some(text) = raw.strip_prefix('"').and_then(|rest| rest.strip_suffix('"')) {
        // Pydantic strips the string and takes an optional `+`, digits, and a fraction of
        // zeros; an escape (`\u0038`) is left out (no client writes a count so).
        let text = text.trim_matches(|c: char| c.is_ascii_whitespace());
        let text = text.strip_prefix('+').unwrap_or(text);
        let (whole, zeros) = text.split_once('.').unwrap_or((text, "0"));
        let made_of = |part: &str, allowed: &[u8]| !part.is_empty() && part.bytes().all(|b| allowed.contains(&b));
        if !made_of(whole, b"0123456789") || !made_of(zeros, b"0") {
            return None;
        }
        return whole.parse().ok();
    }
    if let Ok(count) = raw.parse::<u64>() {
        return Some(count);
    }
    // A JSON number with a fraction or an exponent, or past `u64` (the parse checked it is
    // one); `as` saturates, so a huge one stays above any bound checked.
    let value = raw.parse::<f64>().ok()?;
    (value.is_finite() && value >= 0.0 && value.fract() == 0.0).then_some(value as u64)
}

/// The prompts of a completions `prompt`, counted up to `limit`: the elements of a list of
/// texts or of token-id lists (vLLM's batch); 1 for a text, one prompt's token ids, or
/// anything else (an empty list, which vLLM refuses). No allocation, and no element past the
/// `limit`-th's start is walked: on raw text both parses checked is JSON, a comma is followed
/// by an element.
fn prompts_in(prompt: &str, limit: u32) -> u32 {
    let bytes = prompt.as_bytes();
    if bytes.first() != Some(&b'[') {
        return 1;
    }
    let mut at = scan::skip_white_space(bytes, 1);
    if !matches!(bytes.get(at), Some(b'"' | b'[')) {
        return 1;
    }
    let mut prompts = 0u32;
    while let Some(end) = scan::value_end(bytes, at) {
        prompts += 1;
        at = scan::skip_white_space(bytes, end);
        if bytes.get(at) != Some(&b',') {
            break;
        }
        if prompts.saturating_add(1) >= limit {
            return limit;
        }
        at = scan::skip_white_space(bytes, at + 1);
    }
    prompts.max(1)
}

/// A completions `prompt` that is a list of several prompts (texts or token-id lists), not
/// one prompt's token ids. Walks the first element only (this runs for every list prompt
/// when learning is on).
fn is_batch_of_prompts(prompt: &str) -> bool {
    prompts_in(prompt, 2) == 2
}

/// A raw value's text (present fields only: an absent one is `None` by `default`; `null` is
/// `None` too, as for any `Option`).
pub(crate) fn raw_text<'de: 'a, 'a, D: Deserializer<'de>>(deserializer: D) -> Result<Option<&'a str>, D::Error> {
    Ok(Option::<&'de RawValue>::deserialize(deserializer)?.map(RawValue::get))
}

/// Why a body could not be read as an inference request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyError {
    /// Not JSON, or a field of the wrong type; the text is serde's description.
    Invalid(String),
    /// Valid JSON without the prompt field its endpoint needs.
    MissingPrompt(&'static str),
    /// A prompt field of the wrong JSON type (e.g. `messages` that is not a list).
    WrongType(&'static str),
}

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Invalid(reason) => write!(f, "request body is not valid JSON for this endpoint: {reason}"),
            Self::MissingPrompt(field) => write!(f, "request body has no '{field}' field"),
            Self::WrongType(field) => write!(f, "request body field '{field}' has the wrong type"),
        }
    }
}

/// Reads `body` for `endpoint`: a chat or completions body that is valid UTF-8 by the fast
/// scan (`cut`) when it can, any other the plain way (serde_json), which then decides what is
/// refused and why. The scan checks every byte as serde does, at 1.1-1.4 x serde's speed
/// natively and 1.05-1.3 x in V8 (it stops less often in text full of escapes; bench notes in
/// docs/performance.md).
pub fn parse_request(body: &[u8], endpoint: Endpoint) -> Result<InferenceRequest<'_>, BodyError> {
    let cut = match endpoint {
        Endpoint::ChatCompletions | Endpoint::Completions => std::str::from_utf8(body).ok().and_then(cut::cut_request),
        Endpoint::Responses => return parse_responses(body),
        Endpoint::Messages => return parse_messages(body),
        Endpoint::Other => None,
    };
    match cut {
        Some(request) => check_prompt(request, endpoint),
        None => parse_request_plainly(body, endpoint),
    }
}

/// Any other endpoint's body (`/tokenize`, the render endpoints; in vLLM embeddings, scoring,
/// pooling), and a chat, completions, Responses or Messages body its own parse refused: only its
/// `model`, so the pick can keep it on pods serving that model. Whatever else the body holds is
/// skipped unread, of any type: those endpoints' fields are not the completions' ones (`input`
/// may be a list of token ids, `prompt` an object), and none of them feeds prefix hashing or
/// learning. Read as vLLM reads JSON ([`find_model`]): a byte order mark, `NaN`, a key given
/// twice (the last is kept) are no obstacle. Refused: a body that is not one JSON object, or
/// whose `model` is not a string.
pub fn parse_model_only(body: &[u8]) -> Result<InferenceRequest<'_>, BodyError> {
    let model = read_model(body).map_err(|unreadable| BodyError::Invalid(unreadable.to_string()))?;
    Ok(InferenceRequest { model, ..InferenceRequest::default() })
}

/// [`parse_request`] without cutting the messages (what it falls back to): for tests and the
/// fuzz targets that hold the two to the same answers.
pub fn parse_request_plainly(body: &[u8], endpoint: Endpoint) -> Result<InferenceRequest<'_>, BodyError> {
    let request: InferenceRequest<'_> = serde_json::from_slice(body).map_err(|e| BodyError::Invalid(e.to_string()))?;
    check_prompt(request, endpoint)
}

/// The prompt field `endpoint` needs is there, of a type it allows.
fn check_prompt(request: InferenceRequest<'_>, endpoint: Endpoint) -> Result<InferenceRequest<'_>, BodyError> {
    match endpoint {
        Endpoint::Completions if request.prompt.is_none() => Err(BodyError::MissingPrompt("prompt")),
        Endpoint::ChatCompletions if request.messages.is_none() => Err(BodyError::MissingPrompt("messages")),
        _ if !raw_starts_with(request.prompt, b"\"[") => Err(BodyError::WrongType("prompt")),
        _ if !raw_starts_with(request.messages, b"[") => Err(BodyError::WrongType("messages")),
        _ => Ok(request),
    }
}

/// A present raw value begins with one of `allowed` (absent values pass): a string or a
/// list for `prompt`, a list for `messages`. Raw values carry no leading white space.
fn raw_starts_with(value: Option<&str>, allowed: &[u8]) -> bool {
    value.is_none_or(|raw| raw.as_bytes().first().is_some_and(|b| allowed.contains(b)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_weighs_its_n_choices_within_bounds() {
        let weight =
            |endpoint: Endpoint, body: &str| parse_request(body.as_bytes(), endpoint).unwrap().sequences(endpoint);
        let chat = |n: &str| weight(Endpoint::ChatCompletions, &format!(r#"{{"messages":[],"n":{n}}}"#));
        assert_eq!(chat("8"), 8);
        assert_eq!(chat(" 16 "), 16);
        assert_eq!(chat("1"), 1);
        assert_eq!(chat("256"), 256);
        assert_eq!(chat("1000"), MAX_SEQUENCES, "more fills a whole batch");
        assert_eq!(chat("16384"), MAX_SEQUENCES);
        for refused_or_odd in [
            "0",
            "-4",
            "2.5",
            "-2.0",
            "\"8.5\"",
            "\"1e3\"",
            "\"eight\"",
            "\"\"",
            "\"8.\"",
            "null",
            "true",
            "[2]",
            "16385",
            "16385.0",
            "\"16385\"",
            "99999999999999999999999",
            "1e300",
        ] {
            assert_eq!(chat(refused_or_odd), 1, "{refused_or_odd}");
        }
        // vLLM's request models read integers as pydantic's lax mode does: each of these runs
        // 8 (or 1,000) child requests there, so each weighs as much here.
        for eight in ["8.0", "8e0", "\"8\"", "\" 8 \"", "\"+8\"", "\"8.00\""] {
            assert_eq!(chat(eight), 8, "{eight}");
        }
        assert_eq!(chat("1e3"), MAX_SEQUENCES);
        assert_eq!(weight(Endpoint::ChatCompletions, r#"{"messages":[]}"#), 1, "absent");
        assert_eq!(weight(Endpoint::Completions, r#"{"prompt":"x","n":4}"#), 4);
        let plain = parse_request_plainly(br#"{"prompt":"x","n":3}"#, Endpoint::Completions).unwrap();
        assert_eq!(plain.sequences(Endpoint::Completions), 3, "the plain parse reads it too");
        assert_eq!(weight(Endpoint::Responses, r#"{"input":"x","n":4}"#), 1, "the Responses API has no n");
        assert_eq!(weight(Endpoint::Messages, r#"{"messages":[],"max_tokens":5,"n":4}"#), 1, "nor Messages");
        assert_eq!(
            parse_request_plainly(br#"{"prompt":"x","n":4}"#, Endpoint::Completions)
                .unwrap()
                .sequences(Endpoint::Other),
            1
        );
    }

    #[test]
    fn a_batch_of_prompts_weighs_each_prompt_times_n() {
        let weight = |body: &str| {
            parse_request(body.as_bytes(), Endpoint::Completions).unwrap().sequences(Endpoint::Completions)
        };
        assert_eq!(weight(r#"{"prompt":["a","b","c"]}"#), 3, "vLLM runs each prompt as a request");
        assert_eq!(weight(r#"{"prompt":[ "a" , "b,]" ],"n":4}"#), 8, "each prompt's 4 choices");
        assert_eq!(weight(r#"{"prompt":[[1,2,3],[4,5]],"n":2}"#), 4, "token-id lists");
        assert_eq!(weight(r#"{"prompt":[1,2,3],"n":2}"#), 2, "one prompt's token ids");
        assert_eq!(weight(r#"{"prompt":["one"]}"#), 1);
        assert_eq!(weight(r#"{"prompt":[]}"#), 1);
        let many = format!(r#"{{"prompt":[{}]}}"#, vec!["\"p\""; 1000].join(","));
        assert_eq!(weight(&many), MAX_SEQUENCES, "walked no further than a whole batch");
        assert_eq!(weight(r#"{"prompt":["a","b"],"n":200}"#), MAX_SEQUENCES);
        let chat = parse_request(br#"{"messages":[],"prompt":["a","b"],"n":2}"#, Endpoint::ChatCompletions).unwrap();
        assert_eq!(chat.sequences(Endpoint::ChatCompletions), 2, "a chat's prompt field is not its prompt");
    }

    #[test]
    fn reads_completions_and_chat() {
        let body = br#"{"model":"m","prompt":"hi there","stream":true,"max_tokens":5,"extra":{"a":[1,2]}}"#;
        let request = parse_request(body, Endpoint::Completions).unwrap();
        assert_eq!((request.model.as_deref(), request.stream), (Some("m"), Some(true)));
        assert_eq!(request.prompt, Some("\"hi there\""));
        assert!(!request.includes_usage());
        let chat = br#"{"model":"m","messages":[{"role":"user","content":"hi"}],"cache_salt":"s"}"#;
        let request = parse_request(chat, Endpoint::ChatCompletions).unwrap();
        assert!(request.messages.is_some() && request.cache_salt.as_deref() == Some("s"));
    }

    #[test]
    fn stream_options_of_any_shape_are_accepted_and_usage_is_expected_as_vllm_sends_it() {
        let with = |options: &str| format!(r#"{{"prompt":"x","stream":true,"stream_options":{options}}}"#);
        for (options, includes) in [
            (r#"{"include_usage":true,"continuous_usage_stats":false}"#, true),
            // vLLM's StreamOptions: include_usage defaults to true.
            ("{}", true),
            (r#"{"continuous_usage_stats":true}"#, true),
            (r#"{"include_usage":null}"#, false),
            (r#"{"include_usage":false}"#, false),
            (r#"{"include_usage":"yes"}"#, true),
            (r#"{"include_usage":0}"#, false),
            (r#"{"include_usage":"maybe"}"#, false),
            ("null", false),
            ("[1,2]", false),
            ("\"text\"", false),
        ] {
            let body = with(options);
            for endpoint in [Endpoint::Completions, Endpoint::Other] {
                let request = parse_request(body.as_bytes(), endpoint).unwrap();
                assert_eq!(request.includes_usage(), includes, "{options}");
            }
        }
        let chat = br#"{"messages":[{"role":"user","content":"hi"}],"stream_options":{"include_usage":true}}"#;
        let request = parse_request(chat, Endpoint::ChatCompletions).unwrap();
        assert!(request.messages_cut.is_some() && request.includes_usage(), "the cut parse reads it too");
    }

    #[test]
    fn other_endpoints_are_read_for_their_model_alone_whatever_else_they_hold() {
        let embeddings = br#"{"input":[[1,2,3]],"model":"embed","prompt":{"odd":1},"messages":"not a list"}"#;
        let request = parse_model_only(embeddings).unwrap();
        assert_eq!(request.model.as_deref(), Some("embed"));
        assert!(request.prompt.is_none() && request.messages.is_none() && request.stream.is_none());
        let escaped = parse_model_only(br#"{"model":"a\u002fb","input":"x"}"#).unwrap();
        assert_eq!(escaped.model.as_deref(), Some("a/b"));
        assert_eq!(parse_model_only(br#"{"input":"no model"}"#).unwrap().model, None);
        assert_eq!(parse_model_only(br#"{"model":null}"#).unwrap().model, None);
        for broken in [&b"model=x&input=y"[..], b"{\"model\":3}", b"[1]", b"", b"\xff"] {
            assert!(matches!(parse_model_only(broken), Err(BodyError::Invalid(_))), "{broken:?}");
        }
    }

    #[test]
    fn bodies_vllm_takes_and_serde_refuses_are_read_for_their_model() {
        let chat = r#""messages":[{"role":"user","content":"hi"}]"#;
        for (body, endpoint) in [
            (format!(r#"{{"model":"public",{chat},"model":"m"}}"#), Endpoint::ChatCompletions),
            (format!("\u{feff}{{\"model\":\"m\",{chat}}}"), Endpoint::ChatCompletions),
            (format!(r#"{{"model":"m",{chat},"temperature":NaN}}"#), Endpoint::ChatCompletions),
            (r#"{"model":"m","prompt_embeds":"AAAA"}"#.to_owned(), Endpoint::Completions),
            (r#"{"model":"m","input":"x","model":"m"}"#.to_owned(), Endpoint::Responses),
        ] {
            assert!(parse_request(body.as_bytes(), endpoint).is_err(), "{body}");
            assert_eq!(parse_model_only(body.as_bytes()).unwrap().model.as_deref(), Some("m"), "{body}");
        }
    }

    #[test]
    fn flags_are_read_as_vllm_reads_them() {
        let bodies = |stream: &str| {
            let chat = format!(r#"{{"model":"m","messages":[{{"role":"user","content":"hi"}}],"stream":{stream}}}"#);
            let completion = format!(r#"{{"model":"m","prompt":"hi","stream":{stream}}}"#);
            let responses = format!(r#"{{"model":"m","input":"hi","stream":{stream}}}"#);
            [
                (chat.clone(), Endpoint::ChatCompletions),
                (completion, Endpoint::Completions),
                (responses, Endpoint::Responses),
                (chat, Endpoint::Messages),
            ]
        };
        let cases = [
            ("true", Some(true)),
            (r#""true""#, Some(true)),
            (r#""Yes""#, Some(true)),
            (r#""on""#, Some(true)),
            (r#""1""#, Some(true)),
            (r#""t""#, Some(true)),
            (r#""\u0074rue""#, Some(true)),
            ("1", Some(true)),
            ("1.0", Some(true)),
            ("false", Some(false)),
            (r#""FALSE""#, Some(false)),
            (r#""off""#, Some(false)),
            (r#""n""#, Some(false)),
            ("0", Some(false)),
            ("null", None),
        ];
        for (stream, read) in cases {
            for (body, endpoint) in bodies(stream) {
                let request = parse_request(body.as_bytes(), endpoint).unwrap();
                assert_eq!(request.stream, read, "{body}");
                assert!(request.messages.is_some() || request.prompt.is_some() || request.input.is_some());
            }
        }
        for refused in ["2", "0.5", r#""maybe""#, r#"" true""#, r#""""#, "[]", "{}"] {
            for (body, endpoint) in bodies(refused) {
                assert!(parse_request(body.as_bytes(), endpoint).is_err(), "{body}: vLLM refuses it (400)");
            }
        }
    }

    #[test]
    fn refuses_broken_bodies_with_a_reason() {
        assert!(matches!(parse_request(b"{\"model\":", Endpoint::Completions), Err(BodyError::Invalid(_))));
        assert!(matches!(parse_request(b"", Endpoint::Completions), Err(BodyError::Invalid(_))));
        assert!(matches!(parse_request(b"\xff\xfe", Endpoint::Completions), Err(BodyError::Invalid(_))));
        assert!(matches!(
            parse_request(br#"{"model":3,"prompt":"x"}"#, Endpoint::Completions),
            Err(BodyError::Invalid(_))
        ));
        assert_eq!(
            parse_request(br#"{"model":"m"}"#, Endpoint::ChatCompletions).unwrap_err(),
            BodyError::MissingPrompt("messages")
        );
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        let deep_body = format!("{{\"prompt\":{deep}}}");
        // Skipped values are walked iteratively by serde_json: deep nesting is no stack risk.
        let request = parse_request(deep_body.as_bytes(), Endpoint::Completions).unwrap();
        assert_eq!(request.prompt.map(|p| p.len()), Some(20_000));
    }

    #[test]
    fn cached_tokens_speak_for_one_prompt_without_prompt_logprobs() {
        let speaks = |body: &str| {
            parse_request(body.as_bytes(), Endpoint::Completions).unwrap().cached_tokens_speak_for_the_prompt()
        };
        assert!(speaks(r#"{"prompt":"one"}"#));
        assert!(speaks(r#"{"prompt":["one"]}"#), "a list of one prompt");
        assert!(speaks(r#"{"prompt":[1, 2, 3]}"#), "one prompt's token ids");
        assert!(speaks(r#"{"prompt":"one","echo":true}"#), "echo alone asks no logprobs");
        assert!(speaks(r#"{"prompt":"one","prompt_logprobs":null,"logprobs":2}"#));
        assert!(!speaks(r#"{"prompt":[ "one", "two"]}"#), "a batch");
        assert!(!speaks(r#"{"prompt":[[1, 2], [3]]}"#), "a batch of token ids");
        assert!(!speaks(r#"{"prompt":"one","prompt_logprobs":0}"#));
        assert!(!speaks(r#"{"prompt":"one","echo":true,"logprobs":0}"#));
        assert!(speaks(r#"{"prompt":"one","n":1}"#));
        assert!(speaks(r#"{"prompt":"one","n":null}"#));
        assert!(!speaks(r#"{"prompt":"one","n":2}"#), "a sibling's hit, answered whole");
        assert!(!speaks(r#"{"prompt":"one","n":3,"stream":false}"#));
        assert!(!speaks(r#"{"prompt":"one","n":"2"}"#), "vLLM reads a count in a string");
        assert!(speaks(r#"{"prompt":"one","n":"1"}"#));
        assert!(speaks(r#"{"prompt":"one","n":2,"stream":true}"#), "a stream's is the first child's");
        let chat = |body: &str| {
            parse_request(body.as_bytes(), Endpoint::ChatCompletions).unwrap().cached_tokens_speak_for_the_prompt()
        };
        assert!(!chat(r#"{"messages":[{"role":"user","content":"x"}],"n":4}"#), "the cut parse reads n too");
        assert!(chat(r#"{"messages":[{"role":"user","content":"x"}],"n":4,"stream":true}"#));
    }

    #[test]
    fn names_endpoints_by_path() {
        assert_eq!(Endpoint::from_path("/v1/chat/completions?x=1"), Endpoint::ChatCompletions);
        assert_eq!(Endpoint::from_path("/v1/completions/"), Endpoint::Completions);
        assert_eq!(Endpoint::from_path("/v1/models"), Endpoint::Other);
    }
}
