//! A validating JSON scanner for the request path: finds where a value ends, checking every
//! byte of it against JSON's grammar, without building anything.
//!
//! serde_json validates as it skips too, but it stops at every escape of a string and
//! re-enters its scan; chat text (code, quotes, line breaks) has an escape every few dozen
//! bytes, and that re-entry was most of a long chat body's parse. Here a string is scanned
//! 16 bytes a step for its quote, a backslash or a control character, and an escape is
//! checked in place.
//!
//! It answers "valid, ends here" or `None`; the caller then hands the body to serde_json,
//! which decides what is refused and why. So what it accepts must be exactly what serde_json
//! accepts as a raw value (RFC 8259 JSON, nested to any depth) over text already known to be
//! UTF-8.

const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);

/// The high bit of each byte of `word` that is `"`, `\` or below 0x20. The lowest set bit is
/// exactly the first such byte (a borrow only runs upward from a byte that matched).
#[inline(always)]
fn string_stops(word: u64) -> u64 {
    let quote = word ^ (ONES * u64::from(b'"'));
    let backslash = word ^ (ONES * u64::from(b'\\'));
    let control = word.wrapping_sub(ONES * 0x20) & !word;
    let quote = quote.wrapping_sub(ONES) & !quote;
    let backslash = backslash.wrapping_sub(ONES) & !backslash;
    (control | quote | backslash) & HIGHS
}

/// Where the string whose contents start at `at` (just past its opening quote) ends: one
/// past its closing quote. `None` if a control character, a bad escape or the end comes first.
pub(super) fn string_end(bytes: &[u8], mut at: usize) -> Option<usize> {
    loop {
        let rest = bytes.get(at..)?;
        let mut steps = rest.chunks_exact(16);
        // Two words a step: most strings' stops are dozens of bytes apart.
        let found = steps.by_ref().enumerate().find_map(|(step, chunk)| {
            let (low, high) = chunk.split_at(8);
            let low = string_stops(u64::from_le_bytes(low.try_into().ok()?));
            let high = string_stops(u64::from_le_bytes(high.try_into().ok()?));
            let offset = if low != 0 {
                low.trailing_zeros() / 8
            } else if high != 0 {
                8 + high.trailing_zeros() / 8
            } else {
                return None;
            };
            Some(step * 16 + offset as usize)
        });
        let stop = match found {
            Some(offset) => at + offset,
            None => {
                let tail = steps.remainder();
                at + (rest.len() - tail.len()) + tail_stop(tail)?
            }
        };
        match *bytes.get(stop)? {
            b'"' => return Some(stop + 1),
            b'\\' => at = escape_end(bytes, stop + 1)?,
            _ => return None,
        }
    }
}

/// The first stop among the last (fewer than 16) bytes, if any.
fn tail_stop(rest: &[u8]) -> Option<usize> {
    rest.iter().position(|&b| b == b'"' || b == b'\\' || b < 0x20)
}

/// Where the escape whose letter is at `at` (just past its backslash) ends.
fn escape_end(bytes: &[u8], at: usize) -> Option<usize> {
    match *bytes.get(at)? {
        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => Some(at + 1),
        b'u' => {
            let hex = bytes.get(at + 1..at + 5)?;
            hex.iter().all(u8::is_ascii_hexdigit).then_some(at + 5)
        }
        _ => None,
    }
}

/// JSON's white space from `at` on: where the next other byte (or the end) is.
#[inline]
pub(super) fn skip_white_space(bytes: &[u8], mut at: usize) -> usize {
    while bytes.get(at).is_some_and(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r')) {
        at += 1;
    }
    at
}

/// Where the number starting at `at` ends, if it is one: `-? (0 | [1-9][0-9]*) (. [0-9]+)?
/// ([eE] [+-]? [0-9]+)?`.
fn number_end(bytes: &[u8], mut at: usize) -> Option<usize> {
    let digits =
        |at: usize| at + bytes.get(at..).map_or(0, |rest| rest.iter().take_while(|b| b.is_ascii_digit()).count());
    if bytes.get(at) == Some(&b'-') {
        at += 1;
    }
    match bytes.get(at)? {
        b'0' => at += 1,
        b'1'..=b'9' => at = digits(at),
        _ => return None,
    }
    if bytes.get(at) == Some(&b'.') {
        let end = digits(at + 1);
        (end > at + 1).then_some(())?;
        at = end;
    }
    if matches!(bytes.get(at), Some(b'e' | b'E')) {
        at += 1;
        if matches!(bytes.get(at), Some(b'+' | b'-')) {
            at += 1;
        }
        let end = digits(at);
        (end > at).then_some(())?;
        at = end;
    }
    Some(at)
}

/// Where `literal` (`true`, `false`, `null`) starting at `at` ends, if it is there.
fn literal_end(bytes: &[u8], at: usize, literal: &[u8]) -> Option<usize> {
    let end = at.checked_add(literal.len())?;
    (bytes.get(at..end)? == literal).then_some(end)
}

/// Where an object's member starting at `at` (its key's opening quote) has its value: past
/// the key, the colon and the white space around it.
fn member_value(bytes: &[u8], at: usize) -> Option<usize> {
    (bytes.get(at) == Some(&b'"')).then_some(())?;
    let key_end = string_end(bytes, at + 1)?;
    let colon = skip_white_space(bytes, key_end);
    (bytes.get(colon) == Some(&b':')).then_some(())?;
    Some(skip_white_space(bytes, colon + 1))
}

/// The containers open around the scan: whether each is an object or an array, 128 levels in
/// a word and deeper ones spilled to the heap (only a body nested that deep allocates).
struct Open {
    /// Bit k: the k-th innermost of the word's levels is an object (1) or an array (0).
    objects: u128,
    depth: usize,
    spilled: Vec<u128>,
}

impl Open {
    const LEVELS: usize = 128;

    fn push(&mut self, is_object: bool) {
        if self.depth > 0 && self.depth.is_multiple_of(Self::LEVELS) {
            self.spilled.push(self.objects);
            self.objects = 0;
        }
        self.objects = (self.objects << 1) | u128::from(is_object);
        self.depth += 1;
    }

    fn pop(&mut self) {
        self.objects >>= 1;
        self.depth -= 1;
        if self.depth > 0 && self.depth.is_multiple_of(Self::LEVELS) {
            self.objects = self.spilled.pop().unwrap_or_default();
        }
    }

    fn in_object(&self) -> bool {
        self.objects & 1 == 1
    }
}

/// Where the value starting at `at` (its first byte: no white space before it) ends, one past
/// its last byte, if all of it is valid JSON. Iterative: a deep value costs no stack.
pub(super) fn value_end(bytes: &[u8], mut at: usize) -> Option<usize> {
    let mut open = Open { objects: 0, depth: 0, spilled: Vec::new() };
    loop {
        // A value starts at `at`.
        match *bytes.get(at)? {
            b'"' => at = string_end(bytes, at + 1)?,
            start @ (b'{' | b'[') => {
                let inside = skip_white_space(bytes, at + 1);
                let is_object = start == b'{';
                if bytes.get(inside) == Some(if is_object { &b'}' } else { &b']' }) {
                    at = inside + 1;
                } else {
                    open.push(is_object);
                    at = if is_object { member_value(bytes, inside)? } else { inside };
                    continue;
                }
            }
            b't' => at = literal_end(bytes, at, b"true")?,
            b'f' => at = literal_end(bytes, at, b"false")?,
            b'n' => at = literal_end(bytes, at, b"null")?,
            b'-' | b'0'..=b'9' => at = number_end(bytes, at)?,
            _ => return None,
        }
        // A value ended at `at`: close what it closes, then find where the next one starts.
        loop {
            if open.depth == 0 {
                return Some(at);
            }
            at = skip_white_space(bytes, at);
            match (*bytes.get(at)?, open.in_object()) {
                (b',', true) => {
                    at = member_value(bytes, skip_white_space(bytes, at + 1))?;
                    break;
                }
                (b',', false) => {
                    at = skip_white_space(bytes, at + 1);
                    break;
                }
                (b'}', true) | (b']', false) => {
                    at += 1;
                    open.pop();
                }
                _ => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests;
