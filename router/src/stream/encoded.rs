//! An answer that came compressed: its watchers read its plain bytes, inflated as it passes
//! ([`crate::answer_encoding`]), or nothing. The answer itself passes on as it came.

use wasm_epp_host::Host;

use super::RequestStream;
use crate::answer_encoding::{ContentEncoding, Inflater};
use crate::answer_headers::AnswerHeaders;
use crate::profile::{self, Phase};
use crate::response::Observation;

/// How the answer's bytes reach its watchers.
#[derive(Debug, Default)]
pub(super) enum AnswerCoding {
    /// As they come (no `content-encoding`, or one not looked up: nothing reads the body).
    #[default]
    Plain,
    /// Inflated chunk by chunk, while a watcher reads on (boxed: ~43 KB of decoder state,
    /// made only for a compressed answer being read).
    Inflating(Box<Inflater>),
    /// Compressed, and not read (any more): the watchers were stopped, or read no further.
    Unread,
}

impl RequestStream {
    /// Whether a watcher reads the answer's next chunk: learning, the opening's error event, a
    /// Responses answer's id.
    pub(super) fn reads_answer(&self) -> bool {
        self.observed.as_ref().is_some_and(Observation::reads_next_chunk)
            || self.opening_events > 0
            || self.response_id.as_ref().is_some_and(|watch| watch.reading())
    }

    /// At the answer's headers, once its watchers are set: its `content-encoding`, read only
    /// when one of them will read its body (one header value; none otherwise). An encoding
    /// not inflated stops them now: counted, and nothing is misread.
    pub(super) fn note_answer_coding(&mut self, headers: &AnswerHeaders, end_of_stream: bool) {
        if end_of_stream || !self.reads_answer() {
            return;
        }
        let value = headers.get("content-encoding");
        let encoding = ContentEncoding::from_header(value.as_deref());
        let stats = &self.worker.stats;
        self.answer_coding = match Inflater::new(encoding) {
            Some(inflater) => {
                stats.increment(stats.answers_inflated);
                AnswerCoding::Inflating(Box::new(inflater))
            }
            None if encoding == ContentEncoding::Identity => AnswerCoding::Plain,
            None => {
                self.stop_reading_answer();
                AnswerCoding::Unread
            }
        };
    }

    /// A chunk of a compressed answer (`chunk_size` bytes on the wire), as its watchers get it:
    /// its plain bytes (none while a header or block is incomplete) while one reads on; else
    /// its size alone, as an unread chunk is. The decoder goes once none reads on, and on bytes
    /// that stop inflating: those stop the watchers (counted), never the answer.
    pub(super) fn plain_chunk(&mut self, host: &dyn Host, chunk_size: usize) -> (usize, Option<Vec<u8>>) {
        if !self.reads_answer() {
            self.answer_coding = AnswerCoding::Unread;
        }
        let AnswerCoding::Inflating(inflater) = &mut self.answer_coding else { return (chunk_size, None) };
        if chunk_size == 0 {
            return (0, None);
        }
        let _span = profile::span(host, Phase::ObserveScan);
        let mut plain = Vec::new();
        let inflated = match host.response_body(0, chunk_size) {
            Ok(compressed) => inflater.inflate(&compressed, &mut plain).map_err(|error| format!("{error:?}")),
            Err(error) => Err(error.to_string()),
        };
        match inflated {
            Ok(()) => (plain.len(), Some(plain)),
            Err(error) => {
                log::debug!("wasm-epp: a compressed answer is not read on: {error}");
                self.answer_coding = AnswerCoding::Unread;
                self.stop_reading_answer();
                (chunk_size, None)
            }
        }
    }

    /// The answer's bytes cannot be read: every watcher stops. A stream's opening left unread
    /// is no failure (nothing shows one), as an answer of unknown bytes must not eject its
    /// pod; learning takes nothing from it; no response id is noted.
    fn stop_reading_answer(&mut self) {
        self.worker.stats.increment(self.worker.stats.answers_encoded_unread);
        if let Some(observed) = &mut self.observed {
            observed.stop_reading();
        }
        if let Some(watch) = &mut self.response_id {
            watch.stop();
        }
        self.opening_tail = Vec::new();
        if self.opening_events > 0 {
            self.opening_read(crate::stream_error::Opening::Output);
        }
    }
}
