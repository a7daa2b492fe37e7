//! The many-models workloads (issue 15): (h) LoRA adapters with Zipf popularity on pods that
//! each hold some of them, and (i) two base models on a mixed pool. Each pod gets its own
//! simulator flags ([`per_pod_args`]); after each run the pods' own counters say how many
//! requests reached a pod that does not serve their model (its 404s) and how often adapters
//! were loaded and evicted ([`ModelNotes`]); [`report`] writes `models.json` and `models.md`.

pub mod report;
mod workloads;

pub use workloads::{build_adapters, build_two_models};

use serde::Serialize;

use crate::driver::Replay;
use crate::pool::SimulatedPool;
use crate::summary::percentile;
use crate::workload::{Workload, WorkloadName};

/// What the pods counted during one run of a models workload.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ModelNotes {
    /// Requests the pods answered 404 (their model is not served there), summed.
    pub wrong_pod_requests: u64,
    /// Adapter loads onto a GPU, summed over the pool.
    pub adapter_loads: u64,
    /// Adapter evictions to make room for another (swaps), summed.
    pub adapter_swaps: u64,
    /// Time to first token, 90th percentile of the successful requests, ms.
    pub ttft_p90_ms: Option<f64>,
}

/// Whether `name` is one of this module's workloads.
pub fn is_models_workload(name: WorkloadName) -> bool {
    matches!(name, WorkloadName::Adapters | WorkloadName::TwoModels)
}

/// Extra simulator flags of pod `index` (its base model and adapters); none for other workloads.
pub fn per_pod_args(workload: &Workload, index: usize) -> Vec<String> {
    match workload.name {
        WorkloadName::Adapters => workloads::adapters_pod_args(index),
        WorkloadName::TwoModels => workloads::two_models_pod_args(index),
        _ => Vec::new(),
    }
}

/// Reads the pods' counters after a run (they were reset by the restart before it).
pub fn notes(pool: &SimulatedPool, replay: &Replay) -> Result<ModelNotes, String> {
    let mut notes = ModelNotes::default();
    for stats in pool.stats()? {
        let read = |key: &str| stats.get(key).and_then(serde_json::Value::as_u64).unwrap_or(0);
        notes.wrong_pod_requests += read("model_not_found");
        notes.adapter_loads += read("lora_adapter_loads");
        notes.adapter_swaps += read("lora_adapter_evictions");
    }
    let mut ttft: Vec<f64> =
        replay.outcomes.iter().filter_map(|o| o.as_ref().ok()).map(|s| s.ttft.as_secs_f64() * 1000.0).collect();
    ttft.sort_by(f64::total_cmp);
    notes.ttft_p90_ms = percentile(&ttft, 0.9).map(|v| (v * 10.0).round() / 10.0);
    Ok(notes)
}
