//! One request's life as a tokio task: forward the tokens the engine steps sample to the
//! client, each `api_overhead_ms` after its step ended, so clients measure TTFT and inter-token
//! gaps as they would on vLLM.
//!
//! Delivery uses the step's planned end (`sleep_until`), so timer granularity does not
//! accumulate into drift. If the client goes away (its channel closes), the request is aborted
//! and its seat and blocks are freed, as vLLM aborts on disconnect.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::mpsc;

use super::steps::EngineEvent;
use super::{Pod, Ticket};
use crate::api::errors::ApiError;
use crate::tokenizer::output_word;

/// Token counts of one choice, for `usage`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Generated tokens.
    pub completion_tokens: usize,
    /// Prompt tokens served from the prefix cache.
    pub cached_tokens: usize,
}

impl Usage {
    /// Adds another choice's counts (batched prompts report the sum).
    pub fn add(&mut self, other: Usage) {
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
        self.cached_tokens += other.cached_tokens;
    }
}

/// What a generation task tells the HTTP side.
#[derive(Debug, Clone, PartialEq)]
pub enum GenerationEvent {
    /// One generated token's text; `last` marks the token that ends the choice.
    Token {
        /// Text of the token (a space and a word).
        text: String,
        /// Whether this is the final token (`finish_reason` goes with it).
        last: bool,
    },
    /// The choice is complete.
    Finished(Usage),
    /// The choice failed after the response started.
    Failed(ApiError),
}

/// A [`GenerationEvent`] of one choice.
#[derive(Debug, Clone, PartialEq)]
pub struct ChoiceEvent {
    /// Index of the choice (prompt) in the request.
    pub choice: usize,
    /// What happened.
    pub event: GenerationEvent,
}

/// Everything a generation task needs.
#[derive(Debug)]
pub struct GenerationJob {
    /// Choice index in the response.
    pub choice: usize,
    /// The ticket from [`Pod::submit_request`].
    pub ticket: Ticket,
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Tokens to generate.
    pub max_tokens: usize,
    /// Seeds the generated words (a hash of the prompt).
    pub stream_seed: u64,
}

/// Runs one choice to completion, sending events to `events`.
pub async fn run_generation(pod: Arc<Pod>, job: GenerationJob, events: mpsc::Sender<ChoiceEvent>) {
    let GenerationJob { choice, ticket, prompt_tokens, max_tokens, stream_seed } = job;
    let Ticket { id, events: mut engine_events, delivery_delay } = ticket;
    let send = |event: GenerationEvent| events.send(ChoiceEvent { choice, event });
    let mut cached_tokens = 0;
    // The engine sends one admission and `max_tokens` tokens, then closes: the loop is bounded.
    loop {
        let event = tokio::select! {
            event = engine_events.recv() => event,
            () = events.closed() => return pod.abort_request(id),
        };
        match event {
            None => return report_restart(&events, choice).await,
            Some(EngineEvent::Admitted { cached_tokens: cached }) => cached_tokens = cached,
            Some(EngineEvent::Token { index, last, at }) => {
                if !sleep_until_or_closed(at + delivery_delay, &events).await {
                    return pod.abort_request(id);
                }
                let text = format!(" {}", output_word(stream_seed, index as u64));
                if send(GenerationEvent::Token { text, last }).await.is_err() {
                    return pod.abort_request(id);
                }
                if last {
                    break;
                }
            }
        }
    }
    let usage = Usage { prompt_tokens, completion_tokens: max_tokens, cached_tokens };
    // If the client left after the last token, there is nobody to tell.
    let _ = send(GenerationEvent::Finished(usage)).await;
}

/// Tells the client its pod restarted under it (vLLM would have dropped the connection).
async fn report_restart(events: &mpsc::Sender<ChoiceEvent>, choice: usize) {
    let error = ApiError::unavailable("The pod restarted while serving the request.");
    // Nobody to tell if the client already left.
    let _ = events.send(ChoiceEvent { choice, event: GenerationEvent::Failed(error) }).await;
}

/// Sleeps until `deadline` unless the client goes away first; `false` if it went away.
async fn sleep_until_or_closed(deadline: Instant, events: &mpsc::Sender<ChoiceEvent>) -> bool {
    if events.is_closed() {
        return false;
    }
    if deadline <= Instant::now() {
        return true;
    }
    tokio::select! {
        () = tokio::time::sleep_until(deadline.into()) => true,
        () = events.closed() => false,
    }
}
