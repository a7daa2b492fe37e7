//! Walking raw JSON without building a tree.
//!
//! The request body was parsed once, into borrowed raw values (see [`crate::request`]); these
//! helpers read inside them with no allocation per element, and stop as soon as hashing is done,
//! so the tail of a long prompt is never read twice.

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

/// The object `object` around its member whose value is `value` (a slice of it, as serde hands
/// out): the text before the member and after it, its comma taken with it, so that the two
/// read as the object written without that member (`{"a":1,"b":2}` without `b` is `{"a":1` and
/// `}`; without `a`, `{` and `"b":2}`). `None` when `value` is not found as a member's.
pub(super) fn around_member<'a>(object: &'a str, value: &str) -> Option<(&'a str, &'a str)> {
    let (value_start, value_end) = span_of(object, value)?;
    let before = object.get(..value_start)?.trim_end_matches(|c: char| c.is_ascii_whitespace());
    let before = before.strip_suffix(':')?.trim_end_matches(|c: char| c.is_ascii_whitespace());
    let before = before.strip_suffix('"')?;
    // The key holds no quote (serde matched it to a field name): back to its opening quote.
    let key_start = before.rfind('"')?;
    let head = object.get(..key_start)?.trim_end_matches(|c: char| c.is_ascii_whitespace());
    let tail = object.get(value_end..)?;
    if let Some(head) = head.strip_suffix(',') {
        return Some((head, tail));
    }
    // The first member: its following comma (and the white space after it) goes instead.
    let after = tail.trim_start_matches(|c: char| c.is_ascii_whitespace());
    let tail = after.strip_prefix(',').map_or(tail, |rest| rest.trim_start_matches(|c: char| c.is_ascii_whitespace()));
    Some((object.get(..key_start)?, tail))
}

/// One element of a JSON array, as [`for_each_element`] hands it over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Element<'a> {
    /// The element's raw text: from its first byte to its last, no white space around, as
    /// serde_json's `RawValue` for it holds.
    pub text: &'a str,
    /// A `[` appears anywhere in `text` (`text.contains('[')`), found by the same scan.
    pub has_bracket: bool,
}

const NOT_A_LIST: ShapeError = ShapeError("a list holds elements of the wrong type");

/// Calls `each` on the elements of the JSON array `array`, in order, without collecting them.
/// `each` returns `Ok(false)` to stop early; the rest of the array is not read. Errors: `array`
/// is not an array, or `each`'s.
///
/// `array` is a raw value's text, which the body parse has already checked is valid JSON, so
/// this only finds where each element ends: strings are skipped 8 bytes a step for their
/// closing quote (escapes jump 2 bytes), nesting is counted outside them. That reads a
/// chat request's messages once more at a fraction of what a second serde walk cost (a 6 KB
/// message: ~0.5 µs against ~2.5 µs natively). Given text that is not valid JSON it stays
/// bounded and never panics: each step consumes input, and it ends in an error or in elements
/// serde would have refused.
pub(super) fn for_each_element<'a, F>(array: &'a str, mut each: F) -> Result<(), ShapeError>
where
    F: FnMut(Element<'a>) -> Result<bool, ShapeError>,
{
    let bytes = array.as_bytes();
    let mut at = skip_white_space(bytes, 0);
    if bytes.get(at) != Some(&b'[') {
        return Err(NOT_A_LIST);
    }
    at = skip_white_space(bytes, at + 1);
    if bytes.get(at) == Some(&b']') {
        return Ok(());
    }
    // Each turn consumes one element and the separator after it, so it ends.
    loop {
        let (end, has_bracket) = value_end(bytes, at).ok_or(NOT_A_LIST)?;
        let text = array.get(at..end).ok_or(NOT_A_LIST)?;
        if !each(Element { text, has_bracket })? {
            return Ok(());
        }
        at = skip_white_space(bytes, end);
        match bytes.get(at) {
            Some(b',') => at = skip_white_space(bytes, at + 1),
            Some(b']') => return Ok(()),
            _ => return Err(NOT_A_LIST),
        }
    }
}

/// The raw value of the member named `name` (compared as written, escapes and all) of the JSON
/// object `object`, its first if several; `None` if it has none, or the object is cut short or
/// not one. Members before it are skipped by the same scan as [`for_each_element`]'s, and
/// nothing after it is read.
pub(super) fn member_value<'a>(object: &'a str, name: &str) -> Option<&'a str> {
    let bytes = object.as_bytes();
    let mut at = skip_white_space(bytes, 0);
    (bytes.get(at) == Some(&b'{')).then_some(())?;
    at = skip_white_space(bytes, at + 1);
    // Each turn consumes one member and the separator after it, so it ends.
    loop {
        (bytes.get(at) == Some(&b'"')).then_some(())?;
        let (key_end, _) = string_end(bytes, at + 1)?;
        let key = object.get(at + 1..key_end.checked_sub(1)?)?;
        at = skip_white_space(bytes, key_end);
        (bytes.get(at) == Some(&b':')).then_some(())?;
        at = skip_white_space(bytes, at + 1);
        let (end, _) = value_end(bytes, at)?;
        if key == name {
            return object.get(at..end);
        }
        at = skip_white_space(bytes, end);
        (bytes.get(at) == Some(&b',')).then_some(())?;
        at = skip_white_space(bytes, at + 1);
    }
}

/// JSON's white space: space, tab, line feed, carriage return.
fn skip_white_space(bytes: &[u8], mut at: usize) -> usize {
    while bytes.get(at).is_some_and(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r')) {
        at += 1;
    }
    at
}

/// Where the value starting at `start` ends (one past its last byte), and whether a `[`
/// appears in it; `None` if the input ends first.
fn value_end(bytes: &[u8], start: usize) -> Option<(usize, bool)> {
    let mut has_bracket = false;
    let mut at = start;
    let mut depth = 0usize;
    // Each turn consumes at least one byte, or returns.
    loop {
        let byte = *bytes.get(at)?;
        match byte {
            b'"' => {
                let (end, bracket) = string_end(bytes, at + 1)?;
                has_bracket |= bracket;
                at = end;
            }
            b'[' | b'{' => {
                has_bracket |= byte == b'[';
                depth += 1;
                at += 1;
            }
            b']' | b'}' if depth > 0 => {
                depth -= 1;
                at += 1;
            }
            // A number, `true`, `false` or `null` ends before a separator, the list's end or
            // white space.
            b']' | b'}' | b',' | b' ' | b'\t' | b'\n' | b'\r' if depth == 0 => return Some((at, has_bracket)),
            _ => at += 1,
        }
        if depth == 0 && matches!(byte, b'"' | b']' | b'}') {
            return Some((at, has_bracket));
        }
    }
}

/// Bytes of a `u64` each set to 1.
const ONES: u64 = u64::from_le_bytes([1; 8]);

/// The high bit of the first byte of `word` equal to `byte` is set (and maybe some above it,
/// never below): the classic zero-byte test on `word ^ byte…`.
fn bytes_equal(word: u64, byte: u8) -> u64 {
    let x = word ^ (ONES * u64::from(byte));
    x.wrapping_sub(ONES) & !x & (ONES << 7)
}

/// The 8 bytes at `at`, little-endian (the first byte lowest), if there are 8.
fn word_at(bytes: &[u8], at: usize) -> Option<u64> {
    bytes.get(at..at.checked_add(8)?)?.try_into().ok().map(u64::from_le_bytes)
}

/// Marks the bytes of `word` that stop a string scan: quote, backslash, bracket (the first
/// marked byte is one; see [`bytes_equal`]).
fn string_specials(word: u64) -> u64 {
    bytes_equal(word, b'"') | bytes_equal(word, b'\\') | bytes_equal(word, b'[')
}

/// From just after a string's opening quote: one past its closing quote, and whether a `[`
/// is in it. Sixteen bytes a step until a quote, backslash or bracket; an escape skips the byte
/// after its backslash (a `\uXXXX`'s hex digits are never one of those three).
fn string_end(bytes: &[u8], mut at: usize) -> Option<(usize, bool)> {
    let mut has_bracket = false;
    // Each turn consumes at least one byte.
    loop {
        // Two words a step: one test and branch per 16 bytes.
        while let (Some(low), Some(high)) = (word_at(bytes, at), word_at(bytes, at + 8)) {
            let (low, high) = (string_specials(low), string_specials(high));
            if low | high != 0 {
                at += if low != 0 { low.trailing_zeros() / 8 } else { 8 + high.trailing_zeros() / 8 } as usize;
                break;
            }
            at += 16;
        }
        match *bytes.get(at)? {
            b'"' => return Some((at + 1, has_bracket)),
            b'\\' => at += 2,
            b'[' => {
                has_bracket = true;
                at += 1;
            }
            _ => at += 1,
        }
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
        for_each_element(list, |element| {
            seen.push(element.text);
            Ok(seen.len() < 2)
        })
        .unwrap();
        assert_eq!(seen, vec![r#"{"a": 1}"#, r#""x""#]);
        let (outer, inner) = (list, seen[1]);
        assert_eq!(span_of(outer, inner), Some((11, 14)));
        assert_eq!(span_of(inner, outer), None);
        assert!(for_each_element(r#"{"a": 1}"#, |_| Ok(true)).is_err());
        assert_eq!(string_contents(r#""a\"b""#), Some(r#"a\"b"#));
    }

    /// The elements as serde_json cuts them (what hashing walked before the byte scan), with
    /// whether each holds a `[`.
    fn serde_elements(array: &str) -> Vec<(&str, bool)> {
        let elements: Vec<&RawValue> = serde_json::from_str(array).unwrap();
        elements.into_iter().map(|e| (e.get(), e.get().contains('['))).collect()
    }

    fn scanned_elements(array: &str) -> Result<Vec<(&str, bool)>, ShapeError> {
        let mut seen = Vec::new();
        for_each_element(array, |e| {
            seen.push((e.text, e.has_bracket));
            Ok(true)
        })
        .map(|()| seen)
    }

    #[test]
    fn cuts_valid_json_exactly_where_serde_does() {
        let long_escaped = format!("\"{}\"", "ab\\\"c\\\\d\\n[é] \\u005b\\u0022 ".repeat(40));
        let arrays = [
            "[]".to_owned(),
            " [ ] ".to_owned(),
            "[1]".to_owned(),
            "[1,2.5e-3,-7,true,false,null]".to_owned(),
            " [ 1 , \"a\" ,\t{ } , [ ] ]\n".to_owned(),
            r#"[{"role":"user","content":"hi [1] \"x\" \\"},{"content":[{"type":"text","text":"]}"}]}]"#.to_owned(),
            r#"["\\", "\\\"", "\"\\", "", "}", "{", "]"]"#.to_owned(),
            format!("[{long_escaped},{{\"k\":{long_escaped}}},[[[{long_escaped}]]]]"),
            format!(
                "[{}]",
                (0..300)
                    .map(|i| format!(r#"{{"i":{i},"s":"{}"}}"#, "x".repeat(i % 17)))
                    .collect::<Vec<_>>()
                    .join(" ,\n ")
            ),
            "[\"日本語\", {\"é\": [\"ü\"]}]".to_owned(),
        ];
        for array in &arrays {
            assert_eq!(scanned_elements(array).as_deref(), Ok(&serde_elements(array)[..]), "{array}");
        }
    }

    #[test]
    fn finds_a_member_wherever_it_is_and_only_at_the_top() {
        let object = r#" { "content" : "a \"role\": [x]", "inner": {"role": "user"}, "role" :"assistant" , "n": 1} "#;
        assert_eq!(member_value(object, "role"), Some(r#""assistant""#));
        assert_eq!(member_value(object, "n"), Some("1"));
        assert_eq!(member_value(object, "inner"), Some(r#"{"role": "user"}"#));
        assert_eq!(member_value(object, "missing"), None);
        assert_eq!(member_value(r#"{"role":"user","role":"assistant"}"#, "role"), Some(r#""user""#), "the first");
        for broken in ["", "[]", "{", r#"{"a":1,"#, r#"{"a" 1}"#, r#"{"a":}"#, r#"{a:1}"#, r#"{"a":"x"#] {
            assert_eq!(member_value(broken, "role"), None, "{broken}");
        }
    }

    #[test]
    fn stays_bounded_on_text_that_is_not_json() {
        // Never reached from a RawValue (always valid), but no input may panic or loop.
        for text in ["", "[", "[\"", "[\"a\\", "[{", "[1,", "[1 2]", "[}]", "[]]", "x", "[\"a\"x]", "[[1]"] {
            let _ = scanned_elements(text);
        }
        assert!(scanned_elements("[1 2]").is_err());
        assert!(scanned_elements("{}").is_err());
    }

    #[test]
    fn a_member_is_cut_out_with_its_comma() {
        let cut = |object: &'static str, value: &str| {
            let at = object.find(value).unwrap();
            around_member(object, &object[at..at + value.len()]).map(|(a, b)| format!("{a}{b}"))
        };
        let marked = r#"{"type":"text","text":"hi","cache_control":{"type":"ephemeral"}}"#;
        assert_eq!(cut(marked, r#"{"type":"ephemeral"}"#).as_deref(), Some(r#"{"type":"text","text":"hi"}"#));
        let spaced = r#"{"type": "text", "cache_control": {"type": "ephemeral"}, "text": "hi"}"#;
        assert_eq!(cut(spaced, r#"{"type": "ephemeral"}"#).as_deref(), Some(r#"{"type": "text", "text": "hi"}"#));
        let first = r#"{"cache_control":{"type":"ephemeral"},"type":"text"}"#;
        assert_eq!(cut(first, r#"{"type":"ephemeral"}"#).as_deref(), Some(r#"{"type":"text"}"#));
        let only = r#"{ "cache_control" : {} }"#;
        assert_eq!(cut(only, "{}").as_deref(), Some("{  }"));
        assert_eq!(around_member(marked, "elsewhere"), None, "not a slice of the object");
    }
}
