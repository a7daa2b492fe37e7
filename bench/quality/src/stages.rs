//! Figures per stage of a rate ladder (workload g): llm-d and issue 14 compare routers at the
//! top stage, which whole-run figures dilute with the stages every router keeps up with.
//!
//! A request belongs to the stage it was scheduled in (by the time it was sent). Output
//! tokens/s of a stage count its requests' tokens over the time from the stage's start to its
//! last answer's end, as guidellm times each rate of a sweep: a router that keeps up finishes
//! soon after the stage ends, one that queues takes longer for the same tokens, so the figure
//! is what the pool delivered for that stage's load, not the arrival rate.

use std::fmt::Write as _;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::driver::Replay;
use crate::summary::percentile;
use crate::workload::{Job, Workload};

/// One stage of one workload on one target: the keys of `stages.json`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StageRow {
    pub workload: String,
    pub target: String,
    /// 1-based, in ladder order.
    pub stage: usize,
    /// Scheduled arrival rate, requests per second.
    pub rate_per_s: f64,
    /// Requests scheduled in the stage, and those that succeeded.
    pub requests: usize,
    pub succeeded: usize,
    pub ttft_p50_ms: Option<f64>,
    pub ttft_p90_ms: Option<f64>,
    pub ttft_p99_ms: Option<f64>,
    pub output_tokens_per_s: f64,
}

/// The stage rows of `replay` (none for a workload without stages).
pub fn summarize(workload: &Workload, target: &str, replay: &Replay) -> Vec<StageRow> {
    let scheduled: Vec<u64> = workload
        .jobs
        .iter()
        .filter_map(|job| match job {
            Job::Scheduled { at_ms, .. } => Some(*at_ms),
            _ => None,
        })
        .collect();
    let successes: Vec<_> = replay.outcomes.iter().filter_map(|outcome| outcome.as_ref().ok()).collect();
    let offset_ms = |at: std::time::Instant| at.saturating_duration_since(replay.started).as_secs_f64() * 1000.0;
    let mut rows = Vec::with_capacity(workload.stages.len());
    for (index, stage) in workload.stages.iter().enumerate() {
        let within = |ms: f64| ms >= stage.start_ms as f64 && ms < stage.end_ms as f64;
        let mine: Vec<_> = successes.iter().filter(|s| within(offset_ms(s.started))).collect();
        let mut ttft: Vec<f64> = mine.iter().map(|s| s.ttft.as_secs_f64() * 1000.0).collect();
        ttft.sort_by(f64::total_cmp);
        let last_end_ms = mine.iter().map(|s| offset_ms(s.started + s.e2e)).fold(0.0, f64::max);
        let span_s = Duration::from_secs_f64(((last_end_ms - stage.start_ms as f64) / 1000.0).max(0.001));
        let tokens: u64 = mine.iter().map(|s| s.output_tokens).sum();
        rows.push(StageRow {
            workload: workload.name.label().to_string(),
            target: target.to_string(),
            stage: index + 1,
            rate_per_s: stage.rate_per_s,
            requests: scheduled.iter().filter(|&&at| within(at as f64)).count(),
            succeeded: mine.len(),
            ttft_p50_ms: percentile(&ttft, 0.50).map(round),
            ttft_p90_ms: percentile(&ttft, 0.90).map(round),
            ttft_p99_ms: percentile(&ttft, 0.99).map(round),
            output_tokens_per_s: round(tokens as f64 / span_s.as_secs_f64()),
        });
    }
    rows
}

/// The per-stage table in markdown, with each target's top-stage ratios to round robin's.
pub fn table(rows: &[StageRow]) -> String {
    let mut out = String::new();
    out.push_str("| workload | target | stage | rate req/s | requests | succeeded | TTFT p50 ms | TTFT p90 ms | TTFT p99 ms | out tok/s |\n");
    out.push_str("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    let ms = |value: Option<f64>| value.map(|v| format!("{v:.0}")).unwrap_or_else(|| "-".to_string());
    for row in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.1} | {} | {} | {} | {} | {} | {:.0} |",
            row.workload,
            row.target,
            row.stage,
            row.rate_per_s,
            row.requests,
            row.succeeded,
            ms(row.ttft_p50_ms),
            ms(row.ttft_p90_ms),
            ms(row.ttft_p99_ms),
            row.output_tokens_per_s
        );
    }
    let mut workloads: Vec<&str> = Vec::new();
    for row in rows {
        if !workloads.contains(&row.workload.as_str()) {
            workloads.push(&row.workload);
        }
    }
    for workload in workloads {
        let top =
            rows.iter().filter(|r| r.workload == workload && r.target == "envoy-round-robin").max_by_key(|r| r.stage);
        let Some(baseline) = top else { continue };
        let _ = write!(
            out,
            "\n{workload}: top stage against round robin (issue 14's goals: out tok/s ≥ 2.1 ×, TTFT p90 ≥ 100 × lower). \
             A stage's out tok/s is its answers' output tokens over the time from the stage's start to its last \
             answer: a target still working off earlier stages' backlog gets a lower figure, so the ratio can \
             overstate a gain where round robin fell behind before the top stage; read it with the per-stage \
             table and the whole run's output:\n\n"
        );
        let peers =
            rows.iter().filter(|r| r.workload == workload && r.stage == baseline.stage && r.target != baseline.target);
        for row in peers {
            let speedup = row.output_tokens_per_s / baseline.output_tokens_per_s.max(f64::MIN_POSITIVE);
            let lower = match (baseline.ttft_p90_ms, row.ttft_p90_ms) {
                (Some(theirs), Some(ours)) if ours > 0.0 => format!("{:.0} ×", theirs / ours),
                _ => "-".to_string(),
            };
            let _ = writeln!(out, "- {}: out tok/s {speedup:.2} ×, TTFT p90 {lower} lower", row.target);
        }
    }
    out
}

fn round(value: f64) -> f64 {
    (value * 10.0).round() / 10.0
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::client::Success;
    use crate::workload::{Stage, WorkloadName};

    fn sent(started: Instant, at_ms: u64, ttft_ms: u64, e2e_ms: u64) -> Result<Success, String> {
        Ok(Success {
            started: started + Duration::from_millis(at_ms),
            ttft: Duration::from_millis(ttft_ms),
            e2e: Duration::from_millis(e2e_ms),
            output_tokens: 10,
            served_by: None,
            text: String::new(),
            token_gaps_ms: Vec::new(),
            decision: None,
            cached_tokens: None,
            prompt_tokens: None,
            prompt_key: None,
        })
    }

    #[test]
    fn requests_are_placed_by_when_they_were_sent() {
        let started = Instant::now();
        let job =
            |at_ms| Job::Scheduled { at_ms, job: Box::new(Job::Completion { prompt: String::new(), max_tokens: 1 }) };
        let workload = Workload {
            name: WorkloadName::Ladder,
            pods: 1,
            pod_args: Vec::new(),
            concurrency: 4,
            jobs: vec![job(0), job(500), job(1_000), job(1_500)],
            stages: vec![
                Stage { rate_per_s: 2.0, start_ms: 0, end_ms: 1_000 },
                Stage { rate_per_s: 4.0, start_ms: 1_000, end_ms: 2_000 },
            ],
        };
        // The second stage's answers end 4 s after it starts: a queueing router.
        let outcomes = vec![
            sent(started, 0, 100, 200),
            sent(started, 500, 100, 500),
            sent(started, 1_000, 2_000, 3_000),
            Err("status 503".to_string()),
        ];
        let replay = Replay { outcomes, started, wall: Duration::from_secs(4) };
        let rows = summarize(&workload, "t", &replay);
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[0].requests, rows[0].succeeded, rows[1].requests, rows[1].succeeded), (2, 2, 2, 1));
        assert_eq!(rows[0].output_tokens_per_s, 20.0, "20 tokens over the 1 s to the last answer");
        assert_eq!(rows[1].output_tokens_per_s, 3.3, "10 tokens over 3 s");
        assert_eq!(rows[1].ttft_p90_ms, Some(2_000.0));
    }
}
