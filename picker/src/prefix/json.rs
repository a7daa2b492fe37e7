//! Walking raw JSON without building a tree.
//!
//! The request body was parsed once, into borrowed raw values (see [`crate::request`]); these
//! helpers read inside them with no allocation per element, and stop as soon as hashing is done,
//! so the tail of a long prompt is never read twice.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};

use super::hash::ShapeError;

/// The text between the quotes of a raw JSON string, escapes as written.
pub(super) fn string_contents(raw: &str) -> Option<&str> {
    raw.strip_prefix('"')?.strip_suffix('"')
}

/// Where `inner`, a slice borrowed from `outer`, lies in it. serde_json hands out raw values as
/// slices of its input, and this is the only way to splice around one without copying.
pub(super) fn span_of(outer: &str, inner: &str) -> Option<(usize, usize)> {
    let start = (inner.as_ptr() as usize).checked_sub(outer.as_ptr() as usize)?;
    let end = start.checked_add(inner.len())?;
    (end <= outer.len()).then_some((start, end))
}

/// Calls `each` on the elements of the JSON array `array`, in order, without collecting them.
/// `each` returns `Ok(false)` to stop early. Errors: `array` is not an array of `T`, or `each`'s.
pub(super) fn for_each_element<'de, T, F>(array: &'de str, each: F) -> Result<(), ShapeError>
where
    T: Deserialize<'de>,
    F: FnMut(T) -> Result<bool, ShapeError>,
{
    let mut walk = ElementWalk { each, stopped: None, element: PhantomData };
    let mut deserializer = serde_json::Deserializer::from_str(array);
    let parsed = (&mut deserializer).deserialize_seq(&mut walk);
    match (walk.stopped, parsed) {
        (Some(outcome), _) => outcome,
        (None, Ok(())) => Ok(()),
        (None, Err(_)) => Err(ShapeError("a list holds elements of the wrong type")),
    }
}

/// The serde visitor behind [`for_each_element`]. An early stop leaves elements unread, which
/// serde_json reports as an error; `stopped` tells that apart from a real one.
struct ElementWalk<T, F> {
    each: F,
    stopped: Option<Result<(), ShapeError>>,
    element: PhantomData<fn() -> T>,
}

impl<'de, T, F> Visitor<'de> for &mut ElementWalk<T, F>
where
    T: Deserialize<'de>,
    F: FnMut(T) -> Result<bool, ShapeError>,
{
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(element) = seq.next_element::<T>()? {
            match (self.each)(element) {
                Ok(true) => {}
                Ok(false) => {
                    self.stopped = Some(Ok(()));
                    break;
                }
                Err(error) => {
                    self.stopped = Some(Err(error));
                    break;
                }
            }
        }
        Ok(())
    }
}

/// Calls `each` on the ids of a JSON list of token ids, `[1, 2, 3]`, until it returns false.
/// Scanned by hand: ids are all of a token prompt, and this costs a few ns per id where a serde
/// element costs ~30. Anything but unsigned integers that fit a `u32` is an error (up to where
/// `each` stopped: the rest is not read). Returns whether `each` wanted more.
pub(super) fn for_each_token_id(list: &str, mut each: impl FnMut(u32) -> bool) -> Result<bool, ShapeError> {
    const NOT_IDS: ShapeError = ShapeError("prompt token ids are not all u32 integers");
    let inside = list.trim_ascii().strip_prefix('[').and_then(|l| l.strip_suffix(']')).ok_or(NOT_IDS)?;
    let mut rest = inside.as_bytes().trim_ascii();
    // Each turn reads one id and the comma after it, so it consumes input until none is left.
    while !rest.is_empty() {
        let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        let (number, after) = rest.split_at_checked(digits).ok_or(NOT_IDS)?;
        // At most 10 digits cannot overflow a u64, so the loop needs no check per digit.
        if !(1..=10).contains(&number.len()) {
            return Err(NOT_IDS);
        }
        let value = number.iter().fold(0u64, |value, digit| value * 10 + u64::from(digit - b'0'));
        let id = u32::try_from(value).map_err(|_| NOT_IDS)?;
        if !each(id) {
            return Ok(false);
        }
        rest = match after.trim_ascii_start().split_first() {
            None => &[],
            Some((b',', next)) if !next.trim_ascii().is_empty() => next.trim_ascii_start(),
            Some(_) => return Err(NOT_IDS),
        };
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::value::RawValue;

    fn ids(list: &str, limit: usize) -> Result<Vec<u32>, ShapeError> {
        let mut seen = Vec::new();
        for_each_token_id(list, |id| {
            seen.push(id);
            seen.len() < limit
        })
        .map(|_| seen)
    }

    #[test]
    fn scans_token_ids_and_refuses_anything_else() {
        assert_eq!(ids(" [ 1 ,2,\n 4294967295 ] ", 100), Ok(vec![1, 2, u32::MAX]));
        assert_eq!(ids("[]", 100), Ok(vec![]));
        assert_eq!(ids("[1, 2, 3, 4]", 2), Ok(vec![1, 2]), "stops when told, unread rest and all");
        for bad in ["[4294967296]", "[1,]", "[1 2]", "[-1]", "[1.0]", "[1e3]", "[\"1\"]", "1", "[", "[99999999999]"] {
            assert!(ids(bad, 100).is_err(), "{bad}");
        }
    }

    #[test]
    fn walks_elements_borrowed_and_stops_early() {
        let mut seen = Vec::new();
        let list = r#"[{"a": 1}, "x", [2]]"#;
        for_each_element(list, |element: &RawValue| {
            seen.push(element.get());
            Ok(seen.len() < 2)
        })
        .unwrap();
        assert_eq!(seen, vec![r#"{"a": 1}"#, r#""x""#]);
        let (outer, inner) = (list, seen[1]);
        assert_eq!(span_of(outer, inner), Some((11, 14)));
        assert_eq!(span_of(inner, outer), None);
        assert!(for_each_element(r#"{"a": 1}"#, |_: &RawValue| Ok(true)).is_err());
        assert_eq!(string_contents(r#""a\"b""#), Some(r#"a\"b"#));
    }
}
