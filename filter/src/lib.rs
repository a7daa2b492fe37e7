//! wasm-epp's HTTP filter, loaded by Envoy as a Proxy-Wasm module (one VM per worker).
//!
//! Read in request order: [`root`] validates the configuration and makes one
//! [`worker::Worker`] per VM; [`routing`] holds each request's headers, buffers its body,
//! asks `picker` for a pod and writes the destination header; [`reply`] shapes the few
//! answers the filter gives itself.

#![forbid(unsafe_code)]

mod reply;
mod root;
mod routing;
mod table_cache;
mod worker;

use proxy_wasm::traits::RootContext;
use proxy_wasm::types::LogLevel;

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Info);
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> { Box::new(root::FilterRoot::default()) });
}}
