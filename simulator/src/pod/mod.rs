//! One simulated vLLM pod: its engine, metrics, faults and counters behind one briefly held lock.
//!
//! Several pods can live in one process (`--ports`); each owns its own `Pod`, so nothing is
//! shared between them. The lock is a `std::sync::Mutex` held only for bookkeeping (never across
//! an `.await`): every request is its own tokio task that sleeps on timers between short visits.

mod generation;
mod lifecycle;
pub mod stats;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::{oneshot, watch};

use crate::config::PodConfig;
use crate::engine::{Admission, Engine, RequestId};
use crate::faults::Faults;
use crate::hashing::mix64;
use crate::lora::LoraRegistry;
use crate::metrics::PodMetrics;
use stats::EndpointStats;

pub use generation::{run_generation, ChoiceEvent, GenerationEvent, GenerationJob, Usage};

/// Mutable state of a pod (engine, metrics, counters, adapters).
#[derive(Debug)]
pub struct PodState {
    /// Scheduler and KV cache.
    pub engine: Engine,
    /// Admission notifications, by waiting request.
    waiters: std::collections::HashMap<RequestId, oneshot::Sender<Admission>>,
    /// Request metrics for `/metrics`.
    pub metrics: PodMetrics,
    /// Per-endpoint counters for `/sim/stats`.
    pub stats: EndpointStats,
    /// Requests refused because the waiting queue was full.
    pub rejected_overload: u64,
    /// Loaded LoRA adapters.
    pub lora: LoraRegistry,
    /// Times `/sim/restart` was called.
    pub restarts: u64,
}

/// A submitted request waiting for admission.
#[derive(Debug)]
pub struct Ticket {
    /// Engine request id.
    pub id: RequestId,
    /// Resolves when the scheduler admits the request; fails if the pod restarts first.
    pub admission: oneshot::Receiver<Admission>,
    /// When it entered the waiting queue.
    pub enqueued_at: Instant,
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
    /// Waiting requests fail at once; running ones fail at their next token.
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
        waiters: std::collections::HashMap::new(),
        metrics,
        stats: EndpointStats::default(),
        rejected_overload: 0,
        lora: LoraRegistry::new(lora_enabled, &config.model, &config.lora_adapters),
        restarts,
    }
}
