//! The load generator's HTTP client: hyper 1 over a pooled connector, streaming responses.
//!
//! Every request is bounded by a timeout and every failure (refused connection, non-2xx
//! status, broken or truncated stream, timeout) becomes an error value that is counted, so
//! one bad target never stops or crashes the benchmark.

mod stream;

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{ACCEPT, CONTENT_TYPE};
use hyper::{Request, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

pub use stream::{StreamProgress, Success};
pub use vllm_sim::client::sse_decoder::SseDecoder;

/// Idle keep-alive connections kept per host; above the largest burst so bursts reuse them.
const MAX_IDLE_PER_HOST: usize = 512;
/// wasm-epp's decision header (`debug_decision_header`), kept per request when present.
const DECISION_HEADER: &str = "x-wasm-epp-decision";
/// Bytes of an error body quoted in the error message.
const ERROR_BODY_QUOTE_BYTES: usize = 200;

#[derive(Clone)]
pub struct StreamingClient {
    http: Client<HttpConnector, Full<Bytes>>,
    timeout: Duration,
}

impl StreamingClient {
    /// A client whose every request gives up after `timeout` (connect to last byte).
    pub fn new(timeout: Duration) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(Duration::from_secs(5)));
        let http = Client::builder(TokioExecutor::new()).pool_max_idle_per_host(MAX_IDLE_PER_HOST).build(connector);
        Self { http, timeout }
    }

    /// POSTs a JSON body that asks for a stream and reads the stream to its end.
    pub async fn post_streaming(&self, url: &str, body: String) -> Result<Success, String> {
        let started = Instant::now();
        match tokio::time::timeout(self.timeout, self.exchange(url, body, started)).await {
            Ok(result) => result,
            Err(_) => Err(format!("timed out after {} s", self.timeout.as_secs())),
        }
    }

    /// GETs `url` and returns the body text of a 2xx answer.
    pub async fn get_text(&self, url: &str) -> Result<String, String> {
        let uri: Uri = url.parse().map_err(|e| format!("bad url {url}: {e}"))?;
        let request = Request::get(uri).body(Full::new(Bytes::new())).map_err(|e| e.to_string())?;
        let fetch = async {
            let response = self.http.request(request).await.map_err(|e| format!("GET {url}: {e}"))?;
            let status = response.status();
            let bytes = response.into_body().collect().await.map_err(|e| format!("GET {url}: {e}"))?.to_bytes();
            if !status.is_success() {
                return Err(format!("GET {url}: status {status}"));
            }
            Ok(String::from_utf8_lossy(&bytes).into_owned())
        };
        tokio::time::timeout(self.timeout, fetch).await.map_err(|_| format!("GET {url}: timed out"))?
    }

    async fn exchange(&self, url: &str, body: String, started: Instant) -> Result<Success, String> {
        let uri: Uri = url.parse().map_err(|e| format!("bad url {url}: {e}"))?;
        let request = Request::post(uri)
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, "text/event-stream")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| e.to_string())?;
        let response = self.http.request(request).await.map_err(|e| format!("send: {e}"))?;
        let status = response.status();
        let header = |name: &str| response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let (served_by, decision) = (header("x-served-by"), header(DECISION_HEADER));
        let mut body = response.into_body();
        if !status.is_success() {
            let bytes = body.collect().await.map(|collected| collected.to_bytes()).unwrap_or_default();
            let quote: String = String::from_utf8_lossy(&bytes).chars().take(ERROR_BODY_QUOTE_BYTES).collect();
            return Err(format!("status {}: {quote}", status.as_u16()));
        }
        let mut decoder = SseDecoder::default();
        let mut progress = StreamProgress::new(started);
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| format!("body: {e}"))?;
            let now = Instant::now();
            if let Ok(data) = frame.into_data() {
                for payload in decoder.push(&data)? {
                    progress.apply(&payload, now)?;
                }
            }
        }
        let mut success = progress.finish(Instant::now(), served_by)?;
        success.decision = decision;
        Ok(success)
    }
}
