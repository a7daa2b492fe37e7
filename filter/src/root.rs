//! The filter's root context: configuration in, one shared [`Worker`] out.

use std::rc::Rc;
use std::time::Duration;

use picker::config::{parse_json, FilterConfig};
use picker::inflight::InflightCounts;
use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{BufferType, ContextType};
use wasm_epp_host::ProxyStore;

use crate::election::ElectedPoller;
use crate::routing::RoutingContext;
use crate::worker::Worker;

/// The VM id this plugin runs under (the singleton's must be the same); Envoy's default.
fn vm_id() -> String {
    hostcalls::get_property(vec!["plugin_vm_id"])
        .ok()
        .flatten()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .filter(|id| !id.is_empty())
        .unwrap_or_else(|| "wasm-epp".to_string())
}

pub struct FilterRoot {
    context_id: u32,
    worker: Option<Rc<Worker>>,
    /// Set in no-singleton mode (a `poller` section in the configuration).
    elected: Option<ElectedPoller>,
}

impl FilterRoot {
    pub fn new(context_id: u32) -> Self {
        Self { context_id, worker: None, elected: None }
    }
}

impl Context for FilterRoot {
    fn on_http_call_response(&mut self, token: u32, _headers: usize, body_size: usize, _trailers: usize) {
        if let Some(elected) = self.elected.as_mut() {
            elected.http_response(token, body_size);
        }
    }

    fn on_done(&mut self) -> bool {
        if let Some(elected) = &self.elected {
            elected.release();
        }
        true
    }
}

impl RootContext for FilterRoot {
    fn on_configure(&mut self, size: usize) -> bool {
        let bytes = match hostcalls::get_buffer(BufferType::PluginConfiguration, 0, size) {
            Ok(bytes) => bytes.unwrap_or_default(),
            Err(status) => {
                log::error!("wasm-epp filter: cannot read plugin configuration: {status:?}");
                return false;
            }
        };
        let config: FilterConfig = match parse_json(&bytes) {
            Ok(config) => config,
            Err(reason) => {
                log::error!("wasm-epp filter: {reason}");
                return false;
            }
        };
        let pool = match config.validate() {
            Ok(pool) => pool,
            Err(reason) => {
                log::error!("wasm-epp filter: invalid configuration: {reason}");
                return false;
            }
        };
        if let Err(error) = InflightCounts::ensure_key(&ProxyStore) {
            log::warn!("wasm-epp filter: in-flight key not initialised: {error:?}");
        }
        // The tick serves the prefix sync and, in no-singleton mode, the pool service.
        let periods = [Some(config.prefix.sync_interval_ms), config.poller.as_ref().map(|p| p.poll_interval_ms)];
        if let Some(period) = periods.into_iter().flatten().min() {
            if let Err(status) = hostcalls::set_tick_period(Duration::from_millis(period)) {
                log::error!("wasm-epp filter: cannot set tick period: {status:?}");
                return false;
            }
        }
        if let Some(poller) = config.poller.clone() {
            let me = wasm_epp_host::clock::seed() ^ (u64::from(self.context_id) << 48) | 1;
            self.elected = Some(ElectedPoller::new(me, poller));
        }
        let vm_id = vm_id();
        log::info!(
            "wasm-epp filter configured: fallback pool of {} pods, weights {:?}, prefix affinity {}, vm_id {vm_id}",
            pool.len(),
            config.weights,
            if config.prefix.enabled { "on" } else { "off" },
        );
        self.worker = Some(Rc::new(Worker::new(config, pool, vm_id)));
        true
    }

    fn on_tick(&mut self) {
        if let Some(elected) = self.elected.as_mut() {
            elected.tick(wasm_epp_host::now_ms());
        }
        if let Some(worker) = &self.worker {
            crate::sync::on_tick(worker);
        }
    }

    fn on_queue_ready(&mut self, queue_id: u32) {
        if let Some(elected) = self.elected.as_mut() {
            elected.queue_ready(queue_id);
        }
    }

    fn create_http_context(&self, _context_id: u32) -> Option<Box<dyn HttpContext>> {
        // Without a worker the plugin failed to configure and Envoy will not call us.
        let worker = self.worker.clone()?;
        if !worker.serving.replace(true) {
            // First request on this worker: catch up at once (pod table, the ring's history)
            // rather than routing it cold; until now this root only idled.
            crate::sync::on_tick(&worker);
        }
        Some(Box::new(RoutingContext::new(worker)))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}
