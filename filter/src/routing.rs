//! One request: hold the headers, buffer the body, pick a pod, write the destination.
//!
//! Envoy needs `allow_on_headers_stop_iteration: true` for this: headers are held
//! (`Pause`) while the body is buffered (`Pause` until end of stream), then the header is
//! set and both continue. Requests with no body, or a body over the configured limit, are
//! routed by load at once without reading it. A client's own destination header is always
//! removed first, so only the picker's choice can reach the ORIGINAL_DST cluster.

use std::rc::Rc;

use picker::address::PodAddress;
use picker::config::InvalidBodyPolicy;
use picker::inflight::InflightCounts;
use picker::request::{parse_request, Endpoint};
use picker::route::{choose, Route, RoutingView};
use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext};
use proxy_wasm::types::{Action, BufferType, MapType};
use wasm_epp_host::{now_ms, ProxyStore};

use crate::reply::send_error;
use crate::table_cache::Refresh;
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
}

impl RoutingContext {
    pub fn new(worker: Rc<Worker>) -> Self {
        Self { worker, endpoint: Endpoint::Other, routed_to: None, sheddable: false }
    }

    fn remove_client_destination(&self) {
        let configured = self.worker.config.destination_header.as_str();
        for name in std::iter::once(configured).chain(ENVOY_DESTINATION_HEADERS) {
            if let Ok(Some(_)) = hostcalls::get_map_value(MapType::HttpRequestHeaders, name) {
                self.worker.stats.forged_destination.increment();
                let _ = hostcalls::remove_map_value(MapType::HttpRequestHeaders, name);
            }
        }
    }

    /// Picks a pod and sets the header; on an empty pool answers 503. Returns the action
    /// for the callback that asked.
    fn route(&mut self) -> Action {
        let worker = Rc::clone(&self.worker);
        let store = ProxyStore;
        let now = now_ms();
        let Ok(mut cache) = worker.table.try_borrow_mut() else { return self.no_pod("worker state busy") };
        if let Refresh::DecodeFailed(reason) = cache.refresh(&store) {
            worker.stats.table_decode_failed.increment();
            log::warn!("wasm-epp: pod table not usable, keeping the last one: {reason}");
        }
        let inflight = InflightCounts::read(&store).unwrap_or_default();
        let view = RoutingView {
            table: cache.table(),
            fallback_pool: &worker.fallback_pool,
            inflight: &inflight,
            now_ms: now,
            stale_after_ms: worker.config.stale_after_ms,
            inflight_expiry_ms: worker.config.inflight_expiry_ms,
        };
        let route = match worker.random.try_borrow_mut() {
            Ok(mut random) => {
                let fallbacks = worker.config.fallback_destinations as usize;
                choose(&view, &worker.config.weights, &worker.config.saturation, &mut random, fallbacks)
            }
            Err(_) => None,
        };
        drop(cache);
        let Some(Route { address, fallbacks, fail_open, pool_saturated, .. }) = route else {
            return self.no_pod("no pod in the pool");
        };
        worker.note_fail_open(fail_open);
        if self.sheddable && pool_saturated {
            worker.stats.shed.increment();
            send_error(
                429,
                "rate_limit_exceeded",
                "wasm-epp: every inference pod is saturated; sheddable request refused",
            );
            return Action::Pause;
        }
        let destination = destination_value(&address, &fallbacks);
        if let Err(error) =
            hostcalls::set_map_value(MapType::HttpRequestHeaders, &worker.config.destination_header, Some(&destination))
        {
            log::error!("wasm-epp: cannot set destination header: {error:?}");
            return self.no_pod("destination header refused");
        }
        if inflight.update(&store, address.as_str(), 1, now, worker.config.inflight_expiry_ms).is_err() {
            worker.stats.inflight_update_failed.increment();
        }
        worker.stats.routed.increment();
        if fail_open {
            worker.stats.fail_open.increment();
        }
        if let Ok(mut picks) = worker.stats.picks.try_borrow_mut() {
            picks.increment(&address.stat_label());
        }
        self.routed_to = Some(address.as_str().to_string());
        Action::Continue
    }

    fn no_pod(&self, why: &str) -> Action {
        self.worker.stats.no_pod.increment();
        send_error(503, "service_unavailable", &format!("wasm-epp: no inference pod available ({why})"));
        Action::Pause
    }

    fn body_over_limit(&self, declared: Option<u64>) -> bool {
        declared.is_some_and(|len| len > self.worker.config.max_body_bytes)
    }
}

/// `chosen[,fallback...]`: override_host tries them in order on retries.
fn destination_value(chosen: &PodAddress, fallbacks: &[PodAddress]) -> String {
    let mut value = String::with_capacity(24 * (1 + fallbacks.len()));
    value.push_str(chosen.as_str());
    for fallback in fallbacks {
        value.push(',');
        value.push_str(fallback.as_str());
    }
    value
}

impl Context for RoutingContext {}

impl HttpContext for RoutingContext {
    fn on_http_request_headers(&mut self, _headers: usize, end_of_stream: bool) -> Action {
        self.remove_client_destination();
        self.sheddable = hostcalls::get_map_value(MapType::HttpRequestHeaders, &self.worker.config.priority_header)
            .ok()
            .flatten()
            .and_then(|v| v.trim().parse::<i64>().ok())
            .is_some_and(|priority| priority < 0);
        let path = hostcalls::get_map_value(MapType::HttpRequestHeaders, ":path").ok().flatten().unwrap_or_default();
        self.endpoint = Endpoint::from_path(&path);
        let declared_length = hostcalls::get_map_value(MapType::HttpRequestHeaders, "content-length")
            .ok()
            .flatten()
            .and_then(|v| v.trim().parse::<u64>().ok());
        if end_of_stream || self.endpoint == Endpoint::Other {
            return self.route();
        }
        if self.body_over_limit(declared_length) {
            self.worker.stats.body_over_limit.increment();
            return self.route();
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
            return self.route();
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
        if let Err(error) = parse_request(&body, self.endpoint) {
            self.worker.stats.body_invalid.increment();
            if self.worker.config.invalid_body == InvalidBodyPolicy::Reject {
                self.worker.stats.body_rejected.increment();
                send_error(400, "invalid_request_error", &error.to_string());
                return Action::Pause;
            }
        }
        self.route()
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
