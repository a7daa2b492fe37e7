//! Streams that fail after their `200`.
//!
//! vLLM sends a streamed request's `200` and headers before it generates. An error raised
//! while generating therefore arrives as an event, not a status: `data: {"error": {"message":
//! ..., "type": "InternalServerError", "param": null, "code": 500}}`, then `data: [DONE]`
//! (older builds: `{"object": "error", ...}`). A KV-cache load that failed in a P/D pool, or an
//! engine that broke, answers every stream this way. A chat stream's error comes after the
//! chunk naming the assistant's role (one per choice), which vLLM sends with the engine's
//! first output before it reads that output as an error, and a Messages stream's after its
//! `message_start`, made of that chunk ([`opening_events`]). Learning must
//! not take such a stream's first byte for a fast first token, and outlier detection must
//! count it against the pod when the error is the server's, else a pod failing every
//! generation looks healthy.

use serde_json::Value;

/// Bytes of a stream's first chunk that tell whether it opens with an error event.
pub const OPENING_BYTES: usize = 64;

/// Bytes read to judge whose error it is: vLLM's error object is ~100 bytes, but an error's
/// message can be long and comes before its `code`. Also the most of a chunk read for the
/// events before it (a chat stream's role chunks, ~200 bytes each).
pub const ERROR_EVENT_BYTES: usize = 4096;

/// A chat stream's role chunks read past at most: vLLM sends one per choice. A request of
/// more choices is read no further than this many (its error then goes unseen).
pub const MAX_ROLE_CHUNKS: u32 = 8;

/// The events at a stream's opening that may carry its generation's error: the first; in a
/// chat stream, the one after vLLM's chunks naming the assistant's role, one per choice
/// (`weight`, its `n`): it sends them with the engine's first output, before it reads that
/// output and finds it an error (serving_chat.py, `first_iteration`); in a Messages stream,
/// the one after its `message_start`, which vLLM makes of that role chunk
/// (serving_messages.py, `message_stream_converter`).
pub fn opening_events(endpoint: picker::request::Endpoint, weight: u32) -> u32 {
    match endpoint {
        picker::request::Endpoint::ChatCompletions => 1 + weight.clamp(1, MAX_ROLE_CHUNKS),
        picker::request::Endpoint::Messages => 2,
        _ => 1,
    }
}

/// How a stream's opening reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opening {
    /// No error among its opening events.
    Output,
    /// An error not known as the server's (a client's 4xx, one of no known kind, or cut short).
    Error,
    /// A server's error ([`opens_with_server_error`]): the pod's failure.
    ServerError,
}

/// What the bytes of a stream's opening read so far tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reading {
    Judged(Opening),
    /// They end where an event ends, events left to read: read on in the next chunk.
    Between,
    /// They end inside the event that starts at this offset, which is still to be judged (an
    /// error whose `data:` line is cut, or too few bytes to tell whether it is one) or to be
    /// read past (events left after it): read on with its bytes put before the next chunk's.
    Within(usize),
}

/// Reads the events at the start of `bytes`, `events` of them at most: the first that is an
/// error decides; once `events` have passed without one, `Output`. `events` counts down as
/// events pass (not for the event a `Within` reading stops in: it is read again whole).
pub fn read_opening(bytes: &[u8], events: &mut u32) -> Reading {
    let mut at = 0;
    while *events > 0 {
        let rest = bytes.get(at..).unwrap_or_default();
        if rest.is_empty() {
            return Reading::Between;
        }
        if opens_with_error(rest) {
            // Whose error it is, its `data:` line tells: judged once that line is whole.
            return match first_data_line(rest) {
                Some(_) if blames_server(rest) => Reading::Judged(Opening::ServerError),
                Some(_) => Reading::Judged(Opening::Error),
                None => Reading::Within(at),
            };
        }
        if may_open_with_error(rest) {
            return Reading::Within(at);
        }
        if *events == 1 {
            *events = 0;
            break;
        }
        let Some(end) = event_end(rest) else { return Reading::Within(at) };
        *events -= 1;
        at += end;
    }
    Reading::Judged(Opening::Output)
}

/// How an opening whose stream ended inside an event (`bytes`, from that event on) reads: an
/// error cut short is no verdict on the pod, but it is no output either.
pub fn read_cut_opening(bytes: &[u8]) -> Opening {
    if opens_with_error(bytes) {
        Opening::Error
    } else {
        Opening::Output
    }
}

/// `cut`, the start of an event that ends past it, is too short to tell whether the event
/// opens as [`opens_with_error`] reads an error (`data: {"err`): more bytes may make it one.
fn may_open_with_error(cut: &[u8]) -> bool {
    if b"event:".starts_with(cut) || b"data:".starts_with(cut) {
        return true;
    }
    if let Some(name) = cut.strip_prefix(b"event:") {
        return b"error".starts_with(name.trim_ascii_start());
    }
    let Some(data) = cut.strip_prefix(b"data:").map(<[u8]>::trim_ascii_start) else { return false };
    let Some(object) = data.strip_prefix(b"{").map(<[u8]>::trim_ascii_start) else { return data.is_empty() };
    [&b"\"error\""[..], b"\"object\":\"error\"", b"\"object\": \"error\""].iter().any(|whole| whole.starts_with(object))
}

/// Where the first event of `bytes` ends: past the blank line that closes it.
fn event_end(bytes: &[u8]) -> Option<usize> {
    let mut at = 0;
    loop {
        let next = at + bytes.get(at..)?.iter().position(|&byte| byte == b'\n')? + 1;
        match bytes.get(next..) {
            Some([b'\n', ..]) => return Some(next + 1),
            Some([b'\r', b'\n', ..]) => return Some(next + 2),
            _ => at = next,
        }
    }
}

/// The stream's first event is an error: `event: error` (Responses, Messages), or a first
/// `data:` whose object is one (vLLM's `{"error": ...}`, or `{"object": "error", ...}`).
pub fn opens_with_error(first_chunk: &[u8]) -> bool {
    let head = first_chunk.get(..256).unwrap_or(first_chunk);
    let after = |prefix: &[u8]| head.strip_prefix(prefix).map(|rest| rest.trim_ascii_start());
    if after(b"event:").is_some_and(|name| name.starts_with(b"error")) {
        return true;
    }
    let Some(data) = after(b"data:") else { return false };
    let object = data.strip_prefix(b"{").map(<[u8]>::trim_ascii_start).unwrap_or_default();
    object.starts_with(b"\"error\"")
        || object.starts_with(b"\"object\":\"error\"")
        || object.starts_with(b"\"object\": \"error\"")
}

/// The stream's first event is an error of the server's: a `code` of 500–599, or, with no
/// numeric code, a server error's type (vLLM's `InternalServerError`, OpenAI's
/// `server_error`, Anthropic's `api_error` or `overloaded_error`). Its first `data:` line is
/// parsed as JSON, so text a client got echoed into the message cannot pass for a code. A
/// client's error (a 4xx code: the request's fault, which another pod would refuse too), an
/// error of no known kind, or an event cut before its line ends is not the pod's failure.
pub fn opens_with_server_error(first_chunk: &[u8]) -> bool {
    opens_with_error(first_chunk) && blames_server(first_chunk)
}

/// Whether an error event (`event`, known to open with one) is the server's: see
/// [`opens_with_server_error`].
fn blames_server(event: &[u8]) -> bool {
    let Some(line) = first_data_line(event) else { return false };
    let Ok(event) = serde_json::from_slice::<Value>(line) else { return false };
    let error = match event.get("error") {
        Some(inner @ Value::Object(_)) => inner,
        // `{"object": "error", ...}` (older vLLM) or `{"type": "error", "code": ...}`
        // (a Responses API error event): the event is the error.
        _ => &event,
    };
    match error.get("code") {
        Some(Value::Number(code)) => code.as_u64().is_some_and(|code| (500..600).contains(&code)),
        Some(Value::String(code)) if is_server_error_kind(code) => true,
        _ => error.get("type").and_then(Value::as_str).is_some_and(is_server_error_kind),
    }
}

/// The first `data:` line's value, whole (ending in a line break), without the field name.
fn first_data_line(chunk: &[u8]) -> Option<&[u8]> {
    let mut rest = chunk;
    loop {
        let end = rest.iter().position(|&byte| byte == b'\n')?;
        let (line, next) = rest.split_at(end);
        if let Some(value) = line.strip_prefix(b"data:") {
            return Some(value.trim_ascii());
        }
        rest = next.get(1..)?;
    }
}

fn is_server_error_kind(kind: &str) -> bool {
    matches!(
        kind,
        "InternalServerError"
            | "ServiceUnavailableError"
            | "server_error"
            | "internal_error"
            | "api_error"
            | "overloaded_error"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_error_event_blames_the_pod() {
        let vllm = b"data: {\"error\": {\"message\": \"Internal server error\", \"type\": \"InternalServerError\", \"param\": null, \"code\": 500}}\n\ndata: [DONE]\n\n";
        assert!(opens_with_server_error(vllm));
        let older = b"data: {\"object\": \"error\", \"message\": \"boom\", \"type\": \"InternalServerError\", \"param\": null, \"code\": 503}\n\n";
        assert!(opens_with_server_error(older));
        let typed_only = b"data: {\"error\": {\"message\": \"boom\", \"type\": \"server_error\"}}\n\n";
        assert!(opens_with_server_error(typed_only));
        let responses =
            b"event: error\ndata: {\"type\": \"error\", \"code\": \"server_error\", \"message\": \"boom\"}\n\n";
        assert!(opens_with_server_error(responses));
        let messages = b"event: error\ndata: {\"type\": \"error\", \"error\": {\"type\": \"overloaded_error\", \"message\": \"busy\"}}\n\n";
        assert!(opens_with_server_error(messages));
    }

    #[test]
    fn a_client_error_or_a_success_does_not() {
        let client = b"data: {\"error\": {\"message\": \"bad\", \"type\": \"BadRequestError\", \"param\": null, \"code\": 400}}\n\n";
        assert!(opens_with_error(client));
        assert!(!opens_with_server_error(client), "the request's fault: another pod refuses it too");
        // A client's text echoed into the message cannot pass for the code.
        let echoed = b"data: {\"error\": {\"message\": \"bad value \\\"code\\\": 500, InternalServerError\", \"type\": \"BadRequestError\", \"code\": 400}}\n\n";
        assert!(!opens_with_server_error(echoed));
        let success = b"data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n";
        assert!(!opens_with_error(success));
        assert!(!opens_with_server_error(success));
        let unknown_kind = b"data: {\"error\": {\"message\": \"?\", \"type\": \"Error\"}}\n\n";
        assert!(!opens_with_server_error(unknown_kind));
    }

    #[test]
    fn the_opening_is_read_event_by_event_across_chunks() {
        let role = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n";
        let error = b"data: {\"error\": {\"type\": \"InternalServerError\", \"code\": 500}}\n\n";
        let token = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n";
        let judged = |opening| Reading::Judged(opening);
        let mut events = 2;
        assert_eq!(read_opening(&[&role[..], error].concat(), &mut events), judged(Opening::ServerError));
        let mut events = 2;
        assert_eq!(read_opening(role, &mut events), Reading::Between, "the next chunk is read on");
        assert_eq!((read_opening(error, &mut events), events), (judged(Opening::ServerError), 1));
        let mut events = 2;
        assert_eq!(read_opening(&[&role[..], token, error].concat(), &mut events), judged(Opening::Output));
        let mut events = 1;
        assert_eq!(read_opening(&[&role[..], error].concat(), &mut events), judged(Opening::Output), "one event read");
        let mut events = 3;
        let crlf = b"data: {}\r\n\r\ndata: {}\n\n";
        assert_eq!(read_opening(&[&crlf[..], error].concat(), &mut events), judged(Opening::ServerError));
        let mut events = 3;
        assert_eq!(read_opening(b"data: {\"choices\": [", &mut events), Reading::Within(0), "read past in the next");
        assert_eq!(events, 3, "the event it stops in is read again whole");
        assert_eq!(opening_events(picker::request::Endpoint::ChatCompletions, 1), 2);
        assert_eq!(opening_events(picker::request::Endpoint::ChatCompletions, 256), 1 + MAX_ROLE_CHUNKS);
        assert_eq!(opening_events(picker::request::Endpoint::Completions, 4), 1);
        assert_eq!(opening_events(picker::request::Endpoint::Messages, 1), 2);
    }

    #[test]
    fn an_error_event_cut_between_chunks_is_read_whole_from_its_start() {
        let role = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n";
        let error = b"data: {\"error\": {\"message\": \"boom\", \"type\": \"InternalServerError\", \"code\": 500}}\n\n";
        let whole = [&role[..], error].concat();
        for cut in role.len() + 1..whole.len() - 1 {
            let head = whole.get(..cut).unwrap();
            let mut events = 2;
            let Reading::Within(at) = read_opening(head, &mut events) else { panic!("cut at {cut}: not judged yet") };
            assert_eq!((at, events), (role.len(), 1), "cut at {cut}");
            assert_eq!(read_opening(whole.get(at..).unwrap(), &mut events), Reading::Judged(Opening::ServerError));
        }
        // Cut where it cannot be an error any more, or in an event before it: as the bytes say.
        let token = b"data: {\"id\":\"cmpl-1\",\"choices\":[{\"text\":\" a\"}]}\n\n";
        assert_eq!(read_opening(token.get(..10).unwrap(), &mut 1), Reading::Judged(Opening::Output));
        assert_eq!(read_opening(token.get(..7).unwrap(), &mut 1), Reading::Within(0), "`data: {{` may be an error");
        assert_eq!(read_opening(role.get(..40).unwrap(), &mut 2), Reading::Within(0), "the error may follow it");
        for partial in [&b"d"[..], b"data:", b"event: er", b"data: {\"obj", b"data: {\"object\": \"err"] {
            assert_eq!(read_opening(partial, &mut 1), Reading::Within(0), "{}", String::from_utf8_lossy(partial));
        }
        for other in [&b"event: message_start"[..], b"data: [DONE]", b"data: {\"object\":\"chat"] {
            assert_eq!(
                read_opening(other, &mut 1),
                Reading::Judged(Opening::Output),
                "{}",
                String::from_utf8_lossy(other)
            );
        }
        let cut_error = error.get(..30).unwrap();
        assert_eq!((read_cut_opening(cut_error), read_cut_opening(b"data: {\"id")), (Opening::Error, Opening::Output));
    }

    #[test]
    fn an_event_cut_short_or_not_json_is_not_judged() {
        let cut = b"data: {\"error\": {\"message\": \"Internal server error\", \"type\": \"InternalSe";
        assert!(!opens_with_server_error(cut), "its line has not ended: no verdict from half an object");
        let garbage = b"data: {\"error\" nonsense 500\n\n";
        assert!(!opens_with_server_error(garbage));
        assert!(!opens_with_server_error(b""));
        assert!(!opens_with_server_error(b"data:"));
        let odd_code = b"data: {\"error\": {\"code\": 5e2}}\n\n";
        assert!(!opens_with_server_error(odd_code), "a code that is not an integer is no status");
        let big = b"data: {\"error\": {\"code\": 18446744073709551616000}}\n\n";
        assert!(!opens_with_server_error(big));
    }
}
