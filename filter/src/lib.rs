//! wasm-epp's HTTP filter, loaded by Envoy as a Proxy-Wasm module (one VM per worker).
//!
//! Read in request order: [`root`] validates the configuration and makes one
//! [`worker::Worker`] per VM; [`routing`] holds each request's headers and buffers its body;
//! [`decide`] asks `picker` for a pod and records the pick; [`reply`] shapes the few answers
//! the filter gives itself. [`sync`] runs on the root's tick: it shares this worker's
//! decisions with the others and learns theirs. [`election`] runs the pool service in one
//! elected root context when there is no singleton.

#![forbid(unsafe_code)]

mod decide;
mod election;
mod reply;
mod root;
mod routing;
mod sync;
mod table_cache;
mod worker;

use proxy_wasm::traits::RootContext;
use proxy_wasm::types::LogLevel;

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Info);
    proxy_wasm::set_root_context(|context_id| -> Box<dyn RootContext> { Box::new(root::FilterRoot::new(context_id)) });
}}
