//! One request: hold the headers, buffer the body, pick a pod, write the destination.
//!
//! Envoy needs `allow_on_headers_stop_iteration: true` for this: headers are held
//! (`Pause`) while the body is buffered (`Pause` until end of stream), then the header is
//! set and both continue. Requests with no body, or a body over the configured limit, are
//! routed by load at once without reading it. A client's own destination header is always
//! removed first, so only the picker's choice can reach the pool cluster.

use std::rc::Rc;

use picker::config::InvalidBodyPolicy;
use picker::inflight::InflightCounts;
use picker::prefix::session_key;
use picker::request::{parse_request, Endpoint, InferenceRequest};
use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext};
use proxy_wasm::types::{Action, BufferType, MapType};
use wasm_epp_host::{now_ms, ProxyStore};

use crate::decide::{decide, Outcome, Prompt};
use crate::reply::send_error;
use crate::worker::Worker;

/// Headers Envoy's ORIGINAL_DST load balancer can follow; none may come from a client.
const ENVOY_DESTINATION_HEADERS: [&str; 1] = ["x-envoy-original-dst-host"];

pub struct RoutingContext {
    worker: Rc<Worker>,
    endpoint: Endpoint,
    /// The pod this request was sent to, once routed (decremented in `on_log`).
    routed_to: Option<String>,
    /// The client marked the request sheddable (negative priority).
    sheddable: bool,
    /// Key of the request's session header, if it had one.
    session: Option<u64>,
}

impl RoutingContext {
    pub fn new(worker: Rc<Worker>) -> Self {
        Self { worker, endpoint: Endpoint::Other, routed_to: None, sheddable: false, session: None }
    }

    /// Removes every client copy of a header the pool cluster could follow.
    fn remove_client_destination(&self, headers: &[(String, String)]) {
        let configured = self.worker.config.destination_header.as_str();
        for name in std::iter::once(configured).chain(ENVOY_DESTINATION_HEADERS) {
            if headers.iter().any(|(key, _)| key == name) {
                self.worker.stats.forged_destination.increment();
                let _ = hostcalls::remove_map_value(MapType::HttpRequestHeaders, name);
            }
        }
    }

    /// Decides, then acts: sets the header and continues, or answers locally.
    fn route(&mut self, request: Option<&InferenceRequest<'_>>) -> Action {
        let prompt = Prompt { request, endpoint: self.endpoint, session: self.session, sheddable: self.sheddable };
        match decide(&self.worker, &prompt) {
            Outcome::Routed { address, destination } => {
                let header = &self.worker.config.destination_header;
                if let Err(error) = hostcalls::set_map_value(MapType::HttpRequestHeaders, header, Some(&destination)) {
                    log::error!("wasm-epp: cannot set destination header: {error:?}");
                    return self.no_pod("destination header refused");
                }
                self.routed_to = Some(address.as_str().to_string());
                Action::Continue
            }
            Outcome::Shed => {
                send_error(
                    429,
                    "rate_limit_exceeded",
                    "wasm-epp: every inference pod is saturated; sheddable request refused",
                );
                Action::Pause
            }
            Outcome::NoPod(why) => self.no_pod(why),
        }
    }

    fn no_pod(&self, why: &str) -> Action {
        self.worker.stats.no_pod.increment();
        send_error(503, "service_unavailable", &format!("wasm-epp: no inference pod available ({why})"));
        Action::Pause
    }
}

impl Context for RoutingContext {}

impl HttpContext for RoutingContext {
    fn on_http_request_headers(&mut self, _headers: usize, end_of_stream: bool) -> Action {
        // One host call for every header, instead of one per header looked at.
        let headers = hostcalls::get_map(MapType::HttpRequestHeaders).unwrap_or_default();
        let header = |name: &str| headers.iter().find(|(key, _)| key == name).map(|(_, value)| value.as_str());
        self.remove_client_destination(&headers);
        let config = &self.worker.config;
        self.sheddable = header(&config.priority_header)
            .and_then(|v| v.trim().parse::<i64>().ok())
            .is_some_and(|priority| priority < 0);
        self.session = header(&config.prefix.session_header).map(|id| session_key(id.trim()));
        self.endpoint = Endpoint::from_path(header(":path").unwrap_or_default());
        let declared_length = header("content-length").and_then(|v| v.trim().parse::<u64>().ok());
        if end_of_stream || self.endpoint == Endpoint::Other {
            return self.route(None);
        }
        if declared_length.is_some_and(|len| len > config.max_body_bytes) {
            self.worker.stats.body_over_limit.increment();
            return self.route(None);
        }
        Action::Pause
    }

    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        if self.routed_to.is_some() {
            return Action::Continue;
        }
        if body_size as u64 > self.worker.config.max_body_bytes {
            // Streamed without a declared length and grew past the limit: stop buffering.
            self.worker.stats.body_over_limit.increment();
            return self.route(None);
        }
        if !end_of_stream {
            return Action::Pause;
        }
        let body = match hostcalls::get_buffer(BufferType::HttpRequestBody, 0, body_size) {
            Ok(body) => body.unwrap_or_default(),
            Err(error) => {
                log::warn!("wasm-epp: cannot read request body: {error:?}");
                Vec::new()
            }
        };
        match parse_request(&body, self.endpoint) {
            Ok(request) => self.route(Some(&request)),
            Err(error) => {
                self.worker.stats.body_invalid.increment();
                if self.worker.config.invalid_body == InvalidBodyPolicy::Reject {
                    self.worker.stats.body_rejected.increment();
                    send_error(400, "invalid_request_error", &error.to_string());
                    return Action::Pause;
                }
                self.route(None)
            }
        }
    }

    fn on_log(&mut self) {
        let Some(address) = self.routed_to.take() else { return };
        let store = ProxyStore;
        let expiry = self.worker.config.inflight_expiry_ms;
        let done = InflightCounts::read(&store).and_then(|c| c.update(&store, &address, -1, now_ms(), expiry));
        if done.is_err() {
            self.worker.stats.inflight_update_failed.increment();
        }
    }
}
