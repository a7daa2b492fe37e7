//! wasm-epp's singleton service (Envoy `bootstrap_extensions`, `singleton: true`), one VM on
//! the main thread. It must share its `vm_id` with the filter: shared data is keyed by it.
//!
//! [`service`] ticks, dispatches a scrape of `/metrics` to each pod through an
//! ORIGINAL_DST cluster, hands answers to `picker::poller::PoolPoller` and publishes the
//! pod table when a round completes ([`publish`]).

#![forbid(unsafe_code)]

mod discovery;
mod publish;
mod relay;
mod service;

use proxy_wasm::traits::RootContext;
use proxy_wasm::types::LogLevel;

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Info);
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> { Box::new(service::PollerService::default()) });
}}
