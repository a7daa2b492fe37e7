//! wasm-epp's singleton service (Envoy `bootstrap_extensions`, `singleton: true`), one VM on
//! the main thread. It must share its `vm_id` with the filter: shared data is keyed by it.
//!
//! Glue only: each callback is forwarded to `wasm_epp_poller::PoolService` (discover,
//! scrape, publish, relay) with the real host; the same service runs inside the filter when
//! no singleton exists.

#![forbid(unsafe_code)]

use proxy_wasm::traits::{Context, RootContext};
use proxy_wasm::types::{ContextType, LogLevel};
use wasm_epp_host::{Host, ProxyHost};
use wasm_epp_poller::PoolService;

#[derive(Default)]
struct Singleton(PoolService);

impl Context for Singleton {
    fn on_http_call_response(&mut self, token: u32, _headers: usize, body_size: usize, _trailers: usize) {
        self.0.http_response(&ProxyHost, token, body_size);
    }
}

impl RootContext for Singleton {
    fn on_configure(&mut self, size: usize) -> bool {
        let bytes = ProxyHost.plugin_configuration(size).unwrap_or_default();
        match self.0.configure(&ProxyHost, &bytes) {
            Ok(()) => true,
            Err(reason) => {
                log::error!("wasm-epp singleton: {reason}");
                false
            }
        }
    }

    fn on_tick(&mut self) {
        self.0.tick(&ProxyHost, ProxyHost.now_ms());
    }

    fn on_queue_ready(&mut self, queue_id: u32) {
        self.0.queue_ready(&ProxyHost, queue_id);
    }

    fn get_type(&self) -> Option<ContextType> {
        None
    }
}

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Info);
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> { Box::new(Singleton::default()) });
}}
