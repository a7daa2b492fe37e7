//! The Anthropic Messages API (`POST /v1/messages`), as vLLM serves it: `system` and `messages`
//! become a chat request rendered by the same chat template as `/v1/chat/completions` (vLLM's
//! `AnthropicServingMessages` converts the request, then runs the chat), so a conversation sent
//! either way is the same prompt.
//!
//! `system` is a string or text blocks (joined); a message's `content` is a string or blocks:
//! `text`, `image` (its `source` data or URL names it), `tool_use` (an assistant turn
//! `name(input)`), `tool_result` (a `tool` turn). `max_tokens` is required, as by vLLM. Answers
//! carry `usage` with `input_tokens` and `output_tokens` (vLLM reports no cached tokens here).

mod stream;

use serde::Deserialize;
use serde_json::{json, Value};

pub use stream::MessagesStream;

use super::errors::ApiError;
use super::request::{CommonOptions, MAX_MESSAGES};
use crate::chat_template::{render_chat, ChatMessage, ContentPart};
use crate::pod::Usage;

/// A parsed `POST /v1/messages` body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessagesRequest {
    /// `system` (as a leading system message) and `messages`, as chat messages.
    pub messages: Vec<ChatMessage>,
    /// Model, `max_tokens` and `stream` (usage is always sent).
    pub options: CommonOptions,
}

impl MessagesRequest {
    /// The prompt text after the chat template, with the generation prompt.
    pub fn rendered_prompt(&self) -> String {
        render_chat(&self.messages, true)
    }
}

#[derive(Deserialize)]
struct RawMessages {
    model: Option<String>,
    system: Option<Value>,
    messages: Option<Vec<Value>>,
    #[serde(default, deserialize_with = "crate::api::lax::int")]
    max_tokens: Option<i64>,
    #[serde(default, deserialize_with = "crate::api::lax::flag")]
    stream: Option<bool>,
}

/// Parses a Messages API body.
pub fn parse_messages(body: &[u8]) -> Result<MessagesRequest, ApiError> {
    let raw: RawMessages = serde_json::from_slice(body)
        .map_err(|error| ApiError::bad_request(format!("Invalid request body: {error}")))?;
    let mut messages = Vec::new();
    match raw.system {
        None | Some(Value::Null) => {}
        Some(Value::String(text)) => messages.push(ChatMessage::text("system", &text)),
        Some(Value::Array(blocks)) => messages.push(ChatMessage::text("system", &block_texts(&blocks))),
        Some(_) => return Err(ApiError::bad_param("system", "Field 'system' must be a string or a list of blocks.")),
    }
    let listed = raw.messages.ok_or_else(|| ApiError::bad_param("messages", "Field 'messages' is required."))?;
    if listed.is_empty() || listed.len() > MAX_MESSAGES {
        return Err(ApiError::bad_param("messages", format!("Between 1 and {MAX_MESSAGES} messages are required.")));
    }
    for message in &listed {
        messages.extend(chat_messages(message)?);
    }
    let max_tokens = match raw.max_tokens {
        Some(value) if value >= 1 => usize::try_from(value).unwrap_or(usize::MAX),
        Some(value) => {
            return Err(ApiError::bad_param("max_tokens", format!("max_tokens must be at least 1, got {value}.")))
        }
        None => return Err(ApiError::bad_param("max_tokens", "Field 'max_tokens' is required.")),
    };
    let options = CommonOptions {
        model: raw.model,
        max_tokens: Some(max_tokens),
        stream: raw.stream.unwrap_or(false),
        include_usage: true,
        ..CommonOptions::default()
    };
    Ok(MessagesRequest { messages, options })
}

/// One Messages API message as chat messages: its text and images, then its tool calls (an
/// assistant's) as text, its tool results (a user's) as `tool` turns.
fn chat_messages(message: &Value) -> Result<Vec<ChatMessage>, ApiError> {
    let role = message.get("role").and_then(Value::as_str).ok_or_else(|| bad("a message needs a 'role'"))?;
    let blocks = match message.get("content") {
        Some(Value::String(text)) => return Ok(vec![ChatMessage::text(role, text)]),
        Some(Value::Array(blocks)) if !blocks.is_empty() => blocks,
        _ => return Err(bad("'content' must be a string or a non-empty list of blocks")),
    };
    let mut content = Vec::new();
    let mut tool_turns = Vec::new();
    for block in blocks {
        match block.get("type").and_then(Value::as_str).unwrap_or_default() {
            "text" => content.push(ContentPart::Text(text_of(block, "text"))),
            "image" | "document" => {
                let source = block.get("source");
                let name = source.and_then(|s| s.get("data").or_else(|| s.get("url"))).and_then(Value::as_str);
                content.push(ContentPart::Image(name.unwrap_or_default().to_owned()));
            }
            "tool_use" => {
                let input = block.get("input").map(Value::to_string).unwrap_or_default();
                content.push(ContentPart::Text(format!("{}({input})", text_of(block, "name"))));
            }
            "tool_result" => {
                let output = match block.get("content") {
                    Some(Value::String(text)) => text.clone(),
                    Some(Value::Array(parts)) => block_texts(parts),
                    _ => String::new(),
                };
                tool_turns.push(ChatMessage::text("tool", &output));
            }
            "thinking" | "redacted_thinking" => {}
            other => return Err(bad(&format!("unsupported content block type {other:?}"))),
        }
    }
    let mut turns = Vec::new();
    if !content.is_empty() {
        turns.push(ChatMessage { role: role.to_owned(), content });
    }
    turns.extend(tool_turns);
    Ok(turns)
}

fn text_of(block: &Value, field: &str) -> String {
    block.get(field).and_then(Value::as_str).unwrap_or_default().to_owned()
}

/// The text blocks' texts, joined (vLLM's handling of a list `system`).
fn block_texts(blocks: &[Value]) -> String {
    blocks
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
        .map(|b| text_of(b, "text"))
        .collect()
}

fn bad(reason: &str) -> ApiError {
    ApiError::bad_param("messages", format!("Invalid message: {reason}."))
}

/// `end_turn`, or `max_tokens` when the answer ran to its limit (vLLM's `length`).
pub fn stop_reason(usage: &Usage, max_tokens: Option<usize>) -> &'static str {
    if max_tokens.is_some_and(|max| usage.completion_tokens >= max) {
        "max_tokens"
    } else {
        "end_turn"
    }
}

/// The Messages API's `usage` as vLLM fills it.
pub fn usage_json(usage: &Usage) -> Value {
    json!({"input_tokens": usage.prompt_tokens, "output_tokens": usage.completion_tokens})
}

/// A whole (non-streamed) answer.
pub fn full_message(id: &str, model: &str, text: &str, usage: &Usage, max_tokens: Option<usize>) -> Value {
    json!({
        "id": id, "type": "message", "role": "assistant", "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": stop_reason(usage, max_tokens), "stop_sequence": null,
        "usage": usage_json(usage),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_messages_body_becomes_the_chat_vllm_would_run() {
        let body = br#"{"model":"m","max_tokens":8,"system":[{"type":"text","text":"Be "},{"type":"text","text":"brief."}],
            "messages":[{"role":"user","content":"list files"},
              {"role":"assistant","content":[{"type":"text","text":"ok"},{"type":"tool_use","id":"t1","name":"ls","input":{"d":"."}}]},
              {"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"a.txt"}]}]}"#;
        let request = parse_messages(body).unwrap();
        let roles: Vec<&str> = request.messages.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["system", "user", "assistant", "tool"]);
        assert_eq!(request.messages[0], ChatMessage::text("system", "Be brief."));
        assert_eq!(request.messages[3], ChatMessage::text("tool", "a.txt"));
        assert!(request.rendered_prompt().contains("ls({\"d\":\".\"})"));
        assert_eq!(request.options.max_tokens, Some(8));
    }

    #[test]
    fn refuses_what_vllm_refuses() {
        for body in [
            r#"{"model":"m","messages":[{"role":"user","content":"x"}]}"#,
            r#"{"model":"m","max_tokens":4,"messages":[]}"#,
            r#"{"model":"m","max_tokens":4,"messages":[{"role":"user","content":[]}]}"#,
            r#"{"model":"m","max_tokens":0,"messages":[{"role":"user","content":"x"}]}"#,
            r#"{"model":"m","max_tokens":4,"system":7,"messages":[{"role":"user","content":"x"}]}"#,
        ] {
            assert_eq!(parse_messages(body.as_bytes()).unwrap_err().status, 400, "{body}");
        }
    }
}
