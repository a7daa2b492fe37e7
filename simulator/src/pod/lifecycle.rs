//! A request's visits to the pod lock: submit, abort, and the read-only views (`/metrics`
//! snapshot, `/sim/stats`).
//!
//! Submitting to an idle engine starts a step at once, as vLLM's busy loop picks a request up
//! as soon as it arrives; otherwise the request waits for the step in flight to end.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::steps::{RequestStream, Submission};
use super::{Pod, Ticket};
use crate::api::errors::ApiError;
use crate::engine::{NewRequest, RequestId};
use crate::faults::GarbageMode;
use crate::metrics::{LoraResidency, MetricsSnapshot};

/// Longest a request stays parked by the `hang` fault before it fails with 503.
pub const MAX_HANG: Duration = Duration::from_secs(600);

impl Pod {
    /// Submits `tokens` for `--default-max-tokens` tokens (see [`Pod::submit_request`]).
    pub fn submit(&self, tokens: Vec<u32>, lora: Option<String>) -> Result<Ticket, ApiError> {
        let max_tokens = self.config.default_max_tokens;
        self.submit_request(Submission {
            tokens,
            lora,
            cache_salt: None,
            max_tokens,
            stream_seed: 0,
            arrival: Instant::now(),
        })
    }

    /// Puts a request in the waiting queue (starting a step if the engine is idle); refuses it
    /// with 503 if it would have to wait behind `max_waiting` others with no seat free for it
    /// (a request admitted at once never is).
    pub fn submit_request(&self, submission: Submission) -> Result<Ticket, ApiError> {
        let mut tickets = self.submit_requests(std::iter::once(submission))?;
        tickets.pop().ok_or_else(|| ApiError::new(500, "No request was submitted."))
    }

    /// Puts the engine requests of one HTTP request (each prompt's `n` samples) in the waiting
    /// queue together, under one lock, then starts a step if the engine is idle. vLLM fans a
    /// request with `n` > 1 out into `n` child requests sent to the engine core at once
    /// (v1/engine/async_llm.py `add_request`, parallel_sampling.py), so they are scheduled
    /// together: the first computes the prompt and its siblings, admitted in the same step,
    /// find its blocks (cached when scheduled) and compute only the last partial block.
    ///
    /// Refused as a whole with 503 if one of them would wait behind `max_waiting` others with
    /// no seat free (as [`Pod::submit_request`]); the ones queued before it are withdrawn.
    /// `submissions` is read lazily, so a large `n` stops at the refusal rather than building
    /// every sample's prompt first.
    pub fn submit_requests(&self, submissions: impl IntoIterator<Item = Submission>) -> Result<Vec<Ticket>, ApiError> {
        let delivery_delay = self.config.latency.to_delay(self.config.latency.api_overhead_ms)
            + Duration::from_millis(self.faults().extra_latency_ms);
        let mut state = self.lock();
        let mut tickets = Vec::new();
        for submission in submissions {
            let id = self.next_request_id();
            let (sender, events) = mpsc::unbounded_channel();
            let waiting_ahead = state.engine.num_waiting();
            let seat_free = state.engine.has_seat_for_one_more();
            state.streams.insert(
                id,
                RequestStream {
                    events: sender,
                    arrival: submission.arrival,
                    enqueued_at: Instant::now(),
                    delivery_delay,
                    prompt_tokens: submission.tokens.len(),
                    last_token_at: None,
                    queued: None,
                },
            );
            state.engine.enqueue(NewRequest {
                id,
                tokens: submission.tokens,
                lora: submission.lora,
                cache_salt: submission.cache_salt,
                max_tokens: submission.max_tokens,
                stream_seed: submission.stream_seed,
            });
            tickets.push(Ticket { id, events, delivery_delay });
            if waiting_ahead >= self.config.max_waiting && !seat_free {
                // One that the step starting now admits is not refused.
                self.start_step_if_idle(&mut state);
                if state.engine.is_waiting(id) {
                    for ticket in &tickets {
                        state.streams.remove(&ticket.id);
                        state.engine.abort(ticket.id);
                    }
                    state.rejected_overload += 1;
                    return Err(ApiError::unavailable(format!(
                        "The server is overloaded: {waiting_ahead} requests are waiting (--max-waiting {}).",
                        self.config.max_waiting
                    )));
                }
            }
        }
        self.start_step_if_idle(&mut state);
        Ok(tickets)
    }

    /// Aborts a request (client gone): frees its seat and blocks.
    /// As in vLLM v0.11, a client abort is no finished request: `vllm:request_success_total`
    /// and the e2e and queue-time histograms never see it (v1/engine/output_processor.py
    /// `abort_requests` drops the request's state without making finished-request stats;
    /// v1/engine/async_llm.py `abort`), so only `/sim/stats` counts it.
    pub fn abort_request(&self, id: RequestId) {
        let mut state = self.lock();
        state.streams.remove(&id);
        if state.engine.abort(id) {
            state.client_aborts += 1;
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

    /// What `/metrics` shows now: the truth, then any lies the faults ask for.
    pub fn metrics_snapshot(&self) -> MetricsSnapshot {
        let faults = self.faults();
        let mut snapshot = {
            let state = self.lock();
            let prefix = state.engine.prefix_stats();
            let gauges = state.engine.gauges();
            MetricsSnapshot {
                style: self.config.metrics_style,
                model: self.config.model.clone(),
                running: gauges.running as f64,
                waiting: gauges.waiting as f64,
                kv_usage: state.engine.kv_usage(),
                prefix_queries: prefix.queries as f64,
                prefix_hits: prefix.hits as f64,
                preemptions: state.engine.num_preemptions() as f64,
                metrics: state.metrics.clone(),
                block_size: self.config.block_size,
                num_gpu_blocks: self.config.num_gpu_blocks,
                max_loras: state.lora.enabled().then_some(self.config.max_loras),
                lora: LoraResidency {
                    registered: state.lora.adapters().map(|(name, _)| name.clone()).collect(),
                    resident: state.engine.lora_slots().resident().to_vec(),
                    loads: state.engine.lora_slots().loads(),
                    evictions: state.engine.lora_slots().evictions(),
                },
                model_not_found: state.model_not_found,
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
            "client_aborts": state.client_aborts,
            "model_not_found": state.model_not_found,
            "responses_stored": state.responses.len(),
            "responses_not_found": state.responses.not_found,
            "lora_adapter_loads": state.engine.lora_slots().loads(),
            "lora_adapter_evictions": state.engine.lora_slots().evictions(),
            "lora_resident": state.engine.lora_slots().resident(),
            "max_num_batched_tokens": self.config.max_num_batched_tokens,
            "steps": state.step_counters.to_json(),
            "endpoints": state.stats.to_json(),
            "pd": {
                "role": self.config.role.name(),
                "remote_prefills": state.pd.remote_prefills,
                "prefill_fallbacks": state.pd.prefill_fallbacks,
                "transferred_tokens": state.pd.transferred_tokens,
                "prefill_wait_us": state.pd.prefill_wait_us,
                "transfer_us": state.pd.transfer_us,
            },
        })
    }
}
