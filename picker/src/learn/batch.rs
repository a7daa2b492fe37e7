//! How many requests each pod runs at once, read from its metrics when it queues: the
//! threshold past which a new request waits for a slot instead of starting.
//!
//! vLLM exports no `max_num_seqs`, and its batch is bounded by the KV cache as much as by that
//! setting, so neither is known ahead. What the metrics do show is the batch a pod runs while
//! requests wait (`num_requests_running` when `num_requests_waiting` > 0): that is its batch
//! when full. A pod never seen full is assumed to have the pool's size, the median of the
//! pods seen full (pods of one pool usually run with the same settings; one pod's absurd
//! reading must not set every other pod's size); before any pod is seen full, no request is counted
//! as waiting for a slot. When a pod last showed requests waiting is kept too: a request sent
//! before it may have waited for a slot its counts did not show ([`BatchSizes::queued_after`]).

use std::cell::Cell;

use hashbrown::HashMap;

use crate::pod_table::MAX_PODS;

/// Weight of a full-batch reading below the current size. A scrape that lands between a
/// request's end and the next step's admission reads one slot short (`running` 3 of 4 with
/// one waiting), so low readings only pull the size down slowly; a KV-bound batch that shrank
/// for long prompts still shows after ~20 readings. A higher reading is taken at once: a
/// batch never runs more than it can. Averaging every reading at 0.25 (before) left a batch
/// of 4 at ~3.7, so a pod with a free slot was priced 0.3 of a slot wait (workload c).
const STEP_DOWN: f64 = 0.05;

/// What a pod's scrapes showed while requests waited on it.
#[derive(Debug, Clone, Copy, Default)]
struct Queueing {
    /// Its batch size when full (`None` while no reading with requests waiting was usable).
    size: Option<f64>,
    /// When a scrape last showed requests waiting (the singleton's clock, ms).
    waiting_seen_ms: u64,
}

/// Each pod seen queueing: its batch size when full and when it last queued; the pool's
/// size (the median of theirs), kept until a size changes.
#[derive(Debug, Clone, Default)]
pub struct BatchSizes {
    pods: HashMap<String, Queueing>,
    /// `None` when a size changed since the pool's size was last taken.
    pool: Cell<Option<Option<f64>>>,
}

impl BatchSizes {
    /// The pod's metrics, scraped at `scraped_ms`, showed `running` requests running and
    /// `waiting` waiting.
    pub fn saw(&mut self, pod: &str, running: f64, waiting: f64, scraped_ms: u64) {
        if waiting.is_nan() || waiting <= 0.0 {
            return;
        }
        if !self.pods.contains_key(pod) && self.pods.len() < MAX_PODS {
            self.pods.insert(pod.to_string(), Queueing::default());
        }
        let Some(queueing) = self.pods.get_mut(pod) else { return };
        queueing.waiting_seen_ms = queueing.waiting_seen_ms.max(scraped_ms);
        if !(running >= 1.0 && running.is_finite()) {
            return;
        }
        let moved = match queueing.size {
            Some(size) if running <= size => size + STEP_DOWN * (running - size),
            _ => running,
        };
        if queueing.size != Some(moved) {
            self.pool.set(None);
        }
        queueing.size = Some(moved);
    }

    /// The pod's batch size when full: its own if it was seen full, else the pool's mean.
    pub fn size(&self, pod: &str) -> Option<f64> {
        self.pods.get(pod).and_then(|q| q.size).or_else(|| self.pool_size())
    }

    /// The pool's batch size when full: the median of the pods seen full (`None` before any
    /// was). Not their mean: one pod reading a billion running (a lying or broken page) made
    /// the mean hundreds of millions, so no pod without its own reading was ever priced a slot
    /// wait, and the slot-wait prior of the whole pool fell to nothing. O(pods log pods) once
    /// after a size changed (a pod table), then kept.
    pub fn pool_size(&self) -> Option<f64> {
        if let Some(pool) = self.pool.get() {
            return pool;
        }
        let mut sizes: Vec<f64> = self.pods.values().filter_map(|q| q.size).collect();
        sizes.sort_unstable_by(f64::total_cmp);
        let middle = sizes.len() / 2;
        let pool = match (sizes.len() % 2, middle.checked_sub(1).and_then(|below| sizes.get(below)), sizes.get(middle))
        {
            (0, Some(below), Some(above)) => Some((below + above) / 2.0),
            (_, _, middle) => middle.copied(),
        };
        self.pool.set(Some(pool));
        pool
    }

    /// Requests that must finish before a new one on `pod` gets a slot, with `in_flight`
    /// requests there already (0 while it has a free slot, or no pod was ever seen full).
    pub fn ahead_of_a_slot(&self, pod: &str, in_flight: f64) -> f64 {
        self.size(pod).map_or(0.0, |size| (in_flight + 1.0 - size).max(0.0))
    }

    /// A scrape after `sent_ms` showed requests waiting on `pod`: a request sent then may
    /// have waited for a slot, whatever the counts said when it was sent.
    pub fn queued_after(&self, pod: &str, sent_ms: u64) -> bool {
        self.pods.get(pod).is_some_and(|q| q.waiting_seen_ms > sent_ms)
    }

    /// Pods seen queueing and remembered.
    pub fn len(&self) -> usize {
        self.pods.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    /// Forgets what `pod` showed (its engine restarted, maybe with another `max_num_seqs`:
    /// its old size would only step down 5 % a reading). Whether anything was known.
    pub fn forget(&mut self, pod: &str) -> bool {
        let Some(queueing) = self.pods.remove(pod) else { return false };
        if queueing.size.is_some() {
            self.pool.set(None);
        }
        true
    }

    /// Forgets pods that left the pool.
    pub fn retain_pods(&mut self, keep: impl Fn(&str) -> bool) {
        self.pods.retain(|pod, _| keep(pod));
        self.pool.set(None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_seen_queueing_tells_its_batch_and_the_others_take_the_pools() {
        let mut sizes = BatchSizes::default();
        sizes.saw("a", 4.0, 0.0, 0);
        assert_eq!(sizes.ahead_of_a_slot("a", 9.0), 0.0, "never seen full: no slot wait assumed");
        sizes.saw("a", 4.0, 2.0, 0);
        assert_eq!(sizes.ahead_of_a_slot("a", 3.0), 0.0, "the fourth slot is free");
        assert_eq!(sizes.ahead_of_a_slot("a", 4.0), 1.0, "one must finish first");
        assert_eq!(sizes.ahead_of_a_slot("b", 6.0), 3.0, "a pod never seen full: the pool's size");
        sizes.saw("b", 8.0, 1.0, 0);
        assert_eq!(sizes.size("c"), Some(6.0));
        sizes.saw("a", 8.0, 1.0, 0);
        assert_eq!(sizes.size("a"), Some(8.0), "a larger batch is believed at once");
        sizes.retain_pods(|pod| pod == "b");
        assert_eq!(sizes.size("a"), Some(8.0));
    }

    #[test]
    fn a_reading_one_slot_short_barely_moves_the_size() {
        let mut sizes = BatchSizes::default();
        sizes.saw("a", 4.0, 1.0, 0);
        for _ in 0..3 {
            sizes.saw("a", 3.0, 1.0, 0);
        }
        assert!(sizes.ahead_of_a_slot("a", 3.0) < 0.2, "{:?}", sizes.size("a"));
        for _ in 0..60 {
            sizes.saw("a", 2.0, 3.0, 0);
        }
        assert!(sizes.size("a").is_some_and(|size| size < 2.2), "a batch that stays smaller is learned");
    }

    #[test]
    fn a_queue_seen_after_a_request_was_sent_is_remembered_per_pod() {
        let mut sizes = BatchSizes::default();
        sizes.saw("a", 4.0, 1.0, 1_500);
        sizes.saw("a", 4.0, 0.0, 1_600);
        sizes.saw("b", 4.0, 0.0, 1_600);
        assert!(sizes.queued_after("a", 1_000), "the queue at 1,500 came after");
        assert!(!sizes.queued_after("a", 1_500) && !sizes.queued_after("b", 1_000));
        sizes.saw("a", 3.0, 2.0, 1_200);
        assert!(sizes.queued_after("a", 1_400), "an older reading does not move it back");
        sizes.retain_pods(|pod| pod == "b");
        assert!(!sizes.queued_after("a", 0));
    }

    #[test]
    fn readings_that_say_nothing_are_ignored() {
        let mut sizes = BatchSizes::default();
        sizes.saw("a", 0.0, 5.0, 0);
        sizes.saw("a", f64::NAN, 5.0, 0);
        sizes.saw("a", f64::INFINITY, 5.0, 0);
        assert_eq!(sizes.size("a"), None);
    }

    #[test]
    fn one_pod_reading_an_absurd_batch_does_not_set_the_pools() {
        let mut sizes = BatchSizes::default();
        for pod in ["a", "b", "c"] {
            sizes.saw(pod, 8.0, 1.0, 0);
        }
        sizes.saw("liar", 1e9, 1.0, 0);
        assert_eq!(sizes.size("liar"), Some(1e9), "its own reading is its own");
        assert_eq!(sizes.pool_size(), Some(8.0), "the pool's is the typical pod's");
        assert_eq!(sizes.ahead_of_a_slot("new", 10.0), 3.0, "a pod never seen full still waits for a slot");
        sizes.forget("a");
        sizes.forget("b");
        assert_eq!(sizes.pool_size(), Some((8.0 + 1e9) / 2.0), "two pods: their middle");
        sizes.retain_pods(|pod| pod == "c");
        assert_eq!(sizes.pool_size(), Some(8.0));
        sizes.saw("c", 12.0, 1.0, 0);
        assert_eq!(sizes.pool_size(), Some(12.0), "a size change is seen");
    }
}
