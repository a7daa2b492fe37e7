//! One simulated vLLM pod: its engine, metrics, faults and counters behind one briefly held lock.
//!
//! Several pods can live in one process (`--ports`); each owns its own `Pod`, so nothing is
//! shared between them. The lock is a `std::sync::Mutex` held only for bookkeeping (never across
//! an `.await`). One step loop per pod (`step_loop`) runs the engine a step at a time and sleeps
//! until each step's modelled end; every request is its own tokio task that forwards the tokens
//! the steps sample to its client.

mod generation;
mod lifecycle;
pub mod stats;
mod step_loop;
mod steps;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::{mpsc, watch, Notify};

use crate::config::PodConfig;
use crate::engine::{Engine, RequestId};
use crate::faults::Faults;
use crate::hashing::mix64;
use crate::latency::Jitter;
use crate::lora::LoraRegistry;
use crate::metrics::PodMetrics;
use stats::{EndpointStats, StepCounters};
use steps::{InFlightStep, RequestStream};

pub use generation::{run_generation, ChoiceEvent, GenerationEvent, GenerationJob, Usage, UsageTally};
pub use step_loop::run_step_loop;
pub use steps::{EngineEvent, Submission};

/// Mutable state of a pod (engine, metrics, counters, adapters).
#[derive(Debug)]
pub struct PodState {
    /// Scheduler and KV cache.
    pub engine: Engine,
    /// Where each request's sampled tokens go, and its timing facts for the metrics.
    streams: HashMap<RequestId, RequestStream>,
    /// The step being computed; `None` while the engine is idle.
    step: Option<InFlightStep>,
    /// Jitter of step durations.
    step_jitter: Jitter,
    /// Steps and batched tokens, for `/sim/stats`.
    pub step_counters: StepCounters,
    /// Request metrics for `/metrics`.
    pub metrics: PodMetrics,
    /// Per-endpoint counters for `/sim/stats`.
    pub stats: EndpointStats,
    /// Requests refused because the waiting queue was full.
    pub rejected_overload: u64,
    /// Requests aborted because their client went away (`/sim/stats` only: vLLM counts them in
    /// no metric).
    pub client_aborts: u64,
    /// Loaded LoRA adapters.
    pub lora: LoraRegistry,
    /// Times `/sim/restart` was called.
    pub restarts: u64,
    /// What the P/D sidecar did.
    pub pd: crate::pd::PdCounters,
    /// Inference requests answered 404 because they named a model this pod does not serve.
    pub model_not_found: u64,
    /// Stored Responses API answers (`--responses-store`).
    pub responses: crate::api::responses_api::ResponseStore,
}

/// A submitted request: its id and the engine's events about it.
#[derive(Debug)]
pub struct Ticket {
    /// Engine request id.
    pub id: RequestId,
    /// Admission and sampled tokens; closes without a last token if the pod restarts. Holds at
    /// most `max_tokens + 1` events, so it needs no other bound.
    pub events: mpsc::UnboundedReceiver<EngineEvent>,
    /// Step end to client: `api_overhead_ms` plus the `extra_latency_ms` fault.
    pub delivery_delay: Duration,
}

/// One pod.
#[derive(Debug)]
pub struct Pod {
    config: PodConfig,
    served_by: String,
    state: Mutex<PodState>,
    faults: Mutex<Faults>,
    /// Bumped on every fault change, so hung requests wake up and look again.
    fault_changes: watch::Sender<u64>,
    next_request_id: AtomicU64,
    fault_draws: AtomicU64,
    /// Wakes the step loop when an idle engine starts a step.
    step_started: Notify,
}

/// Current Unix time in seconds (metric timestamps).
pub fn unix_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|elapsed| elapsed.as_secs_f64()).unwrap_or(0.0)
}

impl Pod {
    /// A fresh pod; `config.port` must already be the bound port.
    pub fn new(config: PodConfig) -> Self {
        let state = fresh_state(&config, 0);
        let (fault_changes, _) = watch::channel(0);
        Self {
            served_by: config.served_by(),
            config,
            state: Mutex::new(state),
            faults: Mutex::new(Faults::default()),
            fault_changes,
            next_request_id: AtomicU64::new(1),
            fault_draws: AtomicU64::new(0),
            step_started: Notify::new(),
        }
    }

    /// The pod's configuration.
    pub fn config(&self) -> &PodConfig {
        &self.config
    }

    /// `host:port`, the `x-served-by` value.
    pub fn served_by(&self) -> &str {
        &self.served_by
    }

    /// Locks the state; a poisoned lock is still usable (no code here panics while holding it).
    pub fn lock(&self) -> MutexGuard<'_, PodState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A copy of the current faults.
    pub fn faults(&self) -> Faults {
        self.faults.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Changes the faults (all or nothing) and wakes requests that wait on them.
    pub fn update_faults(&self, change: impl FnOnce(&mut Faults) -> Result<(), String>) -> Result<Faults, String> {
        let updated = {
            let mut faults = self.faults.lock().unwrap_or_else(PoisonError::into_inner);
            change(&mut faults)?;
            faults.clone()
        };
        self.fault_changes.send_modify(|generation| *generation += 1);
        Ok(updated)
    }

    /// A receiver that changes whenever the faults change.
    pub fn watch_faults(&self) -> watch::Receiver<u64> {
        self.fault_changes.subscribe()
    }

    /// A reproducible draw in `[0, 1)` for `fail_fraction`.
    pub fn fault_draw(&self) -> f64 {
        let draw = self.fault_draws.fetch_add(1, Ordering::Relaxed);
        // Top 53 bits over 2^53: uniform and exactly representable.
        (mix64(self.config.seed ^ mix64(draw)) >> 11) as f64 / 9_007_199_254_740_992.0
    }

    /// A new engine request id (unique across restarts, so stale tasks never collide).
    pub fn next_request_id(&self) -> RequestId {
        self.next_request_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Empties the cache and resets every counter, like a pod restart on the same port.
    ///
    /// Every request fails at once (its event channel closes); the step in flight is dropped.
    pub fn restart(&self) {
        let mut state = self.lock();
        let restarts = state.restarts + 1;
        *state = fresh_state(&self.config, restarts);
    }
}

fn fresh_state(config: &PodConfig, restarts: u64) -> PodState {
    let lora_enabled = config.lora_enabled || !config.lora_adapters.is_empty();
    let mut metrics = PodMetrics::new(unix_now());
    if lora_enabled {
        // vLLM publishes the series from its first step; seeding it lets pollers see max_lora early.
        metrics.record_lora_state(&[], &[], metrics.created_unix);
    }
    PodState {
        engine: Engine::new(config.num_gpu_blocks, config.block_size, config.max_num_seqs, config.max_loras),
        streams: HashMap::new(),
        step: None,
        step_jitter: config.latency.jitter_source(mix64(config.seed ^ restarts)),
        step_counters: StepCounters::default(),
        metrics,
        stats: EndpointStats::default(),
        rejected_overload: 0,
        client_aborts: 0,
        lora: LoraRegistry::new(lora_enabled, &config.model, &config.lora_adapters),
        restarts,
        pd: crate::pd::PdCounters::default(),
        model_not_found: 0,
        responses: crate::api::responses_api::ResponseStore::default(),
    }
}
