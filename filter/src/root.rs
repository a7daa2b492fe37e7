//! The filter's root context: forwards to `wasm_epp_router` (configure, tick) and, in
//! no-singleton mode, to `wasm_epp_poller::ElectedPoller`.

use std::rc::Rc;

use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::ContextType;
use wasm_epp_host::{Host, ProxyHost};
use wasm_epp_poller::ElectedPoller;
use wasm_epp_router::{configure, tick, RequestStream, Worker};

use crate::http::{Http, PassThrough};

#[derive(Default)]
pub struct FilterRoot {
    worker: Option<Rc<Worker>>,
    /// Set in no-singleton mode (a `poller` section in the configuration).
    elected: Option<ElectedPoller>,
}

impl Context for FilterRoot {
    fn on_http_call_response(&mut self, token: u32, _headers: usize, body_size: usize, _trailers: usize) {
        if let Some(elected) = self.elected.as_mut() {
            elected.http_response(&ProxyHost, token, body_size);
        }
    }

    fn on_done(&mut self) -> bool {
        if let Some(elected) = &self.elected {
            elected.release(&ProxyHost);
        }
        true
    }
}

impl RootContext for FilterRoot {
    fn on_configure(&mut self, size: usize) -> bool {
        match configure(&ProxyHost, size, ProxyHost.random_seed()) {
            Ok(worker) => {
                self.elected = worker.config.poller.clone().map(ElectedPoller::new);
                self.worker = Some(Rc::new(worker));
                true
            }
            Err(error) => {
                log::error!("wasm-epp filter: {error}");
                false
            }
        }
    }

    fn on_tick(&mut self) {
        if let Some(elected) = self.elected.as_mut() {
            elected.tick(&ProxyHost, ProxyHost.now_ms());
        }
        if let Some(worker) = &self.worker {
            tick::on_tick(worker, &ProxyHost);
        }
    }

    fn on_queue_ready(&mut self, queue_id: u32) {
        if let Some(elected) = self.elected.as_mut() {
            elected.queue_ready(&ProxyHost, queue_id);
        }
    }

    fn create_http_context(&self, context_id: u32) -> Option<Box<dyn HttpContext>> {
        let Some(worker) = self.worker.clone() else { return Some(Box::new(PassThrough)) };
        if !worker.serving.replace(true) {
            // First request on this worker: catch up at once (pod table, the ring's history)
            // rather than routing it cold; until now this root only idled.
            tick::on_tick(&worker, &ProxyHost);
        }
        Some(Box::new(Http(RequestStream::for_context(worker, context_id))))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}
