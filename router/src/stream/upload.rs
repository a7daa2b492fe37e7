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

use picker::request::{FormModel, FormRead, FormScan, InferenceRequest, ModelWatch, Watched, MAX_HEADER_LINE};
use wasm_epp_host::Host;

use super::{RequestStream, Step};
use crate::reply::send_error;

/// The rest of an upload that went on, read for another `model` part.
pub(super) struct UploadWatch {
    watch: ModelWatch,
    answer: PodAnswer,
}

/// How far the pod picked for an upload answered it, as the watch of its form's rest sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PodAnswer {
    NotYet,
    /// Headers with a status other than 2xx (a 401, a 413 before reading the whole form).
    Refused,
    /// Headers of a 2xx, or of a status that could not be read.
    Begun,
}

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
        let Some(upload) = self.upload.take() else { return Step::Pause };
        match read {
            FormRead::Model(model) => {
                self.worker.stats.increment(self.worker.stats.upload_routed_by_model);
                let target = self.upload_target(&model);
                let request =
                    InferenceRequest { model: Some(Cow::Borrowed(&model.name)), ..InferenceRequest::default() };
                let step = self.route_sent_as(host, &request, target.as_deref());
                if self.routed_to.is_none() {
                    // Answered here (404, 503): nothing goes on to watch.
                    return step;
                }
                if let Some(target) = &target {
                    crate::rewrite::replace_form_model(
                        &self.worker,
                        host,
                        model.value.clone(),
                        target,
                        upload.declared_length,
                    );
                }
                // The parts after the model, buffered so far, are read now; the rest as it streams.
                // (A target drawn as the name itself leaves a repeat of it as the pod reads it.)
                let renamed = target.as_deref().is_some_and(|target| *target != model.name);
                let mut watch = ModelWatch::after(&upload.scan, &model, renamed);
                let after_model = bytes.get(model.value.end.saturating_sub(start)..).unwrap_or_default();
                let watched = watch.feed(after_model, end_of_stream);
                self.model_watch = Some(Box::new(UploadWatch { watch, answer: PodAnswer::NotYet }));
                self.judge_watched(host, watched).unwrap_or(step)
            }
            // Nothing was picked for a model yet: a form that cannot be read goes by load, as
            // one without a model does (a `Content-Disposition` too long to read among them;
            // after the model it went by, the watch refuses one instead). (`More` waited above.)
            FormRead::NoModel | FormRead::DispositionTooLong | FormRead::More => self.route(host, None),
        }
    }

    /// Reads a chunk of an upload that went on, for another `model` part.
    pub(super) fn watch_upload(&mut self, host: &dyn Host, chunk_size: usize, end_of_stream: bool) -> Step {
        let Some(upload) = self.model_watch.as_mut() else { return Step::Continue };
        let watched = match host.request_body(0, chunk_size) {
            Ok(chunk) => upload.watch.feed(&chunk, end_of_stream),
            Err(error) => {
                log::warn!("wasm-epp: cannot read an upload's body: {error}");
                Watched::Done
            }
        };
        self.judge_watched(host, watched).unwrap_or(Step::Continue)
    }

    /// Trailers end an upload that went on: the form has no more bytes, so a second `model`
    /// cut by its end (the watch was waiting for its delimiter) is told now, as it would be
    /// by a last chunk that ends the stream. Still before the pod answers: vLLM reads the
    /// form to its end, and Envoy sends the pod the trailers only when this goes on.
    pub(super) fn end_upload_watch(&mut self, host: &dyn Host) -> Step {
        let Some(upload) = self.model_watch.as_mut() else { return Step::Continue };
        let watched = upload.watch.feed(&[], true);
        self.judge_watched(host, watched).unwrap_or(Step::Continue)
    }

    /// The pod's answer headers came while the rest of its upload still streams (a server may
    /// answer before it read the whole form: a 401, a 413): `status`, if it could be read.
    pub(super) fn upload_answered(&mut self, status: Option<&[u8]>) {
        if let Some(upload) = self.model_watch.as_mut() {
            let success = status.and_then(|status| status.first()) == Some(&b'2');
            upload.answer = if status.is_some() && !success { PodAnswer::Refused } else { PodAnswer::Begun };
        }
    }

    /// Refuses the upload when its form names another model than the one it went by (vLLM
    /// would serve that one, on a pod not picked for it): 400, before the pod has the whole form,
    /// and so, mostly, before it answers. `None`: it goes on.
    fn judge_watched(&mut self, host: &dyn Host, watched: Watched) -> Option<Step> {
        match watched {
            Watched::Fine => None,
            Watched::Done => {
                self.model_watch = None;
                None
            }
            Watched::Conflict(other) => {
                let other = other.map_or_else(|| "one that cannot be read".to_owned(), |name| format!("{name:?}"));
                self.refuse_upload(
                    host,
                    &format!("the form names `model` again, as {other}: an upload names one model, once"),
                )
            }
            // It may name another model past what was read of it.
            Watched::DispositionTooLong => self.refuse_upload(
                host,
                &format!(
                    "a part of the form after its `model` has a Content-Disposition header longer than \
                     {MAX_HEADER_LINE} bytes, which no client writes: which field it is cannot be told"
                ),
            ),
        }
    }

    /// Answers an upload that went on 400 with `message`, counted as one naming another model.
    ///
    /// Once the pod's answer headers went to the client, no 400 can follow: Envoy resets the
    /// stream instead. A pod that refused the upload (a 401, a 413 before it read the whole
    /// form) gave the client its verdict, and a refusal serves no model: it passes untouched,
    /// still counted. A pod that answers 2xx before it read the whole form reads the form's rest
    /// while it answers, so the answer may be the second model's, served on a pod not picked
    /// for it, as a success; the client cannot tell. The reset is the one way left to keep it
    /// from passing for one (as an unreadable status may be one, it is reset too).
    fn refuse_upload(&mut self, host: &dyn Host, message: &str) -> Option<Step> {
        let answer = self.model_watch.take().map(|upload| upload.answer);
        self.worker.stats.increment(self.worker.stats.upload_model_conflict);
        if answer == Some(PodAnswer::Refused) {
            return None;
        }
        send_error(host, 400, "invalid_request_error", message);
        // Its pick is given back now (Envoy resets the upstream request as the reply ends it):
        // the response hooks then see the gateway's answer, not the pod's, which outlier
        // detection would count a success and the served header name. (After the reply: the
        // release may hand the place to a held request.)
        self.release(host);
        Some(Step::Pause)
    }

    /// The model an upload is sent as, chosen as a JSON body's is; `None` also when its form's
    /// value cannot be replaced by the target (what a server would read in its place is not
    /// known): then it goes as it came, to pods serving the name it asks for, logged and counted.
    fn upload_target(&mut self, model: &FormModel) -> Option<String> {
        let target = crate::rewrite::choose_target(&self.worker, self.rewrite_to.take(), Some(&model.name))?;
        if model.replaceable_by(&target) {
            return Some(target);
        }
        self.worker.stats.increment(self.worker.stats.upload_not_rewritten);
        log::warn!(
            "wasm-epp: an upload asking for model {:?} is not sent as {target:?}: its form's value is encoded \
             (a transfer encoding, a charset other than UTF-8 and US-ASCII, ISO 8859 or Windows-125x, or \
             one of those with a name that is not ASCII)",
            model.name
        );
        None
    }
}
