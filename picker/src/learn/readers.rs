//! Which streams have their chunks read for `usage`: a few per pod at once, and no more
//! chunks than a budget that grows with the streams and with time.
//!
//! A stream's final `usage` event can only be found by reading every chunk of it into the VM,
//! one host copy per token (~2–4 µs each), so watching every stream would cost as much per
//! request as the stream has tokens. Two bounds keep it small:
//! - at most `limit` streams per pod at once (a pod's slot is taken when a stream is first
//!   read past its first token and given back when it ends);
//! - a budget of chunks: every stream that asked for `usage` adds `chunks_per_stream` to it,
//!   every second adds `chunks_per_second`, every chunk read past a first token takes one, and
//!   a stream starts being read only while the budget is positive. At high rates the chunks
//!   read per stream average `chunks_per_stream` plus `chunks_per_second` ÷ the rate; at low
//!   rates, where reading costs next to nothing a second, the time share reads most streams.
//!
//! The reports still arrive steadily (one per stream read, from the pods in proportion to
//! their streams), which is all the text ratio and the index correction need: they average
//! over answers.

use hashbrown::HashMap;

use super::allowance::Allowance;
use crate::pod_table::MAX_PODS;

/// How much budget is saved while few streams come, in streams' and seconds' worth (the
/// burst that may be read in full after a quiet spell).
const SAVED_STREAMS: f64 = 64.0;
const SAVED_SECONDS: f64 = 1.0;

/// One worker's streams being read, per pod, and its budget of chunks.
#[derive(Debug, Clone, Default)]
pub struct UsageReaders {
    limit: u16,
    /// Pods with a stream being read now (pods at zero are removed).
    by_pod: HashMap<String, u16>,
    /// Chunks that may still be read, earned per stream and per second.
    budget: Allowance,
}

impl UsageReaders {
    /// At most `limit` streams per pod at once (0: none), and a budget of `chunks_per_stream`
    /// per stream that asks for `usage` plus `chunks_per_second`.
    pub fn new(limit: u16, chunks_per_stream: f64, chunks_per_second: f64) -> Self {
        // Nothing saved at the start: the reads spread over the run from its first stream
        // on, so the reports (and the accuracy stats) do not lean on the cold start.
        let budget = Allowance::new(chunks_per_stream, chunks_per_second, SAVED_STREAMS, SAVED_SECONDS, 0.0);
        Self { limit, by_pod: HashMap::new(), budget }
    }

    /// A stream to `pod` that asked for `usage` has its first token at `now_ms`: whether it is
    /// read on (it then holds a slot until [`Self::finish`] and its chunks are
    /// [`Self::charge`]d).
    pub fn try_start(&mut self, pod: &str, now_ms: u64) -> bool {
        self.budget.earn(now_ms);
        if self.limit == 0 || !self.budget.allows() {
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
        self.budget.spend(1.0);
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
        let mut readers = UsageReaders::new(2, 1e9, 0.0);
        assert!(readers.try_start("a", 0) && readers.try_start("a", 0));
        assert!(!readers.try_start("a", 0), "the third stream at once is not read");
        assert!(readers.try_start("b", 0), "other pods have their own slots");
        readers.finish("a");
        assert_eq!(readers.reading("a"), 1);
        assert!(readers.try_start("a", 0));
        for _ in 0..5 {
            readers.finish("a");
        }
        assert_eq!(readers.reading("a"), 0, "extra ends do not go below zero");
        assert_eq!(readers.by_pod.len(), 1, "a pod with nothing read is forgotten");
    }

    #[test]
    fn a_limit_of_zero_reads_no_stream() {
        let mut readers = UsageReaders::new(0, 1e9, 0.0);
        assert!(!readers.try_start("a", 0));
        readers.finish("a");
        assert_eq!(readers.reading("a"), 0);
    }

    #[test]
    fn the_chunks_read_average_at_most_the_budget_per_stream() {
        let (per_stream, length, streams) = (2.0, 20, 1000);
        let mut readers = UsageReaders::new(4, per_stream, 0.0);
        let (mut read_streams, mut chunks) = (0, 0);
        for _ in 0..streams {
            if readers.try_start("a", 0) {
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
        let mut readers = UsageReaders::new(4, 2.0, 0.0);
        assert!(readers.try_start("a", 0), "the first stream is read");
        for _ in 0..1000 {
            readers.charge();
        }
        readers.finish("a");
        assert!(!readers.try_start("a", 0), "an overdrawn budget reads nothing");
        for _ in 0..500 {
            readers.try_start("b", 0);
        }
        assert!(readers.try_start("a", 0), "the debt is paid by the streams that were not read");
        let mut none = UsageReaders::new(4, 0.0, 0.0);
        assert!(!none.try_start("a", 0));
        let mut nan = UsageReaders::new(4, f64::NAN, 0.0);
        assert!(!nan.try_start("a", 0));
    }

    #[test]
    fn time_adds_to_the_budget_so_a_slow_trickle_of_streams_is_read_in_full() {
        // 20-chunk streams, 2 chunks per stream and 100 a second: one a second is read in full
        // (2 + 100 ≥ 20), fifty a second only one in five ((2 · 50 + 100) ÷ 20 = 10 of 50 a second).
        let mut readers = UsageReaders::new(4, 2.0, 100.0);
        let read_at = |readers: &mut UsageReaders, streams: u64, gap_ms: u64| {
            let mut read = 0;
            for k in 1..=streams {
                if readers.try_start("a", 1_000_000 + k * gap_ms) {
                    read += 1;
                    (0..20).for_each(|_| readers.charge());
                    readers.finish("a");
                }
            }
            read
        };
        assert_eq!(read_at(&mut readers, 10, 1000), 10, "one stream a second: all read");
        let mut busy = UsageReaders::new(4, 2.0, 100.0);
        let read = read_at(&mut busy, 500, 20);
        assert!((95..=105).contains(&read), "fifty a second for 10 s: {read} of 500 read");
    }
}
