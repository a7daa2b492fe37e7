//! A worker on a [`MockHost`], and the pool service's side of shared data, for tests.

// Test support: a failed unwrap is a failed test; each test file uses a subset.
#![allow(dead_code, clippy::unwrap_used)]

use std::rc::Rc;

use picker::address::PodAddress;
use picker::keys;
use picker::pod_table::{encode_version, PodState, PodTable};
use wasm_epp_host::{Host, MockHost, SharedStore};
use wasm_epp_router::{configure, RequestStream, Step, Worker};

pub const NOW: u64 = 1_700_000_000_000;

pub struct Bench {
    pub host: MockHost,
    pub worker: Rc<Worker>,
}

/// What one request ended as.
#[derive(Debug)]
pub struct Answer {
    pub headers_step: Step,
    pub body_step: Option<Step>,
    /// The destination header written, if any.
    pub destination: Option<String>,
    /// The local reply's status, if the filter answered itself.
    pub reply: Option<u32>,
}

impl Bench {
    pub fn new(config: &str) -> Self {
        let host = MockHost::new();
        host.clock_ms.set(NOW);
        *host.configuration.borrow_mut() = config.as_bytes().to_vec();
        let worker = configure(&host, config.len(), 7).unwrap();
        worker.serving.set(true);
        Self { host, worker: Rc::new(worker) }
    }

    /// Publishes a table of healthy pods (`(address, waiting)`), as the pool service does,
    /// with its heartbeat.
    pub fn publish(&self, version: u64, pods: &[(&str, f64)]) {
        let mut table =
            PodTable { version, published_at_ms: self.host.now_ms(), poll_interval_ms: 100, ..PodTable::default() };
        for (address, waiting) in pods {
            let mut pod = PodState::unknown(&PodAddress::parse(address).unwrap());
            pod.healthy = true;
            pod.waiting = *waiting;
            pod.kv_usage = Some(0.1);
            pod.last_success_ms = self.host.now_ms();
            table.pods.push(pod);
        }
        self.host.set(keys::POD_TABLE, &table.encode(), None).unwrap();
        self.host.set(keys::POD_TABLE_VERSION, &encode_version(version), None).unwrap();
        self.heartbeat();
    }

    pub fn heartbeat(&self) {
        self.host.set(keys::SERVICE_HEARTBEAT, &encode_version(self.host.now_ms()), None).unwrap();
    }

    /// `ms` later: the clock advanced, and the pool service's heartbeat renewed (so the table
    /// stays fresh).
    pub fn later(&self, ms: u64) {
        self.host.advance(ms);
        self.heartbeat();
    }

    pub fn tick(&self) {
        wasm_epp_router::tick::on_tick(&self.worker, &self.host);
    }

    /// Ticks this worker, then `other` (one from [`Bench::another_worker`]): what each
    /// shares reaches the other within two of these.
    pub fn tick_with(&self, other: &Worker) {
        self.tick();
        wasm_epp_router::tick::on_tick(other, &self.host);
    }

    /// Runs one request through headers and (if held) body, without ending it.
    pub fn request(&self, headers: &[(&str, &str)], body: &str) -> (RequestStream, Answer) {
        self.request_on(&self.worker, headers, body)
    }

    /// Another worker of the same Envoy (same shared data), configured like the first.
    pub fn another_worker(&self, seed: u64) -> Rc<Worker> {
        let config = self.host.configuration.borrow().clone();
        let worker = configure(&self.host, config.len(), seed).unwrap();
        worker.serving.set(true);
        Rc::new(worker)
    }

    /// [`Bench::request`] on `worker`.
    pub fn request_on(&self, worker: &Rc<Worker>, headers: &[(&str, &str)], body: &str) -> (RequestStream, Answer) {
        self.host.replies.borrow_mut().clear();
        self.host.set_request(headers, body.as_bytes());
        let mut stream = RequestStream::new(worker.clone());
        let headers_step = stream.on_request_headers(&self.host, body.is_empty());
        let body_step = (headers_step == Step::Pause && self.host.replies.borrow().is_empty() && !body.is_empty())
            .then(|| stream.on_request_body(&self.host, body.len(), true));
        let answer = Answer {
            headers_step,
            body_step,
            destination: self.host.header("x-gateway-destination-endpoint"),
            reply: self.host.replies.borrow().last().map(|r| r.status),
        };
        (stream, answer)
    }

    /// One whole request: routed or answered, then ended.
    pub fn complete(&self, headers: &[(&str, &str)], body: &str) -> Answer {
        let (mut stream, answer) = self.request(headers, body);
        stream.on_log(&self.host);
        answer
    }

    /// A counter as the host will see it after the next flush.
    /// Sends `body` with `headers` on `worker` as context `id` (needed to hold and release it):
    /// its headers are held for the body; the body's step (held or routed).
    pub fn send_as(&self, worker: &Rc<Worker>, id: u32, headers: &[(&str, &str)], body: &str) -> (RequestStream, Step) {
        self.host.set_request(headers, body.as_bytes());
        let mut stream = RequestStream::for_context(worker.clone(), id);
        assert_eq!(stream.on_request_headers(&self.host, false), Step::Pause);
        let step = stream.on_request_body(&self.host, body.len(), true);
        (stream, step)
    }

    /// The destination header the last routed request left.
    pub fn destination(&self) -> Option<String> {
        self.host.header("x-gateway-destination-endpoint")
    }

    /// The held requests resumed since the last call.
    pub fn resumed(&self) -> Vec<u32> {
        std::mem::take(&mut *self.host.resumed.borrow_mut())
    }

    /// Ends `stream` with the host showing no request (what its end releases is seen alone);
    /// the requests its end resumed.
    pub fn end(&self, stream: &mut RequestStream) -> Vec<u32> {
        self.host.set_request(&[], b"");
        stream.on_log(&self.host);
        self.resumed()
    }

    /// Starts an upload of `body` with `headers` (its form held for its model), then feeds
    /// the body in chunks of `chunk` bytes; the stream and the step of each body call.
    pub fn upload_in_chunks(&self, headers: &[(&str, &str)], body: &[u8], chunk: usize) -> (RequestStream, Vec<Step>) {
        self.upload_in_chunks_until(headers, body, chunk, false)
    }

    /// [`Self::upload_in_chunks`], the stream ended by trailers after the last chunk if
    /// `trailers` (an HTTP/2 or gRPC-style client's): their step is the last.
    pub fn upload_in_chunks_until(
        &self,
        headers: &[(&str, &str)],
        body: &[u8],
        chunk: usize,
        trailers: bool,
    ) -> (RequestStream, Vec<Step>) {
        self.upload_in_chunks_with(headers, body, chunk, trailers, |_, _| {})
    }

    /// [`Self::upload_in_chunks_until`], calling `between(stream, arrived)` after each body
    /// call (with the bytes arrived so far): the pod's answer may come while the upload streams.
    pub fn upload_in_chunks_with(
        &self,
        headers: &[(&str, &str)],
        body: &[u8],
        chunk: usize,
        trailers: bool,
        mut between: impl FnMut(&mut RequestStream, usize),
    ) -> (RequestStream, Vec<Step>) {
        self.host.set_request(headers, body);
        let mut stream = RequestStream::new(self.worker.clone());
        assert_eq!(stream.on_request_headers(&self.host, false), Step::Pause, "held for its form");
        let mut steps = Vec::new();
        let mut arrived = 0;
        // As Envoy delivers a body: while the filter pauses, each call sees the whole body
        // buffered so far; once it continued, only the chunk that just arrived. The host's body
        // ends as what went on: the buffered part as the filter left it, then the chunks.
        let mut went_on: Option<Vec<u8>> = None;
        while arrived < body.len() {
            let from = arrived;
            arrived = (arrived + chunk.max(1)).min(body.len());
            let end = arrived == body.len() && !trailers;
            let step = match went_on.as_mut() {
                None => stream.on_request_body(&self.host, arrived, end),
                Some(sent) => {
                    *self.host.body.borrow_mut() = body.get(from..arrived).unwrap_or_default().to_vec();
                    let step = stream.on_request_body(&self.host, arrived - from, end);
                    sent.extend_from_slice(&self.host.body.borrow());
                    step
                }
            };
            if step == Step::Continue && went_on.is_none() {
                let mut buffered = self.host.body.borrow().clone();
                // (The mock holds the whole body; Envoy had only what arrived, as rewritten.)
                buffered.truncate(buffered.len() - (body.len() - arrived));
                went_on = Some(buffered);
            }
            steps.push(step);
            between(&mut stream, arrived);
        }
        if trailers {
            steps.push(stream.on_request_trailers(&self.host));
        }
        if let Some(sent) = went_on {
            *self.host.body.borrow_mut() = sent;
        }
        (stream, steps)
    }

    pub fn stat(&self, name: &str) -> u64 {
        self.worker.stats.metrics.pending(name) + self.host.metric(name)
    }
}

/// Publishes pods as `(address, base model or "", adapters, waiting)`, with the heartbeat.
pub fn publish_models(bench: &Bench, pods: &[(&str, &str, &[&str], f64)]) {
    publish_models_as(bench, pods, 1);
}

/// [`publish_models`] as table `version` (a worker takes a table only when its version changes).
pub fn publish_models_as(bench: &Bench, pods: &[(&str, &str, &[&str], f64)], version: u64) {
    let now = bench.host.now_ms();
    let mut table = PodTable { version, published_at_ms: now, poll_interval_ms: 100, ..PodTable::default() };
    for (address, base, adapters, waiting) in pods {
        let mut pod = PodState::unknown(&PodAddress::parse(address).unwrap());
        pod.healthy = true;
        pod.waiting = *waiting;
        pod.last_success_ms = now;
        // An empty base: a pod that names no model.
        pod.models = [base].iter().filter(|b| !b.is_empty()).map(|b| b.to_string()).collect();
        pod.adapters = adapters.iter().map(|a| a.to_string()).collect();
        table.pods.push(pod);
    }
    bench.host.set(keys::POD_TABLE, &table.encode(), None).unwrap();
    bench.host.set(keys::POD_TABLE_VERSION, &encode_version(version), None).unwrap();
    bench.heartbeat();
}

/// A completion for `model` of `n` choices (its prompt names the request `id`).
pub fn model_completion(model: &str, id: u32, n: u32) -> String {
    format!(r#"{{"model":"{model}","prompt":"request {id}","max_tokens":4,"n":{n}}}"#)
}

/// [`COMPLETIONS`]'s headers and `extra`.
pub fn completions_with<'a>(extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut all = COMPLETIONS.to_vec();
    all.extend_from_slice(extra);
    all
}

/// About `tokens` tokens of prompt text at the default 4 bytes per token, its words varied by
/// `seed` (so two prompts share no prefix unless their seeds match).
pub fn long_prompt(tokens: usize, seed: usize) -> String {
    (0..tokens).map(|i| format!("w{:03}", (i * 7 + seed) % 1000)).collect()
}

pub fn completion(prompt: &str) -> String {
    format!(r#"{{"model":"m","prompt":"{prompt}","max_tokens":4}}"#)
}

pub const COMPLETIONS: [(&str, &str); 3] =
    [(":method", "POST"), (":path", "/v1/completions"), ("content-type", "application/json")];
