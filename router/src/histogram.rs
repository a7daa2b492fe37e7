//! A Prometheus histogram as plain counters: one cumulative counter per bucket bound, then
//! `+Inf`, a sum and a count, counted in Wasm memory and flushed on the tick like every stat
//! (a Proxy-Wasm histogram would cost a host call per observation). The bootstrap's `le` tag
//! rule makes the bound a label, so `histogram_quantile` reads the buckets as they are.

use wasm_epp_host::{Counter, Metrics};

pub struct CumulativeHistogram {
    bounds: &'static [u64],
    /// One per bound, then `+Inf`.
    buckets: Vec<Counter>,
    sum: Counter,
    count: Counter,
}

impl CumulativeHistogram {
    /// Defines (and shows at 0) the buckets, named by `bucket_name` from each bound's text
    /// (`"+Inf"` last), and the sum and count.
    pub fn define(
        metrics: &Metrics,
        bounds: &'static [u64],
        bucket_name: impl Fn(&str) -> String,
        sum_name: &str,
        count_name: &str,
    ) -> Self {
        let labels = bounds.iter().map(u64::to_string).chain(std::iter::once("+Inf".to_string()));
        Self {
            bounds,
            buckets: labels.map(|label| metrics.announced_counter(&bucket_name(&label))).collect(),
            sum: metrics.announced_counter(sum_name),
            count: metrics.announced_counter(count_name),
        }
    }

    /// One observation, in every bucket whose bound it is under.
    pub fn observe(&self, metrics: &Metrics, value: u64) {
        let first = self.bounds.iter().position(|bound| value <= *bound).unwrap_or(self.bounds.len());
        for bucket in self.buckets.iter().skip(first) {
            metrics.increment(*bucket);
        }
        metrics.add(self.sum, value);
        metrics.increment(self.count);
    }
}
