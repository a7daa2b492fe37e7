//! A request's visits to the pod lock: submit, append each token, finish or abort, and the
//! read-only views (`/metrics` snapshot, `/sim/stats`).
//!
//! Every visit that frees a seat or blocks also runs the scheduler, so waiting requests are
//! admitted the moment capacity appears, as vLLM admits them at its next step.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::sync::oneshot;

use super::{unix_now, Pod, PodState, Ticket};
use crate::api::errors::ApiError;
use crate::engine::{Admission, NewRequest, RequestId, StepOutcome};
use crate::faults::GarbageMode;
use crate::metrics::{FinishReason, MetricsSnapshot};

/// Longest a request stays parked by the `hang` fault before it fails with 503.
pub const MAX_HANG: Duration = Duration::from_secs(600);

/// What appending a generated token did.
#[derive(Debug)]
pub enum TokenStep {
    /// The token has its KV slot; `running` requests are in the batch now.
    Appended {
        /// Running requests (drives the next step time).
        running: usize,
    },
    /// No KV block was free: wait for re-admission, then recompute.
    Preempted(oneshot::Receiver<Admission>),
    /// The request is no longer known (the pod restarted).
    Gone,
}

/// Timing facts recorded with a token.
#[derive(Debug, Clone, Copy)]
pub struct TokenTiming {
    /// Arrival to now.
    pub since_arrival: Duration,
    /// Previous token to now; `None` for the first token.
    pub since_previous: Option<Duration>,
    /// Prompt tokens (counted into `prompt_tokens_total` with the first token).
    pub prompt_tokens: usize,
    /// Time spent waiting for admission (recorded with the first token).
    pub queue_time: Duration,
}

impl Pod {
    /// Puts a request in the waiting queue and runs the scheduler; refuses it with 503 if it
    /// would have to wait behind `max_waiting` others (a request admitted at once never is).
    pub fn submit(&self, tokens: Vec<u32>, lora: Option<String>) -> Result<Ticket, ApiError> {
        let mut state = self.lock();
        let id = self.next_request_id();
        let (sender, admission) = oneshot::channel();
        state.waiters.insert(id, sender);
        state.engine.enqueue(NewRequest { id, tokens, lora });
        self.run_scheduler(&mut state);
        let waiting = state.engine.num_waiting();
        if waiting > self.config.max_waiting && state.waiters.contains_key(&id) {
            state.waiters.remove(&id);
            state.engine.abort(id);
            state.rejected_overload += 1;
            return Err(ApiError::unavailable(format!(
                "The server is overloaded: {} requests are waiting (--max-waiting {}).",
                waiting - 1,
                self.config.max_waiting
            )));
        }
        Ok(Ticket { id, admission, enqueued_at: Instant::now() })
    }

    /// Appends a generated token; records its metrics when it got its KV slot.
    pub fn append_token(&self, id: RequestId, token: u32, timing: TokenTiming) -> TokenStep {
        let mut state = self.lock();
        match state.engine.append_token(id, token) {
            StepOutcome::Appended => {
                record_token(&mut state, timing);
                TokenStep::Appended { running: state.engine.num_running() }
            }
            StepOutcome::Preempted => {
                let (sender, admission) = oneshot::channel();
                state.waiters.insert(id, sender);
                self.run_scheduler(&mut state);
                TokenStep::Preempted(admission)
            }
            StepOutcome::Unknown => TokenStep::Gone,
        }
    }

    /// Records metrics of a token emitted after a preemption (its KV slot was re-made then).
    pub fn record_resumed_token(&self, timing: TokenTiming) {
        record_token(&mut self.lock(), timing);
    }

    /// Ends a request (finished or aborted) and admits whoever can run now.
    pub fn end_request(&self, id: RequestId, reason: FinishReason, since_arrival: Duration) {
        let mut state = self.lock();
        state.waiters.remove(&id);
        let known = match reason {
            FinishReason::Abort => state.engine.abort(id),
            FinishReason::Length | FinishReason::Stop => state.engine.finish(id),
        };
        if known {
            state.metrics.record_finish(reason);
            if reason != FinishReason::Abort {
                state.metrics.e2e.observe(since_arrival.as_secs_f64());
            }
            self.run_scheduler(&mut state);
        }
    }

    /// Parks the caller while the `hang` fault is on (at most [`MAX_HANG`]).
    pub async fn wait_while_hung(&self) -> Result<(), ApiError> {
        let deadline = tokio::time::Instant::now() + MAX_HANG;
        let mut changes = self.watch_faults();
        // Each pass waits for a fault change or the deadline, so the loop is bounded by MAX_HANG.
        loop {
            if !self.faults().hang {
                return Ok(());
            }
            match tokio::time::timeout_at(deadline, changes.changed()).await {
                Ok(Ok(())) => continue,
                Ok(Err(_)) => return Ok(()),
                Err(_) => return Err(ApiError::unavailable("The request hung (fault injection) and timed out.")),
            }
        }
    }

    fn run_scheduler(&self, state: &mut PodState) {
        for admission in state.engine.schedule() {
            if let Some(waiter) = state.waiters.remove(&admission.id) {
                // A closed receiver means the client left; its task aborts the request itself.
                let _ = waiter.send(admission);
            }
        }
        if state.lora.enabled() {
            let running = state.engine.running_loras();
            let waiting = state.engine.waiting_loras();
            state.metrics.record_lora_state(&running, &waiting, unix_now());
        }
    }

    /// What `/metrics` shows now: the truth, then any lies the faults ask for.
    pub fn metrics_snapshot(&self) -> MetricsSnapshot {
        let faults = self.faults();
        let mut snapshot = {
            let state = self.lock();
            let prefix = state.engine.prefix_stats();
            MetricsSnapshot {
                style: self.config.metrics_style,
                model: self.config.model.clone(),
                running: state.engine.num_running() as f64,
                waiting: state.engine.num_waiting() as f64,
                kv_usage: state.engine.kv_usage(),
                prefix_queries: prefix.queries as f64,
                prefix_hits: prefix.hits as f64,
                preemptions: state.engine.num_preemptions() as f64,
                metrics: state.metrics.clone(),
                block_size: self.config.block_size,
                num_gpu_blocks: self.config.num_gpu_blocks,
                max_loras: state.lora.enabled().then_some(self.config.max_loras),
            }
        };
        snapshot.waiting = faults.report.waiting.unwrap_or(snapshot.waiting);
        snapshot.running = faults.report.running.unwrap_or(snapshot.running);
        snapshot.kv_usage = faults.report.kv_usage.unwrap_or(snapshot.kv_usage);
        match faults.metrics_garbage {
            GarbageMode::Nan => snapshot.poison_with_nan(),
            GarbageMode::Negative => snapshot.make_negative(),
            GarbageMode::Off | GarbageMode::Text | GarbageMode::Truncated => {}
        }
        snapshot
    }

    /// The `GET /sim/stats` document.
    pub fn stats_json(&self) -> Value {
        let state = self.lock();
        let prefix = state.engine.prefix_stats();
        let pool = state.engine.cache().pool();
        let [length, stop, abort] = state.metrics.finished;
        json!({
            "served_by": self.served_by,
            "model": self.config.model,
            "restarts": state.restarts,
            "running": state.engine.num_running(),
            "waiting": state.engine.num_waiting(),
            "kv_usage": state.engine.kv_usage(),
            "free_blocks": pool.num_free(),
            "cached_blocks": pool.num_cached(),
            "prefix_cache_queries": prefix.queries,
            "prefix_cache_hits": prefix.hits,
            "preempted_prefix_cache_queries": prefix.preempted_queries,
            "preempted_prefix_cache_hits": prefix.preempted_hits,
            "num_preemptions": state.engine.num_preemptions(),
            "prompt_tokens": state.metrics.prompt_tokens,
            "generation_tokens": state.metrics.generation_tokens,
            "requests_finished": {"length": length, "stop": stop, "abort": abort},
            "rejected_overload": state.rejected_overload,
            "endpoints": state.stats.to_json(),
        })
    }
}

fn record_token(state: &mut PodState, timing: TokenTiming) {
    let metrics = &mut state.metrics;
    metrics.generation_tokens += 1;
    match timing.since_previous {
        None => {
            metrics.ttft.observe(timing.since_arrival.as_secs_f64());
            metrics.queue_time.observe(timing.queue_time.as_secs_f64());
            metrics.prompt_tokens += timing.prompt_tokens as u64;
        }
        Some(gap) => metrics.inter_token.observe(gap.as_secs_f64()),
    }
}
