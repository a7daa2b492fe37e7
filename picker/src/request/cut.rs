//! The fast body parse: a chat body read in one validating scan ([`super::scan`]) that also
//! notes where each message lies, so prefix hashing need not scan the messages again.
//!
//! It reads the fields [`super::InferenceRequest`]'s serde parse reads, to the same values,
//! and skips the rest as serde skips it, checking every byte. It takes only the shapes it is
//! sure of: a body whose fields all have the types they must, no field twice, no escaped key,
//! messages a non-empty list of non-empty objects, each with `content` at most once. Anything
//! else, valid or not, makes [`cut_request`] answer `None`, and the caller parses the body the
//! plain way: what is accepted or refused, and why, is serde's.

use std::borrow::Cow;

use super::scan::{skip_white_space, string_end, value_end};
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
    let mut request = InferenceRequest {
        model: None,
        stream: None,
        stream_options: None,
        prompt: None,
        messages: None,
        tools: None,
        cache_salt: None,
        instructions: None,
        input: None,
        previous_response_id: None,
        messages_cut: None,
    };
    let mut seen = Seen::default();
    let end = for_each_member(text, 0, |key, value_start| {
        let bytes = text.as_bytes();
        let end = if key == "messages" && bytes.get(value_start) == Some(&b'[') {
            let (end, cut) = cut_messages(text, value_start)?;
            request.messages_cut = cut;
            end
        } else {
            value_end(bytes, value_start)?
        };
        let value = text.get(value_start..end)?;
        let null = value == "null";
        match key {
            "model" => request.model = seen.first(0, null)?.then(|| string_value(value)).flatten(),
            "stream" => request.stream = seen.first(1, null)?.then(|| bool_value(value)).flatten(),
            "stream_options" => request.stream_options = seen.first(2, null)?.then_some(value),
            "prompt" => request.prompt = seen.first(3, null)?.then_some(value),
            "messages" => request.messages = seen.first(4, null)?.then_some(value),
            "tools" => request.tools = seen.first(5, null)?.then_some(value),
            "cache_salt" => request.cache_salt = seen.first(6, null)?.then(|| string_value(value)).flatten(),
            _ => return Some(end),
        }
        // A field present and not null whose value did not read (a model that is a number):
        // serde refuses it, so leave it to serde.
        let read = match key {
            "model" => request.model.is_some(),
            "stream" => request.stream.is_some(),
            "cache_salt" => request.cache_salt.is_some(),
            _ => true,
        };
        (null || read).then_some(end)
    })?;
    // Only white space may follow the object.
    (skip_white_space(text.as_bytes(), end) == text.len()).then_some(request)
}

/// Which known fields were met: serde refuses a field given twice.
#[derive(Default)]
struct Seen(u8);

impl Seen {
    /// Marks field `bit`; `None` if it was met before, else whether its value is to be read
    /// (not `null`, which serde reads as absent).
    fn first(&mut self, bit: u8, null: bool) -> Option<bool> {
        let mask = 1u8 << bit;
        (self.0 & mask == 0).then_some(())?;
        self.0 |= mask;
        Some(!null)
    }
}

/// A string value as serde reads it into a `Cow<str>`: borrowed when it has no escape, else
/// unescaped by serde (which also refuses a lone surrogate). `None` if it is no string.
fn string_value(value: &str) -> Option<Cow<'_, str>> {
    let contents = value.strip_prefix('"')?.strip_suffix('"')?;
    if !contents.contains('\\') {
        return Some(Cow::Borrowed(contents));
    }
    serde_json::from_str::<String>(value).ok().map(Cow::Owned)
}

fn bool_value(value: &str) -> Option<bool> {
    match value {
        "true" => Some(true),
        "false" => Some(false),
        _ => None,
    }
}

/// Calls `each` on every member of the object starting at `at` (after white space) with its
/// key and where its value starts; `each` answers where the value ends. Returns where the
/// object ends (one past its `}`). `None` if the object is not valid JSON, a key has an
/// escape (serde would compare it unescaped), or `each` answers `None`.
fn for_each_member<'a>(
    text: &'a str,
    at: usize,
    mut each: impl FnMut(&'a str, usize) -> Option<usize>,
) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut at = skip_white_space(bytes, at);
    (bytes.get(at) == Some(&b'{')).then_some(())?;
    at = skip_white_space(bytes, at + 1);
    if bytes.get(at) == Some(&b'}') {
        return Some(at + 1);
    }
    // Each turn consumes one member and what follows it, so it ends.
    loop {
        (bytes.get(at) == Some(&b'"')).then_some(())?;
        let key_end = string_end(bytes, at + 1)?;
        let key = text.get(at + 1..key_end - 1)?;
        (!key.contains('\\')).then_some(())?;
        let colon = skip_white_space(bytes, key_end);
        (bytes.get(colon) == Some(&b':')).then_some(())?;
        let value_end = each(key, skip_white_space(bytes, colon + 1))?;
        at = skip_white_space(bytes, value_end);
        match bytes.get(at)? {
            b',' => at = skip_white_space(bytes, at + 1),
            b'}' => return Some(at + 1),
            _ => return None,
        }
    }
}

/// The messages list starting at `at` (its `[`): where it ends, and each message's place if
/// there are at most [`MAX_CUT_MESSAGES`]. `None` for a list that is empty or holds anything
/// but non-empty objects with `content` at most once.
fn cut_messages(text: &str, at: usize) -> Option<(usize, Option<Vec<Message<'_>>>)> {
    let bytes = text.as_bytes();
    let mut messages = Vec::with_capacity(8);
    let mut complete = true;
    let mut at = skip_white_space(bytes, at + 1);
    // Each turn consumes one message and what follows it, so it ends.
    loop {
        let start = at;
        let (mut content, mut members) = (None, 0usize);
        let end = for_each_member(text, start, |key, value_start| {
            let value_end = value_end(bytes, value_start)?;
            members += 1;
            if key == "content" {
                // Twice: the plain parse of a message refuses it; leave that to it.
                content.replace(text.get(value_start..value_end)?).is_none().then_some(())?;
            }
            Some(value_end)
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
            b']' => return Some((at + 1, complete.then_some(messages))),
            _ => return None,
        }
    }
}

#[cfg(test)]
mod tests;
