//! What a dashboard needs about decisions: picks by reason and the decision-time histogram.
//!
//! Both are plain counters (Proxy-Wasm histograms would cost a host call per request; these
//! are counted in Wasm memory and flushed on the tick like every other stat). Names carry the
//! label after a fixed word, and the bootstrap's `stats_tags` rules (envoy/envoy.yaml.template)
//! make labels of them:
//! - `wasm_epp.picks_by_reason.reason.<reason>` -> `wasm_epp_picks_by_reason{reason="load"}`
//! - `wasm_epp.decision_time_us_bucket.le.<bound>` -> `wasm_epp_decision_time_us_bucket{le="50"}`,
//!   cumulative like a Prometheus histogram's buckets (the last is `le="+Inf"`), with
//!   `wasm_epp_decision_time_us_sum` and `_count`, so `histogram_quantile` reads them as is.

use wasm_epp_host::{Counter, Metrics};

use crate::histogram::CumulativeHistogram;

/// Why a pod was chosen (or the request refused), most specific first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PickReason {
    /// No usable pod data: in-flight counts alone (or the pool service silent too long).
    FailOpen,
    /// The request's session pod was kept.
    Session,
    /// Pods holding the prompt's prefix narrowed the field.
    Affinity,
    /// Load alone decided (queue, KV, in-flight scorers).
    Load,
    /// A sheddable request refused (429): every pod saturated.
    Shed,
}

impl PickReason {
    pub const ALL: [PickReason; 5] = [Self::FailOpen, Self::Session, Self::Affinity, Self::Load, Self::Shed];

    pub fn label(self) -> &'static str {
        match self {
            Self::FailOpen => "fail_open",
            Self::Session => "session",
            Self::Affinity => "affinity",
            Self::Load => "load",
            Self::Shed => "shed",
        }
    }
}

/// Upper bounds of the decision-time buckets, µs. A decision takes tens of µs on a small
/// pool (docs/performance.md); the top bounds catch a large pool or a slow, shared core.
pub const DECISION_TIME_BOUNDS_US: [u64; 10] = [10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000];

pub struct DecisionStats {
    by_reason: [Counter; PickReason::ALL.len()],
    time: CumulativeHistogram,
}

impl DecisionStats {
    pub fn define(metrics: &Metrics) -> Self {
        let by_reason =
            PickReason::ALL.map(|r| metrics.counter(&format!("wasm_epp.picks_by_reason.reason.{}", r.label())));
        // Every reason and bucket shows from the start, at 0: a dashboard's fail-open or shed
        // rate is then 0, not "no data".
        for counter in &by_reason {
            metrics.announce(*counter);
        }
        let time = CumulativeHistogram::define(
            metrics,
            &DECISION_TIME_BOUNDS_US,
            |bound| format!("wasm_epp.decision_time_us_bucket.le.{bound}"),
            "wasm_epp.decision_time_us_sum",
            "wasm_epp.decision_time_us_count",
        );
        Self { by_reason, time }
    }

    pub fn count_reason(&self, metrics: &Metrics, reason: PickReason) {
        if let Some(counter) = PickReason::ALL.iter().position(|r| *r == reason).and_then(|i| self.by_reason.get(i)) {
            metrics.increment(*counter);
        }
    }

    /// Records one decision that took `elapsed_us`.
    pub fn observe_us(&self, metrics: &Metrics, elapsed_us: u64) {
        self.time.observe(metrics, elapsed_us);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_epp_host::MockHost;

    #[test]
    fn buckets_are_cumulative_and_end_in_inf() {
        let host = MockHost::new();
        let metrics = Metrics::new();
        let stats = DecisionStats::define(&metrics);
        for elapsed in [7, 40, 40, 20_000] {
            stats.observe_us(&metrics, elapsed);
        }
        metrics.flush(&host);
        assert_eq!(host.metric("wasm_epp.decision_time_us_bucket.le.10"), 1);
        assert_eq!(host.metric("wasm_epp.decision_time_us_bucket.le.50"), 3);
        assert_eq!(host.metric("wasm_epp.decision_time_us_bucket.le.10000"), 3);
        assert_eq!(host.metric("wasm_epp.decision_time_us_bucket.le.+Inf"), 4);
        assert_eq!(host.metric("wasm_epp.decision_time_us_count"), 4);
        assert_eq!(host.metric("wasm_epp.decision_time_us_sum"), 20_087);
    }

    #[test]
    fn reasons_count_apart() {
        let host = MockHost::new();
        let metrics = Metrics::new();
        let stats = DecisionStats::define(&metrics);
        stats.count_reason(&metrics, PickReason::Session);
        stats.count_reason(&metrics, PickReason::Load);
        stats.count_reason(&metrics, PickReason::Load);
        metrics.flush(&host);
        assert_eq!(host.metric("wasm_epp.picks_by_reason.reason.load"), 2);
        assert_eq!(host.metric("wasm_epp.picks_by_reason.reason.session"), 1);
        assert_eq!(host.metric("wasm_epp.picks_by_reason.reason.shed"), 0);
        assert!(
            host.metric_names.borrow().iter().any(|(name, _)| name == "wasm_epp.picks_by_reason.reason.shed"),
            "defined at 0"
        );
    }
}
