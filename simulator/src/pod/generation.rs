//! One request's life as a tokio task: wait for admission, prefill, then emit tokens paced by
//! the latency model, so clients measure TTFT and inter-token gaps as they would on vLLM.
//!
//! Pacing uses absolute deadlines (`sleep_until`), so timer granularity does not accumulate into
//! drift: a late wake-up shortens the next gap. If the client goes away (its channel closes),
//! the request is aborted and its seat and blocks are freed, as vLLM aborts on disconnect.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use super::lifecycle::{TokenStep, TokenTiming};
use super::{Pod, Ticket};
use crate::api::errors::ApiError;
use crate::engine::Admission;
use crate::hashing::mix64;
use crate::latency::Jitter;
use crate::metrics::FinishReason;
use crate::tokenizer::{output_word, token_id};

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
    /// The admission ticket from [`Pod::submit`].
    pub ticket: Ticket,
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Tokens to generate.
    pub max_tokens: usize,
    /// Seeds the generated words (a hash of the prompt).
    pub stream_seed: u64,
    /// When the HTTP request arrived (TTFT and e2e are measured from here).
    pub arrival: Instant,
}

enum Wait {
    Admitted(Admission),
    Restarted,
    ClientGone,
}

/// Runs one choice to completion, sending events to `events`.
pub async fn run_generation(pod: Arc<Pod>, job: GenerationJob, events: mpsc::Sender<ChoiceEvent>) {
    let id = job.ticket.id;
    let send = |event: GenerationEvent| events.send(ChoiceEvent { choice: job.choice, event });
    let abort = || pod.end_request(id, FinishReason::Abort, job.arrival.elapsed());
    let latency = pod.config().latency.clone();
    let mut jitter: Jitter = latency.jitter_source(mix64(pod.config().seed ^ mix64(id)));

    let admission = match wait_for_admission(job.ticket.admission, &events).await {
        Wait::Admitted(admission) => admission,
        Wait::Restarted => return report_restart(&events, job.choice).await,
        Wait::ClientGone => return abort(),
    };
    let queue_time = job.ticket.enqueued_at.elapsed();
    let uncached = admission.num_tokens.saturating_sub(admission.cached_tokens);
    let first_token_ms = jitter.apply(latency.first_token_ms(uncached, admission.cached_tokens, admission.running));
    let extra = Duration::from_millis(pod.faults().extra_latency_ms);
    let mut deadline = Instant::now() + latency.to_delay(first_token_ms) + extra;
    let mut running = admission.running;
    let mut previous_token_at: Option<Instant> = None;

    for position in 0..job.max_tokens {
        if position > 0 {
            deadline += latency.to_delay(jitter.apply(latency.step_ms(running)));
        }
        if !sleep_until_or_closed(deadline, &events).await {
            return abort();
        }
        let word = output_word(job.stream_seed, position as u64);
        let timing = |now: Instant| TokenTiming {
            since_arrival: now.duration_since(job.arrival),
            since_previous: previous_token_at.map(|previous| now.duration_since(previous)),
            prompt_tokens: job.prompt_tokens,
            queue_time,
        };
        match pod.append_token(id, token_id(word), timing(Instant::now())) {
            TokenStep::Appended { running: now_running } => running = now_running,
            TokenStep::Gone => return report_restart(&events, job.choice).await,
            TokenStep::Preempted(readmission) => {
                let admission = match wait_for_admission(readmission, &events).await {
                    Wait::Admitted(admission) => admission,
                    Wait::Restarted => return report_restart(&events, job.choice).await,
                    Wait::ClientGone => return abort(),
                };
                let uncached = admission.num_tokens.saturating_sub(admission.cached_tokens);
                let recompute_ms = latency.recompute_ms(uncached, admission.cached_tokens, admission.running);
                deadline = Instant::now() + latency.to_delay(jitter.apply(recompute_ms));
                running = admission.running;
                if !sleep_until_or_closed(deadline, &events).await {
                    return abort();
                }
                pod.record_resumed_token(timing(Instant::now()));
            }
        }
        previous_token_at = Some(Instant::now());
        let last = position + 1 == job.max_tokens;
        if send(GenerationEvent::Token { text: format!(" {word}"), last }).await.is_err() {
            return abort();
        }
    }
    pod.end_request(id, FinishReason::Length, job.arrival.elapsed());
    let usage = Usage {
        prompt_tokens: job.prompt_tokens,
        completion_tokens: job.max_tokens,
        cached_tokens: admission.cached_tokens,
    };
    // If the client left after the last token, there is nobody to tell.
    let _ = send(GenerationEvent::Finished(usage)).await;
}

/// Tells the client its pod restarted under it (vLLM would have dropped the connection).
async fn report_restart(events: &mpsc::Sender<ChoiceEvent>, choice: usize) {
    let error = ApiError::unavailable("The pod restarted while serving the request.");
    // Nobody to tell if the client already left.
    let _ = events.send(ChoiceEvent { choice, event: GenerationEvent::Failed(error) }).await;
}

async fn wait_for_admission(admission: oneshot::Receiver<Admission>, events: &mpsc::Sender<ChoiceEvent>) -> Wait {
    tokio::select! {
        result = admission => match result {
            Ok(admission) => Wait::Admitted(admission),
            Err(_) => Wait::Restarted,
        },
        () = events.closed() => Wait::ClientGone,
    }
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
