//! What an OpenAI streaming response says, chunk by chunk: when the first content token came,
//! how many tokens arrived, the text (a chat needs it for its next turn), and how it ended.
//!
//! TTFT is the first chunk with non-empty content (`choices[0].text` for completions,
//! `choices[0].delta.content` for chat); a chat's role-only chunk does not count. Inter-token
//! latency is the gap between consecutive content chunks as the client receives them (the
//! simulator and vLLM send one token per chunk; chunks read together give a zero gap).

use std::time::{Duration, Instant};

use serde_json::Value;

/// A reply's text is kept up to this many bytes (chat replies here are a few hundred bytes).
const MAX_REPLY_TEXT_BYTES: usize = 1 << 20;
/// Gaps kept per stream: outputs here are at most a few hundred tokens; longer ones keep the first.
const MAX_GAPS_PER_STREAM: usize = 1 << 14;

/// A streamed request that completed.
#[derive(Debug, Clone)]
pub struct Success {
    /// When the request was sent (per-stage figures place it by this).
    pub started: Instant,
    pub ttft: Duration,
    pub e2e: Duration,
    pub output_tokens: u64,
    /// The `x-served-by` response header: the pod that answered.
    pub served_by: Option<String>,
    pub text: String,
    /// Gaps between consecutive content chunks, milliseconds.
    pub token_gaps_ms: Vec<f64>,
    /// wasm-epp's decision header, when the run turned it on (`debug_decision_header`).
    pub decision: Option<String>,
    /// Prompt tokens the pod found cached (`usage.prompt_tokens_details.cached_tokens`), when
    /// it said: tells a cold prefill from a queue wait in `decisions.txt`.
    pub cached_tokens: Option<u64>,
    /// The prompt's tokens as the pod counted them (`usage.prompt_tokens`), when it said.
    pub prompt_tokens: Option<u64>,
    /// A hash of the prompt's first bytes (completions only), set by the driver: names the
    /// shared prefix a request used in `decisions.txt`.
    pub prompt_key: Option<u64>,
}

#[derive(Debug)]
pub struct StreamProgress {
    started: Instant,
    first_token: Option<Duration>,
    last_content_at: Option<Instant>,
    token_gaps_ms: Vec<f64>,
    content_chunks: u64,
    usage_tokens: Option<u64>,
    cached_tokens: Option<u64>,
    prompt_tokens: Option<u64>,
    text: String,
    done: bool,
}

impl StreamProgress {
    pub fn new(started: Instant) -> Self {
        Self {
            started,
            first_token: None,
            last_content_at: None,
            token_gaps_ms: Vec::new(),
            content_chunks: 0,
            usage_tokens: None,
            cached_tokens: None,
            prompt_tokens: None,
            text: String::new(),
            done: false,
        }
    }

    /// Applies one `data:` payload received at `now`.
    pub fn apply(&mut self, payload: &str, now: Instant) -> Result<(), String> {
        if payload.trim() == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        let chunk: Value = serde_json::from_str(payload).map_err(|e| format!("chunk is not JSON: {e}"))?;
        if let Some(error) = chunk.get("error") {
            return Err(format!("error event: {error}"));
        }
        if let Some(kind) = chunk.get("type").and_then(Value::as_str) {
            return self.apply_responses_event(kind, &chunk, now);
        }
        let choice = chunk.get("choices").and_then(|choices| choices.get(0));
        let content = choice.and_then(|c| c.get("text").or_else(|| c.get("delta").and_then(|d| d.get("content"))));
        if let Some(text) = content.and_then(Value::as_str) {
            self.content(text, now);
        }
        let usage = chunk.get("usage");
        if let Some(tokens) = usage.and_then(|u| u.get("completion_tokens")).and_then(Value::as_u64) {
            self.usage_tokens = Some(tokens);
        }
        if let Some(tokens) = usage.and_then(|u| u.get("prompt_tokens")).and_then(Value::as_u64) {
            self.prompt_tokens = Some(tokens);
        }
        let details = usage.and_then(|u| u.get("prompt_tokens_details"));
        if let Some(cached) = details.and_then(|d| d.get("cached_tokens")).and_then(Value::as_u64) {
            self.cached_tokens = Some(cached);
        }
        Ok(())
    }

    /// A content token's text received at `now` (empty text is no token).
    fn content(&mut self, text: &str, now: Instant) {
        if text.is_empty() {
            return;
        }
        if self.first_token.is_none() {
            self.first_token = Some(now.saturating_duration_since(self.started));
        }
        if let Some(previous) = self.last_content_at {
            if self.token_gaps_ms.len() < MAX_GAPS_PER_STREAM {
                self.token_gaps_ms.push(now.saturating_duration_since(previous).as_secs_f64() * 1000.0);
            }
        }
        self.last_content_at = Some(now);
        self.content_chunks += 1;
        if self.text.len() + text.len() <= MAX_REPLY_TEXT_BYTES {
            self.text.push_str(text);
        }
    }

    /// One Responses API event: a token is `response.output_text.delta` (the stream's opening
    /// events come before any token and do not count), and `response.completed` ends the stream
    /// with `usage` (`input_tokens`, `input_tokens_details.cached_tokens`, `output_tokens`);
    /// or one Messages API event (below).
    fn apply_responses_event(&mut self, kind: &str, event: &Value, now: Instant) -> Result<(), String> {
        match kind {
            "response.output_text.delta" => {
                self.content(event.get("delta").and_then(Value::as_str).unwrap_or_default(), now);
            }
            "response.completed" => {
                let usage = event.get("response").and_then(|r| r.get("usage"));
                let field = |name: &str| usage.and_then(|u| u.get(name)).and_then(Value::as_u64);
                self.usage_tokens = field("output_tokens");
                self.prompt_tokens = field("input_tokens");
                let details = usage.and_then(|u| u.get("input_tokens_details"));
                self.cached_tokens = details.and_then(|d| d.get("cached_tokens")).and_then(Value::as_u64);
                self.done = true;
            }
            "response.failed" | "response.incomplete" => return Err(format!("{kind} event: {event}")),
            // The Messages API: a token is a `content_block_delta`'s text; `message_delta`
            // carries `usage` (no cached tokens from vLLM); `message_stop`, then `[DONE]`.
            "content_block_delta" => {
                let delta = event.get("delta");
                self.content(delta.and_then(|d| d.get("text")).and_then(Value::as_str).unwrap_or_default(), now);
            }
            "message_delta" => {
                let usage = event.get("usage");
                let field = |name: &str| usage.and_then(|u| u.get(name)).and_then(Value::as_u64);
                self.usage_tokens = field("output_tokens").or(self.usage_tokens);
                self.prompt_tokens = field("input_tokens").or(self.prompt_tokens);
            }
            "message_stop" => self.done = true,
            _ => {}
        }
        Ok(())
    }

    /// The result once the body ended at `now`.
    pub fn finish(self, now: Instant, served_by: Option<String>) -> Result<Success, String> {
        if !self.done {
            return Err("stream ended without [DONE] (or response.completed)".to_string());
        }
        let ttft = self.first_token.ok_or_else(|| "stream had no content token".to_string())?;
        Ok(Success {
            started: self.started,
            ttft,
            e2e: now.saturating_duration_since(self.started),
            output_tokens: self.usage_tokens.unwrap_or(self.content_chunks),
            served_by,
            text: self.text,
            token_gaps_ms: self.token_gaps_ms,
            decision: None,
            cached_tokens: self.cached_tokens,
            prompt_tokens: self.prompt_tokens,
            prompt_key: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_stream_times_the_first_content_not_the_role_chunk() {
        let started = Instant::now();
        let mut progress = StreamProgress::new(started);
        let later = |ms| started + Duration::from_millis(ms);
        progress.apply(r#"{"choices":[{"delta":{"role":"assistant"}}]}"#, later(5)).unwrap();
        progress.apply(r#"{"choices":[{"delta":{"content":" the"}}]}"#, later(40)).unwrap();
        progress.apply(r#"{"choices":[{"delta":{"content":" of"}}]}"#, later(60)).unwrap();
        let usage = r#"{"choices":[],"usage":{"completion_tokens":2,"prompt_tokens":40,"prompt_tokens_details":{"cached_tokens":16}}}"#;
        progress.apply(usage, later(61)).unwrap();
        progress.apply("[DONE]", later(62)).unwrap();
        let success = progress.finish(later(63), Some("127.0.0.1:1".into())).unwrap();
        assert_eq!(success.ttft, Duration::from_millis(40));
        assert_eq!(success.e2e, Duration::from_millis(63));
        assert_eq!(success.output_tokens, 2);
        assert_eq!(success.cached_tokens, Some(16));
        assert_eq!(success.prompt_tokens, Some(40));
        assert_eq!(success.text, " the of");
        assert_eq!(success.token_gaps_ms, vec![20.0], "one gap between the two content chunks");
    }

    #[test]
    fn a_responses_stream_times_its_first_delta_and_ends_at_completed() {
        let started = Instant::now();
        let mut progress = StreamProgress::new(started);
        let later = |ms| started + Duration::from_millis(ms);
        progress.apply(r#"{"type":"response.created","response":{"status":"in_progress"}}"#, later(1)).unwrap();
        progress.apply(r#"{"type":"response.output_item.added","item":{}}"#, later(30)).unwrap();
        progress.apply(r#"{"type":"response.output_text.delta","delta":" a"}"#, later(31)).unwrap();
        progress.apply(r#"{"type":"response.output_text.delta","delta":" b"}"#, later(45)).unwrap();
        let completed = r#"{"type":"response.completed","response":{"usage":{"input_tokens":90,
            "input_tokens_details":{"cached_tokens":64},"output_tokens":2}}}"#;
        progress.apply(completed, later(46)).unwrap();
        let success = progress.finish(later(47), None).unwrap();
        assert_eq!((success.ttft, success.text.as_str()), (Duration::from_millis(31), " a b"));
        assert_eq!((success.cached_tokens, success.prompt_tokens, success.output_tokens), (Some(64), Some(90), 2));
        assert_eq!(success.token_gaps_ms, vec![14.0]);
        let mut failed = StreamProgress::new(started);
        assert!(failed.apply(r#"{"type":"response.failed","response":{}}"#, started).is_err());
    }

    #[test]
    fn completion_chunks_count_without_usage() {
        let started = Instant::now();
        let mut progress = StreamProgress::new(started);
        for _ in 0..3 {
            progress.apply(r#"{"choices":[{"text":" a"}]}"#, started).unwrap();
        }
        progress.apply("[DONE]", started).unwrap();
        assert_eq!(progress.finish(started, None).unwrap().output_tokens, 3);
    }

    #[test]
    fn errors_truncation_and_garbage_fail() {
        let started = Instant::now();
        let mut progress = StreamProgress::new(started);
        assert!(progress.apply(r#"{"error":{"message":"gone"}}"#, started).is_err());
        assert!(progress.apply("not json", started).is_err());
        let mut truncated = StreamProgress::new(started);
        truncated.apply(r#"{"choices":[{"text":" a"}]}"#, started).unwrap();
        assert!(truncated.finish(started, None).is_err());
    }

    #[test]
    fn a_messages_stream_times_its_first_text_delta_and_ends_at_message_stop() {
        let started = Instant::now();
        let later = |ms| started + Duration::from_millis(ms);
        let mut progress = StreamProgress::new(started);
        progress
            .apply(r#"{"type":"message_start","message":{"content":[]},"usage":{"input_tokens":9}}"#, later(40))
            .unwrap();
        progress
            .apply(r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#, later(40))
            .unwrap();
        progress
            .apply(r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" a"}}"#, later(41))
            .unwrap();
        progress
            .apply(r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" b"}}"#, later(55))
            .unwrap();
        let usage = r#"{"type":"message_delta","delta":{"stop_reason":"max_tokens"},"usage":{"input_tokens":9,"output_tokens":2}}"#;
        progress.apply(usage, later(56)).unwrap();
        progress.apply(r#"{"type":"message_stop"}"#, later(56)).unwrap();
        progress.apply("[DONE]", later(56)).unwrap();
        let success = progress.finish(later(57), None).unwrap();
        assert_eq!(
            (success.ttft, success.output_tokens, success.text.as_str()),
            (Duration::from_millis(41), 2, " a b")
        );
    }
}
