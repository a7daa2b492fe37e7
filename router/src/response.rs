//! Watching one answer go by (learning on): its first byte, its status, its `usage`.
//!
//! Nothing is held or buffered: each body chunk is read once, scanned for `usage`
//! ([`picker::learn::UsageScanner`], a few bytes of state), and passes on unchanged. What is
//! learned:
//! - at the first body byte, the request's uncached prompt tokens stop counting as in flight
//!   (the pod has prefilled them) and, for a streamed answer, the elapsed time is a TTFT
//!   sample for the pod's model. A non-streamed answer's first byte comes after the whole
//!   generation, so it releases the tokens but teaches the model nothing;
//! - at the end, `usage.prompt_tokens` corrects the text token estimate and
//!   `cached_tokens` is compared with the index's prediction (the accuracy stats, and the
//!   index's capacity for the pod).
//!
//! The plugin does not add `stream_options.include_usage` to requests that stream without
//! it: that would rewrite the request body, and hiding the extra event from the client would
//! mean editing the answer. Streams without usage still give TTFT samples; their prompts
//! just do not correct the estimates.

use picker::address::PodAddress;
use picker::learn::{Dispatch, UsageScanner};
use wasm_epp_host::{Counter, Host, Metrics};

use crate::worker::Worker;

/// The learning counters (`wasm_epp.learning.*`).
pub struct LearningStats {
    pub first_bytes: Counter,
    pub ttft_samples: Counter,
    pub usage_reports: Counter,
    pub cached_reports: Counter,
    /// Cached prompt tokens the index predicted for answers that reported cached tokens.
    pub cached_predicted: Counter,
    /// Cached prompt tokens those answers reported.
    pub cached_reported: Counter,
    /// Sum of |predicted − reported| over those answers: accuracy = 1 − error ÷ reported.
    pub cached_error: Counter,
    /// Answers from another pod than the one picked (a retry on a fallback): not learned from.
    pub other_upstream: Counter,
}

impl LearningStats {
    pub fn define(metrics: &Metrics) -> Self {
        let c = |name: &str| metrics.announced_counter(name);
        Self {
            first_bytes: c("wasm_epp.learning.first_bytes"),
            ttft_samples: c("wasm_epp.learning.ttft_samples"),
            usage_reports: c("wasm_epp.learning.usage_reports"),
            cached_reports: c("wasm_epp.learning.cached_reports"),
            cached_predicted: c("wasm_epp.learning.cached_tokens_predicted"),
            cached_reported: c("wasm_epp.learning.cached_tokens_reported"),
            cached_error: c("wasm_epp.learning.cached_tokens_error"),
            other_upstream: c("wasm_epp.learning.other_upstream"),
        }
    }
}

/// One answer being watched.
#[derive(Debug, Clone)]
pub struct Observation {
    dispatch: Dispatch,
    /// The prompt's tokens still count as in flight (no body byte yet).
    holding_tokens: bool,
    /// The answer is a success from the pod that was picked: worth learning from.
    learnable: bool,
    scanner: UsageScanner,
}

impl Observation {
    pub fn new(dispatch: Dispatch) -> Self {
        Self { dispatch, holding_tokens: true, learnable: true, scanner: UsageScanner::default() }
    }

    /// Response headers: a failure, or an answer from a retried fallback, teaches nothing.
    pub fn on_headers(&mut self, worker: &Worker, host: &dyn Host, pod: &PodAddress) {
        // One header looked up, not the whole map copied out of the host and parsed.
        let status_ok =
            matches!(host.response_header_value(":status"), Ok(Some(status)) if status.first() == Some(&b'2'));
        let upstream = crate::served::answering_pod(host);
        let same_pod = upstream.as_deref().is_none_or(|address| address == pod.as_str().as_bytes());
        if !same_pod {
            worker.stats.increment(worker.learning_stats.other_upstream);
        }
        self.learnable = status_ok && same_pod;
    }

    /// One body chunk is passing.
    pub fn on_body(&mut self, worker: &Worker, host: &dyn Host, pod: &PodAddress, chunk_size: usize) {
        if chunk_size == 0 {
            return;
        }
        if self.holding_tokens {
            let now = host.now_ms();
            self.release_tokens(worker, host, pod, now);
            worker.stats.increment(worker.learning_stats.first_bytes);
            if self.learnable && self.dispatch.streamed {
                if let Ok(mut learner) = worker.learning.try_borrow_mut() {
                    learner.first_byte(pod.as_str(), &self.dispatch, now);
                    worker.stats.increment(worker.learning_stats.ttft_samples);
                }
            }
        }
        if self.learnable {
            if let Ok(chunk) = host.response_body(0, chunk_size) {
                self.scanner.feed(&chunk);
            }
        }
    }

    /// The stream ended (completed, failed or reset).
    pub fn on_end(mut self, worker: &Worker, host: &dyn Host, pod: &PodAddress) {
        if self.holding_tokens {
            self.release_tokens(worker, host, pod, host.now_ms());
        }
        let Some(usage) = self.scanner.usage().filter(|_| self.learnable) else { return };
        let stats = &worker.learning_stats;
        worker.stats.increment(stats.usage_reports);
        let block_tokens = u32::try_from(worker.config.prefix.block_tokens).unwrap_or(u32::MAX);
        let Ok(mut learner) = worker.learning.try_borrow_mut() else { return };
        let Some(report) = learner.answered(pod.as_str(), &self.dispatch, &usage, block_tokens) else { return };
        worker.stats.increment(stats.cached_reports);
        worker.stats.add(stats.cached_predicted, report.predicted);
        worker.stats.add(stats.cached_reported, report.reported);
        worker.stats.add(stats.cached_error, report.predicted.abs_diff(report.reported));
    }

    fn release_tokens(&mut self, worker: &Worker, host: &dyn Host, pod: &PodAddress, now_ms: u64) {
        self.holding_tokens = false;
        match worker.inflight.try_borrow_mut() {
            Ok(mut inflight) => {
                inflight.release_tokens(pod.as_str(), self.dispatch.uncached_tokens);
                inflight.publish_now(host, now_ms);
            }
            Err(_) => worker.stats.increment(worker.stats.inflight_update_failed),
        }
    }
}
