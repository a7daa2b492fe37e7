//! Request dispatch: path and method to handler, per-endpoint counters, and the `x-served-by`
//! header on every answer (errors and `/metrics` included), which is how end-to-end tests learn
//! which pod Envoy chose.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request, Response};

use super::body::{error_response, read_body, SimBody};
use super::openai::answer;
use super::{admin, audio, metrics_endpoint, misc, openai};
use crate::api::errors::ApiError;
use crate::pd::PREFILLER_HEADER;
use crate::pod::Pod;

/// The header naming the pod that answered.
pub const SERVED_BY_HEADER: &str = "x-served-by";

/// Endpoint name used for counters when the path is unknown.
const UNKNOWN_ENDPOINT: &str = "other";

/// A stored response, by id (`GET /v1/responses/{id}`): counted under this name.
const STORED_RESPONSE: &str = "/v1/responses/{id}";
const STORED_RESPONSE_PREFIX: &str = "/v1/responses/";

/// Known paths and the methods they accept.
const ROUTES: &[(&str, &[Method])] = &[
    ("/v1/completions", &[Method::POST]),
    ("/v1/chat/completions", &[Method::POST]),
    ("/v1/responses", &[Method::POST]),
    ("/v1/messages", &[Method::POST]),
    ("/v1/audio/transcriptions", &[Method::POST]),
    ("/v1/audio/translations", &[Method::POST]),
    (STORED_RESPONSE, &[Method::GET]),
    ("/v1/models", &[Method::GET]),
    ("/health", &[Method::GET]),
    ("/tokenize", &[Method::POST]),
    ("/v1/completions/render", &[Method::POST]),
    ("/v1/chat/completions/render", &[Method::POST]),
    ("/v1/load_lora_adapter", &[Method::POST]),
    ("/v1/unload_lora_adapter", &[Method::POST]),
    ("/metrics", &[Method::GET]),
    ("/sim/faults", &[Method::GET, Method::POST, Method::DELETE]),
    ("/sim/restart", &[Method::POST]),
    ("/sim/stats", &[Method::GET]),
];

/// Serves one HTTP request.
pub async fn handle(pod: Arc<Pod>, request: Request<Incoming>) -> Response<SimBody> {
    let arrival = Instant::now();
    let method = request.method().clone();
    let query = request.uri().query().map(str::to_owned);
    let prefiller = request.headers().get(PREFILLER_HEADER).and_then(|value| value.to_str().ok()).map(str::to_owned);
    let content_type = request.headers().get(CONTENT_TYPE).and_then(|value| value.to_str().ok()).map(str::to_owned);
    let path = request.uri().path().to_owned();
    let stored_id = path.strip_prefix(STORED_RESPONSE_PREFIX).filter(|id| !id.is_empty() && !id.contains('/'));
    let route_path = if stored_id.is_some() { STORED_RESPONSE } else { path.as_str() };
    let route = ROUTES.iter().find(|(known, _)| *known == route_path);
    let endpoint = route.map_or(UNKNOWN_ENDPOINT, |(path, _)| *path);
    pod.lock().stats.record_received(endpoint);
    let mut response = match route {
        None => error_response(&ApiError::not_found(format!("Not Found: {}", request.uri().path()))),
        Some((_, methods)) if !methods.contains(&method) => error_response(&ApiError::method_not_allowed()),
        Some((path, _)) => match read_body(request.into_body()).await {
            Ok(body) => {
                let call = Call {
                    path,
                    query: query.as_deref(),
                    method: &method,
                    prefiller: prefiller.as_deref(),
                    stored_id,
                    content_type: content_type.as_deref(),
                };
                dispatch(&pod, &call, &body, arrival).await
            }
            Err(error) => error_response(&error),
        },
    };
    pod.lock().stats.record_answer(endpoint, response.status().as_u16());
    if let Ok(value) = HeaderValue::from_str(pod.served_by()) {
        response.headers_mut().insert(HeaderName::from_static(SERVED_BY_HEADER), value);
    }
    response
}

/// What the handler needs from the request line and headers.
struct Call<'a> {
    path: &'a str,
    query: Option<&'a str>,
    method: &'a Method,
    /// `x-prefiller-host-port`: the prefill pod the picker chose, if any.
    prefiller: Option<&'a str>,
    /// The id of `GET /v1/responses/{id}`.
    stored_id: Option<&'a str>,
    /// The body's `content-type` (a form's boundary).
    content_type: Option<&'a str>,
}

async fn dispatch(pod: &Arc<Pod>, call: &Call<'_>, body: &Bytes, arrival: Instant) -> Response<SimBody> {
    let Call { path, query, method, prefiller, stored_id, content_type } = *call;
    match path {
        "/v1/completions" => answer(openai::completions(pod, body, arrival, prefiller).await),
        "/v1/chat/completions" => answer(openai::chat_completions(pod, body, arrival, prefiller).await),
        "/v1/responses" => answer(openai::responses(pod, body, arrival).await),
        STORED_RESPONSE => answer(openai::retrieve_response(pod, stored_id.unwrap_or_default())),
        "/v1/messages" => answer(openai::messages(pod, body, arrival).await),
        "/v1/audio/transcriptions" | "/v1/audio/translations" => {
            answer(audio::transcription(pod, content_type, body.clone()).await)
        }
        "/v1/models" => misc::models(pod),
        "/health" => misc::health(pod),
        "/tokenize" => answer(misc::tokenize_endpoint(pod, body)),
        "/v1/completions/render" => answer(misc::render_completion(pod, body)),
        "/v1/chat/completions/render" => answer(misc::render_chat(pod, body)),
        "/v1/load_lora_adapter" => answer(misc::load_lora(pod, body)),
        "/v1/unload_lora_adapter" => answer(misc::unload_lora(pod, body)),
        "/metrics" => metrics_endpoint::metrics(pod, query).await,
        "/sim/faults" => answer(admin::faults(pod, method, body)),
        "/sim/restart" => admin::restart(pod),
        "/sim/stats" => admin::stats(pod),
        _ => error_response(&ApiError::not_found(format!("Not Found: {path}"))),
    }
}
