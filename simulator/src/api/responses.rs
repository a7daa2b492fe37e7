//! OpenAI response bodies and stream chunks, in the exact shapes vLLM sends.
//!
//! Completions: `object: "text_completion"` with `choices[].text`. Chat: `object:
//! "chat.completion"` with `choices[].message`, and in streams `"chat.completion.chunk"` with
//! `choices[].delta`, the first delta of a choice carrying `role: "assistant"`. `usage` has
//! `prompt_tokens_details: {cached_tokens}` only when the pod runs with
//! `--enable-prompt-tokens-details` and the request hit the cache, as vLLM's (serving_chat.py
//! 1101 and 1409, serving_completion.py 471 and 587): otherwise `null` in a JSON answer and
//! absent from the final stream chunk (dumped with `exclude_none=True`).

use serde_json::{json, Value};

use crate::pod::Usage;

/// Which API a response belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApiKind {
    /// `/v1/completions`.
    Completion,
    /// `/v1/chat/completions`.
    Chat,
}

/// Fields every body and chunk of one response repeats.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseMeta {
    /// Completions or chat.
    pub kind: ApiKind,
    /// `cmpl-...` or `chatcmpl-...`.
    pub id: String,
    /// Unix seconds.
    pub created: u64,
    /// The model (or adapter) name as requested.
    pub model: String,
    /// Whether `usage` may show `prompt_tokens_details` (`--enable-prompt-tokens-details`).
    pub prompt_tokens_details: bool,
}

impl ResponseMeta {
    /// Metadata with an id derived from `request_number`.
    pub fn new(kind: ApiKind, request_number: u64, created: u64, model: &str) -> Self {
        let prefix = match kind {
            ApiKind::Completion => "cmpl",
            ApiKind::Chat => "chatcmpl",
        };
        let id = format!("{prefix}-{request_number:016x}");
        Self { kind, id, created, model: model.to_owned(), prompt_tokens_details: false }
    }
}

/// A finished choice of a non-streamed response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChoiceText {
    /// Generated text.
    pub text: String,
    /// `length` (max_tokens reached) or `stop`.
    pub finish_reason: &'static str,
}

/// The `usage` object of a JSON answer: `prompt_tokens_details` is `null` unless enabled and
/// some prompt tokens were cached.
pub fn usage_json(usage: &Usage, prompt_tokens_details: bool) -> Value {
    let details = if prompt_tokens_details && usage.cached_tokens > 0 {
        json!({"cached_tokens": usage.cached_tokens})
    } else {
        Value::Null
    };
    json!({
        "prompt_tokens": usage.prompt_tokens,
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
        "completion_tokens": usage.completion_tokens,
        "prompt_tokens_details": details,
    })
}

/// A complete (non-streamed) response.
pub fn full_response(meta: &ResponseMeta, choices: &[ChoiceText], usage: &Usage) -> Value {
    let choices: Vec<Value> = choices
        .iter()
        .enumerate()
        .map(|(index, choice)| match meta.kind {
            ApiKind::Completion => json!({
                "index": index, "text": choice.text, "logprobs": null,
                "finish_reason": choice.finish_reason, "stop_reason": null, "prompt_logprobs": null,
            }),
            ApiKind::Chat => json!({
                "index": index,
                "message": {"role": "assistant", "content": choice.text, "reasoning_content": null, "tool_calls": []},
                "logprobs": null, "finish_reason": choice.finish_reason, "stop_reason": null,
            }),
        })
        .collect();
    json!({
        "id": meta.id,
        "object": object_name(meta.kind, false),
        "created": meta.created,
        "model": meta.model,
        "choices": choices,
        "usage": usage_json(usage, meta.prompt_tokens_details),
    })
}

/// The chunk announcing the assistant role (chat streams only, before a choice's first token);
/// with continuous usage it carries the prompt tokens and no completion tokens, as vLLM's.
pub fn role_chunk(meta: &ResponseMeta, index: usize, usage: Option<RunningUsage>) -> Value {
    let mut value = chunk(
        meta,
        json!([{
            "index": index, "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null,
        }]),
    );
    if let (Some(usage), Some(object)) = (usage, value.as_object_mut()) {
        object.insert("usage".to_owned(), usage.to_json());
    }
    value
}

/// The chunk carrying one token; the last token of a choice also carries its finish reason.
/// `usage` is the running count (`stream_options.continuous_usage_stats`): vLLM writes a
/// completions chunk with every field (`exclude_unset=False`, so `"usage": null` without it and
/// `"prompt_tokens_details": null` inside it) and a chat chunk with the fields it set only.
pub fn token_chunk(
    meta: &ResponseMeta,
    index: usize,
    text: &str,
    finish_reason: Option<&str>,
    usage: Option<RunningUsage>,
) -> Value {
    let choice = match meta.kind {
        ApiKind::Completion => json!({
            "index": index, "text": text, "logprobs": null, "finish_reason": finish_reason, "stop_reason": null,
        }),
        ApiKind::Chat => json!({
            "index": index, "delta": {"content": text}, "logprobs": null, "finish_reason": finish_reason,
        }),
    };
    let mut value = chunk(meta, json!([choice]));
    let usage = match (meta.kind, usage) {
        (ApiKind::Completion, Some(usage)) => {
            let mut usage = usage.to_json();
            if let Some(object) = usage.as_object_mut() {
                object.insert("prompt_tokens_details".to_owned(), Value::Null);
            }
            usage
        }
        (ApiKind::Completion, None) => Value::Null,
        (ApiKind::Chat, Some(usage)) => usage.to_json(),
        (ApiKind::Chat, None) => return value,
    };
    if let Some(object) = value.as_object_mut() {
        object.insert("usage".to_owned(), usage);
    }
    value
}

/// A choice's counts so far, for `stream_options.continuous_usage_stats` (no cached tokens:
/// vLLM never puts prompt details on these).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunningUsage {
    /// The choice's prompt tokens.
    pub prompt_tokens: usize,
    /// Tokens the choice generated so far.
    pub completion_tokens: usize,
}

impl RunningUsage {
    fn to_json(self) -> Value {
        json!({
            "prompt_tokens": self.prompt_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "completion_tokens": self.completion_tokens,
        })
    }
}

/// The final usage chunk (`stream_options.include_usage`): no choices, only usage (a null
/// `prompt_tokens_details` left out, as vLLM dumps it with `exclude_none=True`).
pub fn usage_chunk(meta: &ResponseMeta, usage: &Usage) -> Value {
    let mut value = chunk(meta, json!([]));
    let mut usage = usage_json(usage, meta.prompt_tokens_details);
    if let Some(usage) = usage.as_object_mut() {
        usage.retain(|_, field| !field.is_null());
    }
    if let Some(object) = value.as_object_mut() {
        object.insert("usage".to_owned(), usage);
    }
    value
}

fn chunk(meta: &ResponseMeta, choices: Value) -> Value {
    json!({
        "id": meta.id,
        "object": object_name(meta.kind, true),
        "created": meta.created,
        "model": meta.model,
        "choices": choices,
    })
}

fn object_name(kind: ApiKind, streamed: bool) -> &'static str {
    match (kind, streamed) {
        (ApiKind::Completion, _) => "text_completion",
        (ApiKind::Chat, false) => "chat.completion",
        (ApiKind::Chat, true) => "chat.completion.chunk",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage() -> Usage {
        Usage { prompt_tokens: 10, completion_tokens: 3, cached_tokens: 8 }
    }

    /// vLLM shows cached tokens only with `--enable-prompt-tokens-details` and a hit:
    /// `null` in a JSON answer, absent from the usage chunk otherwise.
    #[test]
    fn prompt_tokens_details_need_the_flag_and_a_hit() {
        let mut meta = ResponseMeta::new(ApiKind::Chat, 1, 5, "m");
        let choice = [ChoiceText { text: " x".to_owned(), finish_reason: "length" }];
        assert_eq!(full_response(&meta, &choice, &usage())["usage"]["prompt_tokens_details"], Value::Null);
        assert!(usage_chunk(&meta, &usage())["usage"].get("prompt_tokens_details").is_none());
        meta.prompt_tokens_details = true;
        assert_eq!(
            full_response(&meta, &choice, &usage())["usage"]["prompt_tokens_details"],
            json!({"cached_tokens": 8})
        );
        assert_eq!(usage_chunk(&meta, &usage())["usage"]["prompt_tokens_details"], json!({"cached_tokens": 8}));
        let miss = Usage { cached_tokens: 0, ..usage() };
        assert_eq!(full_response(&meta, &choice, &miss)["usage"]["prompt_tokens_details"], Value::Null);
        assert!(usage_chunk(&meta, &miss)["usage"].get("prompt_tokens_details").is_none());
    }

    #[test]
    fn completion_shapes() {
        let mut meta = ResponseMeta::new(ApiKind::Completion, 1, 5, "m");
        meta.prompt_tokens_details = true;
        let body = full_response(&meta, &[ChoiceText { text: " a b".to_owned(), finish_reason: "length" }], &usage());
        assert_eq!(body["object"], "text_completion");
        assert_eq!(body["choices"][0]["text"], " a b");
        assert_eq!(body["usage"]["total_tokens"], 13);
        assert_eq!(body["usage"]["prompt_tokens_details"]["cached_tokens"], 8);
        let chunk = token_chunk(&meta, 0, " a", None, None);
        assert_eq!(chunk["object"], "text_completion");
        assert_eq!(chunk["choices"][0]["text"], " a");
        assert!(meta.id.starts_with("cmpl-"));
    }

    #[test]
    fn chat_shapes() {
        let meta = ResponseMeta::new(ApiKind::Chat, 2, 5, "m");
        let body = full_response(&meta, &[ChoiceText { text: " x".to_owned(), finish_reason: "length" }], &usage());
        assert_eq!(body["object"], "chat.completion");
        assert_eq!(body["choices"][0]["message"]["role"], "assistant");
        assert_eq!(role_chunk(&meta, 0, None)["choices"][0]["delta"]["role"], "assistant");
        let last = token_chunk(&meta, 0, " x", Some("length"), None);
        assert_eq!(last["object"], "chat.completion.chunk");
        assert_eq!(last["choices"][0]["delta"]["content"], " x");
        assert_eq!(last["choices"][0]["finish_reason"], "length");
        let usage_only = usage_chunk(&meta, &usage());
        assert_eq!(usage_only["choices"], json!([]));
        assert_eq!(usage_only["usage"]["completion_tokens"], 3);
    }
}
