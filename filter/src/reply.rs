//! Answers the filter gives itself, in OpenAI's error shape so clients parse them.

use proxy_wasm::hostcalls;

/// Sends `{"error": {...}}` with `status`; the caller then returns `Action::Pause`.
pub fn send_error(status: u32, kind: &str, message: &str) {
    let body = error_body(status, kind, message);
    let headers = vec![("content-type", "application/json"), ("x-wasm-epp", "local-reply")];
    if let Err(error) = hostcalls::send_http_response(status, headers, Some(body.as_bytes())) {
        log::warn!("wasm-epp: could not send local reply {status}: {error:?}");
    }
}

fn error_body(status: u32, kind: &str, message: &str) -> String {
    serde_json::json!({"error": {"message": message, "type": kind, "param": null, "code": status}}).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_body_is_openai_shaped_json() {
        let body: serde_json::Value =
            serde_json::from_str(&error_body(400, "invalid_request_error", "bad \"json\"")).unwrap_or_default();
        assert_eq!(body["error"]["message"], "bad \"json\"");
        assert_eq!(body["error"]["code"], 400);
    }
}
