//! The fast body parse of chat and completions requests: the body read by the validating
//! scan ([`super::fields`]), noting where each chat message lies, so prefix hashing need not
//! scan the messages again.
//!
//! It reads the fields [`super::InferenceRequest`]'s serde parse reads, to the same values. It
//! cuts only messages it is sure of: a non-empty list of non-empty objects, each with `content`
//! at most once. Any other body, valid or not, makes [`cut_request`] answer `None`, and the
//! caller parses it with serde, which then decides what is refused and why.

use super::fields::{for_each_member, read_object, value_at, Known};
use super::media::{content_value_end, PromptMedia};
use super::scan::skip_white_space;
use super::InferenceRequest;

/// Messages cut per request at most. A longer conversation keeps its list whole and hashing
/// cuts it itself, as for a body parsed the plain way: this bounds the list of cuts, not the
/// body.
pub const MAX_CUT_MESSAGES: usize = 256;

/// One chat message, where the body parse found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message<'a> {
    /// The message object as written, `{` to `}`.
    pub text: &'a str,
    /// Its `content` as written, when that is a list of parts.
    pub parts: Option<&'a str>,
}

/// A body that is valid UTF-8, read with its messages cut, or `None` (then parse it the plain
/// way).
pub(super) fn cut_request(text: &str) -> Option<InferenceRequest<'_>> {
    let mut request = InferenceRequest { media: Some(PromptMedia::default()), ..InferenceRequest::default() };
    let mut known = Known::default();
    read_object(text, |key, start| {
        let (value, end, cut) = value_cut(text, start, key == "messages")?;
        if let Some((cut, media)) = cut {
            (request.messages_cut, request.media) = (cut, Some(media));
        }
        match key {
            "model" => request.model = known.text(0, value)?,
            "stream" => request.stream = known.flag(1, value)?,
            "stream_options" => request.stream_options = known.raw(2, value)?,
            "prompt" => request.prompt = known.raw(3, value)?,
            "messages" => request.messages = known.raw(4, value)?,
            "tools" => request.tools = known.raw(5, value)?,
            "cache_salt" => request.cache_salt = known.text(6, value)?,
            "prompt_logprobs" => request.prompt_logprobs = known.raw(7, value)?,
            "echo" => request.echo = known.raw(8, value)?,
            "logprobs" => request.logprobs = known.raw(9, value)?,
            "n" => request.n = known.raw(10, value)?,
            _ => {}
        }
        Some(end)
    })?;
    Some(request)
}

/// A messages list as the scan read it: where each message lies (if there are at most
/// [`MAX_CUT_MESSAGES`]), and the media parts of all of them.
pub(super) type CutList<'a> = (Option<Vec<Message<'a>>>, PromptMedia);

/// The value starting at `start`, where it ends, and, if `cut` and it is a list, where each of
/// its messages (or input items) lies and their media parts ([`cut_messages`]).
pub(super) fn value_cut(text: &str, start: usize, cut: bool) -> Option<(&str, usize, Option<CutList<'_>>)> {
    if cut && text.as_bytes().get(start) == Some(&b'[') {
        let (end, messages, media) = cut_messages(text, start)?;
        return Some((text.get(start..end)?, end, Some((messages, media))));
    }
    let (value, end) = value_at(text, start)?;
    Some((value, end, None))
}

/// The messages list starting at `at` (its `[`): where it ends, each message's place if
/// there are at most [`MAX_CUT_MESSAGES`], and the media parts of every message's `content`.
/// `None` for a list that is empty or holds anything but non-empty objects with `content` at
/// most once.
fn cut_messages(text: &str, at: usize) -> Option<(usize, Option<Vec<Message<'_>>>, PromptMedia)> {
    let bytes = text.as_bytes();
    let mut messages = Vec::with_capacity(8);
    let mut complete = true;
    let mut media = PromptMedia::default();
    let mut at = skip_white_space(bytes, at + 1);
    // Each turn consumes one message and what follows it, so it ends.
    loop {
        let start = at;
        let (mut content, mut members) = (None, 0usize);
        let end = for_each_member(text, start, |key, value_start| {
            members += 1;
            if key != "content" {
                return value_at(text, value_start).map(|(_, end)| end);
            }
            let end = content_value_end(text, value_start, &mut media)?;
            // Twice: the plain parse of a message refuses it; leave that to it.
            content.replace(text.get(value_start..end)?).is_none().then_some(())?;
            Some(end)
        })?;
        (members > 0).then_some(())?;
        if messages.len() < MAX_CUT_MESSAGES {
            let parts = content.filter(|c: &&str| c.starts_with('['));
            messages.push(Message { text: text.get(start..end)?, parts });
        } else {
            complete = false;
        }
        at = skip_white_space(bytes, end);
        match bytes.get(at)? {
            b',' => at = skip_white_space(bytes, at + 1),
            b']' => return Some((at + 1, complete.then_some(messages), media)),
            _ => return None,
        }
    }
}

#[cfg(test)]
mod tests;
