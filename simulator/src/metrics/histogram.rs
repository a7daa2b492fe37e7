//! Prometheus histograms with vLLM's bucket boundaries.
//!
//! Dashboards and the picker's tests compare these series with real vLLM output, so the bucket
//! lists are vLLM V1's own (`vllm/v1/metrics/loggers.py`).

/// `vllm:time_to_first_token_seconds` buckets.
pub const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
    160.0, 640.0, 2560.0,
];
/// `vllm:inter_token_latency_seconds` (formerly `time_per_output_token_seconds`) buckets.
pub const INTER_TOKEN_BUCKETS: &[f64] =
    &[0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0];
/// `vllm:e2e_request_latency_seconds` and `vllm:request_queue_time_seconds` buckets.
pub const REQUEST_LATENCY_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0,
    1920.0, 7680.0,
];

/// A cumulative-on-output histogram: per-bucket counts, a sum and a count.
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    bounds: &'static [f64],
    /// Observations per bucket (not cumulative); the last entry is the `+Inf` overflow.
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    /// An empty histogram with the given upper bounds (ascending).
    pub fn new(bounds: &'static [f64]) -> Self {
        Self { bounds, counts: vec![0; bounds.len() + 1], sum: 0.0, count: 0 }
    }

    /// Records one value (in seconds for every histogram here).
    pub fn observe(&mut self, value: f64) {
        let bucket = self.bounds.iter().position(|bound| value <= *bound).unwrap_or(self.bounds.len());
        if let Some(slot) = self.counts.get_mut(bucket) {
            *slot += 1;
        }
        self.sum += value;
        self.count += 1;
    }

    /// `(upper bound, cumulative count)` pairs, ending with `(+Inf, count)`.
    pub fn cumulative(&self) -> Vec<(f64, u64)> {
        let mut running_total = 0;
        let mut pairs = Vec::with_capacity(self.counts.len());
        for (index, count) in self.counts.iter().enumerate() {
            running_total += count;
            let bound = self.bounds.get(index).copied().unwrap_or(f64::INFINITY);
            pairs.push((bound, running_total));
        }
        pairs
    }

    /// Sum of observed values.
    pub fn sum(&self) -> f64 {
        self.sum
    }

    /// Number of observations.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Mean of observed values, 0 when empty.
    pub fn mean(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum / self.count as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_and_end_with_inf() {
        let mut histogram = Histogram::new(&[0.1, 1.0]);
        for value in [0.05, 0.1, 0.5, 3.0] {
            histogram.observe(value);
        }
        assert_eq!(histogram.cumulative(), vec![(0.1, 2), (1.0, 3), (f64::INFINITY, 4)]);
        assert_eq!(histogram.count(), 4);
        assert!((histogram.sum() - 3.65).abs() < 1e-9);
        assert!((histogram.mean() - 0.9125).abs() < 1e-9);
    }

    #[test]
    fn vllm_bucket_lists_are_ascending() {
        for bounds in [TTFT_BUCKETS, INTER_TOKEN_BUCKETS, REQUEST_LATENCY_BUCKETS] {
            assert!(bounds.windows(2).all(|pair| pair[0] < pair[1]));
        }
    }
}
