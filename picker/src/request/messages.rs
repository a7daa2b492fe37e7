//! The Anthropic Messages API's body (`POST /v1/messages`, which vLLM serves for clients such as
//! Claude Code): `model`, `stream`, `tools`, and its prompt, `system` and `messages`, kept raw.
//!
//! `system` is a string or a list of text blocks; `messages` a list of `role` and `content`,
//! a string or a list of blocks (`text`, `image`, `tool_use`, `tool_result`, ...). vLLM turns
//! both into a chat request (the system prompt first) and renders it through the chat template,
//! so an agent's resent conversation extends its last turn's prompt as a chat's does, and hashes
//! like one (`prefix/chat.rs`).

use std::borrow::Cow;

use serde::Deserialize;

use super::cut::value_cut;
use super::fields::{by_serde, read_object, scanned_or_serde, Known};
use super::media::PromptMedia;
use super::Message;
use super::{raw_text, BodyError, InferenceRequest};

#[derive(Deserialize, Default)]
struct MessagesBody<'a> {
    #[serde(borrow, default)]
    model: Option<Cow<'a, str>>,
    /// Read as vLLM reads it: `"true"` and `1` stream too.
    #[serde(default, deserialize_with = "super::fields::lax_flag_field")]
    stream: Option<bool>,
    #[serde(borrow, default, deserialize_with = "raw_text")]
    system: Option<&'a str>,
    #[serde(borrow, default, deserialize_with = "raw_text")]
    messages: Option<&'a str>,
    #[serde(borrow, default, deserialize_with = "raw_text")]
    tools: Option<&'a str>,
    /// Where the scan found each of `messages`'s items, if it read the body.
    #[serde(skip)]
    cut: Option<Vec<Message<'a>>>,
    /// Their media parts, if the scan read the body.
    #[serde(skip)]
    media: Option<PromptMedia>,
}

/// Reads a Messages API body; `messages` must be there, a list, and `system` a string, a list
/// or null.
pub fn parse_messages(body: &[u8]) -> Result<InferenceRequest<'_>, BodyError> {
    checked(scanned_or_serde(body, scan_messages)?)
}

/// [`parse_messages`] by serde alone (what it falls back to): for tests and the fuzz targets that
/// hold the two to the same answers.
pub fn parse_messages_plainly(body: &[u8]) -> Result<InferenceRequest<'_>, BodyError> {
    checked(by_serde(body)?)
}

/// The body's prompt fields are there, of the types they must have.
fn checked(body: MessagesBody<'_>) -> Result<InferenceRequest<'_>, BodyError> {
    let Some(messages) = body.messages else { return Err(BodyError::MissingPrompt("messages")) };
    if !messages.starts_with('[') {
        return Err(BodyError::WrongType("messages"));
    }
    let system = body.system.filter(|raw| *raw != "null");
    if system.is_some_and(|raw| !raw.starts_with(['"', '['])) {
        return Err(BodyError::WrongType("system"));
    }
    Ok(InferenceRequest {
        model: body.model,
        stream: body.stream,
        messages: Some(messages),
        tools: body.tools,
        instructions: system,
        messages_cut: body.cut,
        media: body.media,
        ..InferenceRequest::default()
    })
}

/// The body read by the validating scan, as serde would read it, or `None` (then serde reads
/// it and decides any refusal).
fn scan_messages(text: &str) -> Option<MessagesBody<'_>> {
    let mut body = MessagesBody { media: Some(PromptMedia::default()), ..MessagesBody::default() };
    let mut known = Known::default();
    read_object(text, |key, start| {
        let (value, end, cut) = value_cut(text, start, key == "messages")?;
        if let Some((cut, media)) = cut {
            (body.cut, body.media) = (cut, Some(media));
        }
        match key {
            "model" => body.model = known.text(0, value)?,
            "stream" => body.stream = known.flag(1, value)?,
            "system" => body.system = known.raw(2, value)?,
            "messages" => body.messages = known.raw(3, value)?,
            "tools" => body.tools = known.raw(4, value)?,
            _ => {}
        }
        Some(end)
    })?;
    Some(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::{parse_request, Endpoint};

    #[test]
    fn reads_the_system_prompt_messages_and_tools_of_a_messages_body() {
        let body = br#"{"model":"m","max_tokens":64,"system":[{"type":"text","text":"You are a coder."}],
            "messages":[{"role":"user","content":[{"type":"text","text":"fix it"}]}],"stream":true,
            "tools":[{"name":"bash","input_schema":{"type":"object"}}]}"#;
        let request = parse_request(body, Endpoint::Messages).unwrap();
        assert_eq!((request.model.as_deref(), request.stream), (Some("m"), Some(true)));
        assert!(request.instructions.is_some_and(|s| s.starts_with('[')));
        assert!(request.messages.is_some_and(|m| m.starts_with('[')) && request.tools.is_some());
        let plain = parse_messages(br#"{"model":"m","system":null,"messages":[]}"#).unwrap();
        assert!(plain.instructions.is_none(), "a null is no system prompt");
    }

    #[test]
    fn refuses_a_body_without_messages_or_with_a_prompt_of_the_wrong_type() {
        assert_eq!(parse_messages(br#"{"model":"m"}"#).unwrap_err(), BodyError::MissingPrompt("messages"));
        assert_eq!(parse_messages(br#"{"messages":"hi"}"#).unwrap_err(), BodyError::WrongType("messages"));
        assert_eq!(parse_messages(br#"{"messages":[],"system":7}"#).unwrap_err(), BodyError::WrongType("system"));
        assert!(matches!(parse_messages(b"{\"messages\":"), Err(BodyError::Invalid(_))));
    }
}
