//! Which streams have their chunks read for `usage`: at most a few per pod at once.
//!
//! A stream's final `usage` event can only be found by reading every chunk of it into the VM,
//! one host copy per token, so the cost of watching grows with a pod's concurrency. A few
//! streams per pod at once still give the pod a steady flow of reports (one per stream's
//! end), which is all the text ratio and the index correction need: they average over
//! answers. A pod's slot is taken when a stream opens and given back when it ends.

use hashbrown::HashMap;

use crate::pod_table::MAX_PODS;

/// One worker's streams being read, per pod.
#[derive(Debug, Clone, Default)]
pub struct UsageReaders {
    limit: u16,
    /// Pods with a stream being read now (pods at zero are removed).
    by_pod: HashMap<String, u16>,
}

impl UsageReaders {
    /// At most `limit` streams per pod at once (0: none).
    pub fn new(limit: u16) -> Self {
        Self { limit, by_pod: HashMap::new() }
    }

    /// A stream to `pod` opens: whether it may be read (it then holds a slot until
    /// [`Self::finish`]).
    pub fn try_start(&mut self, pod: &str) -> bool {
        if self.limit == 0 {
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
        let mut readers = UsageReaders::new(2);
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
        let mut readers = UsageReaders::new(0);
        assert!(!readers.try_start("a"));
        readers.finish("a");
        assert_eq!(readers.reading("a"), 0);
    }
}
