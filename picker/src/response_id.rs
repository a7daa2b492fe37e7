//! The id of a Responses API answer (`"id": "resp_..."`), read from its first bytes: a whole
//! answer is the `response` object, whose `id` vLLM writes first; a stream's first event,
//! `response.created`, carries the same object. The id names the pod that stored the response,
//! where a later request with `previous_response_id` must go.

/// Longest id taken: vLLM's are `resp_` and 32 hex digits; anything far longer is not one.
pub const MAX_ID_BYTES: usize = 128;

/// Shared-data slots bridging the prefix ring's delay ([`crate::keys::RESPONSE_ID_PREFIX`]):
/// one entry each, the latest answer whose id falls in the slot. An entry is needed only
/// until the ring has carried the session to every worker (a sync interval or two), so a
/// slot overwritten later costs nothing; two answers per slot within that time would.
pub const SLOTS: u64 = 256;

/// The shared-data key of the slot of session `key`.
pub fn slot_key(key: u64) -> String {
    format!("{}{}", crate::keys::RESPONSE_ID_PREFIX, key % SLOTS)
}

/// A slot's value: `key` (8 bytes LE), `epoch` (4 bytes LE), then the pod's address.
pub fn encode_slot(key: u64, epoch: u32, pod: &str) -> Vec<u8> {
    let mut value = Vec::with_capacity(12 + pod.len());
    value.extend_from_slice(&key.to_le_bytes());
    value.extend_from_slice(&epoch.to_le_bytes());
    value.extend_from_slice(pod.as_bytes());
    value
}

/// The pod and epoch a slot holds for `key`; `None` when it holds another key or is garbled.
pub fn decode_slot(value: &[u8], key: u64) -> Option<(&str, u32)> {
    let stored = u64::from_le_bytes(value.get(..8)?.try_into().ok()?);
    let epoch = u32::from_le_bytes(value.get(8..12)?.try_into().ok()?);
    let pod = std::str::from_utf8(value.get(12..)?).ok().filter(|pod| !pod.is_empty())?;
    (stored == key).then_some((pod, epoch))
}

/// The response a path names: `/v1/responses/{id}` (retrieval, which a background request is
/// polled with) and its sub-paths (`/cancel`, `/input_items`), the query aside. Only ids as
/// noted from answers ([`find_response_id`]): `resp…`, at most [`MAX_ID_BYTES`].
pub fn id_in_path(path: &str) -> Option<&str> {
    let path = path.split('?').next().unwrap_or(path);
    let rest = path.strip_prefix("/v1/responses/")?;
    let id = rest.split('/').next().unwrap_or(rest);
    (id.starts_with("resp") && id.len() <= MAX_ID_BYTES).then_some(id)
}

/// The first `"id"` key in `head` whose value is a plain string starting with `resp`.
/// Escapes, a cut-off value or an id past [`MAX_ID_BYTES`] give `None`: no session is noted.
pub fn find_response_id(head: &[u8]) -> Option<&[u8]> {
    const KEY: &[u8] = b"\"id\"";
    let mut from = 0;
    while let Some(found) = head.get(from..)?.windows(KEY.len()).position(|w| w == KEY) {
        let after_key = from + found + KEY.len();
        if let Some(id) = string_value_at(head, after_key) {
            if id.starts_with(b"resp") {
                return Some(id);
            }
        }
        from = after_key;
    }
    None
}

/// After a key: white space, `:`, white space, then a string without escapes; its contents.
fn string_value_at(bytes: &[u8], at: usize) -> Option<&[u8]> {
    let rest = bytes.get(at..)?;
    let rest = rest.get(rest.iter().position(|b| !b.is_ascii_whitespace())?..)?;
    let rest = rest.strip_prefix(b":")?;
    let rest = rest.get(rest.iter().position(|b| !b.is_ascii_whitespace())?..)?;
    let rest = rest.strip_prefix(b"\"")?;
    let end = rest.iter().take(MAX_ID_BYTES + 1).position(|&b| b == b'"' || b == b'\\')?;
    match rest.get(end) {
        Some(b'"') if end > 0 => rest.get(..end),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_id_of_a_whole_answer_and_of_a_streams_first_event() {
        let whole = br#"{"id":"resp_0123abcd","object":"response","output":[{"id":"msg_1"}]}"#;
        assert_eq!(find_response_id(whole), Some(&b"resp_0123abcd"[..]));
        let stream = b"event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\": \"resp_9\",\"status\":\"in_progress\"}}\n\n";
        assert_eq!(find_response_id(stream), Some(&b"resp_9"[..]));
        let later = br#"{"item":{"id":"msg_2"},"response":{"id":"resp_x"}}"#;
        assert_eq!(find_response_id(later), Some(&b"resp_x"[..]), "a message id is skipped");
    }

    #[test]
    fn a_slot_gives_back_its_own_key_only() {
        let value = encode_slot(0x1234, 7, "10.0.0.1:8000");
        assert_eq!(decode_slot(&value, 0x1234), Some(("10.0.0.1:8000", 7)));
        assert_eq!(decode_slot(&value, 0x1234 + SLOTS), None, "another key of the same slot");
        assert_eq!(slot_key(3), slot_key(3 + SLOTS));
        for garbled in [&b""[..], &value[..11], &value[..12], b"\xff\xff\xff\xff\xff\xff\xff\xff\0\0\0\0\xfe"] {
            assert_eq!(decode_slot(garbled, 0x1234), None);
        }
    }

    #[test]
    fn odd_or_cut_off_bytes_give_no_id() {
        for head in [
            &b""[..],
            b"{\"id\":\"resp_cut",
            b"{\"id\":\"res\\u0070_1\"}",
            b"{\"id\":7}",
            b"{\"id\":\"\"}",
            b"{\"error\":{\"message\":\"The model does not exist.\"}}",
            b"\"id\"",
            b"\xff\xfe\"id\":\"resp",
        ] {
            assert_eq!(find_response_id(head), None, "{}", String::from_utf8_lossy(head));
        }
        let long = format!("{{\"id\":\"resp_{}\"}}", "a".repeat(MAX_ID_BYTES));
        assert_eq!(find_response_id(long.as_bytes()), None);
    }

    #[test]
    fn a_path_names_the_stored_response_it_retrieves_or_cancels() {
        assert_eq!(id_in_path("/v1/responses/resp_1a2b"), Some("resp_1a2b"));
        assert_eq!(id_in_path("/v1/responses/resp_1a2b/cancel"), Some("resp_1a2b"));
        assert_eq!(id_in_path("/v1/responses/resp_1a2b?stream=true&starting_after=3"), Some("resp_1a2b"));
        assert_eq!(id_in_path("/v1/responses/resp_9/input_items?limit=5"), Some("resp_9"));
        for other in
            ["/v1/responses", "/v1/responses/", "/v1/responses/compact", "/v1/responses/input_tokens", "/x/resp_1"]
        {
            assert_eq!(id_in_path(other), None, "{other}");
        }
        let long = format!("/v1/responses/resp_{}", "a".repeat(MAX_ID_BYTES));
        assert_eq!(id_in_path(&long), None);
    }
}
