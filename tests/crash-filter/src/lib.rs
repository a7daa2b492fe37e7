//! TEST ONLY: a filter whose VM can be crashed on demand.
//!
//! The end-to-end tests need a VM that dies to show what the shipped `failure_policy` does
//! after a crash (does a later request route again? does fail-open follow a client's
//! header?). wasm-epp itself must never crash, so this stand-in takes its place in the same
//! filter-chain position, with the same JSON configuration fields it needs:
//!
//! - `pool`: pod addresses, taken in turn (per worker), written into
//! - `destination_header` (default `x-gateway-destination-endpoint`), which the `pool`
//!   cluster follows.
//!
//! A request with `x-test-crash: 1` panics (`panic = "abort"`: a Wasm `unreachable` trap,
//! Envoy's RuntimeError). `GET /wasm-epp/healthz` is answered locally with 200, as wasm-epp
//! answers it, so the liveness probe can be tested against a crashed VM.

use std::cell::Cell;
use std::rc::Rc;

use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, BufferType, ContextType, LogLevel, MapType};

const DEFAULT_DESTINATION_HEADER: &str = "x-gateway-destination-endpoint";
const CRASH_HEADER: &str = "x-test-crash";
const HEALTH_PATH: &[u8] = b"/wasm-epp/healthz";

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Warn);
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> { Box::new(CrashRoot::default()) });
}}

struct Settings {
    pool: Vec<String>,
    destination_header: String,
    /// Round-robin position in `pool`.
    next: Cell<usize>,
}

#[derive(Default)]
struct CrashRoot {
    settings: Option<Rc<Settings>>,
}

impl Context for CrashRoot {}

impl RootContext for CrashRoot {
    fn on_configure(&mut self, size: usize) -> bool {
        let bytes = hostcalls::get_buffer(BufferType::PluginConfiguration, 0, size).ok().flatten().unwrap_or_default();
        let config: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
        let pool = config["pool"]
            .as_array()
            .map(|list| list.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
            .unwrap_or_default();
        let destination_header =
            config["destination_header"].as_str().unwrap_or(DEFAULT_DESTINATION_HEADER).to_string();
        self.settings = Some(Rc::new(Settings { pool, destination_header, next: Cell::new(0) }));
        true
    }

    fn create_http_context(&self, _context_id: u32) -> Option<Box<dyn HttpContext>> {
        let settings = Rc::clone(self.settings.as_ref()?);
        Some(Box::new(CrashFilter { settings }))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

struct CrashFilter {
    settings: Rc<Settings>,
}

impl Context for CrashFilter {}

impl HttpContext for CrashFilter {
    fn on_http_request_headers(&mut self, _headers: usize, _end_of_stream: bool) -> Action {
        let header = |name: &str| hostcalls::get_map_value_bytes(MapType::HttpRequestHeaders, name).ok().flatten();
        if header(CRASH_HEADER).as_deref() == Some(b"1") {
            panic!("crash-filter: crashed on request, as asked");
        }
        if header(":path").as_deref() == Some(HEALTH_PATH) {
            let _ = hostcalls::send_http_response(
                200,
                vec![("content-type", "application/json")],
                Some(b"{\"status\":\"ok\"}"),
            );
            return Action::Pause;
        }
        let settings = &self.settings;
        let position = settings.next.get();
        settings.next.set(position.wrapping_add(1));
        let chosen = position.checked_rem(settings.pool.len()).and_then(|i| settings.pool.get(i));
        let _ = hostcalls::set_map_value(
            MapType::HttpRequestHeaders,
            &settings.destination_header,
            chosen.map(String::as_str),
        );
        Action::Continue
    }
}
