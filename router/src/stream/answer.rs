//! The answer's side of a request: its headers (the pod that answered, a retry past the
//! pick, the verdict outlier detection and the comparison draw from them), its body (the
//! stream's opening read for a server's error event, learning's observation, the answer's
//! last byte, which gives the pod's place back) and its trailers.

use std::borrow::Cow;

use wasm_epp_host::Host;

use super::encoded::AnswerCoding;
use super::{RequestStream, Step};
use crate::answer_headers::AnswerHeaders;
use crate::comparison_stats::Compared;
use crate::decision_header::DECISION_HEADER;
use crate::prefill_hold::release_prefill;
use crate::profile::{self, Phase};
use crate::response::Observation;

impl RequestStream {
    /// The pod's response headers arrived. Response hooks observe; they never buffer or hold
    /// the response (each body chunk passes on as it comes).
    pub fn on_response_headers(&mut self, host: &dyn Host, end_of_stream: bool) -> Step {
        let _span = profile::span(host, Phase::ResponseHeaders);
        if let Some(explain) = self.explain.take() {
            if let Err(error) = host.set_response_header(DECISION_HEADER, explain.as_bytes()) {
                log::debug!("wasm-epp: cannot set {DECISION_HEADER}: {error}");
            }
        }
        if self.flow_admitted {
            self.report_queue_duration(host);
        }
        // (First: a released request's prefill pod becomes the stream's there.)
        self.take_release();
        // The decode pod answers once its prompt is prefilled: the prefill pod is done (if the
        // tick has not ended its hold at the prefill's estimated end already).
        release_prefill(&self.worker, host, &mut self.prefilling_at);
        let routed = self.sent_to_pod();
        self.answer_open = routed && !end_of_stream;
        self.answer_moved_ms = self.worker.clock_ms.get();
        let judged = routed && self.worker.config.outlier_detection.enabled;
        // Outlier detection, learning and the response-id watch need the pod that answered:
        // read once.
        let watched = self.observed.as_ref().is_some_and(Observation::watched) || self.response_id.is_some();
        // The plugin writing the served header itself means the route does not (see
        // `served::answering_pod`): the pod is Envoy's attribute then, read once for both.
        let route_writes_served = self.worker.config.models.served_endpoint_header.is_empty();
        // Outlier detection, the comparison and an upload's watch all judge the status: read
        // once.
        let status_read = judged || self.compared().is_some() || self.model_watch.is_some();
        // (Its copy of the map, when read, is timed in `response_headers` alone.)
        let served_read = (judged || watched) && route_writes_served;
        let headers =
            AnswerHeaders::read(host, self.answer_header_lookups(served_read, judged, status_read, end_of_stream));
        let upstream = (judged || watched).then(|| {
            let _span = profile::span(host, Phase::ObserveHeaders);
            crate::served::answering_pod(host, &headers, route_writes_served)
        });
        let status = status_read
            .then(|| {
                let _span = profile::span(host, Phase::AnswerStatus);
                headers.get(":status")
            })
            .flatten();
        self.compare_answer(status.as_deref());
        self.upload_answered(status.as_deref());
        if routed {
            let _span = profile::span(host, Phase::ServedEndpoint);
            let known = upstream.as_ref().filter(|_| !route_writes_served).and_then(Option::as_deref);
            crate::served::report_served_endpoint(host, &self.worker.config.models.served_endpoint_header, known);
        }
        if let Some(upstream) = upstream {
            if judged {
                let _span = profile::span(host, Phase::JudgeAnswer);
                self.success_pending = self.note_answer(host, &headers, status.as_deref(), upstream.as_deref());
                self.await_not_found(status.as_deref(), upstream.as_deref(), end_of_stream);
            }
            // Learning first: an answer from another pod releases the pick's prompt tokens
            // before the request's count leaves the pick.
            if let (Some(observed), Some(pod)) = (&mut self.observed, &self.routed_to) {
                observed.on_headers(&self.worker, pod, upstream.as_deref());
            }
            self.follow_retry(host, upstream.as_deref());
            if let Some(watch) = &mut self.response_id {
                watch.on_headers(upstream.as_deref(), self.routed_to.as_ref());
            }
        }
        // A stream judged a success so far may still fail at its first event: outlier
        // detection (at its end) and the comparison (its first byte) read it.
        let comparing = self.compared.as_ref().is_some_and(|compared| compared.awaiting_first_byte);
        let judged = (self.success_pending.is_some() || comparing) && self.answer_streams(&headers);
        self.opening_events = if judged { crate::stream_error::opening_events(self.endpoint, self.weight) } else { 0 };
        self.note_answer_coding(&headers, end_of_stream);
        if end_of_stream {
            self.release(host);
        }
        Step::Continue
    }

    /// One chunk of the response body is passing (not buffered).
    pub fn on_response_body(&mut self, host: &dyn Host, chunk_size: usize, end_of_stream: bool) -> Step {
        let _span = profile::span(host, Phase::ResponseBody);
        self.answer_open &= !end_of_stream;
        self.answer_bytes = self.answer_bytes.saturating_add(chunk_size as u64);
        if chunk_size > 0 {
            // The worker's clock, not the host's: no host call per chunk.
            self.answer_moved_ms = self.worker.clock_ms.get();
        }
        // One copy of the chunk into the VM serves both watchers. A compressed answer's
        // watchers read its plain bytes: `size` is theirs.
        let (size, chunk) = if matches!(self.answer_coding, AnswerCoding::Plain) {
            let wanted = self.observed.as_ref().is_some_and(Observation::reads_next_chunk) && chunk_size > 0;
            let chunk = wanted.then(|| {
                let _span = profile::span(host, Phase::ObserveScan);
                host.response_body(0, chunk_size).unwrap_or_default()
            });
            (chunk_size, chunk)
        } else {
            self.plain_chunk(host, chunk_size)
        };
        if self.not_found_from.is_some() && chunk_size > 0 {
            self.read_not_found(host, chunk_size);
        }
        let opening_unread = self.opening_events > 0;
        if let (Some(observed), Some(pod)) = (&mut self.observed, &self.routed_to) {
            observed.on_body(&self.worker, host, pod, size, chunk.as_deref(), opening_unread);
        }
        if let Some(watch) = &mut self.response_id {
            watch.on_body(&self.worker, host, size, chunk.as_deref());
        }
        if self.opening_events > 0 {
            let tail = &mut self.opening_tail;
            let events = &mut self.opening_events;
            let opening = (size > 0).then(|| read_opening(host, size, chunk.as_deref(), events, tail));
            if let Some(opening) = opening.flatten() {
                self.opening_read(opening);
            }
        }
        if end_of_stream {
            self.opening_ended();
        }
        // (A first byte noted while the opening was read is sampled once it is read, even at
        // the stream's empty last chunk.)
        if chunk_size > 0 || self.first_byte_ms.is_some() {
            self.compare_first_byte(host);
        }
        if end_of_stream {
            self.release(host);
        }
        Step::Continue
    }

    /// The answer ended (its last chunk, or its trailers) while its opening was still read:
    /// an event of it that a chunk ended in is judged as it stands.
    fn opening_ended(&mut self) {
        if self.opening_events > 0 && !self.opening_tail.is_empty() {
            let tail = std::mem::take(&mut self.opening_tail);
            self.opening_read(crate::stream_error::read_cut_opening(&tail));
        }
    }

    /// The stream's opening was read: it holds an error event, or not.
    pub(super) fn opening_read(&mut self, opening: crate::stream_error::Opening) {
        use crate::stream_error::Opening;
        self.opening_events = 0;
        self.failed_in_stream = opening == Opening::ServerError;
        if let (Some(observed), Some(pod)) = (&mut self.observed, &self.routed_to) {
            observed.opening_read(&self.worker, pod, opening != Opening::Output);
        }
        if opening != Opening::Output {
            self.compare_failed_stream(self.failed_in_stream);
        }
    }

    /// The answer's trailers (an HTTP/2 answer's, a gRPC one's `grpc-status`): its last body
    /// chunk did not end the stream, they do. The pod is done: released here, not at `on_log`,
    /// which a client that stops reading holds off until the stream idle timeout.
    pub fn on_response_trailers(&mut self, host: &dyn Host) -> Step {
        let _span = profile::span(host, Phase::ResponseBody);
        self.answer_open = false;
        // Its body ended here, as a last chunk ends it: an opening event it ended in is judged.
        self.opening_ended();
        if self.first_byte_ms.is_some() {
            self.compare_first_byte(host);
        }
        self.release(host);
        Step::Continue
    }

    /// Whether the answer is a stream whose first event is the first output or an error: one
    /// asked in the body, or a form upload's `text/event-stream` (vLLM's transcription stream
    /// opens as a completion's: an error is its first event, under a `200`; one more header
    /// value, for uploads alone).
    fn answer_streams(&self, headers: &AnswerHeaders) -> bool {
        self.streamed || (self.form_upload && crate::answer_type::event_stream(headers.get("content-type").as_deref()))
    }

    /// How many of the answer's headers `on_response_headers` is to read (the served header,
    /// `:status`, a 2xx's `content-type`, `content-encoding`): from four on, one copy of the
    /// map costs less than the lookups (see `answer_headers`). A guess made before the
    /// status is known: a 2xx's content type is counted, as most answers are 2xx. `served`: the
    /// served header is read (the route writes it and someone needs the answering pod).
    fn answer_header_lookups(&self, served: bool, judged: bool, status_read: bool, end_of_stream: bool) -> usize {
        let content_type = judged && self.posted && self.endpoint.generates();
        // The opening's error event is read when outlier detection or the comparison awaits
        // a stream's first event; learning and the response-id watch say so themselves.
        let opening = self.streamed && (judged || self.compared.is_some());
        let encoding = !end_of_stream && (self.reads_answer() || opening);
        [served, status_read, content_type, encoding].into_iter().filter(|&read| read).count()
    }

    /// Outlier detection learns from the answer to the pods this request was sent to (a
    /// released request's list is on its queue entry).
    fn note_answer(
        &self,
        host: &dyn Host,
        headers: &AnswerHeaders,
        status: Option<&[u8]>,
        served: Option<&[u8]>,
    ) -> Option<u64> {
        let now = || host.now_ms();
        let open = self.answer_open;
        // A 2xx of an inference endpoint is judged by its content type too (one more header
        // value, on that path alone: see `answer_type`).
        let foreign = status.and_then(|s| s.first()) == Some(&b'2')
            && self.posted
            && self.endpoint.generates()
            && crate::answer_type::foreign_answer(self.endpoint, headers.get("content-type").as_deref());
        self.with_destination(|list| {
            crate::attempts::note_answer(&self.worker, list, status, foreign, served, &now, open)
        })
        .flatten()
    }

    /// `f` of the destination header written (routed at once, or on release from the queue).
    pub(super) fn with_destination<R>(&self, f: impl FnOnce(&str) -> R) -> Option<R> {
        match (&self.held, &self.destination) {
            (Some(held), _) => Some(f(&held.destination.borrow())),
            (None, Some(destination)) => Some(f(destination)),
            (None, None) => None,
        }
    }

    /// The answer came from a later address of the destination list (the pick failed and
    /// Envoy retried there): the request's in-flight count moves with it, else the pod
    /// serving it would look idle to every pick until its end, and the failed pick busy.
    /// (Its prompt tokens stay the pick's: the answer's first byte releases them there.)
    fn follow_retry(&mut self, host: &dyn Host, served: Option<&[u8]>) {
        let Some(pick) = &self.routed_to else { return };
        let fallback = self.with_destination(|list| crate::attempts::fallback_that_answered(list, served));
        let Some(fallback) = fallback.flatten() else { return };
        match self.worker.inflight.try_borrow_mut() {
            Ok(mut inflight) => {
                let now = host.now_ms();
                inflight.finished(pick.as_str(), self.weight, now);
                inflight.started(fallback.as_str(), self.weight, now);
                self.answered_by = Some(fallback);
            }
            Err(_) => self.worker.stats.increment(self.worker.stats.inflight_update_failed),
        }
    }

    /// A request released from the queue: what the release decided becomes the stream's, as
    /// had it been routed at once (its pod, for the answer's observers; learning's record,
    /// whose prompt tokens in flight the answer's first byte releases; its prefill pod, in
    /// flight until the decode pod answers or its prefill's estimated end). Once: each is taken
    /// from the queue entry.
    pub(super) fn take_release(&mut self) {
        let Some(held) = &self.held else { return };
        if let (None, crate::flow::Fate::Routed(address)) = (&self.routed_to, &*held.fate.borrow()) {
            self.routed_to = Some(address.clone());
        }
        if let Some(dispatch) = held.dispatch.take() {
            self.observed = Some(Observation::start(&self.worker, dispatch));
        }
        if let Some(prefill) = held.prefill.take() {
            self.prefilling_at = Some(prefill);
        }
    }

    /// The request went to a pod: routed at once, or released from the queue to one (a
    /// released request's pod is the stream's once its answer begins).
    pub(super) fn sent_to_pod(&self) -> bool {
        match &self.held {
            Some(held) => matches!(*held.fate.borrow(), crate::flow::Fate::Routed(_)),
            None => self.routed_to.is_some(),
        }
    }

    /// The compared request's arm (a released request's is set on its queue entry at release).
    fn compared(&mut self) -> Option<&mut Compared> {
        if self.compared.is_none() {
            self.compared = self.held.as_ref().and_then(|held| held.compared.get());
        }
        self.compared.as_mut()
    }

    /// A compared request's answer began: a 5xx counts as its arm's error; only a success's
    /// first byte is a first token.
    fn compare_answer(&mut self, status: Option<&[u8]>) {
        let Some(compared) = self.compared() else { return };
        let class = status.and_then(|s| s.first().copied());
        compared.answered = true;
        compared.awaiting_first_byte &= class == Some(b'2');
        let arm = compared.arm;
        if let (Some(comparing), Some(b'5')) = (&self.worker.comparison, class) {
            comparing.stats.arm(arm).failed(&self.worker.stats.metrics);
        }
    }

    /// A stream that opened with an error event: not a first token. The server's error
    /// (`server`) is a failure of its arm, as a 5xx status is; a client's, as a 4xx, is not.
    fn compare_failed_stream(&mut self, server: bool) {
        // (Its first byte is not timed while the opening is read: a compared stream still
        // awaits it here.)
        let Some(compared) = self.compared().filter(|c| c.awaiting_first_byte) else { return };
        compared.awaiting_first_byte = false;
        let arm = compared.arm;
        if let (Some(comparing), true) = (&self.worker.comparison, server) {
            comparing.stats.arm(arm).failed(&self.worker.stats.metrics);
        }
    }

    /// A compared stream's first body byte: the time from its pick, counted once its opening
    /// is known to hold no error (a chat stream's error comes after its role chunk).
    fn compare_first_byte(&mut self, host: &dyn Host) {
        let Some(compared) = self.compared.as_mut().filter(|c| c.awaiting_first_byte) else { return };
        let at_ms = *self.first_byte_ms.get_or_insert_with(|| host.now_ms());
        if self.opening_events > 0 {
            return;
        }
        compared.awaiting_first_byte = false;
        let (arm, routed_ms) = (compared.arm, compared.routed_ms);
        if let Some(comparing) = &self.worker.comparison {
            comparing.stats.arm(arm).first_byte(&self.worker.stats.metrics, at_ms.saturating_sub(routed_ms));
        }
    }

    /// Tells the client how long flow control held its request (0: admitted at once), as
    /// llm-d's `x-llm-d-flow-queue-duration-ms`: once sent to a pod, never on the gateway's
    /// own refusals (Envoy runs the response hooks for those too).
    fn report_queue_duration(&self, host: &dyn Host) {
        let header = &self.worker.config.flow_control.queue_duration_header;
        if header.is_empty() || !self.sent_to_pod() {
            return;
        }
        let waited_ms = self.held.as_ref().map_or(0, |held| held.waited_ms.get());
        if let Err(error) = host.set_response_header(header, waited_ms.to_string().as_bytes()) {
            log::debug!("wasm-epp: cannot set {header}: {error}");
        }
    }
}

/// Reads a stream's next chunk for the events left at its opening
/// ([`crate::stream_error::read_opening`]); `None`: read the next chunk too. One small copy
/// when a single event is left (unless a watcher copied the chunk already), more of it only
/// when that event may be an error; up to [`crate::stream_error::ERROR_EVENT_BYTES`] when
/// events are to be read past. An event the chunk ends in is read on into the next chunk:
/// its bytes so far are kept in `tail` (a copy; the answer itself passes on unheld), as long
/// as they are fewer than that bound, else it is not read past (`Output`).
fn read_opening(
    host: &dyn Host,
    chunk_size: usize,
    copied: Option<&[u8]>,
    events: &mut u32,
    tail: &mut Vec<u8>,
) -> Option<crate::stream_error::Opening> {
    use crate::stream_error::{Opening, Reading, ERROR_EVENT_BYTES, OPENING_BYTES};
    // The most of this chunk that, after the tail, keeps within the bound.
    let room = ERROR_EVENT_BYTES.saturating_sub(tail.len());
    let wanted = if *events > 1 || !tail.is_empty() || copied.is_some() { room } else { OPENING_BYTES };
    let read = |limit: usize| match copied {
        Some(chunk) => Cow::Borrowed(chunk.get(..limit).unwrap_or(chunk)),
        None => Cow::Owned(host.response_body(0, chunk_size.min(limit)).unwrap_or_default()),
    };
    let left = *events;
    let mut bytes = after(tail, read(wanted));
    let mut reading = crate::stream_error::read_opening(&bytes, events);
    if matches!(reading, Reading::Within(_)) && bytes.len().saturating_sub(tail.len()) < chunk_size.min(room) {
        // The event goes on past the opening's bytes: read it whole, within the bound.
        *events = left;
        bytes = after(tail, read(room));
        reading = crate::stream_error::read_opening(&bytes, events);
    }
    let whole_chunk = bytes.len().saturating_sub(tail.len()) >= chunk_size;
    *tail = Vec::new();
    match reading {
        Reading::Judged(opening) => Some(opening),
        Reading::Between if whole_chunk => None,
        Reading::Within(at) if whole_chunk && bytes.len().saturating_sub(at) < ERROR_EVENT_BYTES => {
            // (Rare: an event a chunk ends in. The copy is of that event alone.)
            *tail = bytes.get(at..).unwrap_or_default().to_vec();
            None
        }
        // Past the bound: not read further. An event cut there is judged as it stands.
        Reading::Within(at) => Some(crate::stream_error::read_cut_opening(bytes.get(at..).unwrap_or_default())),
        Reading::Between => Some(Opening::Output),
    }
}

/// `tail`, the start of an event a former chunk ended in, then `head`, this chunk's bytes
/// (one buffer only when there is a tail).
fn after<'a>(tail: &[u8], head: Cow<'a, [u8]>) -> Cow<'a, [u8]> {
    if tail.is_empty() {
        return head;
    }
    Cow::Owned([tail, &head].concat())
}
