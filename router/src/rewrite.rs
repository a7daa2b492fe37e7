//! Replacing the request body's `model` with its rewrite target before the request leaves
//! Envoy (see `picker::models::rewrite`).

use wasm_epp_host::Host;

/// Rewrites the buffered body (`body_size` bytes) so its `model` is `target`, and its
/// `content-length` to match. The body was parsed already, so only a host refusal can stop
/// it; then the pod gets the public name, which it answers with 404: logged loudly.
pub fn replace_model(host: &dyn Host, target: &str, body_size: usize) {
    let body = match host.request_body(body_size) {
        Ok(body) => body,
        Err(error) => return log::error!("wasm-epp: cannot read the body to rewrite its model: {error}"),
    };
    let Some(rewritten) = picker::models::rewrite::rewrite_body(&body, target) else {
        return log::error!("wasm-epp: body is not a JSON object; model not rewritten");
    };
    if let Err(error) = host.set_request_body(body_size, &rewritten) {
        return log::error!("wasm-epp: cannot replace the body to rewrite its model: {error}");
    }
    if let Err(error) = host.set_request_header("content-length", rewritten.len().to_string().as_bytes()) {
        log::error!("wasm-epp: cannot set content-length after rewriting the model: {error}");
    }
}
