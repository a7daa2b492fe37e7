//! The body parse that also notes where each chat message lies, so prefix hashing need not
//! scan the messages again to find where one ends and the next begins.
//!
//! The same serde_json walk as [`super::InferenceRequest`]'s, over the same fields, except that
//! `messages` is read as a list of objects whose values are raw (borrowed, skipped without
//! recursion as before), which hands over each message's keys and values in place. Any shape
//! this does not cut (an empty list or object, an escaped key, `content` twice, a message that
//! is not an object) or any error makes [`cut_request`] answer `None`, and the caller parses
//! the body the plain way: what is accepted or refused, and why, is the plain parse's.

use std::borrow::Cow;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

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

/// [`super::InferenceRequest`]'s fields, `messages` cut (see the module's comment).
#[derive(Deserialize)]
struct CutRequest<'a> {
    #[serde(borrow, default)]
    model: Option<Cow<'a, str>>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(borrow, default)]
    stream_options: Option<&'a RawValue>,
    #[serde(borrow, default)]
    prompt: Option<&'a RawValue>,
    #[serde(borrow, default)]
    messages: Option<CutList<'a>>,
    #[serde(borrow, default)]
    tools: Option<&'a RawValue>,
    #[serde(borrow, default)]
    cache_salt: Option<Cow<'a, str>>,
}

/// A valid UTF-8 body read with its messages cut, or `None` (then parse it the plain way).
pub(super) fn cut_request(text: &str) -> Option<InferenceRequest<'_>> {
    let request: CutRequest<'_> = serde_json::from_str(text).ok()?;
    let (messages, messages_cut) = match request.messages {
        Some(list) => {
            let (raw, cut) = list.locate(text)?;
            (Some(raw), cut)
        }
        None => (None, None),
    };
    Some(InferenceRequest {
        model: request.model,
        stream: request.stream,
        stream_options: request.stream_options,
        prompt: request.prompt,
        messages,
        tools: request.tools,
        cache_salt: request.cache_salt,
        instructions: None,
        input: None,
        previous_response_id: None,
        messages_cut,
    })
}

/// A message as the parse hands it over: its first key (borrowed: it had no escape), its
/// last value, and `content` if that is a list.
#[derive(Clone, Copy)]
struct Pieces<'a> {
    first_key: &'a str,
    last_value: &'a str,
    parts: Option<&'a str>,
}

/// The messages list as parsed: the first [`MAX_CUT_MESSAGES`] messages' pieces, and the last
/// message's (where the list ends).
struct CutList<'a> {
    pieces: Vec<Pieces<'a>>,
    last: Pieces<'a>,
    complete: bool,
}

impl<'a> CutList<'a> {
    /// The list's text as written (`[` to `]`) and, if every message was cut, each message's.
    /// `None` if the text around the pieces is not what valid JSON puts there.
    fn locate(self, text: &'a str) -> Option<(&'a str, Option<Vec<Message<'a>>>)> {
        let first = self.pieces.first()?;
        let open = before_white_space(text, object_start(text, first)?, b'[')?;
        let close = after_white_space(text, span_of(text, self.last.last_value)?.1, b'}')?;
        let close = after_white_space(text, close + 1, b']')?;
        let raw = text.get(open..=close)?;
        if !self.complete {
            return Some((raw, None));
        }
        // Into the pieces' own allocation (a Message is smaller than the Pieces it comes from).
        let messages = self.pieces.into_iter().map(|pieces| {
            let start = object_start(text, &pieces)?;
            let end = after_white_space(text, span_of(text, pieces.last_value)?.1, b'}')?;
            Some(Message { text: text.get(start..=end)?, parts: pieces.parts })
        });
        Some((raw, Some(messages.collect::<Option<Vec<_>>>()?)))
    }
}

/// Where the `{` of the message whose first key is `pieces.first_key` is.
fn object_start(text: &str, pieces: &Pieces<'_>) -> Option<usize> {
    let quote = span_of(text, pieces.first_key)?.0.checked_sub(1)?;
    (text.as_bytes().get(quote) == Some(&b'"')).then_some(())?;
    before_white_space(text, quote, b'{')
}

/// Where `inner`, a slice of `outer`, lies in it.
fn span_of(outer: &str, inner: &str) -> Option<(usize, usize)> {
    let start = (inner.as_ptr() as usize).checked_sub(outer.as_ptr() as usize)?;
    let end = start.checked_add(inner.len())?;
    (end <= outer.len()).then_some((start, end))
}

/// The position of `expected`, found going back from just before `at` over JSON white space.
fn before_white_space(text: &str, at: usize, expected: u8) -> Option<usize> {
    let bytes = text.as_bytes().get(..at)?;
    let position = bytes.iter().rposition(|b| !is_white_space(*b))?;
    (bytes.get(position) == Some(&expected)).then_some(position)
}

/// The position of `expected`, found going on from `at` over JSON white space.
fn after_white_space(text: &str, at: usize, expected: u8) -> Option<usize> {
    let bytes = text.as_bytes().get(at..)?;
    let offset = bytes.iter().position(|b| !is_white_space(*b))?;
    (bytes.get(offset) == Some(&expected)).then_some(at + offset)
}

fn is_white_space(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | b'\r')
}

/// Refusals of shapes that are not cut; never seen by a client (the plain parse then runs).
const NOT_CUT: &str = "not cut";

impl<'de: 'a, 'a> Deserialize<'de> for CutList<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_seq(ListVisitor)
    }
}

struct ListVisitor;

impl<'de> Visitor<'de> for ListVisitor {
    type Value = CutList<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of messages")
    }

    fn visit_seq<S: SeqAccess<'de>>(self, mut seq: S) -> Result<Self::Value, S::Error> {
        let mut pieces = Vec::with_capacity(8);
        let mut last = None;
        let mut complete = true;
        // Every element is consumed (serde_json checks the list's end after it), so this ends
        // with the list; only the first MAX_CUT_MESSAGES are kept.
        while let Some(message) = seq.next_element_seed(MessageSeed)? {
            if pieces.len() < MAX_CUT_MESSAGES {
                pieces.push(message);
            } else {
                complete = false;
            }
            last = Some(message);
        }
        let last = last.ok_or_else(|| serde::de::Error::custom(NOT_CUT))?;
        Ok(CutList { pieces, last, complete })
    }
}

struct MessageSeed;

impl<'de> DeserializeSeed<'de> for MessageSeed {
    type Value = Pieces<'de>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(MessageVisitor)
    }
}

struct MessageVisitor;

impl<'de> Visitor<'de> for MessageVisitor {
    type Value = Pieces<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a message object")
    }

    fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
        let refuse = || serde::de::Error::custom(NOT_CUT);
        let (mut first_key, mut last_value, mut content) = (None, None, None);
        // Each turn consumes one entry; serde_json ends the object.
        while let Some(key) = map.next_key_seed(KeySeed)? {
            let value: &'de RawValue = map.next_value()?;
            let key = key.ok_or_else(refuse)?;
            first_key.get_or_insert(key);
            if key == "content" {
                // Twice: the plain parse of a message refuses it; leave that to it.
                if content.replace(value.get()).is_some() {
                    return Err(refuse());
                }
            }
            last_value = Some(value.get());
        }
        let (Some(first_key), Some(last_value)) = (first_key, last_value) else { return Err(refuse()) };
        let parts = content.filter(|c| c.starts_with('['));
        Ok(Pieces { first_key, last_value, parts })
    }
}

/// A key as written, or `None` if it had an escape (serde_json then hands a copy).
struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Option<&'de str>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(KeySeed)
    }
}

impl<'de> Visitor<'de> for KeySeed {
    type Value = Option<&'de str>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a key")
    }

    fn visit_borrowed_str<E>(self, key: &'de str) -> Result<Self::Value, E> {
        Ok(Some(key))
    }

    fn visit_str<E>(self, _key: &str) -> Result<Self::Value, E> {
        Ok(None)
    }
}

#[cfg(test)]
mod tests;
