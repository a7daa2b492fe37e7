//! One request's callbacks, forwarded to `wasm_epp_router::RequestStream`.

use proxy_wasm::traits::{Context, HttpContext};
use proxy_wasm::types::Action;
use wasm_epp_host::ProxyHost;
use wasm_epp_router::{RequestStream, Step};

pub struct Http(pub RequestStream);

fn action(step: Step) -> Action {
    match step {
        Step::Continue => Action::Continue,
        Step::Pause => Action::Pause,
    }
}

impl Context for Http {
    fn on_done(&mut self) -> bool {
        self.0.on_done(&ProxyHost);
        true
    }
}

impl HttpContext for Http {
    fn on_http_request_headers(&mut self, _headers: usize, end_of_stream: bool) -> Action {
        action(self.0.on_request_headers(&ProxyHost, end_of_stream))
    }

    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        action(self.0.on_request_body(&ProxyHost, body_size, end_of_stream))
    }

    fn on_http_request_trailers(&mut self, _trailers: usize) -> Action {
        action(self.0.on_request_trailers(&ProxyHost))
    }

    fn on_http_response_headers(&mut self, _headers: usize, end_of_stream: bool) -> Action {
        action(self.0.on_response_headers(&ProxyHost, end_of_stream))
    }

    fn on_http_response_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        action(self.0.on_response_body(&ProxyHost, body_size, end_of_stream))
    }

    fn on_http_response_trailers(&mut self, _trailers: usize) -> Action {
        action(self.0.on_response_trailers(&ProxyHost))
    }

    fn on_log(&mut self) {
        self.0.on_log(&ProxyHost);
    }
}

/// Stands in when the worker is missing (the plugin failed to configure; Envoy should not
/// call us then): the SDK panics if no HTTP context is returned, so pass requests through.
pub struct PassThrough;

impl Context for PassThrough {}

impl HttpContext for PassThrough {}
