//! Flow-control stats (`wasm_epp.flow.*`, `wasm_epp_flow_*` in Prometheus).
//!
//! Envoy gauges defined by several worker VMs are one stat that each worker overwrites, so
//! queue sizes are counted as what entered and what left each band (counters sum across
//! workers): length = `band_entered - band_left`, the same for bytes. Proxy-Wasm has no
//! histograms, so the time waited is a cumulative bucket counter per bound (`le`), with a
//! sum and a count, read as a Prometheus histogram.

use wasm_epp_host::{Counter, Gauge, Metrics};

/// Upper bounds of the wait-time buckets, in ms: from one waiting tick to past the TTL.
pub const WAIT_BUCKETS_MS: [u64; 13] = [5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000];

/// Why a request left the queue without being sent to a pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// Waited its TTL with pods in the pool (429).
    TtlExpired,
    /// Waited its TTL with no pod at all (503).
    NoPods,
    /// Its band or the worker's queue was full (429).
    Capacity,
    /// Evicted by a request of higher priority (sheddable only, 429).
    Evicted,
    /// Its client went away while it waited.
    ClientGone,
    /// Released, but no pod could take it after all (503).
    NoRoute,
    /// Released, but the gateway's subset hint names no pod that may take it (503).
    NoEndpoints,
    /// Released, but no pod serves its model any more (404, as had it arrived then).
    UnknownModel,
}

impl DropReason {
    pub fn label(self) -> &'static str {
        match self {
            Self::TtlExpired => "ttl_expired",
            Self::NoPods => "no_pods",
            Self::Capacity => "capacity",
            Self::Evicted => "evicted",
            Self::ClientGone => "client_gone",
            Self::NoRoute => "no_route",
            Self::NoEndpoints => "no_endpoints",
            Self::UnknownModel => "unknown_model",
        }
    }
}

pub struct FlowStats {
    pub queued: Counter,
    pub released: Counter,
    /// Sent on at once: nothing waited and the pool had room.
    pub direct: Counter,
    wait_sum_ms: Counter,
    wait_count: Counter,
    pool_saturated: Gauge,
}

impl FlowStats {
    pub fn define(metrics: &Metrics) -> Self {
        Self {
            queued: metrics.announced_counter("wasm_epp.flow.queued"),
            released: metrics.announced_counter("wasm_epp.flow.released"),
            direct: metrics.announced_counter("wasm_epp.flow.dispatched_directly"),
            wait_sum_ms: metrics.announced_counter("wasm_epp.flow.wait_ms_sum"),
            wait_count: metrics.announced_counter("wasm_epp.flow.wait_ms_count"),
            pool_saturated: metrics.gauge("wasm_epp.flow.pool_saturated"),
        }
    }

    pub fn band_entered(&self, metrics: &Metrics, priority: i32, bytes: u64) {
        let band = band_label(priority);
        metrics.add_labelled("wasm_epp.flow.band_entered", &band, 1);
        metrics.add_labelled("wasm_epp.flow.band_entered_bytes", &band, bytes);
    }

    pub fn band_left(&self, metrics: &Metrics, priority: i32, bytes: u64) {
        let band = band_label(priority);
        metrics.add_labelled("wasm_epp.flow.band_left", &band, 1);
        metrics.add_labelled("wasm_epp.flow.band_left_bytes", &band, bytes);
    }

    pub fn dropped(&self, metrics: &Metrics, reason: DropReason) {
        metrics.add_labelled("wasm_epp.flow.dropped", reason.label(), 1);
    }

    /// A request was released after waiting `waited_ms`; `worker` names the releasing
    /// worker (its in-flight slot), so the split between workers can be read.
    pub fn released_after(&self, metrics: &Metrics, waited_ms: u64, worker: Option<usize>) {
        metrics.increment(self.released);
        metrics.add(self.wait_sum_ms, waited_ms);
        metrics.increment(self.wait_count);
        for bound in WAIT_BUCKETS_MS.iter().filter(|b| waited_ms <= **b) {
            metrics.add_labelled("wasm_epp.flow.wait_ms_bucket", &format!("le_{bound}"), 1);
        }
        metrics.add_labelled("wasm_epp.flow.wait_ms_bucket", "le_inf", 1);
        if let Some(slot) = worker {
            metrics.add_labelled("wasm_epp.flow.released_by_worker", &format!("w{slot}"), 1);
        }
    }

    pub fn saturation(&self, metrics: &Metrics, pod: &str, saturated: bool) {
        let label: String = pod.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
        metrics.set_labelled("wasm_epp.flow.pod_saturated.pod", &label, u64::from(saturated));
    }

    pub fn pool_saturated(&self, metrics: &Metrics, saturated: bool) {
        metrics.set(self.pool_saturated, u64::from(saturated));
    }
}

/// `p2` for priority 2, `n1` for -1: stat names carry no sign.
pub fn band_label(priority: i32) -> String {
    if priority < 0 {
        format!("n{}", priority.unsigned_abs())
    } else {
        format!("p{priority}")
    }
}
