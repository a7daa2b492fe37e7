//! The gateway's own per-arm figures, read from Envoy's `/stats/prometheus` after a compared
//! run: `wasm_epp_comparison_requests{arm=..}`, `_errors`, and the time histograms
//! `wasm_epp_comparison_first_byte_ms_bucket{le="50",arm="picker"}` (Envoy puts the `le` tag
//! first, then `arm`) and `wasm_epp_comparison_duration_ms_*`, whose quantiles are computed
//! as Prometheus's `histogram_quantile` does: linear interpolation within the bucket.

use serde::Serialize;

use crate::prometheus::series;

/// The filter's bucket bounds, ms (then `+Inf`): the filter's own list, so the two never part.
pub use wasm_epp_router::comparison_stats::TIME_BOUNDS_MS as BOUNDS_MS;

/// One arm as the gateway counted it.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct GatewayArm {
    /// Requests the gateway gave this arm.
    pub requests: f64,
    /// Its answers with a 5xx status.
    pub errors: f64,
    /// Streamed answers whose first byte was timed (pick → first body byte).
    pub first_byte_count: f64,
    pub first_byte_p50_ms: Option<f64>,
    pub first_byte_p90_ms: Option<f64>,
    pub first_byte_p99_ms: Option<f64>,
    /// `_sum` / `_count`.
    pub first_byte_mean_ms: Option<f64>,
    /// Cumulative counts of the first-byte buckets, one per bound of [`BOUNDS_MS`], then `+Inf`.
    pub first_byte_cumulative: Vec<f64>,
    /// Every answer, pick → end.
    pub duration_count: f64,
    pub duration_p50_ms: Option<f64>,
    pub duration_p90_ms: Option<f64>,
}

/// `arm`'s figures from the text of `/stats/prometheus`; `None` when the gateway exported no
/// comparison stats for it (the comparison was off).
pub fn read_arm(text: &str, arm: &str) -> Option<GatewayArm> {
    let requests = series(text, &format!("wasm_epp_comparison_requests{{arm=\"{arm}\"}}"))?;
    let errors = series(text, &format!("wasm_epp_comparison_errors{{arm=\"{arm}\"}}")).unwrap_or(0.0);
    let first_byte = buckets(text, "first_byte_ms", arm);
    let duration = buckets(text, "duration_ms", arm);
    let count = |buckets: &[(f64, f64)]| buckets.last().map_or(0.0, |(_, count)| *count);
    let first_byte_sum = series(text, &format!("wasm_epp_comparison_first_byte_ms_sum{{arm=\"{arm}\"}}"));
    let first_byte_count = count(&first_byte);
    Some(GatewayArm {
        requests,
        errors,
        first_byte_count,
        first_byte_p50_ms: quantile(&first_byte, 0.50),
        first_byte_p90_ms: quantile(&first_byte, 0.90),
        first_byte_p99_ms: quantile(&first_byte, 0.99),
        first_byte_mean_ms: first_byte_sum.filter(|_| first_byte_count > 0.0).map(|sum| sum / first_byte_count),
        first_byte_cumulative: first_byte.iter().map(|(_, count)| *count).collect(),
        duration_count: count(&duration),
        duration_p50_ms: quantile(&duration, 0.50),
        duration_p90_ms: quantile(&duration, 0.90),
    })
}

/// `(upper bound, cumulative count)` of every bucket of one histogram, `+Inf` last (as
/// `f64::INFINITY`); a bucket Envoy did not export reads as the one before it.
fn buckets(text: &str, name: &str, arm: &str) -> Vec<(f64, f64)> {
    let labels =
        BOUNDS_MS.iter().map(|bound| (*bound as f64, bound.to_string())).chain([(f64::INFINITY, "+Inf".into())]);
    let mut previous = 0.0;
    labels
        .map(|(bound, label)| {
            let selector = format!("wasm_epp_comparison_{name}_bucket{{le=\"{label}\",arm=\"{arm}\"}}");
            previous = series(text, &selector).unwrap_or(previous);
            (bound, previous)
        })
        .collect()
}

/// The `quantile` (0..=1) of a histogram of cumulative buckets, `+Inf` last, as Prometheus's
/// `histogram_quantile`: the bucket holding the rank, linearly within it (from 0 for the
/// first); a rank in the `+Inf` bucket reads as the highest finite bound. `None` when empty.
pub fn quantile(buckets: &[(f64, f64)], quantile: f64) -> Option<f64> {
    let total = buckets.last().map(|(_, count)| *count).filter(|count| *count > 0.0)?;
    let rank = quantile * total;
    let finite = buckets.len().checked_sub(1)?;
    let Some(index) = buckets.iter().take(finite).position(|(_, count)| *count >= rank) else {
        return finite.checked_sub(1).and_then(|i| buckets.get(i)).map(|(bound, _)| *bound);
    };
    let (end, count) = *buckets.get(index)?;
    let (start, below) = index.checked_sub(1).and_then(|i| buckets.get(i)).copied().unwrap_or((0.0, 0.0));
    let within = count - below;
    if within <= 0.0 {
        return Some(end);
    }
    Some(start + (end - start) * (rank - below) / within)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate_within_the_bucket_as_prometheus_does() {
        // 10 observations: 2 up to 10 ms, 6 in 10..25, 2 in 25..50.
        let buckets: Vec<(f64, f64)> =
            vec![(10.0, 2.0), (25.0, 8.0), (50.0, 10.0), (100.0, 10.0), (f64::INFINITY, 10.0)];
        // Rank 5: 3 of the 6 in the 10..25 bucket: 10 + 15 × 3/6.
        assert_eq!(quantile(&buckets, 0.5), Some(17.5));
        // Rank 9: 1 of the 2 in 25..50.
        assert_eq!(quantile(&buckets, 0.9), Some(37.5));
        // Rank 1: within the first bucket, from 0.
        assert_eq!(quantile(&buckets, 0.1), Some(5.0));
        assert_eq!(quantile(&[(10.0, 0.0), (f64::INFINITY, 0.0)], 0.5), None);
        // Beyond the last finite bound: that bound.
        assert_eq!(quantile(&[(10.0, 1.0), (25.0, 1.0), (f64::INFINITY, 4.0)], 0.9), Some(25.0));
    }

    #[test]
    fn reads_an_arm_as_envoy_prints_it() {
        let mut text = String::from(
            "wasm_epp_comparison_requests{arm=\"picker\"} 12\nwasm_epp_comparison_errors{arm=\"picker\"} 1\n\
             wasm_epp_comparison_first_byte_ms_sum{arm=\"picker\"} 600\n",
        );
        // 10 answers: 2 by 25 ms, 6 more by 30, the last 2 by 60 (the buckets up to 50 hold 8); every bucket exported, as
        // the filter announces them all.
        let cumulative = |bound: u64| match bound {
            0..=20 => 0,
            21..=25 => 2,
            26..=50 => 8,
            _ => 10,
        };
        for bound in BOUNDS_MS {
            text.push_str(&format!(
                "wasm_epp_comparison_first_byte_ms_bucket{{le=\"{bound}\",arm=\"picker\"}} {}\n",
                cumulative(bound)
            ));
        }
        text.push_str("wasm_epp_comparison_first_byte_ms_bucket{le=\"+Inf\",arm=\"picker\"} 10\n");
        text.push_str("wasm_epp_comparison_duration_ms_bucket{le=\"+Inf\",arm=\"picker\"} 11\n");
        let arm = read_arm(&text, "picker").unwrap();
        assert_eq!((arm.requests, arm.errors, arm.first_byte_count, arm.duration_count), (12.0, 1.0, 10.0, 11.0));
        // Rank 5: 3 of the 6 in the bucket (25, 30].
        assert_eq!(arm.first_byte_p50_ms, Some(27.5));
        assert_eq!(arm.first_byte_mean_ms, Some(60.0));
        let at = |bound: u64| BOUNDS_MS.iter().position(|b| *b == bound).and_then(|i| arm.first_byte_cumulative.get(i));
        assert_eq!((at(20), at(25), at(50), at(100)), (Some(&0.0), Some(&2.0), Some(&8.0), Some(&10.0)));
        assert_eq!(arm.first_byte_cumulative.len(), BOUNDS_MS.len() + 1);
        assert_eq!(read_arm(&text, "baseline"), None);
    }
}
