//! Whether a `2xx` answer's content type can be an answer of the endpoint asked: outlier
//! detection counts one that cannot as its pod's failure. A pod (or a broken proxy in front of
//! it) answering `200` with an HTML page, or any text no OpenAI or Anthropic client can read,
//! failed the request as surely as with a 5xx; counted a success, it cleared the pod's record,
//! and a pod that fails fast looks idle and drew the pool's traffic. Only a `POST`'s answer is
//! judged (the caller's part): vLLM's CORS middleware answers a browser's `OPTIONS` preflight
//! itself, on any path, `200` and `text/plain`.

use picker::request::Endpoint;

/// Whether `content_type` (the answer's header, `None` when it has none) is one no answer of
/// `endpoint` has. vLLM answers completions, chat, Responses and Messages with
/// `application/json` (a whole answer, an error) or `text/event-stream` (a stream), as do
/// SGLang, trtllm-serve and OpenAI itself; parameters (`; charset=utf-8`) and case do not count,
/// and a `+json` type is JSON too. Other endpoints are not judged: a transcription's
/// `response_format` text, srt or vtt answers `text/plain`, `/metrics` is text, a file is
/// anything. An answer without the header is not judged either: nothing shows it is not the
/// endpoint's, and a pod is ejected only on evidence (a proxy that drops the header from
/// true answers would otherwise eject every pod).
pub fn foreign_answer(endpoint: Endpoint, content_type: Option<&[u8]>) -> bool {
    if !endpoint.generates() {
        return false;
    }
    let Some(essence) = content_type.map(essence).filter(|essence| !essence.is_empty()) else { return false };
    let is = |name: &[u8]| essence.eq_ignore_ascii_case(name);
    let json_suffix = essence.len() > 5
        && essence.get(essence.len() - 5..).is_some_and(|suffix| suffix.eq_ignore_ascii_case(b"+json"));
    !(is(b"application/json") || is(b"text/event-stream") || json_suffix)
}

/// Whether `content_type` is `text/event-stream` (parameters and case aside): the answer of
/// an upload whose form asked to stream (vLLM answers one that did not with JSON or text).
pub fn event_stream(content_type: Option<&[u8]>) -> bool {
    content_type.map(essence).is_some_and(|essence| essence.eq_ignore_ascii_case(b"text/event-stream"))
}

/// A content type without its parameters.
fn essence(value: &[u8]) -> &[u8] {
    value.split(|&byte| byte == b';').next().unwrap_or_default().trim_ascii()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_json_or_an_event_stream_answers_an_inference_endpoint() {
        for endpoint in [Endpoint::Completions, Endpoint::ChatCompletions, Endpoint::Responses, Endpoint::Messages] {
            for answer in [
                &b"application/json"[..],
                b"text/event-stream; charset=utf-8",
                b"Application/JSON ; charset=UTF-8",
                b"application/problem+json",
            ] {
                assert!(!foreign_answer(endpoint, Some(answer)), "{endpoint:?} {}", String::from_utf8_lossy(answer));
            }
            for garbage in [&b"text/html; charset=utf-8"[..], b"text/plain", b"application/octet-stream", b"json"] {
                assert!(foreign_answer(endpoint, Some(garbage)), "{endpoint:?} {}", String::from_utf8_lossy(garbage));
            }
            assert!(!foreign_answer(endpoint, None), "no header: no evidence");
            assert!(!foreign_answer(endpoint, Some(b" ")));
        }
        // A transcription's text formats answer text/plain; other endpoints are not judged.
        assert!(!foreign_answer(Endpoint::Other, Some(b"text/plain; charset=utf-8")));
        assert!(!foreign_answer(Endpoint::Other, Some(b"text/html")));
    }

    #[test]
    fn an_event_stream_is_told_by_its_essence() {
        assert!(event_stream(Some(b"text/event-stream; charset=utf-8")));
        assert!(event_stream(Some(b" Text/Event-Stream")));
        for other in [&b"application/json"[..], b"text/plain", b"text/event-streams", b""] {
            assert!(!event_stream(Some(other)), "{}", String::from_utf8_lossy(other));
        }
        assert!(!event_stream(None));
    }
}
