//! The streamed response body: generation events in, server-sent events out.
//!
//! Each token becomes `data: {chunk}\n\n` as soon as its generation task sends it, so the
//! client sees the pacing of the latency model. When every choice has finished, an optional
//! usage chunk and `data: [DONE]\n\n` end the stream. A failure mid-stream sends one
//! `data: {"error": ...}` event, then `data: [DONE]\n\n`, as vLLM does.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame};
use serde_json::Value;
use tokio::sync::mpsc;

use super::responses::{role_chunk, token_chunk, usage_chunk, ApiKind, ResponseMeta, RunningUsage};
use crate::pod::{ChoiceEvent, GenerationEvent, UsageTally};

/// A streaming body fed by the generation tasks of one request.
#[derive(Debug)]
pub struct SseBody {
    events: mpsc::Receiver<ChoiceEvent>,
    meta: ResponseMeta,
    usage_options: StreamUsage,
    /// Whether the role chunks were sent (chat only).
    roles_sent: bool,
    /// Per choice: tokens sent so far (for continuous usage).
    generated: Vec<usize>,
    usage: UsageTally,
    done: bool,
}

/// What a stream reports about usage (`stream_options`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamUsage {
    /// The final usage chunk (`include_usage`).
    pub include_usage: bool,
    /// `usage` on every chunk (`continuous_usage_stats`).
    pub continuous: bool,
    /// Each choice's prompt tokens, in choice order.
    pub prompt_tokens: Vec<usize>,
    /// Choices per prompt (`n`): the final usage counts each prompt once (0 reads as 1).
    pub samples: usize,
}

impl SseBody {
    /// A body for one choice per entry of `usage_options.prompt_tokens`, fed by `events`.
    pub fn new(events: mpsc::Receiver<ChoiceEvent>, meta: ResponseMeta, usage_options: StreamUsage) -> Self {
        let choices = usage_options.prompt_tokens.len();
        let usage = UsageTally::with_samples(usage_options.samples);
        Self { events, meta, usage_options, roles_sent: false, generated: vec![0; choices], usage, done: false }
    }

    /// The choice's counts so far, if continuous usage is on.
    fn running_usage(&self, choice: usize) -> Option<RunningUsage> {
        self.usage_options.continuous.then(|| RunningUsage {
            prompt_tokens: self.usage_options.prompt_tokens.get(choice).copied().unwrap_or_default(),
            completion_tokens: self.generated.get(choice).copied().unwrap_or_default(),
        })
    }

    /// Turns one event into SSE bytes; `None` when the event produces no output yet.
    fn render(&mut self, choice_event: ChoiceEvent) -> Option<Bytes> {
        let choice = choice_event.choice;
        match choice_event.event {
            GenerationEvent::Token { text, last } => {
                let mut out = String::new();
                // vLLM sends every choice's role chunk (index 0..n) with the first output of
                // any of them (serving_chat.py, `first_iteration`), before that token.
                if self.meta.kind == ApiKind::Chat && !self.roles_sent {
                    self.roles_sent = true;
                    for index in 0..self.generated.len() {
                        push_event(&mut out, &role_chunk(&self.meta, index, self.running_usage(index)));
                    }
                }
                self.usage.token(choice);
                if let Some(generated) = self.generated.get_mut(choice) {
                    *generated += 1;
                }
                let finish_reason = last.then_some("length");
                let usage = self.running_usage(choice);
                push_event(&mut out, &token_chunk(&self.meta, choice, &text, finish_reason, usage));
                Some(Bytes::from(out))
            }
            GenerationEvent::Finished(usage) => {
                self.usage.finished(choice, usage);
                if self.usage.finished_choices() < self.generated.len() {
                    return None;
                }
                self.done = true;
                let mut out = String::new();
                if self.usage_options.include_usage {
                    push_event(&mut out, &usage_chunk(&self.meta, &self.usage.streamed()));
                }
                out.push_str("data: [DONE]\n\n");
                Some(Bytes::from(out))
            }
            GenerationEvent::Failed(error) => {
                self.done = true;
                let mut out = String::new();
                // A failed generation reaches vLLM's chat stream as an engine output, so every
                // choice's role chunk goes first there too (serving_chat.py, `first_iteration`).
                if self.meta.kind == ApiKind::Chat && !self.roles_sent {
                    self.roles_sent = true;
                    for index in 0..self.generated.len() {
                        push_event(&mut out, &role_chunk(&self.meta, index, self.running_usage(index)));
                    }
                }
                push_event(&mut out, &error.to_json());
                // vLLM yields `[DONE]` after its error event too (serving_chat.py 1142-1149,
                // serving_completion.py 490-494).
                out.push_str("data: [DONE]\n\n");
                Some(Bytes::from(out))
            }
        }
    }
}

fn push_event(out: &mut String, value: &Value) {
    out.push_str("data: ");
    out.push_str(&value.to_string());
    out.push_str("\n\n");
}

impl EventRenderer for SseBody {
    fn events(&mut self) -> &mut mpsc::Receiver<ChoiceEvent> {
        &mut self.events
    }

    fn render(&mut self, event: ChoiceEvent) -> Option<Bytes> {
        SseBody::render(self, event)
    }

    fn ended(&self) -> bool {
        self.done
    }

    fn end(&mut self) {
        self.done = true;
    }
}

/// What turns one request's generation events into a streamed body's bytes: the chat and
/// completions' SSE ([`SseBody`]), the Responses and Messages APIs' typed events. One
/// [`EventBody`] polls them all.
pub trait EventRenderer: Unpin {
    fn events(&mut self) -> &mut mpsc::Receiver<ChoiceEvent>;
    /// Bytes sent before any event, once (the Responses API's opening events); none by default.
    fn opening(&mut self) -> Option<Bytes> {
        None
    }
    /// One event's bytes; `None` when it produces no output yet.
    fn render(&mut self, event: ChoiceEvent) -> Option<Bytes>;
    /// The stream has ended: its last bytes were rendered, or its tasks are gone.
    fn ended(&self) -> bool;
    fn end(&mut self);
}

/// A streamed body: the renderer's opening, then one frame per rendered event, as each event
/// comes from the generation tasks.
#[derive(Debug)]
pub struct EventBody<R>(pub R);

impl<R: EventRenderer> Body for EventBody<R> {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let renderer = &mut self.get_mut().0;
        if let Some(opening) = renderer.opening() {
            return Poll::Ready(Some(Ok(Frame::data(opening))));
        }
        // Each pass consumes one event; only an event that renders nothing (a non-final
        // choice's end) loops, so the passes are bounded by the events.
        loop {
            if renderer.ended() {
                return Poll::Ready(None);
            }
            match renderer.events().poll_recv(context) {
                Poll::Ready(Some(event)) => {
                    if let Some(bytes) = renderer.render(event) {
                        return Poll::Ready(Some(Ok(Frame::data(bytes))));
                    }
                }
                // Every task is gone without finishing (cannot happen unless one was cancelled).
                Poll::Ready(None) => {
                    renderer.end();
                    return Poll::Ready(None);
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.0.ended()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::errors::ApiError;
    use crate::pod::Usage;

    fn token(choice: usize, text: &str, last: bool) -> ChoiceEvent {
        ChoiceEvent { choice, event: GenerationEvent::Token { text: text.to_owned(), last } }
    }

    fn finished(choice: usize) -> ChoiceEvent {
        let usage = Usage { prompt_tokens: 4, completion_tokens: 1, cached_tokens: 0 };
        ChoiceEvent { choice, event: GenerationEvent::Finished(usage) }
    }

    fn no_usage(choices: usize) -> StreamUsage {
        StreamUsage { prompt_tokens: vec![4; choices], ..StreamUsage::default() }
    }

    /// `continuous_usage_stats`: every chunk carries the choice's counts so far, the role chunk
    /// with no completion tokens (serving_chat.py); completions chunks always have a `usage`
    /// key, null without it (serving_completion.py dumps with `exclude_unset=False`).
    #[test]
    fn continuous_usage_is_on_every_chunk() {
        let (_sender, receiver) = mpsc::channel(1);
        let usage = StreamUsage { include_usage: true, continuous: true, prompt_tokens: vec![4], samples: 1 };
        let mut body = SseBody::new(receiver, ResponseMeta::new(ApiKind::Chat, 1, 0, "m"), usage);
        let text = collect(&mut body, vec![token(0, " a", false), token(0, " b", true), finished(0)]);
        let chunks: Vec<Value> = text
            .split("\n\n")
            .filter_map(|event| event.strip_prefix("data: "))
            .filter(|data| *data != "[DONE]")
            .map(|data| serde_json::from_str(data).unwrap())
            .collect();
        let counts: Vec<(u64, u64)> = chunks
            .iter()
            .map(|chunk| {
                (
                    chunk["usage"]["prompt_tokens"].as_u64().unwrap(),
                    chunk["usage"]["completion_tokens"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(counts, [(4, 0), (4, 1), (4, 2), (4, 1)], "role, two tokens, then the final usage chunk");
        assert!(chunks[1]["usage"].get("prompt_tokens_details").is_none(), "chat dumps only the fields it set");

        let (_sender, receiver) = mpsc::channel(1);
        let usage = StreamUsage { include_usage: true, continuous: true, prompt_tokens: vec![4], samples: 1 };
        let mut body = SseBody::new(receiver, ResponseMeta::new(ApiKind::Completion, 1, 0, "m"), usage);
        let text = collect(&mut body, vec![token(0, " a", true), finished(0)]);
        let first: Value =
            serde_json::from_str(text.split("\n\n").next().unwrap().strip_prefix("data: ").unwrap()).unwrap();
        assert_eq!(
            first["usage"],
            serde_json::json!({"prompt_tokens": 4, "completion_tokens": 1, "total_tokens": 5, "prompt_tokens_details": null})
        );

        let (_sender, receiver) = mpsc::channel(1);
        let mut body = SseBody::new(receiver, ResponseMeta::new(ApiKind::Completion, 1, 0, "m"), no_usage(1));
        let text = collect(&mut body, vec![token(0, " a", true)]);
        assert!(text.contains("\"usage\":null"), "{text}");
    }

    fn collect(body: &mut SseBody, events: Vec<ChoiceEvent>) -> String {
        events
            .into_iter()
            .filter_map(|event| body.render(event))
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
            .collect()
    }

    #[test]
    fn chat_stream_sends_role_then_tokens_then_usage_and_done() {
        let (_sender, receiver) = mpsc::channel(1);
        let meta = ResponseMeta::new(ApiKind::Chat, 1, 0, "m");
        let usage = StreamUsage { include_usage: true, prompt_tokens: vec![4, 4], ..StreamUsage::default() };
        let mut body = SseBody::new(receiver, meta, usage);
        let text = collect(&mut body, vec![token(0, " a", true), token(1, " b", true), finished(0), finished(1)]);
        let events: Vec<&str> = text.split("\n\n").filter(|event| !event.is_empty()).collect();
        assert_eq!(events.len(), 6, "{text}");
        assert!(events[0].contains("\"role\":\"assistant\"") && events[0].contains("\"index\":0"));
        assert!(events[1].contains("\"role\":\"assistant\"") && events[1].contains("\"index\":1"), "every role first");
        assert!(events[2].contains("\"content\":\" a\""));
        assert!(events[4].contains("\"prompt_tokens\":8"), "usage sums the prompts");
        assert_eq!(events[5], "data: [DONE]");
        assert!(body.ended());
    }

    #[test]
    fn completion_stream_without_usage_and_a_failure_ends_it() {
        let (_sender, receiver) = mpsc::channel(1);
        let meta = ResponseMeta::new(ApiKind::Completion, 1, 0, "m");
        let mut body = SseBody::new(receiver, meta.clone(), no_usage(1));
        let text = collect(&mut body, vec![token(0, " a", true), finished(0)]);
        assert!(!text.contains("\"usage\":{"), "no usage chunk: {text}");
        assert!(!text.contains("role"));
        assert!(text.ends_with("data: [DONE]\n\n"));
        let (_sender, receiver) = mpsc::channel(1);
        let mut failing = SseBody::new(receiver, meta, no_usage(1));
        let failure = ChoiceEvent { choice: 0, event: GenerationEvent::Failed(ApiError::unavailable("gone")) };
        let text = collect(&mut failing, vec![failure]);
        assert!(text.starts_with("data: {\"error\""));
        assert!(text.ends_with("}\n\ndata: [DONE]\n\n"), "the error event, then [DONE], as vLLM: {text}");
    }

    #[test]
    fn a_chat_stream_s_failure_follows_its_role_chunks() {
        let (_sender, receiver) = mpsc::channel(1);
        let meta = ResponseMeta::new(ApiKind::Chat, 2, 0, "m");
        let mut failing = SseBody::new(receiver, meta, no_usage(2));
        let failure = ChoiceEvent { choice: 0, event: GenerationEvent::Failed(ApiError::unavailable("gone")) };
        let text = collect(&mut failing, vec![failure]);
        let events: Vec<&str> = text.split("\n\n").filter(|event| !event.is_empty()).collect();
        assert_eq!(events.len(), 4, "{text}");
        assert!(events[0].contains("\"role\":\"assistant\"") && events[1].contains("\"index\":1"), "{text}");
        assert!(events[2].starts_with("data: {\"error\"") && events[3] == "data: [DONE]", "{text}");
    }
}
