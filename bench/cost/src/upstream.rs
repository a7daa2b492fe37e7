//! Pods that answer at once: many ports served by one small hyper runtime in the bench
//! process.
//!
//! The benchmarks measure Envoy, so the upstream must add as little and as steady a delay as
//! possible: no model, no queue, a fixed completion answer, and a vLLM-shaped `/metrics` page
//! for the singleton. One runtime thread serves every port; it needs microseconds a request.

use std::convert::Infallible;
use std::net::TcpListener as StdListener;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response};
use hyper_util::rt::TokioIo;

/// What a non-streaming vLLM completion answers, give or take the text.
const COMPLETION: &str = r#"{"id":"cmpl-bench","object":"text_completion","created":1700000000,"model":"sim-model","choices":[{"index":0,"text":" answered at once","logprobs":null,"finish_reason":"length","stop_reason":null}],"usage":{"prompt_tokens":256,"total_tokens":260,"completion_tokens":4}}"#;

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

async fn answer(
    request: Request<Incoming>,
    page: Arc<Page>,
    served_by: Arc<String>,
) -> Result<Response<Full<Bytes>>, Infallible> {
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
    let _ = request.into_body().collect().await;
    let (body, content_type) = if is_metrics {
        // `name[]` filters, answered as vLLM's prometheus_client does.
        let filtered = std::str::from_utf8(&page.metrics)
            .ok()
            .and_then(|text| vllm_sim::metrics::name_filter::restrict_to_query(text, query.as_deref()));
        (filtered.map_or_else(|| page.metrics.clone(), Bytes::from), "text/plain; version=0.0.4")
    } else {
        (page.completion.clone(), "application/json")
    };
    let mut response = Response::new(Full::new(body));
    response.headers_mut().insert("content-type", hyper::header::HeaderValue::from_static(content_type));
    if let Ok(value) = hyper::header::HeaderValue::from_str(&served_by) {
        response.headers_mut().insert("x-served-by", value);
    }
    Ok(response)
}
