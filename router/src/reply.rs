//! Answers the filter gives itself, in OpenAI's error shape so clients parse them.

use wasm_epp_host::Host;

/// Sends `{"error": {...}}` with `status`; the caller then pauses the stream.
pub fn send_error(host: &dyn Host, status: u32, kind: &str, message: &str) {
    let body = error_body(status, kind, message);
    let headers = [("content-type", "application/json"), ("x-wasm-epp", "local-reply")];
    if let Err(error) = host.send_reply(status, &headers, body.as_bytes()) {
        log::warn!("wasm-epp: could not send local reply {status}: {error}");
    }
}

/// Sends a small JSON document with 200 (the health probe).
pub fn send_json(host: &dyn Host, body: &serde_json::Value) {
    let headers = [("content-type", "application/json"), ("x-wasm-epp", "local-reply"), ("cache-control", "no-store")];
    if let Err(error) = host.send_reply(200, &headers, body.to_string().as_bytes()) {
        log::warn!("wasm-epp: could not send local reply 200: {error}");
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
            serde_json::from_str(&error_body(400, "invalid_request_error", "bad \"json\"")).unwrap();
        assert_eq!(body["error"]["message"], "bad \"json\"");
        assert_eq!(body["error"]["code"], 400);
    }
}
