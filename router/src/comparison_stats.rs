//! The comparison's stats, per arm (`comparison` on; see `picker::comparison`): what an
//! operator reads to tell whether the picker serves their traffic faster than the baseline.
//!
//! Counted in Wasm memory and flushed on the tick, as every stat; the arm is a label after a
//! fixed word, made a tag by the bootstrap's `arm` rule (envoy/envoy.yaml.template):
//! - `wasm_epp.comparison_requests.arm.<arm>` -> `wasm_epp_comparison_requests{arm="picker"}`;
//! - `wasm_epp.comparison_errors.arm.<arm>`: answers with a 5xx status (the pod's or Envoy's);
//! - `wasm_epp.comparison_first_byte_ms_bucket.arm.<arm>.le.<bound>` (`_sum`, `_count`):
//!   streamed answers, from the pick to the answer's first body byte (the first token, as
//!   the gateway sees it: what the pick changes of the client's time to first token);
//! - `wasm_epp.comparison_duration_ms_bucket.arm.<arm>.le.<bound>` (`_sum`, `_count`):
//!   every answer, from the pick to its end.

use picker::comparison::Arm;
use wasm_epp_host::{Counter, Metrics};

use crate::histogram::CumulativeHistogram;

/// Upper bounds of the time buckets, ms: 10 ms apart where first tokens come on an idle or
/// busy pod (two arms whose p90s differ by 10 % must not fall in one bucket: a first run with
/// 50 / 100 bounds put both arms' p90 at 94-96 ms while their clients measured 77 and 81),
/// coarser past a second, up to a whole answer of minutes.
pub const TIME_BOUNDS_MS: [u64; 38] = [
    5, 10, 15, 20, 25, 30, 40, 50, 60, 70, 80, 90, 100, 120, 150, 200, 250, 300, 400, 500, 600, 800, 1_000, 1_250,
    1_500, 2_000, 2_500, 3_000, 4_000, 5_000, 7_500, 10_000, 15_000, 20_000, 30_000, 60_000, 120_000, 300_000,
];

/// `wasm_epp.comparison_<name>_bucket.arm.<arm>.le.<bound>`, and its sum and count.
fn time_histogram(metrics: &Metrics, name: &str, arm: &str) -> CumulativeHistogram {
    CumulativeHistogram::define(
        metrics,
        &TIME_BOUNDS_MS,
        |bound| format!("wasm_epp.comparison_{name}_bucket.arm.{arm}.le.{bound}"),
        &format!("wasm_epp.comparison_{name}_sum.arm.{arm}"),
        &format!("wasm_epp.comparison_{name}_count.arm.{arm}"),
    )
}

/// One arm's stats.
pub struct ArmStats {
    requests: Counter,
    errors: Counter,
    first_byte: CumulativeHistogram,
    duration: CumulativeHistogram,
}

impl ArmStats {
    fn define(metrics: &Metrics, arm: Arm) -> Self {
        let label = arm.label();
        Self {
            requests: metrics.announced_counter(&format!("wasm_epp.comparison_requests.arm.{label}")),
            errors: metrics.announced_counter(&format!("wasm_epp.comparison_errors.arm.{label}")),
            first_byte: time_histogram(metrics, "first_byte_ms", label),
            duration: time_histogram(metrics, "duration_ms", label),
        }
    }

    pub fn routed(&self, metrics: &Metrics) {
        metrics.increment(self.requests);
    }

    pub fn failed(&self, metrics: &Metrics) {
        metrics.increment(self.errors);
    }

    pub fn first_byte(&self, metrics: &Metrics, elapsed_ms: u64) {
        self.first_byte.observe(metrics, elapsed_ms);
    }

    pub fn ended(&self, metrics: &Metrics, elapsed_ms: u64) {
        self.duration.observe(metrics, elapsed_ms);
    }
}

/// Both arms' stats; defined (and shown at 0) only when the comparison is on.
pub struct ComparisonStats {
    picker: ArmStats,
    baseline: ArmStats,
}

impl ComparisonStats {
    pub fn define(metrics: &Metrics) -> Self {
        Self { picker: ArmStats::define(metrics, Arm::Picker), baseline: ArmStats::define(metrics, Arm::Baseline) }
    }

    pub fn arm(&self, arm: Arm) -> &ArmStats {
        match arm {
            Arm::Picker => &self.picker,
            Arm::Baseline => &self.baseline,
        }
    }
}

/// A compared request on its way: its arm, when it was routed, and what is left to time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compared {
    pub arm: Arm,
    pub routed_ms: u64,
    /// A streamed answer, whose first byte is timed (a whole answer's comes at its end).
    pub awaiting_first_byte: bool,
    /// Its answer's headers came (from the pod, or Envoy's own reply): its end is timed.
    pub answered: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_epp_host::MockHost;

    #[test]
    fn each_arm_counts_and_times_apart() {
        let host = MockHost::new();
        let metrics = Metrics::new();
        let stats = ComparisonStats::define(&metrics);
        stats.arm(Arm::Baseline).routed(&metrics);
        stats.arm(Arm::Baseline).first_byte(&metrics, 40);
        stats.arm(Arm::Picker).first_byte(&metrics, 20);
        stats.arm(Arm::Picker).ended(&metrics, 400_000);
        stats.arm(Arm::Picker).failed(&metrics);
        metrics.flush(&host);
        assert_eq!(host.metric("wasm_epp.comparison_requests.arm.baseline"), 1);
        assert_eq!(host.metric("wasm_epp.comparison_requests.arm.picker"), 0);
        assert_eq!(host.metric("wasm_epp.comparison_first_byte_ms_bucket.arm.baseline.le.25"), 0);
        assert_eq!(host.metric("wasm_epp.comparison_first_byte_ms_bucket.arm.baseline.le.50"), 1);
        assert_eq!(host.metric("wasm_epp.comparison_first_byte_ms_bucket.arm.picker.le.25"), 1);
        assert_eq!(host.metric("wasm_epp.comparison_first_byte_ms_sum.arm.baseline"), 40);
        assert_eq!(host.metric("wasm_epp.comparison_duration_ms_bucket.arm.picker.le.300000"), 0);
        assert_eq!(host.metric("wasm_epp.comparison_duration_ms_bucket.arm.picker.le.+Inf"), 1);
        assert_eq!(host.metric("wasm_epp.comparison_duration_ms_count.arm.picker"), 1);
        assert_eq!(host.metric("wasm_epp.comparison_errors.arm.picker"), 1);
    }
}
