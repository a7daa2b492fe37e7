//! Incremental parsing of an OpenAI server-sent event stream into client-side timings.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::sse_decoder::SseDecoder;
use super::{ClientError, ClientTiming};

/// Accumulates stream bytes and records when text and `[DONE]` arrived.
#[derive(Debug)]
pub struct SseReader {
    started: Instant,
    decoder: SseDecoder,
    first_text_after: Option<Duration>,
    done_after: Option<Duration>,
    text_chunks: u64,
    usage: Option<Value>,
}

impl SseReader {
    /// A reader timing from `started` (when the request was sent).
    pub fn new(started: Instant) -> Self {
        Self {
            started,
            decoder: SseDecoder::default(),
            first_text_after: None,
            done_after: None,
            text_chunks: 0,
            usage: None,
        }
    }

    /// Feeds received bytes; complete events are handled at once.
    pub fn push(&mut self, data: &[u8]) -> Result<(), ClientError> {
        for payload in self.decoder.push(data).map_err(ClientError::Protocol)? {
            self.handle_payload(&payload)?;
        }
        Ok(())
    }

    /// Whether `data: [DONE]` arrived.
    pub fn is_done(&self) -> bool {
        self.done_after.is_some()
    }

    fn handle_payload(&mut self, payload: &str) -> Result<(), ClientError> {
        for payload in payload.lines() {
            if payload == "[DONE]" {
                self.done_after = Some(self.started.elapsed());
                continue;
            }
            let chunk: Value = serde_json::from_str(payload)
                .map_err(|error| ClientError::Protocol(format!("chunk is not JSON ({error}): {payload}")))?;
            if let Some(error) = chunk.get("error") {
                return Err(ClientError::Protocol(format!("error event: {error}")));
            }
            let has_text = chunk.get("choices").and_then(Value::as_array).is_some_and(|choices| {
                choices.iter().any(|choice| {
                    let text =
                        choice.get("text").or_else(|| choice.get("delta").and_then(|delta| delta.get("content")));
                    text.and_then(Value::as_str).is_some_and(|text| !text.is_empty())
                })
            });
            if has_text {
                self.text_chunks += 1;
                self.first_text_after.get_or_insert_with(|| self.started.elapsed());
            }
            if let Some(usage) = chunk.get("usage").filter(|usage| !usage.is_null()) {
                self.usage = Some(usage.clone());
            }
        }
        Ok(())
    }

    /// The timing of a complete stream; an error if `[DONE]` or any text never came.
    pub fn finish(self, served_by: Option<String>) -> Result<ClientTiming, ClientError> {
        let e2e = self.done_after.ok_or_else(|| ClientError::Protocol("stream ended without [DONE]".to_owned()))?;
        let ttft = self.first_text_after.ok_or_else(|| ClientError::Protocol("stream carried no text".to_owned()))?;
        let usage_field = |path: &[&str]| {
            let mut value = self.usage.as_ref()?;
            for key in path {
                value = value.get(key)?;
            }
            value.as_u64()
        };
        Ok(ClientTiming {
            ttft,
            e2e,
            output_tokens: usage_field(&["completion_tokens"]).unwrap_or(self.text_chunks),
            prompt_tokens: usage_field(&["prompt_tokens"]),
            cached_tokens: usage_field(&["prompt_tokens_details", "cached_tokens"]),
            served_by,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_across_frames_are_reassembled() {
        let mut reader = SseReader::new(Instant::now());
        let stream = "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\r\n\r\n\
                      data: {\"choices\":[{\"delta\":{\"content\":\" a\"}}]}\n\n\
                      data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":1,\
                      \"prompt_tokens_details\":{\"cached_tokens\":4}}}\n\ndata: [DONE]\n\n";
        for piece in stream.as_bytes().chunks(7) {
            reader.push(piece).unwrap();
        }
        assert!(reader.is_done());
        let timing = reader.finish(Some("pod".to_owned())).unwrap();
        assert_eq!((timing.output_tokens, timing.prompt_tokens, timing.cached_tokens), (1, Some(5), Some(4)));
        assert!(timing.ttft <= timing.e2e);
    }

    #[test]
    fn errors_and_unfinished_streams_are_reported() {
        let mut reader = SseReader::new(Instant::now());
        assert!(reader.push(b"data: {\"error\":{\"message\":\"x\"}}\n\n").is_err());
        let mut reader = SseReader::new(Instant::now());
        reader.push(b"data: {\"choices\":[{\"text\":\" a\"}]}\n\n").unwrap();
        assert!(reader.finish(None).is_err(), "no [DONE]");
    }
}
