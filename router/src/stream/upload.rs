//! Uploads: a `multipart/form-data` body on another endpoint (vLLM's audio transcriptions and
//! translations) is routed by its form's `model`, as a JSON body is by its own, so that in a
//! pool of several models it reaches a pod serving that model, not any pod by load (whose 404
//! the client would get). The form is read as it arrives ([`picker::request::FormScan`]):
//! the request goes on once its model is read, and the rest of the upload streams through.
//! A model with a rewrite (a rule, or the gateway's header) is sent as its target, as a JSON
//! body's is: routed to pods serving the target, and the form's value replaced in the body
//! buffered so far, while the request's headers are still held (so `content-length` can
//! follow). Uploads are not flow control's (as other endpoints' requests are not): routed at
//! once, never held in its queue, so no rewrite waits for a release.

use std::borrow::Cow;

use picker::request::{FormModel, FormRead, FormScan, InferenceRequest};
use wasm_epp_host::Host;

use super::{RequestStream, Step};

/// An upload being read for its `model`.
pub(super) struct Upload {
    scan: FormScan,
    /// The body's length as the client declared it (`None`: chunked), changed with a rewrite.
    declared_length: Option<u64>,
}

impl Upload {
    /// An upload of a body of this content type, if it is a form.
    pub(super) fn start(content_type: &str, declared_length: Option<u64>) -> Option<Box<Self>> {
        let scan = FormScan::for_content_type(content_type)?;
        Some(Box::new(Self { scan, declared_length }))
    }
}

impl RequestStream {
    /// Reads the part of the upload that arrived since the last chunk; routes it by its model
    /// once read, by load if the form has none (or none readable), or waits for more.
    pub(super) fn read_upload(&mut self, host: &dyn Host, body_size: usize, end_of_stream: bool) -> Step {
        let Some(upload) = self.upload.as_mut() else { return Step::Pause };
        let start = upload.scan.resume_at().min(body_size);
        let bytes = match host.request_body(start, body_size - start) {
            Ok(bytes) => bytes,
            Err(error) => {
                log::warn!("wasm-epp: cannot read an upload's body: {error}");
                self.upload = None;
                return self.route(host, None);
            }
        };
        let read = upload.scan.scan(&bytes, end_of_stream);
        if read == FormRead::More {
            return Step::Pause;
        }
        let declared_length = upload.declared_length;
        self.upload = None;
        match read {
            FormRead::Model(model) => {
                self.worker.stats.increment(self.worker.stats.upload_routed_by_model);
                let target = self.upload_target(&model);
                let FormModel { name, value, .. } = model;
                let request = InferenceRequest { model: Some(Cow::Owned(name)), ..InferenceRequest::default() };
                let step = self.route_sent_as(host, &request, target.as_deref());
                if let (Some(target), Some(_)) = (&target, &self.routed_to) {
                    crate::rewrite::replace_form_model(&self.worker, host, value, target, declared_length);
                }
                step
            }
            _ => self.route(host, None),
        }
    }

    /// The model an upload is sent as, chosen as a JSON body's is; `None` also when its form's
    /// value cannot be rewritten (what a server would read in its place is not known): then it
    /// goes as it came, to pods serving the name it asks for, logged and counted.
    fn upload_target(&mut self, model: &FormModel) -> Option<String> {
        let target = crate::rewrite::choose_target(&self.worker, self.rewrite_to.take(), Some(&model.name))?;
        if model.replaceable {
            return Some(target);
        }
        self.worker.stats.increment(self.worker.stats.upload_not_rewritten);
        log::warn!(
            "wasm-epp: an upload asking for model {:?} is not sent as {target:?}: its form's value is encoded \
             (a transfer encoding, or a charset other than UTF-8)",
            model.name
        );
        None
    }
}
