//! Where a body's top-level `model` is, found as vLLM reads the body: with Python's `json`
//! (FastAPI hands `json.loads` the body's bytes), then pydantic.
//!
//! That reader takes bodies serde_json refuses: a UTF-8 byte order mark before the object
//! (`json.loads` of bytes decodes it as `utf-8-sig`), `NaN` and `Infinity` as numbers, numbers of
//! any size (`1e400`), and a key given twice, of which the last is kept. A body the picker cannot
//! read whole is still routed by its model found here ([`super::parse_model_only`]), and a model
//! rewrite replaces this value and no other byte (`crate::models::rewrite::rewrite_body`): the
//! rest of the body (a JSON schema's property order, which structured output generates in, and
//! every number as written) reaches the engine as the client wrote it.
//!
//! Hand-written, as the scans next to it are: no JSON crate reads Python's extensions and
//! hands back where a member lies. Only the top level is walked member by member; a nested
//! value is skipped by its brackets, outside strings, which are checked as JSON's. So every body
//! Python reads is read to the same top-level members, and some it refuses are read too (a
//! mismatched bracket inside a value, a malformed number): the engine then refuses them itself.

use std::borrow::Cow;
use std::ops::Range;

use super::scan::{skip_white_space, string_end};

/// UTF-8's byte order mark, which Python's `json.loads` of bytes skips.
const BYTE_ORDER_MARK: &[u8] = b"\xEF\xBB\xBF";

/// Where a body's top-level `model` member is, or would go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelPlace {
    /// The value of the last top-level `model` member, as written (Python keeps the last of a
    /// key given twice); `None` when the object has none.
    pub value: Option<Range<usize>>,
    /// Just past the object's `{`: where a `model` member is added.
    pub members_start: usize,
    /// The object has no member at all (an added one needs no comma after it).
    pub empty: bool,
}

/// Why no model could be read from a body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unreadable {
    /// Not one JSON object in UTF-8 (a byte order mark allowed), as far as its top level shows:
    /// not an object, cut short, text after it.
    NotAnObject,
    /// The model is neither a string nor `null` (vLLM's field is an optional string).
    ModelNotText,
}

impl std::fmt::Display for Unreadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotAnObject => f.write_str("not a JSON object"),
            Self::ModelNotText => f.write_str("'model' is not a string"),
        }
    }
}

/// Finds the top-level `model` of `body`, walking its top-level members once.
pub fn find_model(body: &[u8]) -> Result<ModelPlace, Unreadable> {
    // Python decodes the whole body first: a body that is not UTF-8 is refused there.
    let text = std::str::from_utf8(body).map_err(|_| Unreadable::NotAnObject)?;
    let bytes = text.as_bytes();
    let start = if bytes.starts_with(BYTE_ORDER_MARK) { BYTE_ORDER_MARK.len() } else { 0 };
    let object = skip_white_space(bytes, start);
    let place = walk_members(text, object).ok_or(Unreadable::NotAnObject)?;
    Ok(place)
}

/// The model `body` names: `None` when it names none (or `null`, pydantic's `None`).
pub fn read_model(body: &[u8]) -> Result<Option<Cow<'_, str>>, Unreadable> {
    let place = find_model(body)?;
    let Some(raw) = place.value.and_then(|value| body.get(value)) else { return Ok(None) };
    if raw == b"null" {
        return Ok(None);
    }
    let contents = raw.strip_prefix(b"\"").and_then(|r| r.strip_suffix(b"\"")).ok_or(Unreadable::ModelNotText)?;
    if !contents.contains(&b'\\') {
        // A slice of text already checked as UTF-8.
        return std::str::from_utf8(contents)
            .map(|name| Some(Cow::Borrowed(name)))
            .map_err(|_| Unreadable::NotAnObject);
    }
    // Escapes: unescaped by serde_json (which refuses a lone surrogate; no pod serves such a name).
    serde_json::from_slice::<String>(raw).map(|name| Some(Cow::Owned(name))).map_err(|_| Unreadable::ModelNotText)
}

/// The members of the object starting at `at` (its `{`), which must be the rest of `text`
/// but for white space.
fn walk_members(text: &str, at: usize) -> Option<ModelPlace> {
    let bytes = text.as_bytes();
    (bytes.get(at) == Some(&b'{')).then_some(())?;
    let members_start = at + 1;
    let mut place = ModelPlace { value: None, members_start, empty: true };
    let mut at = skip_white_space(bytes, members_start);
    if bytes.get(at) == Some(&b'}') {
        return at_end(bytes, at + 1).then_some(place);
    }
    place.empty = false;
    // Each turn consumes one member and what follows it, so it ends.
    loop {
        (bytes.get(at) == Some(&b'"')).then_some(())?;
        let key_end = string_end(bytes, at + 1)?;
        let key = text.get(at..key_end)?;
        let colon = skip_white_space(bytes, key_end);
        (bytes.get(colon) == Some(&b':')).then_some(())?;
        let value_start = skip_white_space(bytes, colon + 1);
        let value_end = loose_value_end(bytes, value_start)?;
        if is_model_key(key) {
            place.value = Some(value_start..value_end);
        }
        at = skip_white_space(bytes, value_end);
        match bytes.get(at)? {
            b',' => at = skip_white_space(bytes, at + 1),
            b'}' => return at_end(bytes, at + 1).then_some(place),
            _ => return None,
        }
    }
}

/// Nothing but white space follows `at`.
fn at_end(bytes: &[u8], at: usize) -> bool {
    skip_white_space(bytes, at) == bytes.len()
}

/// The key, quotes included, is `model` (escaped or not: Python compares keys unescaped).
fn is_model_key(key: &str) -> bool {
    key == "\"model\"" || (key.contains('\\') && serde_json::from_str::<String>(key).is_ok_and(|k| k == "model"))
}

/// Where the value starting at `at` ends: a string checked as JSON's, a container at its
/// matching closing bracket (counted outside strings), anything else (a number, `true`,
/// Python's `NaN`, `Infinity`, `-Infinity`) at the next delimiter.
fn loose_value_end(bytes: &[u8], at: usize) -> Option<usize> {
    match *bytes.get(at)? {
        b'"' => string_end(bytes, at + 1),
        b'{' | b'[' => container_end(bytes, at),
        _ => {
            let rest = bytes.get(at..)?;
            let length = rest.iter().take_while(|&&b| !is_delimiter(b)).count();
            (length > 0).then_some(at + length)
        }
    }
}

/// A byte that ends a bare value (JSON's structure, a string's start, white space).
fn is_delimiter(byte: u8) -> bool {
    matches!(byte, b',' | b':' | b'{' | b'}' | b'[' | b']' | b'"' | b' ' | b'\t' | b'\n' | b'\r')
}

/// Where the object or array whose opening bracket is at `at` ends, one past its closing one.
/// Iterative: a deep value costs no stack. Each step consumes input, so it ends.
fn container_end(bytes: &[u8], mut at: usize) -> Option<usize> {
    let mut depth = 0usize;
    loop {
        match *bytes.get(at)? {
            b'"' => {
                at = string_end(bytes, at + 1)?;
                continue;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(at + 1);
                }
            }
            _ => {}
        }
        at += 1;
    }
}

#[cfg(test)]
mod tests;
