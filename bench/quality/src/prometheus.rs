//! The few numbers the benchmark reads from a pod's Prometheus text: prefix-cache counters
//! (for the hit rate) and queue gauges (for the balance sampler). Series of one metric with
//! different labels (one per engine, per model) are summed, as vLLM's data-parallel pods need.

pub use vllm_sim::client::{series, sum_of};

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
