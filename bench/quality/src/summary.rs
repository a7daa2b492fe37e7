//! Turns one replay into the numbers the report shows: one [`QualityRow`] (the fixed schema of
//! `quality.json`) plus [`RunNotes`] that only the markdown report and the console show.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::balance::Balance;
use crate::driver::Replay;
use crate::pool::PrefixCounters;

/// Distinct error messages kept per run, to say why requests failed without flooding the report.
const ERROR_SAMPLES: usize = 3;
/// Successful replies that named no pod are counted under this key of `pod_share`.
pub const UNKNOWN_POD: &str = "unknown";

/// One workload on one target: exactly the keys of `bench/results/quality.json`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct QualityRow {
    pub workload: String,
    pub target: String,
    /// Prefix-cache hits / queries (tokens) over the run, from the pods' own counters; 0..1.
    pub hit_rate: Option<f64>,
    pub ttft_p50_ms: Option<f64>,
    pub ttft_p99_ms: Option<f64>,
    pub e2e_p50_ms: Option<f64>,
    pub e2e_p99_ms: Option<f64>,
    /// Inter-token latency: gaps between a stream's consecutive chunks, as the client saw them.
    pub itl_p50_ms: Option<f64>,
    pub itl_p99_ms: Option<f64>,
    pub output_tokens_per_s: f64,
    /// Successful requests per second of wall time.
    pub requests_per_s: f64,
    pub errors: u64,
    /// Pod (`ip:port`, from `x-served-by`) -> share of the successful requests it served.
    pub pod_share: BTreeMap<String, f64>,
    /// The figure llm-d and issue 14 compare (older result files lack it).
    #[serde(default)]
    pub ttft_p90_ms: Option<f64>,
}

/// What a run produced besides its row.
#[derive(Debug, Clone, Default)]
pub struct RunNotes {
    pub requests: usize,
    pub wall_s: f64,
    /// Share of sampling rounds in which a pod was idle while another had requests waiting.
    pub idle_while_queued: Option<f64>,
    pub error_samples: Vec<String>,
    /// Models workloads only: what the pods counted (see `crate::models`).
    pub models: Option<crate::models::ModelNotes>,
    /// Rate-ladder workloads only: figures per stage (`stages.json`).
    pub stages: Vec<crate::stages::StageRow>,
}

pub fn summarize(
    workload: &str,
    target: &str,
    replay: &Replay,
    counters: Option<(PrefixCounters, PrefixCounters)>,
    pool: &[String],
    balance: Balance,
) -> (QualityRow, RunNotes) {
    let successes: Vec<_> = replay.outcomes.iter().filter_map(|outcome| outcome.as_ref().ok()).collect();
    let mut ttft: Vec<f64> = successes.iter().map(|s| s.ttft.as_secs_f64() * 1000.0).collect();
    let mut e2e: Vec<f64> = successes.iter().map(|s| s.e2e.as_secs_f64() * 1000.0).collect();
    let mut itl: Vec<f64> = successes.iter().flat_map(|s| s.token_gaps_ms.iter().copied()).collect();
    ttft.sort_by(f64::total_cmp);
    e2e.sort_by(f64::total_cmp);
    itl.sort_by(f64::total_cmp);
    let wall_s = replay.wall.as_secs_f64().max(f64::MIN_POSITIVE);
    let output_tokens: u64 = successes.iter().map(|s| s.output_tokens).sum();

    let mut served: BTreeMap<String, usize> = pool.iter().map(|pod| (pod.clone(), 0)).collect();
    for success in &successes {
        let pod = success.served_by.clone().unwrap_or_else(|| UNKNOWN_POD.to_string());
        *served.entry(pod).or_insert(0) += 1;
    }
    let total = successes.len().max(1) as f64;
    let pod_share = served.into_iter().map(|(pod, count)| (pod, round(count as f64 / total, 4))).collect();

    let mut error_samples: Vec<String> = Vec::new();
    for error in replay.outcomes.iter().filter_map(|outcome| outcome.as_ref().err()) {
        if error_samples.len() < ERROR_SAMPLES && !error_samples.contains(error) {
            error_samples.push(error.clone());
        }
    }
    let row = QualityRow {
        workload: workload.to_string(),
        target: target.to_string(),
        hit_rate: counters.and_then(|(before, after)| before.hit_rate_until(&after)).map(|rate| round(rate, 4)),
        ttft_p50_ms: percentile(&ttft, 0.50).map(|ms| round(ms, 1)),
        ttft_p99_ms: percentile(&ttft, 0.99).map(|ms| round(ms, 1)),
        e2e_p50_ms: percentile(&e2e, 0.50).map(|ms| round(ms, 1)),
        e2e_p99_ms: percentile(&e2e, 0.99).map(|ms| round(ms, 1)),
        itl_p50_ms: percentile(&itl, 0.50).map(|ms| round(ms, 1)),
        itl_p99_ms: percentile(&itl, 0.99).map(|ms| round(ms, 1)),
        output_tokens_per_s: round(output_tokens as f64 / wall_s, 1),
        requests_per_s: round(successes.len() as f64 / wall_s, 2),
        errors: (replay.outcomes.len() - successes.len()) as u64,
        pod_share,
        ttft_p90_ms: percentile(&ttft, 0.90).map(|ms| round(ms, 1)),
    };
    let notes = RunNotes {
        requests: replay.outcomes.len(),
        wall_s: round(wall_s, 1),
        idle_while_queued: balance.idle_while_queued_share(),
        error_samples,
        models: None,
        stages: Vec::new(),
    };
    (row, notes)
}

/// Nearest-rank percentile of sorted values (`quantile` in 0..=1).
pub fn percentile(sorted: &[f64], quantile: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (quantile * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len()) - 1).copied()
}

fn round(value: f64, decimals: i32) -> f64 {
    let scale = 10f64.powi(decimals);
    (value * scale).round() / scale
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::client::Success;

    fn success(ttft_ms: u64, pod: &str) -> Result<Success, String> {
        Ok(Success {
            started: std::time::Instant::now(),
            ttft: Duration::from_millis(ttft_ms),
            e2e: Duration::from_millis(ttft_ms * 10),
            output_tokens: 10,
            served_by: Some(pod.to_string()),
            text: String::new(),
            token_gaps_ms: vec![ttft_ms as f64 / 2.0],
            decision: None,
            cached_tokens: None,
            prompt_tokens: None,
            prompt_key: None,
        })
    }

    #[test]
    fn nearest_rank_percentiles() {
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&values, 0.5), Some(50.0));
        assert_eq!(percentile(&values, 0.99), Some(99.0));
        assert_eq!(percentile(&[7.0], 0.99), Some(7.0));
        assert_eq!(percentile(&[], 0.5), None);
    }

    #[test]
    fn a_run_becomes_one_row() {
        let pool = vec!["p1".to_string(), "p2".to_string(), "p3".to_string()];
        let replay = Replay {
            outcomes: vec![success(10, "p1"), success(20, "p1"), success(30, "p2"), Err("status 503".into())],
            started: std::time::Instant::now(),
            wall: Duration::from_secs(2),
        };
        let before = PrefixCounters { queries: 100.0, hits: 10.0 };
        let after = PrefixCounters { queries: 300.0, hits: 110.0 };
        let (row, notes) = summarize("w", "t", &replay, Some((before, after)), &pool, Balance::default());
        assert_eq!(row.hit_rate, Some(0.5));
        assert_eq!(row.ttft_p50_ms, Some(20.0));
        assert_eq!((row.itl_p50_ms, row.itl_p99_ms), (Some(10.0), Some(15.0)));
        assert_eq!(row.errors, 1);
        assert_eq!(row.requests_per_s, 1.5);
        assert_eq!(row.output_tokens_per_s, 15.0);
        assert_eq!(row.pod_share.get("p1"), Some(&0.6667));
        assert_eq!(row.pod_share.get("p3"), Some(&0.0), "idle pods are listed");
        assert_eq!(notes.error_samples, vec!["status 503".to_string()]);
        let keys: Vec<String> = serde_json::to_value(&row).unwrap().as_object().unwrap().keys().cloned().collect();
        assert_eq!(keys.len(), 14);
    }
}
