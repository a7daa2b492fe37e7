//! The Responses API's body (`POST /v1/responses`): `model`, `stream`, `cache_salt`, `tools`,
//! and its prompt, `instructions` and `input`, kept raw like the chat's messages.
//!
//! `input` is a string (one user message) or a list of items: messages (`role` and `content`,
//! a string or a list of `input_text` / `input_image` / `input_file` parts), and the items an
//! agent's loop sends back (`function_call`, `function_call_output`, `reasoning`, ...). A
//! conversation resends its earlier items as they were, so they hash as written, one after
//! another, like chat messages. `previous_response_id` names a response the server stored (vLLM
//! keeps it in one pod's memory); the router sends the request where that response came from
//! (`prefix.follow_response_ids`).

use std::borrow::Cow;

use serde::Deserialize;

use super::cut::value_cut;
use super::fields::{by_serde, read_object, scanned_or_serde, Known};
use super::media::PromptMedia;
use super::Message;
use super::{raw_text, BodyError, InferenceRequest};

#[derive(Deserialize, Default)]
struct ResponsesBody<'a> {
    #[serde(borrow, default)]
    model: Option<Cow<'a, str>>,
    /// Read as vLLM reads it: `"true"` and `1` stream too.
    #[serde(default, deserialize_with = "super::fields::lax_flag_field")]
    stream: Option<bool>,
    #[serde(borrow, default, deserialize_with = "raw_text")]
    instructions: Option<&'a str>,
    #[serde(borrow, default, deserialize_with = "raw_text")]
    input: Option<&'a str>,
    #[serde(borrow, default, deserialize_with = "raw_text")]
    tools: Option<&'a str>,
    #[serde(borrow, default)]
    cache_salt: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    previous_response_id: Option<Cow<'a, str>>,
    /// Where the scan found each of `input`'s items, if it read the body.
    #[serde(skip)]
    cut: Option<Vec<Message<'a>>>,
    /// Their media parts, if the scan read the body.
    #[serde(skip)]
    media: Option<PromptMedia>,
}

/// Reads a Responses API body; `input` must be there, a string or a list, and `instructions`
/// a string or null.
pub fn parse_responses(body: &[u8]) -> Result<InferenceRequest<'_>, BodyError> {
    checked(scanned_or_serde(body, scan_responses)?)
}

/// [`parse_responses`] by serde alone (what it falls back to): for tests and the fuzz targets that
/// hold the two to the same answers.
pub fn parse_responses_plainly(body: &[u8]) -> Result<InferenceRequest<'_>, BodyError> {
    checked(by_serde(body)?)
}

/// The body's prompt fields are there, of the types they must have.
fn checked(body: ResponsesBody<'_>) -> Result<InferenceRequest<'_>, BodyError> {
    let Some(input) = body.input else { return Err(BodyError::MissingPrompt("input")) };
    if !input.starts_with(['"', '[']) {
        return Err(BodyError::WrongType("input"));
    }
    let instructions = body.instructions.filter(|raw| *raw != "null");
    if instructions.is_some_and(|raw| !raw.starts_with('"')) {
        return Err(BodyError::WrongType("instructions"));
    }
    Ok(InferenceRequest {
        model: body.model,
        stream: body.stream,
        tools: body.tools,
        cache_salt: body.cache_salt,
        instructions,
        input: Some(input),
        previous_response_id: body.previous_response_id,
        messages_cut: body.cut,
        media: body.media,
        ..InferenceRequest::default()
    })
}

/// The body read by the validating scan, as serde would read it, or `None` (then serde reads
/// it and decides any refusal).
fn scan_responses(text: &str) -> Option<ResponsesBody<'_>> {
    let mut body = ResponsesBody { media: Some(PromptMedia::default()), ..ResponsesBody::default() };
    let mut known = Known::default();
    read_object(text, |key, start| {
        let (value, end, cut) = value_cut(text, start, key == "input")?;
        if let Some((cut, media)) = cut {
            (body.cut, body.media) = (cut, Some(media));
        }
        match key {
            "model" => body.model = known.text(0, value)?,
            "stream" => body.stream = known.flag(1, value)?,
            "instructions" => body.instructions = known.raw(2, value)?,
            "input" => body.input = known.raw(3, value)?,
            "tools" => body.tools = known.raw(4, value)?,
            "cache_salt" => body.cache_salt = known.text(5, value)?,
            "previous_response_id" => body.previous_response_id = known.text(6, value)?,
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
    fn reads_the_prompt_model_and_stream_of_a_responses_body() {
        let body = br#"{"model":"m","instructions":"Be brief.","input":[{"role":"user","content":"hi"}],
            "stream":true,"tools":[{"type":"function","name":"f"}],"previous_response_id":null,"store":false}"#;
        let request = parse_request(body, Endpoint::Responses).unwrap();
        assert_eq!((request.model.as_deref(), request.stream), (Some("m"), Some(true)));
        assert_eq!(request.instructions, Some("\"Be brief.\""));
        assert!(request.input.is_some_and(|i| i.starts_with('[')) && request.tools.is_some());
        assert!(request.prompt.is_none() && request.messages.is_none());
        assert_eq!(request.previous_response_id, None, "null is none");
        let next = parse_responses(br#"{"input":"more","previous_response_id":"resp_1a"}"#).unwrap();
        assert_eq!(next.previous_response_id.as_deref(), Some("resp_1a"));
        let text = parse_responses(br#"{"input":"hello","instructions":null}"#).unwrap();
        assert_eq!(text.input, Some("\"hello\""));
        assert!(text.instructions.is_none(), "a null is no instructions");
    }

    #[test]
    fn refuses_a_body_without_input_or_with_a_prompt_of_the_wrong_type() {
        assert_eq!(parse_responses(br#"{"model":"m"}"#).unwrap_err(), BodyError::MissingPrompt("input"));
        assert_eq!(parse_responses(br#"{"input":7}"#).unwrap_err(), BodyError::WrongType("input"));
        assert_eq!(
            parse_responses(br#"{"input":"x","instructions":[1]}"#).unwrap_err(),
            BodyError::WrongType("instructions")
        );
        assert!(matches!(parse_responses(b"{\"input\":"), Err(BodyError::Invalid(_))));
        assert!(matches!(parse_responses(br#"{"input":"x","stream":"maybe"}"#), Err(BodyError::Invalid(_))));
    }
}
