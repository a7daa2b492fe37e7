//! wasm-epp's HTTP filter, loaded by Envoy as a Proxy-Wasm module (one VM per worker).
//!
//! Glue only: [`root`] forwards the root context's callbacks (configure, tick, call
//! answers, queue wake-ups) and [`http`] the request's callbacks to `wasm_epp_router` (and,
//! in no-singleton mode, to `wasm_epp_poller`'s election), passing the real host. All
//! logic, and every host call, lives in those crates and in `wasm_epp_host`.

#![forbid(unsafe_code)]

mod http;
mod root;

use proxy_wasm::traits::RootContext;
use proxy_wasm::types::LogLevel;

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Info);
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> { Box::new(root::FilterRoot::default()) });
}}
