//! Pods that answer at once: many ports served by one small hyper runtime in the bench
//! process.
//!
//! The benchmarks measure Envoy, so the upstream must add as little and as steady a delay as
//! possible: no model, no queue, a fixed completion answer, and a vLLM-shaped `/metrics` page
//! for the singleton. One runtime thread serves every port; it needs microseconds a request.
//!
//! A request with `"stream":true` gets a vLLM-shaped event stream instead ([`STREAM_EVENTS`]
//! token events [`EVENT_GAP`] apart, so each reaches Envoy as its own body chunk, then the
//! `usage` event when the request asked for it, then `[DONE]`): what watching a streamed
//! answer costs per chunk is measured on it (`streams`).

use std::convert::Infallible;
use std::net::TcpListener as StdListener;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response};
use hyper_util::rt::TokioIo;

/// What a non-streaming vLLM completion answers, give or take the text.
const COMPLETION: &str = r#"{"id":"cmpl-bench","object":"text_completion","created":1700000000,"model":"sim-model","choices":[{"index":0,"text":" answered at once","logprobs":null,"finish_reason":"length","stop_reason":null}],"usage":{"prompt_tokens":256,"total_tokens":260,"completion_tokens":4}}"#;

/// Token events in a streamed answer.
pub const STREAM_EVENTS: usize = 32;

/// Time between two events of a streamed answer: long enough that Envoy reads each one
/// alone, as it does a real pod's tokens (one per engine step, tens of ms apart).
pub const EVENT_GAP: Duration = Duration::from_millis(1);

/// One token event of a streamed answer, as vLLM writes it.
const TOKEN_EVENT: &str = "data: {\"id\":\"cmpl-bench\",\"object\":\"text_completion\",\"created\":1700000000,\"model\":\"sim-model\",\"choices\":[{\"index\":0,\"text\":\" word\",\"logprobs\":null,\"finish_reason\":null,\"stop_reason\":null}],\"usage\":null}\n\n";

/// The last event of a stream that asked for `usage`.
const USAGE_EVENT: &str = "data: {\"id\":\"cmpl-bench\",\"object\":\"text_completion\",\"created\":1700000000,\"model\":\"sim-model\",\"choices\":[],\"usage\":{\"prompt_tokens\":256,\"total_tokens\":288,\"completion_tokens\":32,\"prompt_tokens_details\":{\"cached_tokens\":0}}}\n\n";

const DONE_EVENT: &str = "data: [DONE]\n\n";

/// Scrape arrivals kept at most (500 pods at 10 scrapes/s for 200 s).
const MAX_ARRIVALS: usize = 1_000_000;

/// Pods on 127.0.0.1, served until dropped.
pub struct Upstream {
    runtime: Option<tokio::runtime::Runtime>,
    ports: Vec<u16>,
    page: Arc<Page>,
}

struct Page {
    metrics: Bytes,
    completion: Bytes,
    /// When each `/metrics` request arrived, for the scrape benchmark.
    arrivals: Mutex<Vec<Instant>>,
}

impl Upstream {
    /// Binds `count` free ports and serves them; `/metrics` answers `metrics_page`.
    pub fn start(count: usize, metrics_page: String) -> Result<Self, String> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("bench-upstream")
            .enable_all()
            .build()
            .map_err(|e| format!("upstream runtime: {e}"))?;
        let page = Arc::new(Page {
            metrics: Bytes::from(metrics_page),
            completion: Bytes::from_static(COMPLETION.as_bytes()),
            arrivals: Mutex::new(Vec::new()),
        });
        let mut ports = Vec::with_capacity(count);
        for _ in 0..count {
            let listener = StdListener::bind(("127.0.0.1", 0)).map_err(|e| format!("upstream bind: {e}"))?;
            listener.set_nonblocking(true).map_err(|e| format!("upstream: {e}"))?;
            let port = listener.local_addr().map_err(|e| format!("upstream: {e}"))?.port();
            let page = Arc::clone(&page);
            let served_by = format!("127.0.0.1:{port}");
            let _guard = runtime.enter();
            let listener = tokio::net::TcpListener::from_std(listener).map_err(|e| format!("upstream: {e}"))?;
            runtime.spawn(serve(listener, page, served_by));
            ports.push(port);
        }
        Ok(Self { runtime: Some(runtime), ports, page })
    }

    /// Arrival times of the `/metrics` requests since the last call.
    pub fn take_scrape_arrivals(&self) -> Vec<Instant> {
        self.page.arrivals.lock().map(|mut a| std::mem::take(&mut *a)).unwrap_or_default()
    }

    /// `127.0.0.1:port` of every pod.
    pub fn addresses(&self) -> Vec<String> {
        self.ports.iter().map(|p| format!("127.0.0.1:{p}")).collect()
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

async fn serve(listener: tokio::net::TcpListener, page: Arc<Page>, served_by: String) {
    let served_by = Arc::new(served_by);
    loop {
        let Ok((stream, _)) = listener.accept().await else { continue };
        let _ = stream.set_nodelay(true);
        let page = Arc::clone(&page);
        let served_by = Arc::clone(&served_by);
        tokio::spawn(async move {
            let service = service_fn(move |request| answer(request, Arc::clone(&page), Arc::clone(&served_by)));
            let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

/// An answer's body: whole, or events sent by a task as they are written.
enum AnswerBody {
    Whole(Option<Bytes>),
    Events(tokio::sync::mpsc::Receiver<Bytes>),
}

impl Body for AnswerBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            AnswerBody::Whole(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            AnswerBody::Events(events) => events.poll_recv(cx).map(|event| event.map(|b| Ok(Frame::data(b)))),
        }
    }

    // A whole body's exact size makes hyper send `content-length`, as before this type.
    fn size_hint(&self) -> hyper::body::SizeHint {
        match self {
            AnswerBody::Whole(bytes) => hyper::body::SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64)),
            AnswerBody::Events(_) => hyper::body::SizeHint::default(),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, AnswerBody::Whole(None))
    }
}

/// Writes a streamed answer's events into `events`, [`EVENT_GAP`] apart.
async fn write_events(events: tokio::sync::mpsc::Sender<Bytes>, with_usage: bool) {
    let tokens = std::iter::repeat_n(TOKEN_EVENT, STREAM_EVENTS);
    let tail = with_usage.then_some(USAGE_EVENT).into_iter().chain([DONE_EVENT]);
    for event in tokens.chain(tail) {
        tokio::time::sleep(EVENT_GAP).await;
        if events.send(Bytes::from_static(event.as_bytes())).await.is_err() {
            return;
        }
    }
}

/// Whether `body` asks for a stream, and for its `usage` event (the bench's own bodies:
/// compact JSON).
fn stream_request(body: &[u8]) -> Option<bool> {
    let has = |needle: &[u8]| body.windows(needle.len()).any(|w| w == needle);
    has(b"\"stream\":true").then(|| has(b"\"include_usage\":true"))
}

async fn answer(
    request: Request<Incoming>,
    page: Arc<Page>,
    served_by: Arc<String>,
) -> Result<Response<AnswerBody>, Infallible> {
    let is_metrics = request.method() == Method::GET && request.uri().path() == "/metrics";
    let query = request.uri().query().map(str::to_owned);
    if is_metrics {
        if let Ok(mut arrivals) = page.arrivals.lock() {
            if arrivals.len() < MAX_ARRIVALS {
                arrivals.push(Instant::now());
            }
        }
    }
    // Read the whole body, as a server must before it answers on a kept-alive connection.
    let request_body = request.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let (body, content_type) = if let Some(with_usage) = stream_request(&request_body).filter(|_| !is_metrics) {
        let (sender, events) = tokio::sync::mpsc::channel(1);
        tokio::spawn(write_events(sender, with_usage));
        (AnswerBody::Events(events), "text/event-stream")
    } else if is_metrics {
        // `name[]` filters, answered as vLLM's prometheus_client does.
        let filtered = std::str::from_utf8(&page.metrics)
            .ok()
            .and_then(|text| vllm_sim::metrics::name_filter::restrict_to_query(text, query.as_deref()));
        let page = filtered.map_or_else(|| page.metrics.clone(), Bytes::from);
        (AnswerBody::Whole(Some(page)), "text/plain; version=0.0.4")
    } else {
        (AnswerBody::Whole(Some(page.completion.clone())), "application/json")
    };
    let mut response = Response::new(body);
    response.headers_mut().insert("content-type", hyper::header::HeaderValue::from_static(content_type));
    if let Ok(value) = hyper::header::HeaderValue::from_str(&served_by) {
        response.headers_mut().insert("x-served-by", value);
    }
    Ok(response)
}
