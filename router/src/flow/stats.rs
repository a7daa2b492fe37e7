//! Flow-control stats (`wasm_epp.flow.*`, `wasm_epp_flow_*` in Prometheus).
//!
//! Envoy gauges defined by several worker VMs are one stat that each worker overwrites, so
//! queue sizes are counted as what entered and what left each band (counters sum across
//! workers): length = `band_entered - band_left`, the same for bytes. Proxy-Wasm has no
//! histograms, so the time waited is a [`CumulativeHistogram`] (a counter per bound, `le`,
//! every bucket shown at 0 from the start, with a sum and a count), read as a Prometheus
//! histogram.

use wasm_epp_host::{Counter, Gauge, Metrics};

use crate::histogram::CumulativeHistogram;

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
    pub const ALL: [DropReason; 8] = [
        Self::TtlExpired,
        Self::NoPods,
        Self::Capacity,
        Self::Evicted,
        Self::ClientGone,
        Self::NoRoute,
        Self::NoEndpoints,
        Self::UnknownModel,
    ];

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
    /// Time waited by released requests, ms: `wasm_epp.flow.wait_ms_bucket.le_<bound>` (and
    /// `le_+Inf`), `_sum`, `_count`.
    wait: CumulativeHistogram,
    pool_saturated: Gauge,
}

/// `wasm_epp.flow.dropped.<reason>` -> `wasm_epp_flow_dropped{reason="ttl_expired"}`.
const DROPPED_FAMILY: &str = "wasm_epp.flow.dropped";

impl FlowStats {
    pub fn define(metrics: &Metrics) -> Self {
        // Every reason shows at 0 from the start, as the picks' reasons do: the refusals'
        // alert (WasmEppFlowControlRefusing) then sees the first drops too, which `rate`
        // misses on a series born at 1, and the dashboard shows 0, not no data.
        for reason in DropReason::ALL {
            metrics.announce_labelled(DROPPED_FAMILY, reason.label());
        }
        Self {
            queued: metrics.announced_counter("wasm_epp.flow.queued"),
            released: metrics.announced_counter("wasm_epp.flow.released"),
            direct: metrics.announced_counter("wasm_epp.flow.dispatched_directly"),
            // Every bucket exists from the start, as the decision time's: a bucket born at its
            // first count has no earlier sample, so `rate` misses that count and
            // `histogram_quantile` reads the buckets below it as empty.
            wait: CumulativeHistogram::define(
                metrics,
                &WAIT_BUCKETS_MS,
                |bound| format!("wasm_epp.flow.wait_ms_bucket.le_{bound}"),
                "wasm_epp.flow.wait_ms_sum",
                "wasm_epp.flow.wait_ms_count",
            ),
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
        metrics.add_labelled(DROPPED_FAMILY, reason.label(), 1);
    }

    /// A request was released after waiting `waited_ms`; `worker` names the releasing
    /// worker (its in-flight slot), so the split between workers can be read.
    pub fn released_after(&self, metrics: &Metrics, waited_ms: u64, worker: Option<usize>) {
        metrics.increment(self.released);
        self.wait.observe(metrics, waited_ms);
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

#[cfg(test)]
mod tests {
    use wasm_epp_host::MockHost;

    use super::*;

    const BUCKET: &str = "wasm_epp.flow.wait_ms_bucket";

    #[test]
    fn every_drop_reason_is_defined_at_zero_before_the_first_drop() {
        let host = MockHost::new();
        let metrics = Metrics::new();
        let stats = FlowStats::define(&metrics);
        metrics.flush(&host);
        for reason in DropReason::ALL {
            let name = format!("wasm_epp.flow.dropped.{}", reason.label());
            assert!(host.metric_names.borrow().iter().any(|(n, _)| *n == name), "{name} not defined at start");
        }
        stats.dropped(&metrics, DropReason::TtlExpired);
        metrics.flush(&host);
        assert_eq!(host.metric("wasm_epp.flow.dropped.ttl_expired"), 1);
        assert_eq!(host.metric("wasm_epp.flow.dropped.capacity"), 0);
    }

    #[test]
    fn every_wait_bucket_is_defined_at_zero_before_the_first_release() {
        let host = MockHost::new();
        let metrics = Metrics::new();
        let stats = FlowStats::define(&metrics);
        metrics.flush(&host);
        let defined = |name: &str| host.metric_names.borrow().iter().any(|(n, _)| n == name);
        for bound in WAIT_BUCKETS_MS {
            assert!(defined(&format!("{BUCKET}.le_{bound}")), "bucket {bound} not defined at start");
        }
        // `+Inf`, as the other histograms name it (the `le` tag rule makes it le="+Inf").
        assert!(defined(&format!("{BUCKET}.le_+Inf")));
        assert!(defined("wasm_epp.flow.wait_ms_sum") && defined("wasm_epp.flow.wait_ms_count"));

        // A wait of 750 ms: in (500, 1000], so the 500 bucket stays at 0, not missing.
        stats.released_after(&metrics, 750, None);
        metrics.flush(&host);
        assert_eq!(host.metric(&format!("{BUCKET}.le_500")), 0);
        assert_eq!(host.metric(&format!("{BUCKET}.le_1000")), 1);
        assert_eq!(host.metric(&format!("{BUCKET}.le_60000")), 1);
        assert_eq!(host.metric(&format!("{BUCKET}.le_+Inf")), 1);
        assert_eq!(host.metric("wasm_epp.flow.wait_ms_sum"), 750);
        assert_eq!(host.metric("wasm_epp.flow.wait_ms_count"), 1);
    }
}
