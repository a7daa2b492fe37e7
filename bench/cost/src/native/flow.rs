//! Flow control's release scan, natively, at its worst: a worker whose queue holds requests of
//! a model whose pods are all at their bound, beside another model's pods with room, so the
//! scan looks at every waiting request (up to its cap) and none may go. It runs on each tick
//! while requests wait (every 5 ms) and at the end of each request of the worker.

use std::rc::Rc;

use wasm_epp_host::MockHost;
use wasm_epp_router::{configure, tick, RequestStream, Step, Worker};

use super::state::{pod_table, publish, NOW_MS, WORKER_SEED};

/// The model whose pods are full, and the one whose pods have room.
const FULL: &str = "full-model";
const ROOMY: &str = "roomy-model";

const CONFIG: &str = r#"{"flow_control": {"enabled": true, "max_inflight_per_pod": 1, "ttl_ms": 600000,
    "max_queued_requests": 65536, "max_band_requests": 65536}}"#;

/// A worker with `waiting` requests held for [`FULL`]'s pods (half of `pods`); `hinted`: each
/// carries the gateway's subset hint naming every pod (as a gateway restricting to its
/// healthy endpoints sends it).
pub struct FlowScan {
    host: MockHost,
    worker: Rc<Worker>,
    /// The requests in flight and waiting (kept: their ends would free places).
    _streams: Vec<RequestStream>,
}

impl FlowScan {
    pub fn new(pods: usize, waiting: usize, hinted: bool) -> Result<Self, String> {
        let host = MockHost::new();
        host.clock_ms.set(NOW_MS - picker::inflight::SLOT_DISCOVERY_MS);
        *host.configuration.borrow_mut() = CONFIG.as_bytes().to_vec();
        let worker = Rc::new(configure(&host, CONFIG.len(), WORKER_SEED).map_err(|e| e.to_string())?);
        worker.serving.set(true);
        tick::on_tick(&worker, &host);
        host.clock_ms.set(NOW_MS);
        let mut table = pod_table(pods)?;
        for (i, pod) in table.pods.iter_mut().enumerate() {
            // Below every saturation threshold: only the in-flight bound fills a pod.
            pod.waiting = 0.0;
            pod.kv_usage = Some(0.1);
            pod.models = vec![if i < pods / 2 { FULL } else { ROOMY }.to_owned()];
        }
        publish(&host, &table)?;
        tick::on_tick(&worker, &host);
        let mut hint: Vec<String> = (0..pods).map(super::pod_address).collect();
        hint.sort_unstable();
        let hint = hint.join(",");
        let mut streams = Vec::new();
        let full_pods = pods / 2;
        for i in 0..full_pods + waiting {
            let body = format!(r#"{{"model":"{FULL}","prompt":"request {i}","max_tokens":4}}"#);
            let length = body.len().to_string();
            let mut headers =
                vec![(":method", "POST"), (":path", "/v1/completions"), ("content-length", length.as_str())];
            if hinted {
                headers.push(("x-gateway-destination-endpoint-subset", hint.as_str()));
            }
            host.set_request(&headers, body.as_bytes());
            let id = u32::try_from(i + 1).map_err(|e| e.to_string())?;
            let mut stream = RequestStream::for_context(Rc::clone(&worker), id);
            stream.on_request_headers(&host, false);
            let step = stream.on_request_body(&host, body.len(), true);
            let expected = if i < full_pods { Step::Continue } else { Step::Pause };
            if step != expected {
                return Err(format!("request {i}: {step:?}, expected {expected:?}"));
            }
            streams.push(stream);
        }
        if worker.flow.waiting() != waiting {
            return Err(format!("{} waiting, expected {waiting}", worker.flow.waiting()));
        }
        Ok(Self { host, worker, _streams: streams })
    }

    /// One release attempt, as a tick or a request's end makes it (nothing may go).
    pub fn scan(&self) {
        wasm_epp_router::flow::release_ready(&self.worker, &self.host);
    }

    /// Requests still waiting (the scan released none).
    pub fn waiting(&self) -> usize {
        self.worker.flow.waiting()
    }
}
