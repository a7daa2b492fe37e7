//! Model rewrites (see `picker::models::rewrite`): drawing the target a request is sent as,
//! and replacing the request body's `model` with it before the request leaves Envoy. A
//! request that waits in the flow-control queue keeps the target drawn when it arrived and
//! has its body rewritten at release, like one routed at once.

use wasm_epp_host::Host;

use crate::worker::Worker;

/// The target model a request for `asked` is sent as, drawn by weight; `None` without a rule.
pub fn draw_target(worker: &Worker, asked: Option<&str>) -> Option<String> {
    let rule = worker.config.models.rewrite(asked?)?;
    let mut random = worker.random.try_borrow_mut().ok()?;
    rule.target(|total| random.below(total)).map(str::to_owned)
}

/// Replaces the buffered `body` (as the host holds it) with one whose `model` is `target`,
/// and its `content-length` to match; counted in `model_rewritten`. The body was parsed
/// already, so only a host refusal can stop it; then the pod gets the public name, which it
/// answers with 404: logged loudly.
pub fn replace_model(worker: &Worker, host: &dyn Host, body: &[u8], target: &str) {
    worker.stats.increment(worker.stats.model_rewritten);
    let Some(rewritten) = picker::models::rewrite::rewrite_body(body, target) else {
        return log::error!("wasm-epp: body is not a JSON object; model not rewritten");
    };
    if let Err(error) = host.set_request_body(body.len(), &rewritten) {
        return log::error!("wasm-epp: cannot replace the body to rewrite its model: {error}");
    }
    if let Err(error) = host.set_request_header("content-length", rewritten.len().to_string().as_bytes()) {
        log::error!("wasm-epp: cannot set content-length after rewriting the model: {error}");
    }
}
