//! Errors as values, rendered in OpenAI's JSON shape with vLLM's status codes.
//!
//! Shape: `{"error": {"message", "type", "param", "code"}}`, where `type` is vLLM's error class
//! name (`BadRequestError`, `NotFoundError`, ...), `code` repeats the HTTP status and `param` is
//! always `null`: vLLM's `create_error_response` never sets it (entrypoints/openai/
//! serving_engine.py 439-452), so a client cannot rely on it there either.

use serde_json::{json, Value};

/// An error answer: status, message, OpenAI error type, optional offending parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status.
    pub status: u16,
    /// Human-readable message.
    pub message: String,
    /// OpenAI / vLLM error type.
    pub kind: &'static str,
    /// Name of the offending request field, if one is to blame: for tests and the Responses
    /// API's error events; never in the OpenAI error body (vLLM sends `param: null`).
    pub param: Option<String>,
}

impl ApiError {
    /// An error of any status; the type follows from the status.
    pub fn new(status: u16, message: impl Into<String>) -> Self {
        let kind = match status {
            400 => "BadRequestError",
            404 => "NotFoundError",
            405 => "MethodNotAllowed",
            413 => "RequestEntityTooLarge",
            429 => "RateLimitError",
            503 => "ServiceUnavailableError",
            500..=599 => "InternalServerError",
            _ => "Error",
        };
        Self { status, message: message.into(), kind, param: None }
    }

    /// 400: malformed or invalid request.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, message)
    }

    /// 400 blaming one field.
    pub fn bad_param(param: &str, message: impl Into<String>) -> Self {
        Self { param: Some(param.to_owned()), ..Self::bad_request(message) }
    }

    /// 404: unknown model, adapter or path.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(404, message)
    }

    /// 405: known path, wrong method.
    pub fn method_not_allowed() -> Self {
        Self::new(405, "Method Not Allowed")
    }

    /// 503: the waiting queue is full, or the pod restarted under the request.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(503, message)
    }

    /// The JSON body.
    pub fn to_json(&self) -> Value {
        json!({
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": null,
                "code": self.status,
            }
        })
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "{} {}: {}", self.status, self.kind, self.message)
    }
}

impl std::error::Error for ApiError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_openai_error_shape() {
        let error = ApiError::bad_param("max_tokens", "too large");
        assert_eq!(
            error.to_json(),
            json!({"error": {"message": "too large", "type": "BadRequestError", "param": null, "code": 400}}),
            "vLLM's ErrorInfo leaves param unset"
        );
        assert_eq!(ApiError::not_found("x").kind, "NotFoundError");
        assert_eq!(ApiError::unavailable("x").kind, "ServiceUnavailableError");
        assert_eq!(ApiError::new(502, "x").kind, "InternalServerError");
    }
}
