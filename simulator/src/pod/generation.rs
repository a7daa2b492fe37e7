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

/// A request's `usage` from its choices' counts, as vLLM v0.11 reports it: completion tokens
/// summed over the choices, prompt tokens once per prompt however many samples it has (`n`:
/// choices `p*n .. p*n + n - 1` share prompt `p`; serving_completion.py sums
/// `num_prompt_tokens` per prompt, serving_chat.py counts its one prompt once), and the cached
/// tokens of one prompt, not their sum: the first output's when streaming
/// (serving_completion.py 346-348, serving_chat.py 583-584), the last prompt's in a JSON
/// answer (serving_completion.py 511-512 and 587-590).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UsageTally {
    /// Choices per prompt (`n`; 0 reads as 1).
    samples: usize,
    prompt_tokens: usize,
    completion_tokens: usize,
    /// The choice whose token reached the client first, and its cached tokens once it finished.
    first: Option<(usize, usize)>,
    /// The highest choice index finished so far (the last prompt's), and its cached tokens.
    last: Option<(usize, usize)>,
    finished: usize,
}

impl UsageTally {
    /// A tally for a request of `samples` choices per prompt (`n`).
    pub fn with_samples(samples: usize) -> Self {
        Self { samples, ..Self::default() }
    }

    /// Notes a token of `choice` (the first one names the choice whose cached tokens a stream reports).
    pub fn token(&mut self, choice: usize) {
        self.first.get_or_insert((choice, 0));
    }

    /// Adds a finished choice's counts.
    pub fn finished(&mut self, choice: usize, usage: Usage) {
        // Each prompt's first sample counts its prompt tokens; its siblings share that prompt.
        if choice.is_multiple_of(self.samples.max(1)) {
            self.prompt_tokens += usage.prompt_tokens;
        }
        self.completion_tokens += usage.completion_tokens;
        self.finished += 1;
        match &mut self.first {
            Some((first, cached)) if *first == choice => *cached = usage.cached_tokens,
            Some(_) => {}
            None => self.first = Some((choice, usage.cached_tokens)),
        }
        if self.last.is_none_or(|(last, _)| choice >= last) {
            self.last = Some((choice, usage.cached_tokens));
        }
    }

    /// Choices finished so far.
    pub fn finished_choices(&self) -> usize {
        self.finished
    }

    /// The usage a stream's final chunk reports.
    pub fn streamed(&self) -> Usage {
        self.with_cached(self.first)
    }

    /// The usage a JSON answer reports.
    pub fn answered(&self) -> Usage {
        self.with_cached(self.last)
    }

    fn with_cached(&self, choice: Option<(usize, usize)>) -> Usage {
        let cached_tokens = choice.map_or(0, |(_, cached)| cached);
        Usage { prompt_tokens: self.prompt_tokens, completion_tokens: self.completion_tokens, cached_tokens }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(prompt_tokens: usize, cached_tokens: usize) -> Usage {
        Usage { prompt_tokens, completion_tokens: 2, cached_tokens }
    }

    #[test]
    fn a_tally_sums_tokens_and_reports_one_prompts_cached_count() {
        let mut tally = UsageTally::default();
        tally.token(1);
        tally.token(0);
        tally.finished(0, usage(40, 32));
        tally.finished(1, usage(80, 64));
        assert_eq!(tally.finished_choices(), 2);
        assert_eq!(
            tally.answered(),
            Usage { prompt_tokens: 120, completion_tokens: 4, cached_tokens: 64 },
            "the last prompt's"
        );
        assert_eq!(tally.streamed().cached_tokens, 64, "the choice whose token came first");
        let mut first_is_zero = UsageTally::default();
        first_is_zero.token(0);
        first_is_zero.finished(1, usage(80, 64));
        first_is_zero.finished(0, usage(40, 32));
        assert_eq!(first_is_zero.streamed().cached_tokens, 32);
        assert_eq!(first_is_zero.answered().cached_tokens, 64);
    }

    /// `n` samples of a prompt count its prompt tokens once and sum their completion tokens
    /// (vLLM's usage for `n` > 1).
    #[test]
    fn samples_of_one_prompt_count_its_tokens_once() {
        let mut tally = UsageTally::with_samples(3);
        for choice in [2, 0, 1, 5, 3, 4] {
            let prompt_tokens = if choice < 3 { 40 } else { 80 };
            tally.finished(choice, usage(prompt_tokens, 0));
        }
        assert_eq!(tally.finished_choices(), 6);
        assert_eq!(tally.answered(), Usage { prompt_tokens: 120, completion_tokens: 12, cached_tokens: 0 });
    }
}
