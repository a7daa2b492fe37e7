//! wasm-epp's singleton service (Envoy `bootstrap_extensions`, `singleton: true`), one VM on
//! the main thread. It must share its `vm_id` with the filter: shared data is keyed by it.
//!
//! All it does is run `wasm_epp_poller::PoolService` (discover, scrape, publish, relay) as
//! its root context; the same service can run inside the filter when no singleton exists.

#![forbid(unsafe_code)]

use proxy_wasm::traits::RootContext;
use proxy_wasm::types::LogLevel;
use wasm_epp_poller::PoolService;

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Info);
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> { Box::new(PoolService::default()) });
}}
