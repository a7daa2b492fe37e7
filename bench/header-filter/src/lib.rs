//! A Proxy-Wasm filter that does nothing but write the destination header.
//!
//! wasm-epp's added latency has two parts: what any Wasm filter costs inside Envoy (a VM
//! call per callback, holding the headers, buffering the body) and what wasm-epp itself
//! does (parse, read shared data, score, count in-flight requests). Benchmarking against
//! this filter separates them. Configured with a plain-text plugin configuration, one
//! token per whitespace-separated word, so no parser runs at all:
//!
//! - `buffer` — pause in headers and body until end of stream, then write the header
//!   (the same callback pattern as wasm-epp; needs `allow_on_headers_stop_iteration`);
//!   without it the header is written in `on_http_request_headers` and the request goes on.
//! - `read` — with `buffer`, also copy the whole body into the VM and
//!   drop it: the copy wasm-epp needs before it can parse, without the parse.
//! - `probe` — with `buffer`, answer each request locally with what every host call
//!   costs inside Envoy ([`probe`]), instead of routing it.
//! - every other word is a pod address; requests take them in turn (per worker).
//!
//! Host calls go through `wasm_epp_host::ProxyHost`, the same seam wasm-epp uses, so the
//! two differ only in what they do, not in how they call Envoy.

#![forbid(unsafe_code)]

mod probe;

use std::cell::Cell;
use std::rc::Rc;

use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, ContextType, LogLevel};
use wasm_epp_host::{Host, ProxyHost};

/// The header an ORIGINAL_DST cluster with `use_http_header: true` follows.
const DESTINATION_HEADER: &str = "x-gateway-destination-endpoint";

/// The configuration word that turns body buffering on.
const BUFFER_WORD: &str = "buffer";
/// The configuration word that copies the buffered body into the VM.
const READ_WORD: &str = "read";
/// The configuration word that turns the host-call probe on.
const PROBE_WORD: &str = "probe";

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Warn);
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> { Box::new(HeaderRoot::default()) });
}}

/// What every request on one worker shares.
struct Settings {
    buffer_body: bool,
    read_body: bool,
    probe: bool,
    pool: Vec<String>,
    /// Round-robin position in `pool`.
    next: Cell<usize>,
}

impl Settings {
    fn parse(text: &str) -> Self {
        let words = text.split_whitespace();
        let buffer_body = words.clone().any(|w| w == BUFFER_WORD);
        let read_body = buffer_body && words.clone().any(|w| w == READ_WORD);
        let probe = buffer_body && words.clone().any(|w| w == PROBE_WORD);
        let pool = words.filter(|w| ![BUFFER_WORD, READ_WORD, PROBE_WORD].contains(w)).map(str::to_string).collect();
        Self { buffer_body, read_body, probe, pool, next: Cell::new(0) }
    }

    fn next_destination(&self) -> Option<&str> {
        let position = self.next.get();
        self.next.set(position.wrapping_add(1));
        let index = position.checked_rem(self.pool.len())?;
        self.pool.get(index).map(String::as_str)
    }
}

#[derive(Default)]
struct HeaderRoot {
    settings: Option<Rc<Settings>>,
}

impl Context for HeaderRoot {}

impl RootContext for HeaderRoot {
    fn on_configure(&mut self, size: usize) -> bool {
        let bytes = ProxyHost.plugin_configuration(size).unwrap_or_default();
        let settings = Settings::parse(&String::from_utf8_lossy(&bytes));
        if settings.pool.is_empty() {
            log::error!("header-only-filter: configuration names no pod address");
            return false;
        }
        self.settings = Some(Rc::new(settings));
        true
    }

    fn create_http_context(&self, _context_id: u32) -> Option<Box<dyn HttpContext>> {
        // The SDK panics on None: a root that failed to configure never gets requests anyway.
        let settings = self.settings.clone()?;
        Some(Box::new(HeaderOnly { settings }))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

struct HeaderOnly {
    settings: Rc<Settings>,
}

impl HeaderOnly {
    fn set_destination(&self) -> Action {
        if let Some(address) = self.settings.next_destination() {
            let _ = ProxyHost.set_request_header(DESTINATION_HEADER, address.as_bytes());
        }
        Action::Continue
    }
}

impl Context for HeaderOnly {}

impl HttpContext for HeaderOnly {
    fn on_http_request_headers(&mut self, _headers: usize, end_of_stream: bool) -> Action {
        if self.settings.buffer_body && !end_of_stream {
            return Action::Pause;
        }
        self.set_destination()
    }

    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        if !self.settings.buffer_body {
            return Action::Continue;
        }
        if !end_of_stream {
            return Action::Pause;
        }
        if self.settings.probe {
            probe::run(body_size);
            return Action::Pause;
        }
        if self.settings.read_body {
            let body = ProxyHost.request_body(0, body_size).ok();
            std::hint::black_box(body);
        }
        self.set_destination()
    }
}
