//! One request: hold the headers, buffer the body, pick a pod, write the destination.
//!
//! Envoy needs `allow_on_headers_stop_iteration: true` for this: headers are held
//! ([`Step::Pause`]) while the body is buffered (paused until end of stream), then the
//! header is set and both continue. Requests with no body, uploads to other endpoints, or a
//! body over the configured limits, are routed by load at once without reading it (with flow
//! control on, an inference request with a body over the limits only when it need not wait:
//! else 429). A client's own destination headers are always removed first, so only the
//! picker's choice can reach the pool.
//! Header values are bytes: a value that is not UTF-8 is simply not a number or a session.

use std::rc::Rc;

use picker::address::PodAddress;
use picker::config::{InvalidBodyPolicy, UnknownModelPolicy};
use picker::prefix::session_key;
use picker::request::{parse_model_only, parse_request, strip_path_prefix, BodyError, Endpoint, InferenceRequest};
use wasm_epp_host::{HeaderMap, Host};

use crate::attempts::{unfinished_by, AnswerPassed, Unfinished};
use crate::comparison_stats::Compared;
use crate::decision_header::DECISION_HEADER;
use crate::prefill_hold::release_prefill;
use crate::profile::{self, Phase};
use crate::reply::{send_error, send_json, send_json_bytes};
use crate::response::Observation;
use crate::response_ids::ResponseIdWatch;
use crate::worker::Worker;

mod answer;
mod disown;
mod encoded;
mod routing;
mod upload;

/// Headers a pool cluster could follow besides the configured one; none may come from a
/// client: the protocol's default name, ORIGINAL_DST's own, and P/D's prefill address.
const CLIENT_FORBIDDEN_HEADERS: [&str; 3] =
    ["x-gateway-destination-endpoint", "x-envoy-original-dst-host", "x-prefiller-host-port"];

/// What the glue should answer Envoy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Continue,
    Pause,
}

pub struct RequestStream {
    worker: Rc<Worker>,
    endpoint: Endpoint,
    /// A `POST`: the one method an inference endpoint answers as such, so the only one whose
    /// 2xx is judged by its content type (a browser's `OPTIONS` preflight is answered `200`
    /// `text/plain` by vLLM's CORS middleware, on any path).
    posted: bool,
    /// The pod this request was sent to, once routed (its in-flight count is released at the end).
    routed_to: Option<PodAddress>,
    /// Answered locally or routed: later body chunks just pass.
    decided: bool,
    /// The client marked the request sheddable (negative priority).
    sheddable: bool,
    /// Key of the request's session header, if it had one, or of the stored response it names.
    session: Option<u64>,
    /// The session is a stored response's id: only its pod holds it.
    session_pinned: bool,
    /// Bytes of this stream counted in the worker's buffered total.
    buffered: u64,
    /// A request on the peer listener (see [`crate::peer_receiver`]).
    peer: bool,
    /// Body bytes buffered so far (the size at the last body callback).
    body_size: usize,
    /// Envoy's id of this stream's context: a held request is resumed by it.
    context_id: u32,
    /// Band and flow, with flow control on (set from the headers).
    flow_class: Option<crate::flow::RequestClass>,
    /// The band flow control admitted it in, to be routed at once (see `Prompt::band`).
    flow_band: Option<i32>,
    /// Held in the wait queue (or released from it): shared with the queue entry.
    held: Option<Rc<crate::flow::Held>>,
    /// The decision header's value, written on the response (`debug_decision_header`).
    explain: Option<String>,
    /// The hold on the prefill pod of a disaggregated request, in flight until the decode pod
    /// answers or the prefill's estimated end ([`crate::prefill_hold`]).
    prefilling_at: Option<crate::prefill_hold::PrefillHold>,
    /// Priority from the priority or objective header; `None` lets the model's priority apply.
    priority: Option<i64>,
    /// The gateway's subset hint (`None`: no hint).
    subset: Option<Vec<PodAddress>>,
    /// The client's TTFT objective (learning on, from `learning.slo_header`).
    slo_ttft_ms: Option<f64>,
    /// The answer being watched (learning on, once routed).
    observed: Option<Observation>,
    /// A Responses API answer whose id will be noted as its pod's session.
    response_id: Option<ResponseIdWatch>,
    /// The model a gateway asked this request be sent as (`models.rewrite_headers`).
    rewrite_to: Option<String>,
    /// Flow control admitted it (routed at once or held): its answer reports the wait.
    flow_admitted: bool,
    /// An inference request whose body was read for its model alone (`read_for_model_alone`):
    /// routed as another endpoint's, but queued by flow control as the inference request it is.
    read_for_model: bool,
    /// The comparison's arm that routed it (comparison on), timed until its end.
    compared: Option<Compared>,
    /// The destination header written (the pick, then fallbacks), once routed: outlier
    /// detection judges the answer by it.
    destination: Option<String>,
    /// A later address of that list answered (Envoy retried past the pick): the request
    /// counts in flight there, not on the pick, from its answer to its end.
    answered_by: Option<PodAddress>,
    /// The answer's headers came and it has not ended whole yet (its last byte not passed).
    answer_open: bool,
    /// The answer's body bytes that passed so far (who left it unfinished: see
    /// [`crate::attempts::unfinished_by`]).
    answer_bytes: u64,
    /// The worker's clock ([`Worker::clock_ms`]) when the answer last moved: its headers,
    /// then each body chunk (how long it had been silent when it ended unfinished).
    answer_moved_ms: u64,
    /// Outlier detection judges the answer's success at its end (a pod may cut it); the
    /// worker's failure count at its headers.
    success_pending: Option<u64>,
    /// The sequences it weighs in flight (its `n`, read from the body's parse; 1 until then
    /// and for a body not read): counted on its pod at the pick, moved with a retry, released
    /// at its end, always by this same weight.
    weight: u32,
    /// The client asked for a stream (`"stream": true` in the body read) of an endpoint whose
    /// first event is the first output or an error (chat, completions, Messages).
    streamed: bool,
    /// A `multipart/form-data` upload (vLLM's audio transcriptions and translations): its
    /// form's `stream` is not read, so an answer of `text/event-stream` says it streams.
    form_upload: bool,
    /// Events at the stream's opening still to read for an error (outlier detection or the
    /// comparison judges it: a stream may fail after its `200`, see
    /// [`crate::stream_error::opening_events`]); 0 once judged, or when not read.
    opening_events: u32,
    /// The bytes so far of the opening's event the last chunk ended in (fewer than
    /// [`crate::stream_error::ERROR_EVENT_BYTES`]; empty but for such a cut).
    opening_tail: Vec<u8>,
    /// When a compared stream's first body byte passed, while its opening is still read.
    first_byte_ms: Option<u64>,
    /// It opened with a server's error event: a failure of the pod that answered.
    failed_in_stream: bool,
    /// How the answer's bytes reach its watchers: as they come, inflated, or not at all
    /// (`content-encoding`, looked up when a watcher reads the body).
    answer_coding: encoded::AnswerCoding,
    /// The model it was routed as, kept when a pod's 404 to it may disown it (see
    /// [`crate::disowned`]; a held request's is on its queue entry).
    disowned_model: Option<String>,
    /// The pod whose 404 is to be read for the engine's "model does not exist" at its first
    /// body chunk.
    not_found_from: Option<PodAddress>,
    /// A `multipart/form-data` upload being read for its `model` ([`upload`]); boxed, as most
    /// requests are not uploads and the stream is built for each.
    upload: Option<Box<upload::Upload>>,
    /// The rest of an upload routed by its form's `model`, read for another `model` part as it
    /// streams through ([`picker::request::ModelWatch`]), and whether its pod answered yet.
    model_watch: Option<Box<upload::UploadWatch>>,
}

impl RequestStream {
    pub fn new(worker: Rc<Worker>) -> Self {
        Self::for_context(worker, 0)
    }

    /// A stream Envoy knows as `context_id` (needed to hold and release it).
    pub fn for_context(worker: Rc<Worker>, context_id: u32) -> Self {
        Self {
            worker,
            endpoint: Endpoint::Other,
            posted: false,
            routed_to: None,
            decided: false,
            sheddable: false,
            session: None,
            session_pinned: false,
            buffered: 0,
            peer: false,
            body_size: 0,
            context_id,
            flow_class: None,
            flow_band: None,
            held: None,
            explain: None,
            prefilling_at: None,
            priority: None,
            subset: None,
            slo_ttft_ms: None,
            observed: None,
            response_id: None,
            rewrite_to: None,
            flow_admitted: false,
            read_for_model: false,
            compared: None,
            destination: None,
            answered_by: None,
            answer_open: false,
            answer_bytes: 0,
            answer_moved_ms: 0,
            success_pending: None,
            weight: 1,
            streamed: false,
            form_upload: false,
            opening_events: 0,
            opening_tail: Vec::new(),
            first_byte_ms: None,
            failed_in_stream: false,
            answer_coding: encoded::AnswerCoding::Plain,
            upload: None,
            model_watch: None,
            disowned_model: None,
            not_found_from: None,
        }
    }

    pub fn on_request_headers(&mut self, host: &dyn Host, end_of_stream: bool) -> Step {
        let _span = profile::span(host, Phase::Headers);
        let headers = match host.request_headers() {
            Ok(headers) => headers,
            Err(error) => {
                // Nothing read, so nothing to trust: route by load, and still strip.
                self.worker.stats.increment(self.worker.stats.header_read_failed);
                log::warn!("wasm-epp: cannot read request headers: {error}");
                HeaderMap::default()
            }
        };
        self.remove_client_destination(host, &headers);
        if headers.contains(DECISION_HEADER) {
            // Only the plugin says how it decided; a client's copy never reaches a pod.
            if let Err(error) = host.remove_request_header(DECISION_HEADER) {
                log::warn!("wasm-epp: cannot remove client header {DECISION_HEADER}: {error}");
            }
        }
        if let Some(receiver) = &self.worker.config.peer_receiver {
            let wants_body = crate::peer_receiver::accept_headers(&self.worker, host, receiver, &headers);
            if wants_body && end_of_stream {
                // No body is coming (no body callback would answer): an empty message, refused now
                // rather than held until the listener's request timeout.
                crate::peer_receiver::accept_body(&self.worker, host, 0);
            }
            self.decided = !wants_body || end_of_stream;
            self.peer = true;
            return Step::Pause;
        }
        let config = &self.worker.config;
        // As the pod will see it: a route's prefix rewrite runs after the plugin.
        let path = strip_path_prefix(headers.get_text(":path").unwrap_or_default(), &config.path_prefix);
        // Only requests without a body can be the health probe or the model list.
        let bodyless_get = end_of_stream && headers.get_text(":method") == Some("GET");
        if bodyless_get && path == config.health_path {
            return self.answer_health(host);
        }
        if bodyless_get && crate::model_list::is_list_path(path, &config.models.list_path) {
            if let Some(list) = crate::model_list::pool_models(&self.worker, host) {
                self.decided = true;
                crate::model_list::count_answer(&self.worker, &list);
                send_json_bytes(host, &list.body);
                return Step::Pause;
            }
        }
        self.priority = crate::protocol::header_priority(&headers, config);
        self.sheddable = self.priority.is_some_and(|p| p < 0);
        self.session = crate::protocol::session_value(&headers, config).map(|id| session_key(trim_bytes(id)));
        self.subset = crate::protocol::subset_hint(host, &headers, config);
        self.endpoint = Endpoint::from_path(path);
        self.posted = headers.get_text(":method") == Some("POST");
        if self.endpoint == Endpoint::Other {
            // `GET /v1/responses/{id}` (a background request's polling, a retrieval) and its
            // `cancel` and `input_items`: only the pod that stored the response has it.
            if let Some(key) = crate::response_ids::follow_path(&self.worker, host, path) {
                (self.session, self.session_pinned) = (Some(key), true);
            }
        }
        if config.flow_control.enabled {
            self.flow_class = Some(crate::flow::RequestClass::from_headers(config, &headers, self.priority));
        }
        self.rewrite_to = crate::protocol::rewrite_target(&headers, config);
        self.slo_ttft_ms = crate::protocol::slo_ttft_ms(&headers, config);
        let declared_length = headers.get_text("content-length").and_then(|v| v.parse::<u64>().ok());
        // (Looked up for other endpoints only: the inference endpoints read JSON whatever the label.)
        let content_type = || headers.get_text("content-type");
        if self.endpoint == Endpoint::Other && !end_of_stream {
            // An upload (an audio transcription's form) is read for its `model` as it arrives.
            self.upload = content_type().and_then(|value| upload::Upload::start(value, declared_length));
            self.form_upload = self.upload.is_some();
        }
        let unread = self.endpoint == Endpoint::Other && self.upload.is_none() && !may_be_json(content_type());
        if end_of_stream || unread {
            // No body: no prompt for an engine to generate from (a preflight, a HEAD), so not
            // flow control's to hold or refuse either; a binary upload to another endpoint neither.
            return self.route(host, None);
        }
        // (An upload's fields come before its file, as the SDKs send them: it is read, however
        // long, until its model is found or `max_body_bytes` have come.)
        if self.upload.is_none() && declared_length.is_some_and(|len| len > config.max_body_bytes) {
            self.worker.stats.increment(self.worker.stats.body_over_limit);
            return self.route_unread(host);
        }
        Step::Pause
    }

    pub fn on_request_body(&mut self, host: &dyn Host, body_size: usize, end_of_stream: bool) -> Step {
        let _span = profile::span(host, Phase::Body);
        self.body_size = body_size;
        if self.peer {
            // Answered locally in every case: nothing on the peer listener goes on.
            if !self.decided && (end_of_stream || body_size > picker::peer::MAX_MESSAGE_BYTES) {
                self.decided = true;
                crate::peer_receiver::accept_body(&self.worker, host, body_size);
            }
            return Step::Pause;
        }
        if self.decided {
            if self.model_watch.is_some() {
                return self.watch_upload(host, body_size, end_of_stream);
            }
            return Step::Continue;
        }
        let size = body_size as u64;
        if size > self.worker.config.max_body_bytes {
            // Streamed without a declared length and grew past the limit: stop buffering.
            self.worker.stats.increment(self.worker.stats.body_over_limit);
            return self.route_unread(host);
        }
        self.account_buffered(size);
        if self.worker.buffered_bytes.get() > self.worker.config.max_buffered_bytes {
            // Every stream of this worker together holds too much: this one goes on unread.
            self.worker.stats.increment(self.worker.stats.buffer_cap_reached);
            return self.route_unread(host);
        }
        if self.upload.is_some() {
            return self.read_upload(host, body_size, end_of_stream);
        }
        if !end_of_stream {
            return Step::Pause;
        }
        let read = profile::span(host, Phase::BodyRead);
        let body = match host.request_body(0, body_size) {
            Ok(body) => body,
            Err(error) => {
                log::warn!("wasm-epp: cannot read request body: {error}");
                Vec::new()
            }
        };
        read.end();
        let parsing = profile::span(host, Phase::Parse);
        let parsed = match self.endpoint {
            Endpoint::Other => parse_model_only(&body),
            Endpoint::Completions | Endpoint::ChatCompletions | Endpoint::Responses | Endpoint::Messages => {
                parse_request(&body, self.endpoint).or_else(|error| self.read_for_model_alone(&body, error))
            }
        };
        parsing.end();
        match parsed {
            Ok(request) => {
                // (After `read_for_model_alone`, an `Other` endpoint: 1.)
                self.weight = request.sequences(self.endpoint);
                // (A Responses stream opens with `response.created` whatever follows: only
                // the other endpoints' first event can be the error.)
                self.streamed = request.stream == Some(true) && self.endpoint != Endpoint::Responses;
                self.follow_response_id(host, &request);
                let target =
                    crate::rewrite::choose_target(&self.worker, self.rewrite_to.take(), request.model.as_deref());
                // Other endpoints are not queued by flow control (as when they were not read);
                // an inference request read for its model alone is.
                let class = self.flow_class.filter(|_| self.endpoint != Endpoint::Other || self.read_for_model);
                let Some(class) = class else { return self.route_model(host, &request, &body, target) };
                let model = target.as_deref().or(request.model.as_deref());
                if self.refused_model(host, model) {
                    // Its 404 at once: queued, it would wait for a place it cannot use.
                    return self.route_model(host, &request, &body, target);
                }
                let priority = class.priority(&self.worker.config, model);
                if self.admitted_now(host, priority, self.weight, model) {
                    return self.route_model(host, &request, &body, target);
                }
                let model = model.map(str::to_owned);
                drop(request);
                self.hold(host, priority, class, body, target, model)
            }
            // Any other endpoint's body need not be JSON (nor ours to judge): routed by load.
            Err(_) if self.endpoint == Endpoint::Other => self.route(host, None),
            // No model can be read from it (see `read_for_model_alone`): the policy's.
            Err(error) => {
                if self.worker.config.invalid_body == InvalidBodyPolicy::Reject {
                    self.worker.stats.increment(self.worker.stats.body_rejected);
                    self.finish_buffering();
                    self.decided = true;
                    send_error(host, 400, "invalid_request_error", &error.to_string());
                    return Step::Pause;
                }
                // Read whole, so with flow control on it waits as any inference request does
                // (routed by load, now or at its release): else a body the parse refuses
                // would go past the queue and past every pod's in-flight bound.
                let Some(class) = self.flow_class else { return self.route(host, None) };
                let priority = class.priority(&self.worker.config, None);
                if self.admitted_now(host, priority, 1, None) {
                    return self.route(host, None);
                }
                self.hold(host, priority, class, body, None, None)
            }
        }
    }

    /// Flow control's admission of a request of `weight` sequences whose body is held: whether
    /// it goes on now (else the caller holds it). Either way it was admitted (its queue time
    /// is reported).
    fn admitted_now(&mut self, host: &dyn Host, priority: i32, weight: u32, model: Option<&str>) -> bool {
        self.flow_admitted = true;
        self.flow_band = Some(priority);
        let reach = crate::flow::Reach { model, subset: self.subset.as_deref() };
        crate::flow::admit(&self.worker, host, priority, weight, reach) == crate::flow::Admitted::RouteNow
    }

    /// Routes a request whose body is not read: over `max_body_bytes` or past
    /// `max_buffered_bytes`. With flow control on, an inference request among them cannot
    /// wait in the queue (its body is not held whole: it streams through Envoy), so it goes
    /// on only when it would be sent at once (its band's turn, a place on a pod of its subset
    /// hint within this worker's share; or the pool has no pod, which the decision answers)
    /// and is otherwise answered as a full queue answers. Routed regardless, a client padding
    /// its body past `max_body_bytes` would jump the queue and take pods past
    /// `max_inflight_per_pod`. Its priority is its headers' (the model's is in the body).
    /// Other endpoints' requests are not queued: routed by load, counted in flight.
    fn route_unread(&mut self, host: &dyn Host) -> Step {
        let class = self.flow_class.filter(|_| self.endpoint != Endpoint::Other);
        let Some(class) = class else { return self.route(host, None) };
        let priority = class.priority(&self.worker.config, None);
        if crate::flow::admit_unheld(&self.worker, host, priority, self.subset.as_deref()) {
            self.flow_admitted = true;
            self.flow_band = Some(priority);
            return self.route(host, None);
        }
        self.finish_buffering();
        self.decided = true;
        crate::flow::answer::refuse_unheld(&self.worker, host);
        Step::Pause
    }

    /// A body its endpoint's parse refused, read for its model alone as any other endpoint's
    /// is, and routed so (by model and load: no prefix, not learned from; flow control queues
    /// it all the same). vLLM reads JSON with Python and pydantic, which take what serde refuses
    /// (a key given twice, `NaN`, a byte order mark, completions by
    /// `prompt_embeds`): routed by load, such a request would reach pods of another model
    /// (their 404), and a rewrite's public name would reach the pod. `error` stands when no
    /// model can be read at all (not a JSON object, a `model` that is not a string).
    fn read_for_model_alone<'b>(
        &mut self,
        body: &'b [u8],
        error: BodyError,
    ) -> Result<InferenceRequest<'b>, BodyError> {
        self.worker.stats.increment(self.worker.stats.body_invalid);
        let request = parse_model_only(body).map_err(|_| error)?;
        self.worker.stats.increment(self.worker.stats.body_routed_by_model);
        self.endpoint = Endpoint::Other;
        self.read_for_model = true;
        Ok(request)
    }

    /// `model` is one no pod of the current table serves (none names it, none is silent about
    /// its models, none had its lists cut: such a pod gets it, so it waits for a place there)
    /// and such requests are refused: the decision answers 404. Not while the
    /// pool has no pod at all (requests wait for the first: scale from zero), nor once the
    /// table has expired (the decision then routes on the static pool, which names no model).
    fn refused_model(&self, host: &dyn Host, model: Option<&str>) -> bool {
        let Some(model) = model else { return false };
        let config = &self.worker.config;
        if config.models.unknown_model != UnknownModelPolicy::Reject {
            return false;
        }
        self.worker.table.try_borrow().is_ok_and(|cache| {
            let index = cache.models();
            cache.table().is_some_and(|t| !t.pods.is_empty())
                && !cache.expired(host.now_ms(), config.fail_open_max_age_ms)
                && !index.may_be_served(model)
        })
    }

    /// Trailers end the request (HTTP/2, gRPC-style clients): the body seen so far is the
    /// whole body, and the decision is made now. Without this a body that ends in trailers
    /// never reaches `end_of_stream`, and the request would leave unrouted.
    pub fn on_request_trailers(&mut self, host: &dyn Host) -> Step {
        if self.decided && !self.peer {
            // An upload that went on: its form ends here.
            return self.end_upload_watch(host);
        }
        match self.on_request_body(host, self.body_size, true) {
            Step::Continue => Step::Continue,
            Step::Pause => Step::Pause,
        }
    }

    /// The stream is done (Envoy calls this before `on_log`): if it still waits in the
    /// queue, its client went away, so it leaves the queue at once.
    pub fn on_done(&mut self, _host: &dyn Host) {
        if let Some(held) = &self.held {
            if *held.fate.borrow() == crate::flow::Fate::Waiting {
                *held.fate.borrow_mut() = crate::flow::Fate::Answered;
                crate::flow::abandon(&self.worker, self.context_id);
            }
        }
    }

    /// The stream ended (completed, failed or reset): release what it held, unless its
    /// answer's end did ([`Self::release`]).
    pub fn on_log(&mut self, host: &dyn Host) {
        let _span = profile::span(host, Phase::Log);
        self.release(host);
    }

    /// Gives back what the request holds: its queue place, its pod's in-flight count, its
    /// reading slot, its outlier and learning verdicts. Once: at its answer's last byte (the
    /// pod is done), else at the stream's end. The stream may end long after its answer: a
    /// client that stops reading keeps it open (an HTTP/2 one with its window shut holds the
    /// answer's end in Envoy until the stream idle timeout), and a pod's place held so long
    /// kept every other request off an idle pod (e2e tests/slow_readers.rs).
    fn release(&mut self, host: &dyn Host) {
        self.on_done(host);
        self.take_release();
        if let Some(held) = self.held.take() {
            if let crate::flow::Fate::Routed(address) = held.fate.replace(crate::flow::Fate::Answered) {
                self.routed_to = Some(address);
            }
        }
        self.finish_buffering();
        release_prefill(&self.worker, host, &mut self.prefilling_at);
        let Some(address) = self.routed_to.take() else { return };
        let now = host.now_ms();
        // An answer that began but did not end whole: did the pod cut it? (Envoy's flags, read
        // on this rare path only: a client gone, a pod reset mid-stream or silent.)
        let answer_open = std::mem::take(&mut self.answer_open);
        let judged = self.success_pending.take();
        let unfinished = if answer_open && (judged.is_some() || self.observed.is_some()) {
            let silent_ms = now.saturating_sub(self.answer_moved_ms);
            unfinished_by(host, AnswerPassed { bytes: self.answer_bytes, silent_ms })
        } else {
            Unfinished::NotByThePod
        };
        let failed_in_stream = std::mem::take(&mut self.failed_in_stream);
        if let Some(failures_then) = judged {
            let pod = self.answered_by.as_ref().unwrap_or(&address);
            crate::attempts::settle(&self.worker, pod, failures_then, unfinished.end(failed_in_stream), now);
        }
        if let (Some(compared), Some(comparing)) = (self.compared.take(), &self.worker.comparison) {
            if compared.answered {
                comparing
                    .stats
                    .arm(compared.arm)
                    .ended(&self.worker.stats.metrics, now.saturating_sub(compared.routed_ms));
            }
        }
        if let Some(observed) = self.observed.take() {
            // (An answer left unfinished by the pod, or maybe, is no duration sample.)
            observed.on_end(&self.worker, host, &address, now, unfinished != Unfinished::NotByThePod);
        }
        let counted_at = self.answered_by.take().unwrap_or(address);
        match self.worker.inflight.try_borrow_mut() {
            Ok(mut inflight) => {
                inflight.finished(counted_at.as_str(), self.weight, now);
                inflight.publish_now(host, now);
            }
            Err(_) => self.worker.stats.increment(self.worker.stats.inflight_update_failed),
        }
        // A place freed up on this worker: the next waiting request may take it now.
        crate::flow::release_ready(&self.worker, host);
    }

    /// Holds the request in the wait queue (flow control): paused until released.
    /// It keeps what routing it needs: its rewrite target, the model it is routed as and the
    /// gateway's subset hint.
    fn hold(
        &mut self,
        host: &dyn Host,
        priority: i32,
        class: crate::flow::RequestClass,
        body: Vec<u8>,
        target: Option<String>,
        model: Option<String>,
    ) -> Step {
        self.finish_buffering();
        self.decided = true;
        let reach_key = crate::flow::reach_key(model.as_deref(), self.subset.as_deref());
        let held = Rc::new(crate::flow::Held {
            context_id: self.context_id,
            body,
            endpoint: self.endpoint,
            session: self.session,
            session_pinned: self.session_pinned,
            target,
            model,
            reach_key,
            subset: self.subset.take(),
            fate: std::cell::RefCell::new(crate::flow::Fate::Waiting),
            waited_ms: std::cell::Cell::new(0),
            compared: std::cell::Cell::new(None),
            destination: std::cell::RefCell::new(String::new()),
            slo_ttft_ms: self.slo_ttft_ms,
            dispatch: std::cell::Cell::new(None),
            prefill: std::cell::RefCell::new(None),
            weight: self.weight,
        });
        if crate::flow::hold(&self.worker, host, Rc::clone(&held), priority, class.flow, class.ttl_ms) {
            self.held = Some(held);
        }
        Step::Pause
    }

    /// Removes every client copy of a header the pool cluster could follow.
    fn remove_client_destination(&self, host: &dyn Host, headers: &HeaderMap) {
        let configured = self.worker.config.destination_header.as_str();
        let prefiller = (self.worker.pd.as_ref().map(|pd| pd.config.prefiller_header.as_str()))
            .filter(|name| !CLIENT_FORBIDDEN_HEADERS.contains(name));
        for name in std::iter::once(configured).chain(prefiller).chain(CLIENT_FORBIDDEN_HEADERS) {
            if headers.contains(name) {
                self.worker.stats.increment(self.worker.stats.forged_destination);
                if let Err(error) = host.remove_request_header(name) {
                    log::warn!("wasm-epp: cannot remove client header {name}: {error}");
                }
            }
        }
    }

    fn account_buffered(&mut self, size: u64) {
        let total = &self.worker.buffered_bytes;
        total.set(total.get().saturating_sub(self.buffered).saturating_add(size));
        self.buffered = size;
    }

    fn finish_buffering(&mut self) {
        let total = &self.worker.buffered_bytes;
        total.set(total.get().saturating_sub(std::mem::take(&mut self.buffered)));
    }

    fn answer_health(&mut self, host: &dyn Host) -> Step {
        self.decided = true;
        self.worker.stats.increment(self.worker.stats.health_probes);
        let (pods, healthy) = match self.worker.table.try_borrow() {
            Ok(cache) => cache.table().map_or((0, 0), |t| (t.pods.len(), t.pods.iter().filter(|p| p.healthy).count())),
            Err(_) => (0, 0),
        };
        send_json(host, &serde_json::json!({"status": "ok", "pods": pods, "healthy_pods": healthy}));
        Step::Pause
    }
}

/// Whether a body on another endpoint may be JSON naming a `model`, and so is worth buffering:
/// declared as JSON, or undeclared, or as curl's `-d` default and plain text (servers that read
/// JSON whatever the label). Binary uploads pass unread (a `multipart/form-data` form is read
/// for its `model` field, see [`upload`]).
fn may_be_json(content_type: Option<&str>) -> bool {
    let Some(value) = content_type else { return true };
    let essence = value.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    essence.is_empty()
        || essence.ends_with("/json")
        || essence.ends_with("+json")
        || essence == "application/x-www-form-urlencoded"
        || essence == "text/plain"
}

fn trim_bytes(value: &[u8]) -> &[u8] {
    let start = value.iter().position(|b| !b.is_ascii_whitespace()).unwrap_or(value.len());
    let end = value.iter().rposition(|b| !b.is_ascii_whitespace()).map_or(start, |i| i + 1);
    value.get(start..end).unwrap_or_default()
}
