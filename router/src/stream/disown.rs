//! The answer's side of [`crate::disowned`]: a 404 from the pod, on a request whose model it
//! lists, is read at its first body chunk for the engine's "model does not exist". Nothing is
//! done for any other status (the status is read already, for outlier detection).

use wasm_epp_host::Host;

use super::RequestStream;
use crate::disowned::{says_model_not_found, NOT_FOUND_BYTES};

impl RequestStream {
    /// The answer's headers: a 404 from a pod the filter named, to a request whose model may be
    /// disowned, has its body read for the engine's error (`served`: the answering pod, as the
    /// served-endpoint header or Envoy says).
    pub(super) fn await_not_found(&mut self, status: Option<&[u8]>, served: Option<&[u8]>, end_of_stream: bool) {
        if status != Some(b"404") || end_of_stream || !self.posted || self.disown_model().is_none() {
            return;
        }
        let pod = self.with_destination(|list| crate::attempts::pod_that_answered(list, served));
        self.not_found_from = pod.flatten();
    }

    /// The first body chunk of that 404 (vLLM's error is one small chunk; a compressed one
    /// is not read as such, and disowns nothing).
    pub(super) fn read_not_found(&mut self, host: &dyn Host, chunk_size: usize) {
        let Some(pod) = self.not_found_from.take() else { return };
        let read = host.response_body(0, chunk_size.min(NOT_FOUND_BYTES)).unwrap_or_default();
        if !says_model_not_found(&read) {
            return;
        }
        if let Some(model) = self.disown_model() {
            crate::disowned::note(&self.worker, &pod, model, host.now_ms());
        }
    }

    /// The model this request was routed as, when its answer may disown it: kept at the pick
    /// (routed at once), or its queue entry's (released by flow control).
    fn disown_model(&self) -> Option<&str> {
        match &self.held {
            Some(held) => held.routed_model(),
            None => self.disowned_model.as_deref(),
        }
    }
}
