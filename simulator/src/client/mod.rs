//! A small HTTP client for OpenAI-compatible servers (the simulator, vLLM, or Envoy in front of
//! them), measuring what a benchmark client measures: TTFT, end-to-end time, output and cached
//! tokens, and which pod answered (`x-served-by`).
//!
//! The benchmark tool reuses it, so it works against any vLLM-compatible server, not only the
//! simulator: TTFT is the arrival of the first chunk carrying text (a chat stream's role-only
//! chunk does not count), and token counts come from the usage chunk when the server sends one.

pub mod prom_text;
pub mod sse_decoder;
mod sse_reader;

pub use prom_text::{series, sum_metric, sum_of};

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::CONTENT_TYPE;
use hyper::Request;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};

pub use hyper::Method;

use crate::http::SERVED_BY_HEADER;

/// Largest non-streamed response body read.
pub const MAX_RESPONSE_BYTES: usize = 64 << 20;

/// What one streamed request measured, client side.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientTiming {
    /// Request sent to first chunk with text.
    pub ttft: Duration,
    /// Request sent to `data: [DONE]`.
    pub e2e: Duration,
    /// Generated tokens (from usage, or counted chunks if the server sent no usage).
    pub output_tokens: u64,
    /// Prompt tokens from usage.
    pub prompt_tokens: Option<u64>,
    /// `usage.prompt_tokens_details.cached_tokens`, if the server reports it.
    pub cached_tokens: Option<u64>,
    /// The `x-served-by` header, if present.
    pub served_by: Option<String>,
}

impl ClientTiming {
    /// Time per output token after the first: `(e2e - ttft) / (output_tokens - 1)`.
    pub fn tpot(&self) -> Option<Duration> {
        let gaps = u32::try_from(self.output_tokens.checked_sub(1)?).ok().filter(|gaps| *gaps > 0)?;
        Some(self.e2e.saturating_sub(self.ttft) / gaps)
    }
}

/// Why a request failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientError {
    /// The URL or the connection failed.
    Transport(String),
    /// The server answered a non-2xx status.
    Status {
        /// HTTP status.
        status: u16,
        /// Response body (truncated to what was readable).
        body: String,
    },
    /// The response was not what an OpenAI server sends.
    Protocol(String),
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientError::Transport(message) => write!(formatter, "transport error: {message}"),
            ClientError::Status { status, body } => write!(formatter, "HTTP {status}: {body}"),
            ClientError::Protocol(message) => write!(formatter, "protocol error: {message}"),
        }
    }
}

impl std::error::Error for ClientError {}

/// A pooled HTTP/1.1 client; clone it freely (clones share the pool).
#[derive(Debug, Clone)]
pub struct SimClient {
    inner: Client<HttpConnector, Full<Bytes>>,
}

impl Default for SimClient {
    fn default() -> Self {
        Self::new()
    }
}

impl SimClient {
    /// A client with keep-alive connection pooling.
    pub fn new() -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        Self { inner: Client::builder(TokioExecutor::new()).build(connector) }
    }

    /// POSTs `body` to `url` (e.g. `http://127.0.0.1:8001/v1/completions`) as a stream with
    /// `stream_options.include_usage` forced on, and measures it.
    pub async fn stream_completion(&self, url: &str, body: &Value) -> Result<ClientTiming, ClientError> {
        let mut body = body.clone();
        if let Some(object) = body.as_object_mut() {
            object.insert("stream".to_owned(), json!(true));
            object.insert("stream_options".to_owned(), json!({"include_usage": true}));
        }
        let started = Instant::now();
        let response = self.send(Method::POST, url, &[], Bytes::from(body.to_string())).await?;
        let status = response.status().as_u16();
        let served_by = response.headers().get(SERVED_BY_HEADER).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let mut body = response.into_body();
        if !(200..300).contains(&status) {
            let text = read_limited(body).await.unwrap_or_default();
            return Err(ClientError::Status { status, body: text });
        }
        let mut reader = sse_reader::SseReader::new(started);
        // Each pass reads one frame; the server ends the stream, and the buffer is bounded.
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|error| ClientError::Transport(error.to_string()))?;
            if let Ok(data) = frame.into_data() {
                reader.push(&data)?;
                if reader.is_done() {
                    break;
                }
            }
        }
        reader.finish(served_by)
    }

    /// POSTs JSON and returns the status and the JSON answer (`Value::Null` if not JSON).
    pub async fn post_json(&self, url: &str, body: &Value) -> Result<(u16, Value), ClientError> {
        let response = self.request(Method::POST, url, Bytes::from(body.to_string())).await?;
        Ok((response.status, serde_json::from_str(&response.body).unwrap_or(Value::Null)))
    }

    /// GETs a URL and returns the status and body text (e.g. `/metrics`).
    pub async fn get_text(&self, url: &str) -> Result<(u16, String), ClientError> {
        let response = self.request(Method::GET, url, Bytes::new()).await?;
        Ok((response.status, response.body))
    }

    /// Any method with a raw body (sent as `application/json`); the whole answer is read.
    pub async fn request(&self, method: Method, url: &str, body: Bytes) -> Result<RawResponse, ClientError> {
        self.request_with_headers(method, url, &[], body).await
    }

    /// [`SimClient::request`] with extra request headers (e.g. `x-prefiller-host-port`).
    pub async fn request_with_headers(
        &self,
        method: Method,
        url: &str,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> Result<RawResponse, ClientError> {
        let response = self.send(method, url, headers, body).await?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = read_limited(response.into_body()).await?;
        Ok(RawResponse { status, headers, body })
    }

    async fn send(
        &self,
        method: Method,
        url: &str,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> Result<hyper::Response<hyper::body::Incoming>, ClientError> {
        let mut builder = Request::builder().method(method).uri(url);
        // JSON unless the caller names its own type (a form's, with its boundary).
        if !headers.iter().any(|(name, _)| name.eq_ignore_ascii_case(CONTENT_TYPE.as_str())) {
            builder = builder.header(CONTENT_TYPE, "application/json");
        }
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        let request = builder
            .body(Full::new(body))
            .map_err(|error| ClientError::Transport(format!("bad request for {url}: {error}")))?;
        self.inner.request(request).await.map_err(|error| ClientError::Transport(format!("{url}: {error:?}")))
    }
}

/// A complete answer: status, headers and body text.
#[derive(Debug, Clone)]
pub struct RawResponse {
    /// HTTP status.
    pub status: u16,
    /// Response headers (`x-served-by` among them).
    pub headers: hyper::HeaderMap,
    /// Body as text (lossy UTF-8).
    pub body: String,
}

impl RawResponse {
    /// The `x-served-by` header, if present.
    pub fn served_by(&self) -> Option<&str> {
        self.headers.get(SERVED_BY_HEADER).and_then(|value| value.to_str().ok())
    }

    /// The body parsed as JSON (`Value::Null` if it is not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

async fn read_limited(body: hyper::body::Incoming) -> Result<String, ClientError> {
    let collected = Limited::new(body, MAX_RESPONSE_BYTES)
        .collect()
        .await
        .map_err(|error| ClientError::Transport(error.to_string()))?;
    Ok(String::from_utf8_lossy(&collected.to_bytes()).into_owned())
}

/// [`SimClient::stream_completion`] on a process-wide shared client.
pub async fn stream_completion(url: &str, body: &Value) -> Result<ClientTiming, ClientError> {
    static SHARED: OnceLock<SimClient> = OnceLock::new();
    SHARED.get_or_init(SimClient::new).stream_completion(url, body).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tpot_spreads_decode_time_over_gaps() {
        let timing = ClientTiming {
            ttft: Duration::from_millis(50),
            e2e: Duration::from_millis(1050),
            output_tokens: 101,
            prompt_tokens: None,
            cached_tokens: None,
            served_by: None,
        };
        assert_eq!(timing.tpot(), Some(Duration::from_millis(10)));
        assert_eq!(ClientTiming { output_tokens: 1, ..timing }.tpot(), None);
    }
}
