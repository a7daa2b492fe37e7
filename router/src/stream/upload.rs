//! Uploads: a `multipart/form-data` body on another endpoint (vLLM's audio transcriptions and
//! translations) is routed by its form's `model`, as a JSON body is by its own, so that in a
//! pool of several models it reaches a pod serving that model, not any pod by load (whose 404
//! the client would get). The form is read as it arrives ([`picker::request::FormScan`]):
//! the request goes on once its model is read, and the rest of the upload streams through.

use std::borrow::Cow;

use picker::request::{FormRead, InferenceRequest};
use wasm_epp_host::Host;

use super::{RequestStream, Step};

impl RequestStream {
    /// Reads the part of the upload that arrived since the last chunk; routes it by its model
    /// once read, by load if the form has none (or none readable), or waits for more.
    pub(super) fn read_upload(&mut self, host: &dyn Host, body_size: usize, end_of_stream: bool) -> Step {
        let Some(scan) = self.upload.as_mut() else { return Step::Pause };
        let start = scan.resume_at().min(body_size);
        let bytes = match host.request_body(start, body_size - start) {
            Ok(bytes) => bytes,
            Err(error) => {
                log::warn!("wasm-epp: cannot read an upload's body: {error}");
                self.upload = None;
                return self.route(host, None);
            }
        };
        let read = scan.scan(&bytes, end_of_stream);
        if read == FormRead::More {
            return Step::Pause;
        }
        self.upload = None;
        match read {
            FormRead::Model(model) => {
                self.worker.stats.increment(self.worker.stats.upload_routed_by_model);
                let request = InferenceRequest { model: Some(Cow::Owned(model.name)), ..InferenceRequest::default() };
                // (A rewrite rule is not applied: the form is not rewritten.)
                self.route_model(host, &request, &[], None)
            }
            _ => self.route(host, None),
        }
    }
}
