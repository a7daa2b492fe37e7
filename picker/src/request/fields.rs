//! Reading a body's top-level fields by the validating scan ([`super::scan`]), to the values
//! serde's derived parse of the same struct gives, or not at all.
//!
//! Each endpoint's fast parse walks its body's members ([`read_object`]) and reads the fields
//! it knows ([`Known`]); every other value is skipped and checked. Whatever serde would read
//! differently or refuse (a field twice, a key with an escape, which serde compares unescaped,
//! a value of the wrong type) makes the walk answer `None`, and the caller parses the body with
//! serde, which then decides what is refused and why.

use std::borrow::Cow;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use super::scan::{skip_white_space, string_end, value_end};
use super::BodyError;

/// Walks the object that is the whole of `text` (white space around it allowed): `each` gets
/// every member's key and where its value starts, and answers where the value ends (use
/// [`value_at`]). `None` if `text` is not one valid JSON object or `each` answers `None`.
pub(super) fn read_object<'a>(text: &'a str, each: impl FnMut(&'a str, usize) -> Option<usize>) -> Option<()> {
    let end = for_each_member(text, 0, each)?;
    (skip_white_space(text.as_bytes(), end) == text.len()).then_some(())
}

/// A raw JSON value read as a boolean the way vLLM reads `stream` and its other flags: its
/// request models are pydantic models in lax mode, which take `true` and `false`, the numbers
/// 0 and 1 (`1.0` too), and the strings pydantic names (`"true"`, `"yes"`, `"on"`, `"1"`,
/// `"t"`, `"y"`, and their opposites, in any case). So a client sending `"stream": "true"` is
/// answered a stream, and must be read as streaming. `None` for anything else (vLLM refuses
/// it: 400).
pub(crate) fn lax_flag(raw: &str) -> Option<bool> {
    match raw {
        "true" => Some(true),
        "false" => Some(false),
        _ => lax_flag_in_another_form(raw),
    }
}

/// [`lax_flag`] past JSON's own `true` and `false`: rare, so kept out of the body scan's
/// inlined code.
#[cold]
#[inline(never)]
fn lax_flag_in_another_form(raw: &str) -> Option<bool> {
    let Some(quoted) = raw.strip_prefix('"').and_then(|rest| rest.strip_suffix('"')) else {
        // A JSON number (the parse checked it is one, or this `None` refuses it).
        let number = raw.parse::<f64>().ok()?;
        return [(0.0, false), (1.0, true)].iter().find(|(at, _)| number == *at).map(|&(_, flag)| flag);
    };
    let text: Cow<'_, str> = match quoted.contains('\\') {
        false => Cow::Borrowed(quoted),
        true => Cow::Owned(serde_json::from_str::<String>(raw).ok()?),
    };
    let is = |names: &[&str]| names.iter().any(|name| text.eq_ignore_ascii_case(name));
    if is(&["true", "t", "yes", "y", "on", "1"]) {
        Some(true)
    } else if is(&["false", "f", "no", "n", "off", "0"]) {
        Some(false)
    } else {
        None
    }
}

/// A boolean field read by serde (`deserialize_with`), as [`lax_flag`] reads it; `null` is
/// absent.
pub(crate) fn lax_flag_field<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<bool>, D::Error> {
    let Some(raw) = Option::<&'de RawValue>::deserialize(deserializer)? else { return Ok(None) };
    match lax_flag(raw.get()) {
        Some(flag) => Ok(Some(flag)),
        None => Err(D::Error::custom(format!("invalid value: {}, expected a boolean", raw.get()))),
    }
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

    /// A boolean field (`Option<bool>`), read as vLLM reads it ([`lax_flag`]).
    pub fn flag(&mut self, bit: u8, value: &str) -> Option<Option<bool>> {
        self.first(bit)?;
        match value {
            "null" => Some(None),
            _ => lax_flag(value).map(Some),
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
