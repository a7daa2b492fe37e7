//! Model rewrites (see `picker::models::rewrite`): drawing the target a request is sent as,
//! and replacing the request body's `model` with it before the request leaves Envoy: a JSON
//! body's, buffered whole, or an upload form's `model` field, in the part of the form
//! buffered when it was read (uploads are never held by flow control). A request that waits in
//! the flow-control queue keeps the target drawn when it arrived and has its body rewritten at
//! release, like one routed at once.

use std::ops::Range;

use wasm_epp_host::Host;

use crate::worker::Worker;

/// The target model a request for `asked` is sent as, drawn by weight; `None` without a rule.
pub fn draw_target(worker: &Worker, asked: Option<&str>) -> Option<String> {
    let rule = worker.config.models.rewrite(asked?)?;
    let mut random = worker.random.try_borrow_mut().ok()?;
    rule.target(|total| random.below(total)).map(str::to_owned)
}

/// The model a request asking for `asked` is sent as: the gateway's rewrite header's
/// (`header`), which wins over the rules and changes nothing when it names `asked`; else a
/// rule's target, drawn by weight. `None`: sent as it asks.
pub fn choose_target(worker: &Worker, header: Option<String>, asked: Option<&str>) -> Option<String> {
    match header {
        Some(target) => Some(target).filter(|t| asked != Some(t.as_str())),
        None => draw_target(worker, asked),
    }
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

/// Replaces an upload form's `model` value, its bytes at `value` in the body buffered so far,
/// with `target`, and the client's `content-length` (`declared`; `None` for a chunked body,
/// which has none to change) by the difference; counted in `model_rewritten`. Envoy sets a
/// request body only from its start (draining the bytes replaced, then prepending) or at its
/// end, so the body up to the value is written again with the target after it: one read and
/// one write of the bytes before the value, the form's first fields as the SDKs send them
/// (a file sent first, at most `max_body_bytes`, is copied as a JSON body is). Only a host
/// refusal can stop it; then the pod gets the public name, which it answers with 404: logged
/// loudly.
pub fn replace_form_model(worker: &Worker, host: &dyn Host, value: Range<usize>, target: &str, declared: Option<u64>) {
    worker.stats.increment(worker.stats.model_rewritten);
    let mut written = match host.request_body(0, value.start) {
        Ok(before) if before.len() == value.start => before,
        Ok(_) => return log::error!("wasm-epp: the upload's body is shorter than its model field; not rewritten"),
        Err(error) => return log::error!("wasm-epp: cannot read an upload's form to rewrite its model: {error}"),
    };
    written.extend_from_slice(target.as_bytes());
    if let Err(error) = host.set_request_body(value.end, &written) {
        return log::error!("wasm-epp: cannot replace an upload's model field: {error}");
    }
    let Some(declared) = declared else { return };
    let length = declared.saturating_sub(value.len() as u64).saturating_add(target.len() as u64);
    if let Err(error) = host.set_request_header("content-length", length.to_string().as_bytes()) {
        log::error!("wasm-epp: cannot set content-length after rewriting an upload's model: {error}");
    }
}
