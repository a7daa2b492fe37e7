//! The media parts of a prompt: images, audio, video and files in a chat message's, a Responses
//! input item's or a Messages block list's `content`, told from text by the fields hashing
//! replaces with a placeholder ([`MEDIA_FIELDS`], `prefix/chat.rs`).
//!
//! The prompt's size is estimated from its text bytes (`learn/tokens.rs`), and a media part's
//! bytes are no measure of its tokens: a 400 KB base64 image reads as ~100,000 tokens of text,
//! while the engine makes a few hundred of it. So the estimate leaves media parts' bytes out.
//! They are counted by the body scan as it checks each content list ([`content_list_end`]),
//! which reads those bytes anyway: a walk of its own cost 2.3 x the whole parse of a 230 KB
//! agent conversation (natively), counting in the scan 1-8 % more than the scan alone.

use super::fields::for_each_member;
use super::scan::{skip_white_space, value_end};
use super::InferenceRequest;

/// Fields of a content part that carry media rather than text (OpenAI and vLLM's extensions).
/// `file_data` is the Responses API's `input_file` part's inline file; `source` the Messages
/// API's image or document block's (`{"type": "base64", "data": ...}` or a `url`).
pub const MEDIA_FIELDS: [&str; 8] =
    ["image_url", "input_audio", "video_url", "audio_url", "file", "image_pil", "file_data", "source"];

/// Lists nested in a part whose media parts count too: a Messages `tool_result` block's
/// `content` (how Claude Code returns an image it read), one level down as vLLM unpacks it.
const NESTED_LEVELS: u8 = 1;

/// The media parts of a prompt, and the body bytes they take (each part object whole).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PromptMedia {
    pub parts: u32,
    pub bytes: usize,
}

impl PromptMedia {
    fn add(&mut self, other: PromptMedia) {
        self.parts = self.parts.saturating_add(other.parts);
        self.bytes = self.bytes.saturating_add(other.bytes);
    }
}

/// The media parts among `request`'s messages (or Responses input items): as the body scan
/// counted them; for a body serde read, by a walk of the list (a shape the scan cannot walk
/// counts what came before it).
pub fn media_in(request: &InferenceRequest<'_>) -> PromptMedia {
    if let Some(media) = request.media {
        return media;
    }
    let mut media = PromptMedia::default();
    if let Some(list) = request.messages.or(request.input).filter(|list| list.starts_with('[')) {
        let _ = message_list_end(list, 0, &mut media);
    }
    media
}

/// A list of messages at `at` (its `[`), walked for their `content` lists: where it ends.
fn message_list_end(text: &str, at: usize, media: &mut PromptMedia) -> Option<usize> {
    for_each_element(text, at, |start| {
        if text.as_bytes().get(start) != Some(&b'{') {
            return value_end(text.as_bytes(), start);
        }
        for_each_member(text, start, |key, value_start| match key {
            "content" => content_value_end(text, value_start, media),
            _ => value_end(text.as_bytes(), value_start),
        })
    })
}

/// The value of a message's `content` at `at`, checked: where it ends, its media parts counted
/// into `media` if it is a list.
pub(super) fn content_value_end(text: &str, at: usize, media: &mut PromptMedia) -> Option<usize> {
    match text.as_bytes().get(at) {
        Some(b'[') => content_list_end(text, at, NESTED_LEVELS, media),
        _ => value_end(text.as_bytes(), at),
    }
}

/// The content list at `at` (its `[`), every byte checked as [`value_end`] checks it: where it
/// ends. Each part that has a member named in [`MEDIA_FIELDS`] counts, whole, into `media`; a
/// part that has none has its own `content` list walked, `nested` levels down.
fn content_list_end(text: &str, at: usize, nested: u8, media: &mut PromptMedia) -> Option<usize> {
    let bytes = text.as_bytes();
    for_each_element(text, at, |start| {
        if bytes.get(start) != Some(&b'{') {
            return value_end(bytes, start);
        }
        let (mut is_media, mut inner) = (false, PromptMedia::default());
        let end = for_each_member(text, start, |key, value_start| {
            is_media |= MEDIA_FIELDS.contains(&key);
            match (key, bytes.get(value_start)) {
                ("content", Some(b'[')) if nested > 0 => content_list_end(text, value_start, nested - 1, &mut inner),
                _ => value_end(bytes, value_start),
            }
        })?;
        if is_media {
            media.add(PromptMedia { parts: 1, bytes: end - start });
        } else {
            media.add(inner);
        }
        Some(end)
    })
}

/// Calls `each` with where each element of the list at `at` (its `[`) starts; `each` answers
/// where it ends. Returns where the list ends (one past its `]`), or `None` if it is not valid
/// JSON or `each` answers `None`.
fn for_each_element(text: &str, at: usize, mut each: impl FnMut(usize) -> Option<usize>) -> Option<usize> {
    let bytes = text.as_bytes();
    (bytes.get(at) == Some(&b'[')).then_some(())?;
    let mut at = skip_white_space(bytes, at + 1);
    if bytes.get(at) == Some(&b']') {
        return Some(at + 1);
    }
    // Each turn consumes one element and what follows it, so it ends.
    loop {
        at = skip_white_space(bytes, each(at)?);
        match bytes.get(at)? {
            b',' => at = skip_white_space(bytes, at + 1),
            b']' => return Some(at + 1),
            _ => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::{parse_request, parse_request_plainly, Endpoint};

    fn both(body: &str, endpoint: Endpoint) -> PromptMedia {
        let scanned = parse_request(body.as_bytes(), endpoint).unwrap();
        assert!(scanned.media.is_some(), "the scan read it");
        let walked = match endpoint {
            Endpoint::Responses => crate::request::parse_responses_plainly(body.as_bytes()),
            Endpoint::Messages => crate::request::parse_messages_plainly(body.as_bytes()),
            _ => parse_request_plainly(body.as_bytes(), endpoint),
        };
        let walked = walked.unwrap();
        assert!(walked.media.is_none(), "serde read it");
        assert_eq!(media_in(&scanned), media_in(&walked), "the scan and the walk count alike");
        media_in(&scanned)
    }

    #[test]
    fn media_parts_of_every_shape_are_counted_whole() {
        let image = "QUJD".repeat(1000);
        let chat_part = format!(r#"{{"type":"image_url","image_url":{{"url":"data:image/png;base64,{image}"}}}}"#);
        let audio_part = format!(r#"{{"input_audio":{{"data":"{image}","format":"wav"}},"type":"input_audio"}}"#);
        let chat = format!(
            r#"{{"model":"m","messages":[{{"role":"system","content":"be brief [really]"}},{{"role":"user","content":[{{"type":"text","text":"what?"}}, {chat_part} ,{audio_part}]}}]}}"#
        );
        let two = PromptMedia { parts: 2, bytes: chat_part.len() + audio_part.len() };
        assert_eq!(both(&chat, Endpoint::ChatCompletions), two);

        let responses_part = format!(r#"{{"type":"input_image","image_url":"data:image/png;base64,{image}"}}"#);
        let responses = format!(
            r#"{{"model":"m","input":[{{"role":"user","content":[{{"type":"input_text","text":"hi"}},{responses_part}]}}]}}"#
        );
        assert_eq!(both(&responses, Endpoint::Responses), PromptMedia { parts: 1, bytes: responses_part.len() });

        let block =
            format!(r#"{{"type":"image","source":{{"type":"base64","media_type":"image/png","data":"{image}"}}}}"#);
        let messages = format!(
            r#"{{"model":"m","max_tokens":9,"messages":[{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"t","content":[{block}]}}]}}]}}"#
        );
        let nested = PromptMedia { parts: 1, bytes: block.len() };
        assert_eq!(both(&messages, Endpoint::Messages), nested, "an image a tool returned");
    }

    #[test]
    fn text_alone_has_no_media() {
        let mentions = r#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"\"image_url\": [x]"}]},{"role":"assistant","content":"source"}]}"#;
        assert_eq!(both(mentions, Endpoint::ChatCompletions), PromptMedia::default());
        let input = parse_request(br#"{"model":"m","input":"[not a list]"}"#, Endpoint::Responses).unwrap();
        assert_eq!(media_in(&input), PromptMedia::default());
    }
}
