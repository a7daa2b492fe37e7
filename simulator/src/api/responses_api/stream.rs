//! A streamed Responses API answer: generation events in, the Responses API's typed events out.
//!
//! `response.created` and `response.in_progress` go out at once, before any token (as vLLM
//! sends them, so a client's first byte is not its first token); the first token opens the
//! message item (`response.output_item.added`, `response.content_part.added`), every token is a
//! `response.output_text.delta`, and the end closes the part and the item and sends
//! `response.completed` with `usage` (as vLLM does, also when the final status is
//! `incomplete`). Each event is
//! `event: <type>` and `data: <json>` carrying the same `type` and a `sequence_number`; no
//! `[DONE]` follows. A failure mid-stream sends one `error` event and ends the stream.

use bytes::Bytes;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::shapes::{message_item, output_text, response_object, ResponsesMeta};
use crate::api::sse::EventRenderer;
use crate::pod::{ChoiceEvent, GenerationEvent, Usage};

/// Called with the answer's whole text and its usage when the stream completes (to store the
/// response).
pub type OnComplete = Box<dyn FnOnce(&str, &Usage) + Send>;

/// A streaming body fed by the one generation task of a Responses API request.
pub struct ResponsesStream {
    events: mpsc::Receiver<ChoiceEvent>,
    meta: ResponsesMeta,
    text: String,
    sequence: u64,
    started: bool,
    opened_item: bool,
    done: bool,
    on_complete: Option<OnComplete>,
}

impl std::fmt::Debug for ResponsesStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponsesStream").field("meta", &self.meta).field("sequence", &self.sequence).finish()
    }
}

impl ResponsesStream {
    pub fn new(events: mpsc::Receiver<ChoiceEvent>, meta: ResponsesMeta, on_complete: Option<OnComplete>) -> Self {
        Self {
            events,
            meta,
            text: String::new(),
            sequence: 0,
            started: false,
            opened_item: false,
            done: false,
            on_complete,
        }
    }

    fn push(&mut self, out: &mut String, kind: &str, mut data: Value) {
        if let Some(object) = data.as_object_mut() {
            object.insert("type".to_owned(), json!(kind));
            object.insert("sequence_number".to_owned(), json!(self.sequence));
        }
        self.sequence += 1;
        out.push_str("event: ");
        out.push_str(kind);
        out.push_str("\ndata: ");
        out.push_str(&data.to_string());
        out.push_str("\n\n");
    }

    /// `response.created` and `response.in_progress`, before any token.
    fn preamble(&mut self) -> Bytes {
        self.started = true;
        let mut out = String::new();
        let response = response_object(&self.meta, "in_progress", json!([]), None);
        self.push(&mut out, "response.created", json!({ "response": response }));
        self.push(&mut out, "response.in_progress", json!({ "response": response }));
        Bytes::from(out)
    }

    fn render(&mut self, event: ChoiceEvent) -> Bytes {
        let mut out = String::new();
        let item = json!({"item_id": self.meta.message_id, "output_index": 0, "content_index": 0});
        let with = |mut base: Value, extra: Value| {
            if let (Some(base), Some(extra)) = (base.as_object_mut(), extra.as_object()) {
                base.extend(extra.clone());
            }
            base
        };
        match event.event {
            GenerationEvent::Token { text, .. } => {
                if !self.opened_item {
                    self.opened_item = true;
                    let added = message_item(&self.meta, "", "in_progress");
                    self.push(&mut out, "response.output_item.added", json!({"output_index": 0, "item": added}));
                    self.push(
                        &mut out,
                        "response.content_part.added",
                        with(item.clone(), json!({"part": output_text("")})),
                    );
                }
                self.text.push_str(&text);
                self.push(&mut out, "response.output_text.delta", with(item, json!({"delta": text, "logprobs": []})));
            }
            GenerationEvent::Finished(usage) => {
                self.done = true;
                let text = self.text.clone();
                if let Some(store) = self.on_complete.take() {
                    store(&text, &usage);
                }
                self.push(
                    &mut out,
                    "response.output_text.done",
                    with(item.clone(), json!({"text": text, "logprobs": []})),
                );
                self.push(&mut out, "response.content_part.done", with(item, json!({"part": output_text(&text)})));
                let finished = message_item(&self.meta, &text, "completed");
                self.push(&mut out, "response.output_item.done", json!({"output_index": 0, "item": finished}));
                let status = self.meta.final_status();
                let response = response_object(&self.meta, status, json!([finished]), Some(&usage));
                // vLLM ends every stream with `response.completed`, whatever the final status.
                self.push(&mut out, "response.completed", json!({ "response": response }));
            }
            GenerationEvent::Failed(error) => {
                self.done = true;
                let error = json!({"code": error.kind, "message": error.message, "param": error.param});
                self.push(&mut out, "error", error);
            }
        }
        Bytes::from(out)
    }
}

impl EventRenderer for ResponsesStream {
    fn events(&mut self) -> &mut mpsc::Receiver<ChoiceEvent> {
        &mut self.events
    }

    fn opening(&mut self) -> Option<Bytes> {
        (!self.started).then(|| self.preamble())
    }

    fn render(&mut self, event: ChoiceEvent) -> Option<Bytes> {
        Some(ResponsesStream::render(self, event))
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

    fn events_of(text: &str) -> Vec<(String, Value)> {
        text.split("\n\n")
            .filter(|event| !event.is_empty())
            .map(|event| {
                let (kind, data) = event.split_once("\ndata: ").unwrap();
                (kind.trim_start_matches("event: ").to_owned(), serde_json::from_str(data).unwrap())
            })
            .collect()
    }

    #[test]
    fn a_stream_opens_before_the_first_token_and_ends_with_usage() {
        let (_sender, receiver) = mpsc::channel(1);
        let mut meta = ResponsesMeta::new(7, 1, 0, "m");
        meta.max_output_tokens = Some(2);
        let mut body = ResponsesStream::new(receiver, meta, None);
        let mut text = String::from_utf8(body.preamble().to_vec()).unwrap();
        for token in [" a", " b"] {
            let event =
                ChoiceEvent { choice: 0, event: GenerationEvent::Token { text: token.to_owned(), last: false } };
            text.push_str(&String::from_utf8_lossy(&body.render(event)));
        }
        let usage = Usage { prompt_tokens: 5, completion_tokens: 2, cached_tokens: 4 };
        text.push_str(&String::from_utf8_lossy(
            &body.render(ChoiceEvent { choice: 0, event: GenerationEvent::Finished(usage) }),
        ));
        let events = events_of(&text);
        let kinds: Vec<&str> = events.iter().map(|(kind, _)| kind.as_str()).collect();
        assert_eq!(
            kinds,
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.completed",
            ]
        );
        for (index, (kind, data)) in events.iter().enumerate() {
            assert_eq!(
                (data["type"].as_str(), data["sequence_number"].as_u64()),
                (Some(kind.as_str()), Some(index as u64))
            );
        }
        let last = &events[9].1["response"];
        assert_eq!(last["status"], "incomplete", "cut by max_output_tokens");
        assert_eq!(last["output"][0]["content"][0]["text"], " a b");
        assert_eq!(last["usage"]["input_tokens_details"]["cached_tokens"], 4);
        assert!(body.ended());
    }
}
