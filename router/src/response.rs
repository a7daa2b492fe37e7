//! Watching one answer go by (learning on): its first byte, where it came from, its `usage`.
//!
//! Answers are watched within a per-worker budget ([`Observation::start`],
//! `learning.watch_per_second` and `learning.watch_share`): watching costs two host calls (the
//! answering pod's header, the first chunk's copy), so at high rates a sample is watched. An
//! answer not watched still releases its prompt tokens at its first token (a stream; a
//! Responses stream's opening chunks are read for it) or end.
//!
//! Nothing is held or buffered: each body chunk is read once, scanned for `usage`
//! ([`picker::learn::UsageScanner`], a few bytes of state), and passes on unchanged. A stream
//! is read past its first chunk only while it holds one of its pod's few reading slots,
//! granted while the worker's chunk budget lasts ([`picker::learn::UsageReaders`]): every
//! chunk read is a copy into the VM. A compressed answer's chunks come here inflated, or not
//! at all (`stream/encoded.rs`). What is learned:
//! - at a stream's first token, the request's uncached prompt tokens stop counting as in
//!   flight (the pod has prefilled them) and the elapsed time is a TTFT sample for the pod's
//!   model. A chat or completions stream's first token is its first body byte; a Responses
//!   API stream's is its first output event ([`picker::learn::first_token`]), its chunks read
//!   until then. A whole (non-streamed) answer's first byte comes after the generation, so it
//!   teaches the model nothing, and its tokens are released at its end;
//! - at the end, `usage.prompt_tokens` corrects the text token estimate and
//!   `cached_tokens` is compared with the index's prediction (the accuracy stats, and the
//!   index's capacity for the pod).
//!
//! What marks a success is the body, not `:status`: a stream's answer must begin as an SSE
//! stream, a whole answer must carry `usage` (OpenAI-style errors and Envoy's local replies
//! do neither). Each host call saved here is ~3–5 µs of a callback in Envoy's V8, caches cold.
//!
//! The plugin does not add `stream_options.include_usage` to requests that stream without
//! it: that would rewrite the request body, and hiding the extra event from the client would
//! mean editing the answer. Streams without usage still give TTFT samples; their prompts
//! just do not correct the estimates.

use picker::address::PodAddress;
use picker::learn::{Dispatch, FirstOutput, OutputEventFinder, UsageScanner};
use wasm_epp_host::{Counter, Host, Metrics};

use crate::profile::{self, Phase};
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
    /// Streams that asked for `usage` but were read no further than their first chunk: the
    /// pod's reading slots were taken (`learning.usage_streams_per_pod`).
    pub streams_not_read: Counter,
    /// Body chunks copied into the VM and scanned (one host copy each).
    pub chunks_read: Counter,
    /// Answers not watched (past the worker's watch budget, `learning.watch_*`): their
    /// tokens were released, nothing was learned from them.
    pub answers_not_watched: Counter,
    /// Other workers' learned TTFT observations read on the tick (one per worker and share).
    pub models_read: Counter,
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
            streams_not_read: c("wasm_epp.learning.usage_streams_not_read"),
            chunks_read: c("wasm_epp.learning.chunks_read"),
            answers_not_watched: c("wasm_epp.learning.answers_not_watched"),
            models_read: c("wasm_epp.learning.models_read"),
        }
    }
}

/// One answer being watched.
#[derive(Debug, Clone)]
pub struct Observation {
    dispatch: Dispatch,
    /// Within the worker's watch budget: the answering pod is checked and the answer read
    /// (first chunk, `usage`). Else only its first byte and end are noted, to release its
    /// tokens.
    watched: bool,
    /// No body byte yet.
    awaiting_first_byte: bool,
    /// No token yet: a stream's prompt tokens count as in flight until then; a whole answer's
    /// until its end. A chat or completions stream's first byte is its first token; a
    /// Responses API stream's is its first output event (`first_output`).
    awaiting_first_token: bool,
    /// Its prompt tokens no longer count in flight (released once: at the first token, the
    /// end, or an answer from another pod than the pick).
    tokens_released: bool,
    first_output: Option<OutputEventFinder>,
    /// The answer comes from the pod that was picked and, as far as its first bytes tell,
    /// is a success: worth learning from.
    learnable: bool,
    /// It opened as an SSE stream (a stream's success): its first token is yet to come,
    /// watched or not.
    event_stream: bool,
    /// Its next chunk is copied and scanned: it can still hold `usage` we may read, or the
    /// first output event.
    reading: bool,
    /// It holds one of the pod's stream-reading slots (`learning.usage_streams_per_pod`),
    /// given back at its end.
    holds_reader_slot: bool,
    /// A chunk of it passed unscanned: any `usage` seen is not the answer's last (with
    /// `continuous_usage_stats` vLLM puts the usage so far on every chunk; the first one's
    /// has no token generated and no cached-token details, read as a miss).
    passed_unread: bool,
    /// Its first token's time, held while the caller reads the stream's opening for an error
    /// (a chat stream's comes after the role chunk that is its first byte): sampled once the
    /// opening holds none ([`Self::opening_read`]).
    held_first_byte: Option<u64>,
    scanner: UsageScanner,
}

impl Observation {
    /// A request was sent with `dispatch`: its answer is watched if the worker's watch budget
    /// allows (`learning.watch_per_second`, `learning.watch_share`).
    pub fn start(worker: &Worker, dispatch: Dispatch) -> Self {
        let watched =
            worker.watch_budget.try_borrow_mut().is_ok_and(|mut budget| budget.try_take_one(dispatch.sent_ms));
        if !watched {
            worker.stats.increment(worker.learning_stats.answers_not_watched);
        }
        Self::new(dispatch, watched)
    }

    fn new(dispatch: Dispatch, watched: bool) -> Self {
        let first_output = (dispatch.streamed && dispatch.responses_api).then(OutputEventFinder::default);
        // A Responses stream is read to its first output event even when not watched: its
        // prompt is being prefilled until then, and the token load must say so.
        let reading = watched || first_output.is_some();
        Self {
            dispatch,
            watched,
            awaiting_first_byte: true,
            awaiting_first_token: true,
            tokens_released: false,
            first_output,
            learnable: watched,
            event_stream: false,
            reading,
            holds_reader_slot: false,
            passed_unread: false,
            held_first_byte: None,
            scanner: UsageScanner::default(),
        }
    }

    /// Response headers, with the pod that answered (the route's served-endpoint header,
    /// looked up once by the caller): an answer from a retried fallback teaches nothing about
    /// the pod picked. `:status` is not read: the body tells a success as well, see
    /// [`Self::on_body`]. (Each header lookup is ~4–5 µs of a response callback in Envoy's
    /// V8, caches cold; the same lookup in the first body chunk's callback measured more,
    /// ~7–9 µs.)
    ///
    /// Another pod than the pick answering means the pick's attempt failed: the prompt is no
    /// longer being prefilled there, so its tokens are released now (before the caller moves
    /// the request's count to the pod that answered: the pick's entry may go with it).
    pub fn on_headers(&mut self, worker: &Worker, pod: &PodAddress, upstream: Option<&[u8]>) {
        let same_pod = upstream.is_none_or(|address| address == pod.as_str().as_bytes());
        if !same_pod {
            worker.stats.increment(worker.learning_stats.other_upstream);
            self.release_tokens(worker, pod, None);
        }
        self.learnable &= same_pod;
        self.reading &= same_pod;
    }

    /// Whether the answer is watched, so [`Self::on_headers`] wants the answering pod.
    pub fn watched(&self) -> bool {
        self.watched
    }

    /// Whether the next body chunk is to be copied into the VM for [`Self::on_body`].
    pub fn reads_next_chunk(&self) -> bool {
        self.reading
    }

    /// The answer's bytes cannot be read (an encoding the plugin does not inflate, or
    /// compressed bytes that stopped inflating): nothing more is learned from it, as from an
    /// answer that did not open as a success. A stream's next chunk is its first token all
    /// the same, so its prompt's tokens are released there; no TTFT sample (an error event
    /// may hide in it), no `usage` (the last one was not seen).
    pub fn stop_reading(&mut self) {
        self.reading = false;
        self.learnable = false;
        self.passed_unread = true;
        self.held_first_byte = None;
    }

    /// One body chunk is passing; `chunk` is its bytes when [`Self::reads_next_chunk`] asked
    /// for them (the caller copies it once for every watcher).
    ///
    /// A streamed success is an SSE stream from its first byte. Its first token releases the
    /// prompt's tokens and the time is a TTFT sample. Anything else answering a stream (an
    /// error's JSON, Envoy's plain-text local reply) is not learned from; its tokens are
    /// released at its first byte all the same. A whole answer's first byte comes after the
    /// generation and at most a transfer before its end, so its tokens are released at the
    /// end with the request (one shared-data write, not two); its `usage` is what marks it a
    /// success (error bodies carry none).
    ///
    /// `opening_unread`: the caller has yet to read this stream's opening for an error; its
    /// TTFT sample waits for [`Self::opening_read`].
    pub fn on_body(
        &mut self,
        worker: &Worker,
        host: &dyn Host,
        pod: &PodAddress,
        chunk_size: usize,
        chunk: Option<&[u8]>,
        opening_unread: bool,
    ) {
        if chunk_size == 0 {
            return;
        }
        let first_byte = std::mem::take(&mut self.awaiting_first_byte);
        let streamed = self.dispatch.streamed;
        let mut first_token = streamed && self.awaiting_first_token && self.first_output.is_none();
        // A Responses stream past its opening chunks without an output event: no TTFT sample.
        let mut gave_up = false;
        self.passed_unread |= chunk.is_none() || !self.reading;
        if let Some(chunk) = chunk.filter(|_| self.reading) {
            let _span = profile::span(host, Phase::ObserveScan);
            worker.stats.increment(worker.learning_stats.chunks_read);
            if self.holds_reader_slot {
                if let Ok(mut readers) = worker.usage_readers.try_borrow_mut() {
                    readers.charge();
                }
            }
            if first_byte && streamed {
                self.event_stream = is_event_stream(chunk);
                self.learnable &= self.event_stream;
            }
            if self.learnable {
                self.scanner.feed(chunk);
            }
            if self.event_stream && self.awaiting_first_token {
                if let Some(finder) = &mut self.first_output {
                    let found = finder.feed(chunk);
                    gave_up = found == FirstOutput::GaveUp;
                    first_token = found != FirstOutput::NotYet;
                }
            }
        }
        // Not a success (or not read): no token to wait for; its tokens go now.
        if streamed && self.awaiting_first_token && (!self.event_stream || !self.reading) {
            first_token = true;
        }
        // The first token's time: the TTFT sample, the token release and the reading budget's
        // clock (one clock read).
        let first_token_at = first_token.then(|| host.now_ms());
        if first_token {
            self.awaiting_first_token = false;
        }
        // Nothing further to learn from this answer's bytes, nor a first token to find: stop
        // copying them.
        let learning_on = self.learnable && self.dispatch.usage_expected;
        self.reading &= learning_on || (self.event_stream && self.awaiting_first_token);
        // A stream is read past its first token only in one of the pod's reading slots, and
        // only while the chunk budget lasts: each further chunk is one more copy, so streams
        // are read a sample at a time (a whole answer is one or a few chunks: always read).
        if let (true, Some(now)) = (self.reading, first_token_at) {
            self.holds_reader_slot =
                worker.usage_readers.try_borrow_mut().is_ok_and(|mut readers| readers.try_start(pod.as_str(), now));
            self.reading = self.holds_reader_slot;
            if !self.holds_reader_slot {
                worker.stats.increment(worker.learning_stats.streams_not_read);
            }
        }
        if first_byte {
            worker.stats.increment(worker.learning_stats.first_bytes);
        }
        if let Some(now) = first_token_at {
            let _span = profile::span(host, Phase::ObserveFirstByte);
            self.release_tokens(worker, pod, Some((host, now)));
            if self.learnable && !gave_up {
                if opening_unread {
                    self.held_first_byte = Some(now);
                } else {
                    self.sample_first_byte(worker, pod, now);
                }
            }
        }
    }

    /// The caller read the stream's opening: a stream that opened with an error (`failed`)
    /// gives no TTFT sample, and nothing more is learned from it; else its first byte's held
    /// time is sampled now.
    pub fn opening_read(&mut self, worker: &Worker, pod: &PodAddress, failed: bool) {
        let held = self.held_first_byte.take();
        if failed {
            self.learnable = false;
            return;
        }
        if let Some(at_ms) = held {
            self.sample_first_byte(worker, pod, at_ms);
        }
    }

    fn sample_first_byte(&self, worker: &Worker, pod: &PodAddress, at_ms: u64) {
        if let Ok(mut learner) = worker.learning.try_borrow_mut() {
            learner.first_byte(pod.as_str(), &self.dispatch, at_ms);
            worker.stats.increment(worker.learning_stats.ttft_samples);
        }
    }

    /// The caller publishes the in-flight counts next (the request itself ends). `cut`: the
    /// pod cut the answer after its headers (its length is no request's duration).
    pub fn on_end(mut self, worker: &Worker, host: &dyn Host, pod: &PodAddress, now_ms: u64, cut: bool) {
        let _span = profile::span(host, Phase::ObserveEnd);
        if self.holds_reader_slot {
            if let Ok(mut readers) = worker.usage_readers.try_borrow_mut() {
                readers.finish(pod.as_str());
            }
        }
        if self.awaiting_first_token || !self.dispatch.streamed {
            self.release_tokens(worker, pod, None);
        }
        let usage = self.scanner.usage().filter(|_| self.learnable && !self.passed_unread);
        // A success's whole duration (a stream that opened as one, an answer with `usage`):
        // how long a running request holds its slot, the prior of the slot wait. A stream
        // given up before its first byte opened as nothing.
        let opened = self.dispatch.streamed && !self.awaiting_first_byte;
        if self.learnable && !cut && (opened || usage.is_some()) {
            if let Ok(mut learner) = worker.learning.try_borrow_mut() {
                learner.models.ended(now_ms.saturating_sub(self.dispatch.sent_ms) as f64);
            }
        }
        let Some(usage) = usage else { return };
        let stats = &worker.learning_stats;
        worker.stats.increment(stats.usage_reports);
        // In the blocks the prediction was made in (the pool's reported size), not the
        // configured fallback: on a pool of 64-token blocks, 16 made rounding read as misses.
        let block_tokens = self.dispatch.block_tokens;
        let Ok(mut learner) = worker.learning.try_borrow_mut() else { return };
        let Some(report) = learner.answered(pod.as_str(), &self.dispatch, &usage, block_tokens) else { return };
        worker.stats.increment(stats.cached_reports);
        worker.stats.add(stats.cached_predicted, report.predicted);
        worker.stats.add(stats.cached_reported, report.reported);
        worker.stats.add(stats.cached_error, report.predicted.abs_diff(report.reported));
    }

    /// Releases the prompt's tokens; with `publish`, the other workers see it at once rather
    /// than at the next tick (at the end the caller publishes with the request's release).
    fn release_tokens(&mut self, worker: &Worker, pod: &PodAddress, publish: Option<(&dyn Host, u64)>) {
        if std::mem::replace(&mut self.tokens_released, true) {
            return;
        }
        match worker.inflight.try_borrow_mut() {
            Ok(mut inflight) => {
                inflight.release_tokens(pod.as_str(), self.dispatch.uncached_tokens);
                if let Some((host, now_ms)) = publish {
                    inflight.publish_now(host, now_ms);
                }
            }
            Err(_) => worker.stats.increment(worker.stats.inflight_update_failed),
        }
    }
}

/// The first bytes of a Server-Sent Events stream: a field line (`data:`, `event:`, `id:`,
/// `retry:`) or a comment (`:`), unless its first event is an error (a 200 stream that failed
/// at once: a first "token" in milliseconds would make the pod look fast).
fn is_event_stream(first_chunk: &[u8]) -> bool {
    let opens = [&b"data:"[..], b"event:", b"id:", b"retry:", b":"].iter().any(|field| first_chunk.starts_with(field));
    opens && !crate::stream_error::opens_with_error(first_chunk)
}
