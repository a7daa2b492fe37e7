//! The rest of an upload, after the `model` it was routed by. vLLM reads a form's *last*
//! `model` (Starlette keeps a field's last value), while the upload is routed by its first, as
//! soon as it is read, and streams on. A form naming another model further on would reach a
//! pod picked (and a rewrite chosen) for the first name, and be served as the other there, or
//! answered 404 for it: the watch reads the parts that follow as they stream through, each
//! byte once, and tells when that happens, so the request is refused before the form ends
//! (vLLM reads the whole form before it answers).

use std::borrow::Cow;

use super::{FormModel, FormRead, FormScan};

/// What the form read so far says of the routing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Watched {
    /// Nothing against it yet: read on as more of the form arrives.
    Fine,
    /// The form ended (or names nothing more that could be a model): nothing left to watch.
    Done,
    /// Another `model` part: its name when readable (`None`: a value that cannot be read, which
    /// vLLM would still read as the model). Named again after a rewrite, even as the same name:
    /// that value would reach the pod unrewritten.
    Conflict(Option<String>),
    /// A part's `Content-Disposition` longer than any client writes
    /// ([`super::MAX_HEADER_LINE`]): it may name another `model` past what was read of it.
    DispositionTooLong,
}

/// A watch over the parts after a form's first `model`.
#[derive(Debug, Clone)]
pub struct ModelWatch {
    scan: FormScan,
    /// The bytes from the scan's resume point to the end of what was fed: a delimiter, a part's
    /// header line or a value cut by a chunk's end (bounded as the scan bounds them).
    kept: Vec<u8>,
    /// The name the upload was routed by, as the form gave it.
    routed_by: String,
    /// Its value was rewritten before the body went on.
    rewritten: bool,
}

impl ModelWatch {
    /// A watch after `model`, read by `scan`; its first [`Self::feed`] starts at the byte after
    /// the model's value.
    pub fn after(scan: &FormScan, model: &FormModel, rewritten: bool) -> Self {
        Self { scan: scan.after(model), kept: Vec::new(), routed_by: model.name.clone(), rewritten }
    }

    /// The bytes kept between chunks (bounded as the scan bounds a part's header line and value).
    pub fn kept_len(&self) -> usize {
        self.kept.len()
    }

    /// Reads the form's next `bytes` (each chunk once, in order); `complete`: the body ends
    /// with them.
    pub fn feed(&mut self, bytes: &[u8], complete: bool) -> Watched {
        // What was kept starts at the scan's resume point, and the new bytes follow it (with
        // nothing kept, the last feed was read to its end: they start there).
        let start = self.scan.resume_at();
        let buffer: Cow<'_, [u8]> = if self.kept.is_empty() {
            Cow::Borrowed(bytes)
        } else {
            let mut joined = std::mem::take(&mut self.kept);
            joined.extend_from_slice(bytes);
            Cow::Owned(joined)
        };
        // The scan's places only move forward, from `start` on.
        let from_resume = |scan: &FormScan| buffer.get(scan.resume_at().saturating_sub(start)..).unwrap_or_default();
        loop {
            match self.scan.scan(from_resume(&self.scan), complete) {
                FormRead::More => {
                    self.kept = from_resume(&self.scan).to_vec();
                    return Watched::Fine;
                }
                // The same name again: vLLM reads what the upload was routed by. Watch on.
                FormRead::Model(model) if model.name == self.routed_by && !self.rewritten => {
                    self.scan = self.scan.after(&model);
                }
                FormRead::Model(model) => return Watched::Conflict(Some(model.name)),
                FormRead::NoModel if self.scan.stopped_in_model_value() => return Watched::Conflict(None),
                FormRead::DispositionTooLong => return Watched::DispositionTooLong,
                FormRead::NoModel => return Watched::Done,
            }
        }
    }
}

#[cfg(test)]
mod tests;
