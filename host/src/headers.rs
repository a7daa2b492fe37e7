//! Header maps as bytes, and the ABI's serialized map format.
//!
//! Header names and values are bytes: HTTP allows obs-text (0x80-0xFF) in values, and a
//! value that is not UTF-8 must never reach a `String` conversion that can fail loudly.
//! The serialized form is `count: u32`, then `count` pairs of `(name_len: u32, value_len:
//! u32)`, then each name and value followed by a NUL byte, all little-endian.

/// Most header pairs kept from one map; Envoy's own default limit is 100 headers, so a map
/// claiming more than this is malformed.
pub const MAX_HEADER_PAIRS: usize = 8192;

/// A request's or response's headers, as the host gave them (names lower-case in Envoy).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct HeaderMap {
    pairs: Vec<(Vec<u8>, Vec<u8>)>,
}

impl HeaderMap {
    pub fn new(pairs: Vec<(Vec<u8>, Vec<u8>)>) -> Self {
        Self { pairs }
    }

    /// Builds a map from text pairs (tests, mocks).
    pub fn from_pairs(pairs: &[(&str, &str)]) -> Self {
        Self { pairs: pairs.iter().map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec())).collect() }
    }

    /// Parses the ABI's serialized form; `None` if it is malformed (never panics).
    pub fn parse(bytes: &[u8]) -> Option<Self> {
        let count = usize::try_from(read_u32(bytes, 0)?).ok()?;
        if count > MAX_HEADER_PAIRS {
            return None;
        }
        let mut pairs = Vec::with_capacity(count);
        let mut data = 4usize.checked_add(count.checked_mul(8)?)?;
        for index in 0..count {
            let sizes = 4 + index * 8;
            let name_len = usize::try_from(read_u32(bytes, sizes)?).ok()?;
            let value_len = usize::try_from(read_u32(bytes, sizes + 4)?).ok()?;
            let name = bytes.get(data..data.checked_add(name_len)?)?;
            data = data.checked_add(name_len)?.checked_add(1)?;
            let value = bytes.get(data..data.checked_add(value_len)?)?;
            data = data.checked_add(value_len)?.checked_add(1)?;
            pairs.push((name.to_vec(), value.to_vec()));
        }
        Some(Self { pairs })
    }

    /// The first value of `name` (exact, lower-case match, as Envoy stores names).
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.pairs.iter().find(|(key, _)| key.as_slice() == name.as_bytes()).map(|(_, value)| value.as_slice())
    }

    /// The first value of `name` if it is UTF-8 (after trimming spaces), else `None`.
    pub fn get_text(&self, name: &str) -> Option<&str> {
        self.get(name).and_then(|value| std::str::from_utf8(value).ok()).map(str::trim)
    }

    pub fn contains(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.pairs.iter().map(|(name, value)| (name.as_slice(), value.as_slice()))
    }

    pub fn len(&self) -> usize {
        self.pairs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }
}

fn read_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let slice: [u8; 4] = bytes.get(at..at.checked_add(4)?)?.try_into().ok()?;
    Some(u32::from_le_bytes(slice))
}

/// Serializes text pairs into the ABI's map form (local reply headers, call headers).
pub fn serialize(pairs: &[(&str, &str)]) -> Vec<u8> {
    let size = 4 + pairs.iter().map(|(n, v)| n.len() + v.len() + 10).sum::<usize>();
    let mut bytes = Vec::with_capacity(size);
    bytes.extend_from_slice(&u32::try_from(pairs.len()).unwrap_or(u32::MAX).to_le_bytes());
    for (name, value) in pairs {
        bytes.extend_from_slice(&u32::try_from(name.len()).unwrap_or(u32::MAX).to_le_bytes());
        bytes.extend_from_slice(&u32::try_from(value.len()).unwrap_or(u32::MAX).to_le_bytes());
    }
    for (name, value) in pairs {
        bytes.extend_from_slice(name.as_bytes());
        bytes.push(0);
        bytes.extend_from_slice(value.as_bytes());
        bytes.push(0);
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_keeps_non_utf8_bytes() {
        let mut bytes = serialize(&[(":path", "/v1/completions"), ("x-a", "b")]);
        let parsed = HeaderMap::parse(&bytes).unwrap();
        assert_eq!(parsed.get(":path"), Some(&b"/v1/completions"[..]));
        assert_eq!(parsed.get_text("x-a"), Some("b"));
        // Replace "b" by 0xE9 (Latin-1 é): still parsed, not text.
        let last = bytes.len() - 2;
        bytes[last] = 0xE9;
        let parsed = HeaderMap::parse(&bytes).unwrap();
        assert_eq!(parsed.get("x-a"), Some(&[0xE9][..]));
        assert_eq!(parsed.get_text("x-a"), None);
    }

    #[test]
    fn malformed_maps_are_refused_not_panicked_on() {
        let good = serialize(&[("name", "value"), ("other", "x")]);
        // The final NUL is not needed to read the last value; any shorter cut is refused.
        for cut in 0..good.len() - 1 {
            assert!(HeaderMap::parse(&good[..cut]).is_none(), "truncated at {cut}");
        }
        let mut huge_count = good.clone();
        huge_count[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(HeaderMap::parse(&huge_count).is_none());
        let mut huge_len = good;
        huge_len[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(HeaderMap::parse(&huge_len).is_none());
    }
}
