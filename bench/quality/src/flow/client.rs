//! One request of the overload run: POST with the class's headers, read the stream (TTFT,
//! tokens) or the refusal (status, when, why). Every failure is a value, never a panic.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use super::load::Class;
use crate::client::{SseDecoder, StreamProgress};

/// Idle connections kept per host: above the most requests in flight at 2× capacity.
const MAX_IDLE_PER_HOST: usize = 1024;

pub type Http = Client<HttpConnector, Full<Bytes>>;

pub fn http_client() -> Http {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(Duration::from_secs(5)));
    Client::builder(TokioExecutor::new()).pool_max_idle_per_host(MAX_IDLE_PER_HOST).build(connector)
}

/// How one request ended.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Outcome {
    pub class: Class,
    /// When it was sent, ms from the start of the run.
    pub sent_at_ms: u64,
    /// HTTP status; 0 when there was none (connection failed, timed out).
    pub status: u16,
    /// Time to the first token (200 only), ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttft_ms: Option<f64>,
    /// Time to the end of the answer, ms.
    pub total_ms: f64,
    pub tokens: u64,
    /// `x-llm-d-request-dropped-reason`, if the gateway sent one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dropped_reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

pub async fn send(http: &Http, url: &str, class: Class, body: String, timeout: Duration, sent_at_ms: u64) -> Outcome {
    let started = Instant::now();
    let mut outcome = Outcome {
        class,
        sent_at_ms,
        status: 0,
        ttft_ms: None,
        total_ms: 0.0,
        tokens: 0,
        dropped_reason: None,
        error: None,
    };
    match tokio::time::timeout(timeout, exchange(http, url, class, body, started, &mut outcome)).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => outcome.error = Some(error),
        Err(_) => outcome.error = Some(format!("timed out after {} s", timeout.as_secs())),
    }
    // 0.1 ms is finer than anything measured here, and keeps the results file small.
    outcome.total_ms = (started.elapsed().as_secs_f64() * 10_000.0).round() / 10.0;
    outcome
}

async fn exchange(
    http: &Http,
    url: &str,
    class: Class,
    body: String,
    started: Instant,
    outcome: &mut Outcome,
) -> Result<(), String> {
    let mut request =
        Request::post(url).header("content-type", "application/json").header("accept", "text/event-stream");
    for (name, value) in class.headers() {
        request = request.header(name, value);
    }
    let request = request.body(Full::new(Bytes::from(body))).map_err(|e| e.to_string())?;
    let response = http.request(request).await.map_err(|e| format!("send: {e}"))?;
    outcome.status = response.status().as_u16();
    outcome.dropped_reason =
        response.headers().get("x-llm-d-request-dropped-reason").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let mut body = response.into_body();
    if outcome.status != 200 {
        body.collect().await.map_err(|e| format!("body: {e}"))?;
        return Ok(());
    }
    let mut decoder = SseDecoder::default();
    let mut progress = StreamProgress::new(started);
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| format!("body: {e}"))?;
        if let Ok(data) = frame.into_data() {
            for payload in decoder.push(&data)? {
                progress.apply(&payload, Instant::now())?;
            }
        }
    }
    let success = progress.finish(Instant::now(), None)?;
    outcome.ttft_ms = Some((success.ttft.as_secs_f64() * 10_000.0).round() / 10.0);
    outcome.tokens = success.output_tokens;
    Ok(())
}
