//! Starting and completing engine steps under the pod lock, and handing their tokens and
//! metrics to the requests.
//!
//! A step is planned when it starts (the previous one ended, or a request reached an idle
//! engine), lasts the latency model's duration, and its sampled tokens are stamped with its
//! planned end. Chaining steps on planned ends (not on when the loop woke up) keeps timer
//! lateness from adding up, as long as the loop keeps up within [`MAX_STEP_LAG`].

use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::{unix_now, Pod, PodState};
use crate::engine::{StepOutput, StepPlan};
use crate::metrics::FinishReason;

/// If the loop wakes this late after a step's end, the next step starts now rather than at
/// that end (the machine was starved; catching up in zero-length steps would be worse).
const MAX_STEP_LAG: Duration = Duration::from_millis(50);
/// Plans tried when a step preempted every running sequence (vLLM then admits at its next step).
const PLANS_PER_START: usize = 2;

/// What the engine tells a request's task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineEvent {
    /// First admitted to the running batch, with this many prompt tokens found in the cache.
    Admitted {
        /// Prompt tokens served from the prefix cache.
        cached_tokens: usize,
    },
    /// A token was sampled by the step that ended at `at`.
    Token {
        /// Position in the output.
        index: usize,
        /// Whether it is the last token (the request has left the engine).
        last: bool,
        /// The step's (simulated) end.
        at: Instant,
    },
}

/// A request to put in the waiting queue.
#[derive(Debug, Clone)]
pub struct Submission {
    /// Prompt tokens.
    pub tokens: Vec<u32>,
    /// LoRA adapter, `None` for the base model.
    pub lora: Option<String>,
    /// `cache_salt` of the request.
    pub cache_salt: Option<String>,
    /// Tokens to generate.
    pub max_tokens: usize,
    /// Seeds the generated tokens.
    pub stream_seed: u64,
    /// When the HTTP request arrived (TTFT and e2e are measured from here).
    pub arrival: Instant,
}

/// One request's channel and timing facts, kept while the engine knows it.
#[derive(Debug)]
pub(super) struct RequestStream {
    pub(super) events: mpsc::UnboundedSender<EngineEvent>,
    pub(super) arrival: Instant,
    pub(super) enqueued_at: Instant,
    /// Step end to client: `api_overhead_ms` plus the `extra_latency_ms` fault.
    pub(super) delivery_delay: Duration,
    pub(super) prompt_tokens: usize,
    pub(super) last_token_at: Option<Instant>,
    /// Time from enqueue to first admission, observed when the request finishes (vLLM records
    /// queue time with the finished request's stats, so an aborted request never shows it).
    pub(super) queued: Option<Duration>,
}

/// The step being computed.
#[derive(Debug)]
pub(super) struct InFlightStep {
    pub(super) plan: StepPlan,
    pub(super) ends_at: Instant,
}

impl Pod {
    /// Starts a step now if the engine is idle, and wakes the step loop for it.
    pub(super) fn start_step_if_idle(&self, state: &mut PodState) {
        if state.step.is_none() {
            self.start_step(state, Instant::now());
            if state.step.is_some() {
                self.step_started.notify_one();
            }
        }
    }

    /// The end of the step in flight, `None` if idle.
    pub(super) fn step_end(&self) -> Option<Instant> {
        self.lock().step.as_ref().map(|step| step.ends_at)
    }

    /// Completes the step in flight (if its time is up), delivers its tokens, starts the next.
    pub(super) fn complete_step(&self) {
        let mut state = self.lock();
        let now = Instant::now();
        let Some(step) = state.step.take_if(|step| step.ends_at <= now) else { return };
        let outputs = state.engine.complete_step(&step.plan);
        for output in outputs {
            deliver(&mut state, output, step.ends_at);
        }
        let late = now.saturating_duration_since(step.ends_at) > MAX_STEP_LAG;
        self.start_step(&mut state, if late { now } else { step.ends_at });
    }

    fn start_step(&self, state: &mut PodState, starts_at: Instant) {
        let mut plan = StepPlan::default();
        for _ in 0..PLANS_PER_START {
            plan = state.engine.plan_step(self.config.max_num_batched_tokens);
            if !plan.is_empty() || plan.preempted.is_empty() {
                break;
            }
        }
        for admission in plan.admitted.iter().filter(|admission| !admission.resumed) {
            if let Some(stream) = state.streams.get_mut(&admission.id) {
                stream.queued = Some(starts_at.saturating_duration_since(stream.enqueued_at));
                // A closed channel means the client left; its task aborts the request itself.
                let _ = stream.events.send(EngineEvent::Admitted { cached_tokens: admission.cached_tokens });
            }
        }
        if state.lora.enabled() {
            let running = state.engine.running_loras();
            let waiting = state.engine.waiting_loras();
            state.metrics.record_lora_state(&running, &waiting, unix_now());
        }
        if plan.is_empty() {
            state.step = None;
            return;
        }
        let latency = &self.config.latency;
        let work = plan.work();
        let load_ms = self.config.lora_load_ms * work.adapter_loads as f64;
        let duration = latency.to_delay(state.step_jitter.apply(latency.step_ms(&work) + load_ms));
        state.step_counters.record(plan.num_batched_tokens(), &work, duration);
        state.step = Some(InFlightStep { plan, ends_at: starts_at + duration });
    }
}

/// Hands a sampled token to its request and records its metrics (the client sees it
/// `delivery_delay` after the step's end, so TTFT and e2e include that delay).
fn deliver(state: &mut PodState, output: StepOutput, step_end: Instant) {
    let Some(stream) = state.streams.get_mut(&output.id) else { return };
    let metrics = &mut state.metrics;
    metrics.generation_tokens += 1;
    let seen_at = step_end + stream.delivery_delay;
    match stream.last_token_at {
        None => {
            metrics.ttft.observe(seen_at.saturating_duration_since(stream.arrival).as_secs_f64());
            metrics.prompt_tokens += stream.prompt_tokens as u64;
        }
        Some(previous) => metrics.inter_token.observe(step_end.saturating_duration_since(previous).as_secs_f64()),
    }
    stream.last_token_at = Some(step_end);
    // A closed channel means the client left; its task aborts the request itself.
    let _ = stream.events.send(EngineEvent::Token { index: output.index, last: output.last, at: step_end });
    if output.last {
        metrics.record_finish(FinishReason::Length);
        metrics.e2e.observe(seen_at.saturating_duration_since(stream.arrival).as_secs_f64());
        if let Some(queued) = stream.queued {
            metrics.queue_time.observe(queued.as_secs_f64());
        }
        state.streams.remove(&output.id);
    }
}
