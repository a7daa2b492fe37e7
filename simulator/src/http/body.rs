//! Response bodies and the small helpers every handler uses to build answers.

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Response, StatusCode};
use serde_json::Value;

use crate::api::errors::ApiError;

/// Largest request body read. vLLM's server sets no body limit and answers an overlong prompt
/// with 400; this bound only keeps a simulated pod's memory finite, well above what routers
/// are tested with (a 100 MB body must reach the prompt-length check, as on vLLM).
pub const MAX_REQUEST_BODY_BYTES: usize = 256 << 20;

/// Every response body: a full buffer or a stream of server-sent events.
pub type SimBody = UnsyncBoxBody<Bytes, Infallible>;

/// A response with a complete body and a content type.
pub fn full_response(status: u16, content_type: &'static str, body: impl Into<Bytes>) -> Response<SimBody> {
    let mut response = Response::new(Full::new(body.into()).boxed_unsync());
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// A JSON response.
pub fn json_response(status: u16, value: &Value) -> Response<SimBody> {
    full_response(status, "application/json", value.to_string())
}

/// An error in OpenAI's JSON shape.
pub fn error_response(error: &ApiError) -> Response<SimBody> {
    json_response(error.status, &error.to_json())
}

/// An empty 200 (`/health`).
pub fn empty_ok() -> Response<SimBody> {
    full_response(200, "text/plain; charset=utf-8", Bytes::new())
}

/// Reads the whole request body, refusing bodies above [`MAX_REQUEST_BODY_BYTES`].
pub async fn read_body(body: Incoming) -> Result<Bytes, ApiError> {
    match Limited::new(body, MAX_REQUEST_BODY_BYTES).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.is::<http_body_util::LengthLimitError>() => {
            Err(ApiError::new(413, format!("Request body larger than {MAX_REQUEST_BODY_BYTES} bytes.")))
        }
        Err(error) => Err(ApiError::bad_request(format!("Could not read the request body: {error}"))),
    }
}
