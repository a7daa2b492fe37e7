//! The few numbers the benchmark reads from a pod's Prometheus text: prefix-cache counters
//! (for the hit rate) and queue gauges (for the balance sampler). Series of one metric with
//! different labels (one per engine, per model) are summed, as vLLM's data-parallel pods need.

/// Sum of every sample of `name` (any labels) in `text`; `None` when the metric is absent.
pub fn sum_of(text: &str, name: &str) -> Option<f64> {
    let mut total = None;
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(name) else { continue };
        if !(rest.starts_with('{') || rest.starts_with(' ')) {
            continue;
        }
        let after_labels = match rest.strip_prefix('{') {
            Some(labelled) => labelled.rsplit_once('}').map(|(_, value)| value).unwrap_or(""),
            None => rest,
        };
        let Some(value) = after_labels.split_whitespace().next().and_then(|v| v.parse::<f64>().ok()) else { continue };
        if value.is_finite() {
            *total.get_or_insert(0.0) += value;
        }
    }
    total
}

pub const PREFIX_QUERIES: &str = "vllm:prefix_cache_queries_total";
pub const PREFIX_HITS: &str = "vllm:prefix_cache_hits_total";
pub const WAITING: &str = "vllm:num_requests_waiting";
pub const RUNNING: &str = "vllm:num_requests_running";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_labelled_series_and_ignores_lookalikes() {
        let text = "# HELP vllm:prefix_cache_hits_total hits\n\
                    vllm:prefix_cache_hits_total{engine=\"0\",model_name=\"m\"} 100.0\n\
                    vllm:prefix_cache_hits_total{engine=\"1\",model_name=\"m\"} 28\n\
                    vllm:prefix_cache_hits_total_created 17\n\
                    vllm:num_requests_waiting 3\n";
        assert_eq!(sum_of(text, PREFIX_HITS), Some(128.0));
        assert_eq!(sum_of(text, WAITING), Some(3.0));
        assert_eq!(sum_of(text, PREFIX_QUERIES), None);
    }
}
