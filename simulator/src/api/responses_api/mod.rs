//! The Responses API (`POST /v1/responses`), as vLLM serves it: `instructions` and `input`
//! become chat messages rendered by the same chat template as `/v1/chat/completions`, so a
//! conversation sent either way is the same prompt and shares the same cached blocks.
//!
//! `input` is a string (one user message) or a list of items: messages (`role`, and `content`
//! as a string or `input_text` / `output_text` / `input_image` parts), `function_call` (rendered
//! as an assistant turn `name(arguments)`), `function_call_output` (a `tool` turn) and
//! `reasoning` (dropped: a template renders no past reasoning). `previous_response_id`
//! continues a stored response with `--responses-store` ([`store`]); without it the request is
//! refused, as by vLLM started without its response store.

mod shapes;
mod store;
mod stream;

use serde::Deserialize;
use serde_json::Value;

pub use shapes::{full_response, ResponsesMeta};
pub use store::{ResponseStore, MAX_STORED_RESPONSES};
pub use stream::{OnComplete, ResponsesStream};

use super::errors::ApiError;
use super::request::{CommonOptions, MAX_MESSAGES};
use crate::chat_template::{render_chat, ChatMessage, ContentPart};

/// A parsed `POST /v1/responses` body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponsesRequest {
    /// `instructions` (as a leading system message) and `input`, as chat messages.
    pub messages: Vec<ChatMessage>,
    /// `instructions` as given, echoed in the response object.
    pub instructions: Option<String>,
    /// The input items alone, as chat messages: what a stored response keeps of this request.
    pub input: Vec<ChatMessage>,
    /// The stored response this request continues.
    pub previous_response_id: Option<String>,
    /// Model, `max_output_tokens` and `stream` (`include_usage` is moot: usage is always sent).
    pub options: CommonOptions,
}

impl ResponsesRequest {
    /// The prompt text after the chat template, with the generation prompt.
    pub fn rendered_prompt(&self) -> String {
        render_chat(&self.messages, true)
    }
}

#[derive(Deserialize)]
struct RawResponses {
    model: Option<String>,
    input: Option<Value>,
    instructions: Option<String>,
    #[serde(default, deserialize_with = "crate::api::lax::int")]
    max_output_tokens: Option<i64>,
    #[serde(default, deserialize_with = "crate::api::lax::flag")]
    stream: Option<bool>,
    previous_response_id: Option<String>,
}

/// Parses a Responses API body.
pub fn parse_responses(body: &[u8]) -> Result<ResponsesRequest, ApiError> {
    let raw: RawResponses = serde_json::from_slice(body)
        .map_err(|error| ApiError::bad_request(format!("Invalid request body: {error}")))?;
    let mut messages = Vec::new();
    match raw.input {
        Some(Value::String(text)) => messages.push(ChatMessage::text("user", &text)),
        Some(Value::Array(items)) if !items.is_empty() && items.len() <= MAX_MESSAGES => {
            for item in &items {
                if let Some(message) = input_item(item)? {
                    messages.push(message);
                }
            }
        }
        Some(Value::Array(_)) => {
            return Err(ApiError::bad_param("input", format!("Between 1 and {MAX_MESSAGES} input items are required.")))
        }
        Some(_) => return Err(ApiError::bad_param("input", "Field 'input' must be a string or a list of items.")),
        None => return Err(ApiError::bad_param("input", "Field 'input' is required.")),
    }
    let max_tokens = match raw.max_output_tokens {
        None => None,
        Some(value) if value >= 1 => Some(usize::try_from(value).unwrap_or(usize::MAX)),
        Some(value) => {
            return Err(ApiError::bad_param(
                "max_output_tokens",
                format!("max_output_tokens must be at least 1, got {value}."),
            ))
        }
    };
    let options = CommonOptions {
        model: raw.model,
        max_tokens,
        stream: raw.stream.unwrap_or(false),
        include_usage: true,
        ..CommonOptions::default()
    };
    let mut request = ResponsesRequest {
        messages: Vec::new(),
        instructions: raw.instructions,
        input: messages,
        previous_response_id: raw.previous_response_id,
        options,
    };
    request.continue_from(&[]);
    Ok(request)
}

impl ResponsesRequest {
    /// The prompt's messages: `instructions`, the conversation a stored response ended
    /// (`earlier`), then this request's input.
    pub fn continue_from(&mut self, earlier: &[ChatMessage]) {
        let system = self.instructions.iter().map(|text| ChatMessage::text("system", text));
        self.messages = system.chain(earlier.iter().cloned()).chain(self.input.iter().cloned()).collect();
    }
}

/// One input item as a chat message; `None` for what a template does not render.
fn input_item(item: &Value) -> Result<Option<ChatMessage>, ApiError> {
    let text_of = |field: &str| item.get(field).and_then(Value::as_str).unwrap_or_default().to_owned();
    let kind = item.get("type").and_then(Value::as_str).unwrap_or("message");
    match kind {
        "message" => {
            let role = item.get("role").and_then(Value::as_str).ok_or_else(|| bad_item("a message needs a 'role'"))?;
            let content = match item.get("content") {
                Some(Value::String(text)) => vec![ContentPart::Text(text.clone())],
                Some(Value::Array(parts)) => parts.iter().map(content_part).collect::<Result<_, _>>()?,
                None | Some(Value::Null) => Vec::new(),
                Some(_) => return Err(bad_item("'content' must be a string or a list of parts")),
            };
            Ok(Some(ChatMessage { role: role.to_owned(), content }))
        }
        "function_call" => {
            let call = format!("{}({})", text_of("name"), text_of("arguments"));
            Ok(Some(ChatMessage::text("assistant", &call)))
        }
        "function_call_output" => Ok(Some(ChatMessage::text("tool", &text_of("output")))),
        "reasoning" => Ok(None),
        other => Err(bad_item(&format!("unsupported input item type {other:?}"))),
    }
}

fn content_part(part: &Value) -> Result<ContentPart, ApiError> {
    let kind = part.get("type").and_then(Value::as_str).unwrap_or_default();
    let text = part.get("text").and_then(Value::as_str);
    let image = part.get("image_url").and_then(Value::as_str);
    match (kind, text, image) {
        ("input_text" | "output_text" | "text", Some(text), _) => Ok(ContentPart::Text(text.to_owned())),
        ("input_image", _, Some(url)) => Ok(ContentPart::Image(url.to_owned())),
        _ => Err(bad_item(&format!("unsupported or incomplete content part {kind:?}"))),
    }
}

fn bad_item(reason: &str) -> ApiError {
    ApiError::bad_param("input", format!("Invalid input item: {reason}."))
}

#[cfg(test)]
mod tests;
