//! A streamed Messages API answer, as vLLM converts its chat stream: `message_start` (with
//! `usage.input_tokens`), `content_block_start` and the first `content_block_delta` when the
//! first token comes (vLLM sends `message_start` on the chat's first chunk, after the
//! prefill), a `content_block_delta` per token, then `content_block_stop`, `message_delta`
//! (`stop_reason` and `usage`), `message_stop` and `data: [DONE]`. A failure mid-stream sends
//! one `error` event. Each event is `event: <type>` and `data: <json>` carrying the same `type`.

use bytes::Bytes;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::{stop_reason, usage_json};
use crate::api::sse::EventRenderer;
use crate::pod::{ChoiceEvent, GenerationEvent};

/// A streaming body fed by the one generation task of a Messages API request.
#[derive(Debug)]
pub struct MessagesStream {
    events: mpsc::Receiver<ChoiceEvent>,
    id: String,
    model: String,
    prompt_tokens: usize,
    max_tokens: Option<usize>,
    started: bool,
    done: bool,
}

impl MessagesStream {
    pub fn new(
        events: mpsc::Receiver<ChoiceEvent>,
        id: String,
        model: String,
        prompt_tokens: usize,
        max_tokens: Option<usize>,
    ) -> Self {
        Self { events, id, model, prompt_tokens, max_tokens, started: false, done: false }
    }

    fn push(out: &mut String, kind: &str, mut data: Value) {
        if let Some(object) = data.as_object_mut() {
            object.insert("type".to_owned(), json!(kind));
        }
        out.push_str("event: ");
        out.push_str(kind);
        out.push_str("\ndata: ");
        out.push_str(&data.to_string());
        out.push_str("\n\n");
    }

    fn render(&mut self, event: ChoiceEvent) -> Bytes {
        let mut out = String::new();
        match event.event {
            GenerationEvent::Token { text, .. } => {
                if !self.started {
                    self.started = true;
                    let usage = json!({"input_tokens": self.prompt_tokens, "output_tokens": 0});
                    let message = json!({"id": self.id, "type": "message", "role": "assistant", "content": [],
                                         "model": self.model, "stop_reason": null, "usage": usage});
                    Self::push(&mut out, "message_start", json!({"message": message, "usage": usage}));
                    let block = json!({"index": 0, "content_block": {"type": "text", "text": ""}});
                    Self::push(&mut out, "content_block_start", block);
                }
                let delta = json!({"index": 0, "delta": {"type": "text_delta", "text": text}});
                Self::push(&mut out, "content_block_delta", delta);
            }
            GenerationEvent::Finished(usage) => {
                self.done = true;
                if self.started {
                    Self::push(&mut out, "content_block_stop", json!({"index": 0}));
                }
                let delta = json!({"delta": {"stop_reason": stop_reason(&usage, self.max_tokens)},
                                   "usage": usage_json(&usage)});
                Self::push(&mut out, "message_delta", delta);
                Self::push(&mut out, "message_stop", json!({}));
                out.push_str("data: [DONE]\n\n");
            }
            GenerationEvent::Failed(error) => {
                self.done = true;
                Self::push(&mut out, "error", json!({"error": {"type": error.kind, "message": error.message}}));
                out.push_str("data: [DONE]\n\n");
            }
        }
        Bytes::from(out)
    }
}

impl EventRenderer for MessagesStream {
    fn events(&mut self) -> &mut mpsc::Receiver<ChoiceEvent> {
        &mut self.events
    }

    fn render(&mut self, event: ChoiceEvent) -> Option<Bytes> {
        Some(MessagesStream::render(self, event))
    }

    fn ended(&self) -> bool {
        self.done
    }

    fn end(&mut self) {
        self.done = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::Usage;

    #[test]
    fn the_stream_opens_with_its_first_token_and_ends_with_usage_and_done() {
        let (_sender, receiver) = mpsc::channel(1);
        let mut body = MessagesStream::new(receiver, "chatcmpl-1".into(), "m".into(), 5, Some(2));
        let mut text = String::new();
        for token in [" a", " b"] {
            let event =
                ChoiceEvent { choice: 0, event: GenerationEvent::Token { text: token.to_owned(), last: false } };
            text.push_str(&String::from_utf8_lossy(&body.render(event)));
        }
        let usage = Usage { prompt_tokens: 5, completion_tokens: 2, cached_tokens: 4 };
        text.push_str(&String::from_utf8_lossy(
            &body.render(ChoiceEvent { choice: 0, event: GenerationEvent::Finished(usage) }),
        ));
        let events: Vec<&str> = text.split("\n\n").filter(|e| !e.is_empty()).collect();
        let kinds: Vec<&str> = events.iter().map(|e| e.lines().next().unwrap_or_default()).collect();
        assert_eq!(
            kinds,
            [
                "event: message_start",
                "event: content_block_start",
                "event: content_block_delta",
                "event: content_block_delta",
                "event: content_block_stop",
                "event: message_delta",
                "event: message_stop",
                "data: [DONE]",
            ]
        );
        let delta: Value = serde_json::from_str(events[5].split_once("data: ").unwrap().1).unwrap();
        assert_eq!(delta["delta"]["stop_reason"], "max_tokens");
        assert_eq!(delta["usage"], json!({"input_tokens": 5, "output_tokens": 2}));
        assert!(body.ended());
    }
}
