//! Reading a body's top-level fields by the validating scan ([`super::scan`]), to the values
//! serde's derived parse of the same struct gives, or not at all.
//!
//! Each endpoint's fast parse walks its body's members ([`read_object`]) and reads the fields
//! it knows ([`Known`]); every other value is skipped and checked. Whatever serde would read
//! differently or refuse (a field twice, a key with an escape, which serde compares unescaped,
//! a value of the wrong type) makes the walk answer `None`, and the caller parses the body with
//! serde, which then decides what is refused and why.

use std::borrow::Cow;

use serde::Deserialize;

use super::scan::{skip_white_space, string_end, value_end};
use super::BodyError;

/// Walks the object that is the whole of `text` (white space around it allowed): `each` gets
/// every member's key and where its value starts, and answers where the value ends (use
/// [`value_at`]). `None` if `text` is not one valid JSON object or `each` answers `None`.
pub(super) fn read_object<'a>(text: &'a str, each: impl FnMut(&'a str, usize) -> Option<usize>) -> Option<()> {
    let end = for_each_member(text, 0, each)?;
    (skip_white_space(text.as_bytes(), end) == text.len()).then_some(())
}

/// `body` read by `scan` when it is UTF-8 and the scan is sure of it, else by serde.
pub(super) fn scanned_or_serde<'a, B: Deserialize<'a>>(
    body: &'a [u8],
    scan: impl FnOnce(&'a str) -> Option<B>,
) -> Result<B, BodyError> {
    match std::str::from_utf8(body).ok().and_then(scan) {
        Some(read) => Ok(read),
        None => by_serde(body),
    }
}

/// `body` read by serde alone, its error kept as the refusal's text.
pub(super) fn by_serde<'a, B: Deserialize<'a>>(body: &'a [u8]) -> Result<B, BodyError> {
    serde_json::from_slice(body).map_err(|e| BodyError::Invalid(e.to_string()))
}

/// The value starting at `start` in `text`, checked, and where it ends.
pub(super) fn value_at(text: &str, start: usize) -> Option<(&str, usize)> {
    let end = value_end(text.as_bytes(), start)?;
    Some((text.get(start..end)?, end))
}

/// Calls `each` on every member of the object starting at `at` (after white space) with its
/// key and where its value starts; `each` answers where the value ends. Returns where the
/// object ends (one past its `}`). `None` if the object is not valid JSON, a key has an
/// escape, or `each` answers `None`.
pub(super) fn for_each_member<'a>(
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

/// The known fields met so far, each named by a bit of the endpoint's choosing. Every read
/// answers `None` where serde's would fail (the field given twice, a value of the wrong
/// type), else the field as serde's `Option` holds it: `null` reads as absent.
#[derive(Default)]
pub(super) struct Known(u16);

impl Known {
    fn first(&mut self, bit: u8) -> Option<()> {
        let mask = 1u16.checked_shl(u32::from(bit))?;
        (self.0 & mask == 0).then_some(())?;
        self.0 |= mask;
        Some(())
    }

    /// A string field (`Option<Cow<str>>`, borrowed): borrowed when it has no escape, else
    /// unescaped by serde (which also refuses a lone surrogate).
    pub fn text<'a>(&mut self, bit: u8, value: &'a str) -> Option<Option<Cow<'a, str>>> {
        self.first(bit)?;
        if value == "null" {
            return Some(None);
        }
        let contents = value.strip_prefix('"')?.strip_suffix('"')?;
        if !contents.contains('\\') {
            return Some(Some(Cow::Borrowed(contents)));
        }
        serde_json::from_str::<String>(value).ok().map(|text| Some(Cow::Owned(text)))
    }

    /// A boolean field (`Option<bool>`).
    pub fn flag(&mut self, bit: u8, value: &str) -> Option<Option<bool>> {
        self.first(bit)?;
        match value {
            "null" => Some(None),
            "true" => Some(Some(true)),
            "false" => Some(Some(false)),
            _ => None,
        }
    }

    /// A raw field (`Option<&str>` read by `raw_text`): the value as written.
    pub fn raw<'a>(&mut self, bit: u8, value: &'a str) -> Option<Option<&'a str>> {
        self.first(bit)?;
        Some((value != "null").then_some(value))
    }
}

#[cfg(test)]
mod tests;
