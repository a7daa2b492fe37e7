//! Which streams have their chunks read for `usage`: a few per pod at once, and no more
//! chunks on average than a budget per stream.
//!
//! A stream's final `usage` event can only be found by reading every chunk of it into the VM,
//! one host copy per token (~4 µs of Envoy CPU each), so watching every stream would cost as
//! much per request as the stream has tokens. Two bounds keep it small:
//! - at most `limit` streams per pod at once (a pod's slot is taken when a stream is first
//!   read past its first token and given back when it ends);
//! - a budget of chunks: every stream that asked for `usage` adds `chunks_per_stream` to it,
//!   every chunk read past a first token takes one, and a stream starts being read only while
//!   the budget is positive. Over a run the chunks read per such stream average at most
//!   `chunks_per_stream` (plus what the streams being read when the budget ran out still
//!   take); at low rates, when the budget has saved up, every stream is read.
//!
//! The reports still arrive steadily (one per stream read, from the pods in proportion to
//! their streams), which is all the text ratio and the index correction need: they average
//! over answers.

use hashbrown::HashMap;

use crate::pod_table::MAX_PODS;

/// How many streams' worth of budget is saved while few streams come (the burst that may be
/// read in full after a quiet spell).
const SAVED_STREAMS: f64 = 64.0;

/// One worker's streams being read, per pod, and its budget of chunks.
#[derive(Debug, Clone, Default)]
pub struct UsageReaders {
    limit: u16,
    /// Pods with a stream being read now (pods at zero are removed).
    by_pod: HashMap<String, u16>,
    chunks_per_stream: f64,
    /// Chunks that may still be read; below zero while the streams being read take more
    /// than was saved.
    budget: f64,
}

impl UsageReaders {
    /// At most `limit` streams per pod at once (0: none), and on average `chunks_per_stream`
    /// chunks read per stream that asked for `usage`.
    pub fn new(limit: u16, chunks_per_stream: f64) -> Self {
        let chunks_per_stream = if chunks_per_stream.is_finite() { chunks_per_stream.max(0.0) } else { 0.0 };
        // Nothing saved at the start: the reads spread over the run from its first stream on, so
        // the reports (and the accuracy stats) do not lean on the cold start.
        Self { limit, by_pod: HashMap::new(), chunks_per_stream, budget: 0.0 }
    }

    /// A stream to `pod` that asked for `usage` has its first token: whether it is read on
    /// (it then holds a slot until [`Self::finish`] and its chunks are [`Self::charge`]d).
    pub fn try_start(&mut self, pod: &str) -> bool {
        self.budget = (self.budget + self.chunks_per_stream).min(self.chunks_per_stream * SAVED_STREAMS);
        if self.limit == 0 || self.budget <= 0.0 {
            return false;
        }
        if let Some(reading) = self.by_pod.get_mut(pod) {
            if *reading >= self.limit {
                return false;
            }
            *reading += 1;
            return true;
        }
        if self.by_pod.len() >= MAX_PODS {
            return false;
        }
        self.by_pod.insert(pod.to_string(), 1);
        true
    }

    /// One chunk of a stream being read was copied into the VM.
    pub fn charge(&mut self) {
        self.budget -= 1.0;
    }

    /// A stream that held a slot on `pod` ended.
    pub fn finish(&mut self, pod: &str) {
        if let Some(reading) = self.by_pod.get_mut(pod) {
            *reading = reading.saturating_sub(1);
            if *reading == 0 {
                self.by_pod.remove(pod);
            }
        }
    }

    /// Streams to `pod` being read now.
    pub fn reading(&self, pod: &str) -> u16 {
        self.by_pod.get(pod).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_gets_at_most_its_limit_of_streams_and_each_end_frees_one() {
        let mut readers = UsageReaders::new(2, 1e9);
        assert!(readers.try_start("a") && readers.try_start("a"));
        assert!(!readers.try_start("a"), "the third stream at once is not read");
        assert!(readers.try_start("b"), "other pods have their own slots");
        readers.finish("a");
        assert_eq!(readers.reading("a"), 1);
        assert!(readers.try_start("a"));
        for _ in 0..5 {
            readers.finish("a");
        }
        assert_eq!(readers.reading("a"), 0, "extra ends do not go below zero");
        assert_eq!(readers.by_pod.len(), 1, "a pod with nothing read is forgotten");
    }

    #[test]
    fn a_limit_of_zero_reads_no_stream() {
        let mut readers = UsageReaders::new(0, 1e9);
        assert!(!readers.try_start("a"));
        readers.finish("a");
        assert_eq!(readers.reading("a"), 0);
    }

    #[test]
    fn the_chunks_read_average_at_most_the_budget_per_stream() {
        let (per_stream, length, streams) = (2.0, 20, 1000);
        let mut readers = UsageReaders::new(4, per_stream);
        let (mut read_streams, mut chunks) = (0, 0);
        for _ in 0..streams {
            if readers.try_start("a") {
                read_streams += 1;
                for _ in 0..length {
                    readers.charge();
                    chunks += 1;
                }
                readers.finish("a");
            }
        }
        let bound = per_stream * (f64::from(streams) + SAVED_STREAMS) + f64::from(length);
        assert!(f64::from(chunks) <= bound, "{chunks} chunks read, at most {bound}");
        // 2 of every 20 chunks: one stream in ten, the first one included.
        assert!((99..=101).contains(&read_streams), "{read_streams} streams read");
    }

    #[test]
    fn an_overdrawn_budget_is_paid_back_by_the_streams_not_read_and_a_zero_budget_reads_none() {
        let mut readers = UsageReaders::new(4, 2.0);
        assert!(readers.try_start("a"), "the first stream is read");
        for _ in 0..1000 {
            readers.charge();
        }
        readers.finish("a");
        assert!(!readers.try_start("a"), "an overdrawn budget reads nothing");
        for _ in 0..500 {
            readers.try_start("b");
        }
        assert!(readers.try_start("a"), "the debt is paid by the streams that were not read");
        let mut none = UsageReaders::new(4, 0.0);
        assert!(!none.try_start("a"));
        let mut nan = UsageReaders::new(4, f64::NAN);
        assert!(!nan.try_start("a"));
    }
}
