//! Envoy stats kept in Wasm memory and flushed to the host on the tick.
//!
//! A stat call per request costs a host call each (~1-3 µs in V8); counting in memory and
//! flushing the deltas every tick (20 ms in the filter) costs one host call per changed
//! stat per tick. Stats therefore reach `/stats` up to one tick late. Names show in
//! `/stats/prometheus` as `wasm_epp_*`. Per-pod stats put the pod in the name
//! (`wasm_epp.picks.pod.<ip_port>`); the bootstrap's `stats_tags` turn it into a label.
//! Their number is bounded by [`MAX_LABELLED`] per family (or the caller's own bound,
//! [`Metrics::set_labelled_within`]), and one more where counts past the bound go to a
//! fallback label ([`Metrics::add_labelled_or`]).
//!
//! Where one Envoy serves several pools, each pool's VMs name it ([`Metrics::label_pool`]):
//! every name then carries `pool.<name>` after `wasm_epp` (`wasm_epp.pool.llama.picks.pod.<ip_port>`),
//! which the bootstrap's `stats_tags` turn into a `pool` label. Without it the pools' counters
//! would add up and their gauges overwrite each other: Envoy keys a stat by its name alone.

use std::cell::{Cell, RefCell};

use hashbrown::HashMap;
use picker::pod_table::MAX_PODS;

use crate::{Host, MetricKind};

/// Stats per labelled family at most: one per pod, and the pool is bounded.
pub const MAX_LABELLED: usize = MAX_PODS;

struct Slot {
    name: String,
    kind: MetricKind,
    /// The host's id, once defined (definition is retried at each flush until it works).
    id: Option<u32>,
    /// Counter: increments not yet flushed. Gauge: the value to record.
    pending: Cell<u64>,
    /// Gauge: whether `pending` changed since the last flush. Counter: define it at the next
    /// flush even at zero ([`Metrics::announce`]).
    dirty: Cell<bool>,
}

/// A counter handle (an index into [`Metrics`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counter(usize);

/// A gauge handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gauge(usize);

/// The fixed first word of every stat name, after which a pool's name goes.
const STAT_ROOT: &str = "wasm_epp.";

/// Every stat of one VM, counted in memory.
#[derive(Default)]
pub struct Metrics {
    slots: RefCell<Vec<Slot>>,
    /// `family -> label -> slot`, for per-pod stats.
    labelled: RefCell<HashMap<String, HashMap<String, usize>>>,
    /// The pool this VM serves, when one Envoy serves several (empty: no pool label).
    pool: RefCell<String>,
}

impl Metrics {
    pub fn new() -> Self {
        Self::default()
    }

    fn register(&self, name: &str, kind: MetricKind) -> usize {
        let Ok(mut slots) = self.slots.try_borrow_mut() else { return usize::MAX };
        slots.push(Slot { name: name.to_string(), kind, id: None, pending: Cell::new(0), dirty: Cell::new(false) });
        slots.len() - 1
    }

    pub fn counter(&self, name: &str) -> Counter {
        Counter(self.register(name, MetricKind::Counter))
    }

    pub fn gauge(&self, name: &str) -> Gauge {
        Gauge(self.register(name, MetricKind::Gauge))
    }

    pub fn add(&self, counter: Counter, by: u64) {
        if let Ok(slots) = self.slots.try_borrow() {
            if let Some(slot) = slots.get(counter.0) {
                slot.pending.set(slot.pending.get().saturating_add(by));
            }
        }
    }

    pub fn increment(&self, counter: Counter) {
        self.add(counter, 1);
    }

    /// A counter defined in the host at the next flush whether or not anything was counted
    /// ([`Self::announce`]): the filter's own counters, so `/stats/prometheus` lists every one
    /// from the start (at 0 for a feature that is off), as Envoy does its own stats.
    pub fn announced_counter(&self, name: &str) -> Counter {
        let counter = self.counter(name);
        self.announce(counter);
        counter
    }

    /// Defines the counter in the host at the next flush even if nothing was counted, so a
    /// dashboard shows a series at 0 instead of none (a fixed label set: reasons, buckets).
    pub fn announce(&self, counter: Counter) {
        if let Ok(slots) = self.slots.try_borrow() {
            if let Some(slot) = slots.get(counter.0) {
                slot.dirty.set(true);
            }
        }
    }

    pub fn set(&self, gauge: Gauge, value: u64) {
        if let Ok(slots) = self.slots.try_borrow() {
            if let Some(slot) = slots.get(gauge.0) {
                slot.pending.set(value);
                slot.dirty.set(true);
            }
        }
    }

    /// Adds to the counter `family.label`, created on first use; labels beyond
    /// [`MAX_LABELLED`] per family are not counted (never a stat per request).
    pub fn add_labelled(&self, family: &str, label: &str, by: u64) {
        if let Some(index) = self.labelled_slot(family, label, MetricKind::Counter) {
            self.add(Counter(index), by);
        }
    }

    /// Takes `family.label`'s place and defines it in the host at the next flush, at zero
    /// (a fallback label that must exist from the start and always have its place).
    pub fn announce_labelled(&self, family: &str, label: &str) {
        if let Some(index) = self.labelled_slot(family, label, MetricKind::Counter) {
            self.announce(Counter(index));
        }
    }

    /// As [`Self::add_labelled`], counted under `fallback` when the family has no room left
    /// for `label`, so nothing is lost past the bound. The fallback always has its place: if
    /// the family filled before it was first used, it is the one stat past [`MAX_LABELLED`]
    /// (announce it first to show it at 0 from the start and keep the family at the bound).
    pub fn add_labelled_or(&self, family: &str, label: &str, fallback: &str, by: u64) {
        let slot = self.labelled_slot(family, label, MetricKind::Counter);
        let slot = slot.or_else(|| self.labelled_slot_within(family, fallback, MetricKind::Counter, MAX_LABELLED + 1));
        if let Some(index) = slot {
            self.add(Counter(index), by);
        }
    }

    /// Sets the gauge `family.label`, created on first use (bounded as above).
    pub fn set_labelled(&self, family: &str, label: &str, value: u64) {
        self.set_labelled_within(family, label, value, MAX_LABELLED);
    }

    /// As [`Self::set_labelled`], the family bounded at `bound` labels instead: for a caller
    /// that keeps its own, documented bound on which labels get series. Returns whether the
    /// gauge has its place (false: the family is full and `label` is not in it).
    pub fn set_labelled_within(&self, family: &str, label: &str, value: u64, bound: usize) -> bool {
        let Some(index) = self.labelled_slot_within(family, label, MetricKind::Gauge, bound) else { return false };
        self.set(Gauge(index), value);
        true
    }

    /// Names every stat of this VM after `pool` (empty: none), from the next flush on. A
    /// new name is a new stat in Envoy: stats defined under the old one keep what they
    /// counted, and counting goes on under the new one.
    pub fn label_pool(&self, pool: &str) {
        let Ok(mut current) = self.pool.try_borrow_mut() else { return };
        if *current == pool {
            return;
        }
        *current = pool.to_string();
        if let Ok(mut slots) = self.slots.try_borrow_mut() {
            for slot in slots.iter_mut() {
                // Whatever the host had is defined again under the new name at the next
                // flush (a gauge with its value, a counter at least at zero).
                slot.dirty.set(slot.dirty.get() || slot.id.is_some());
                slot.id = None;
            }
        }
    }

    fn labelled_slot(&self, family: &str, label: &str, kind: MetricKind) -> Option<usize> {
        self.labelled_slot_within(family, label, kind, MAX_LABELLED)
    }

    /// `family.label`'s slot, created if the family holds fewer than `bound` labels.
    fn labelled_slot_within(&self, family: &str, label: &str, kind: MetricKind, bound: usize) -> Option<usize> {
        let mut labelled = self.labelled.try_borrow_mut().ok()?;
        if let Some(index) = labelled.get(family).and_then(|labels| labels.get(label)) {
            return Some(*index);
        }
        let labels = labelled.entry_ref(family).or_default();
        if labels.len() >= bound {
            return None;
        }
        let index = self.register(&format!("{family}.{label}"), kind);
        labels.insert(label.to_string(), index);
        Some(index)
    }

    /// What a counter or gauge holds in memory, not yet flushed (tests).
    pub fn pending(&self, name: &str) -> u64 {
        let Ok(slots) = self.slots.try_borrow() else { return 0 };
        slots.iter().filter(|s| s.name == name).map(|s| s.pending.get()).sum()
    }

    /// Hands every change since the last flush to the host. A stat the host refuses to
    /// define keeps its count and is tried again next time; stats never fail a request.
    pub fn flush(&self, host: &dyn Host) {
        let Ok(mut slots) = self.slots.try_borrow_mut() else { return };
        let pool = self.pool.try_borrow().ok();
        let pool = pool.as_deref().map_or("", String::as_str);
        for slot in slots.iter_mut() {
            let changed = match slot.kind {
                MetricKind::Counter => slot.pending.get() > 0 || (slot.dirty.get() && slot.id.is_none()),
                MetricKind::Gauge => slot.dirty.get(),
            };
            if !changed {
                continue;
            }
            if slot.id.is_none() {
                slot.id = host.define_metric(slot.kind, &pooled_name(&slot.name, pool)).ok();
            }
            let Some(id) = slot.id else { continue };
            match slot.kind {
                MetricKind::Counter => {
                    slot.dirty.set(false);
                    if slot.pending.get() > 0 && host.increment_metric(id, slot.pending.get()).is_ok() {
                        slot.pending.set(0);
                    }
                }
                MetricKind::Gauge => {
                    if host.record_metric(id, slot.pending.get()).is_ok() {
                        slot.dirty.set(false);
                    }
                }
            }
        }
    }
}

/// The name the host knows a stat by: `name`, with the pool after `wasm_epp` if there is one.
fn pooled_name(name: &str, pool: &str) -> String {
    match name.strip_prefix(STAT_ROOT) {
        Some(rest) if !pool.is_empty() => format!("{STAT_ROOT}pool.{pool}.{rest}"),
        _ => name.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MockHost;

    #[test]
    fn counts_in_memory_and_flushes_deltas() {
        let host = MockHost::new();
        let metrics = Metrics::new();
        let routed = metrics.counter("wasm_epp.requests_routed");
        let pods = metrics.gauge("wasm_epp.pods_total");
        metrics.increment(routed);
        metrics.add(routed, 2);
        metrics.set(pods, 4);
        assert_eq!(host.metric("wasm_epp.requests_routed"), 0, "nothing reaches the host before a flush");
        metrics.flush(&host);
        metrics.increment(routed);
        metrics.flush(&host);
        metrics.flush(&host);
        assert_eq!(host.metric("wasm_epp.requests_routed"), 4);
        assert_eq!(host.metric("wasm_epp.pods_total"), 4);
    }

    #[test]
    fn an_announced_counter_is_defined_at_zero() {
        let host = MockHost::new();
        let metrics = Metrics::new();
        let shed = metrics.counter("wasm_epp.shed");
        let _quiet = metrics.counter("wasm_epp.quiet");
        metrics.announce(shed);
        metrics.flush(&host);
        assert_eq!(host.metric_names.borrow().len(), 1, "only the announced counter is defined");
        assert_eq!(host.metric("wasm_epp.shed"), 0);
    }

    #[test]
    fn labelled_families_are_bounded() {
        let host = MockHost::new();
        let metrics = Metrics::new();
        for pod in 0..MAX_LABELLED + 50 {
            metrics.add_labelled("wasm_epp.picks.pod", &format!("10_0_0_{pod}_8000"), 1);
        }
        metrics.flush(&host);
        assert_eq!(host.metric_names.borrow().len(), MAX_LABELLED);
    }

    #[test]
    fn a_full_family_counts_under_its_fallback() {
        let host = MockHost::new();
        let metrics = Metrics::new();
        metrics.announce_labelled("wasm_epp.model_requests.model", "other");
        metrics.flush(&host);
        assert_eq!(host.metric_names.borrow().len(), 1, "the fallback exists before anything is counted");
        for model in 0..MAX_LABELLED + 5 {
            metrics.add_labelled_or("wasm_epp.model_requests.model", &format!("m{model}"), "other", 1);
        }
        metrics.flush(&host);
        assert_eq!(host.metric_names.borrow().len(), MAX_LABELLED);
        assert_eq!(host.metric("wasm_epp.model_requests.model.other"), 6, "5 past the bound and the one without room");
    }

    #[test]
    fn a_fallback_first_used_past_the_bound_still_counts() {
        let host = MockHost::new();
        let metrics = Metrics::new();
        for pod in 0..1_100 {
            let label = format!("10_0_{}_{}_8000", pod / 256, pod % 256);
            metrics.add_labelled_or("wasm_epp.picks.pod", &label, "other", 1);
        }
        metrics.flush(&host);
        assert_eq!(host.metric("wasm_epp.picks.pod.10_0_3_255_8000"), 1, "within the bound: its own label");
        assert_eq!(host.metric("wasm_epp.picks.pod.10_0_4_75_8000"), 0, "the 1,100th has no label of its own");
        assert_eq!(host.metric("wasm_epp.picks.pod.other"), 1_100 - MAX_LABELLED as u64, "nothing lost past the bound");
        assert_eq!(host.metric_names.borrow().len(), MAX_LABELLED + 1, "the fallback is the one stat past it");
    }

    #[test]
    fn a_pool_name_goes_after_the_first_word_of_every_stat() {
        let host = MockHost::new();
        let metrics = Metrics::new();
        let routed = metrics.announced_counter("wasm_epp.requests_routed");
        let healthy = metrics.gauge("wasm_epp.pods_healthy");
        metrics.label_pool("llama");
        metrics.increment(routed);
        metrics.set(healthy, 3);
        metrics.add_labelled("wasm_epp.picks.pod", "10.0.0.1:8000", 2);
        metrics.flush(&host);
        assert_eq!(host.metric("wasm_epp.pool.llama.requests_routed"), 1);
        assert_eq!(host.metric("wasm_epp.pool.llama.pods_healthy"), 3);
        assert_eq!(host.metric("wasm_epp.pool.llama.picks.pod.10.0.0.1:8000"), 2);
        assert_eq!(host.metric("wasm_epp.requests_routed"), 0, "nothing under the unlabelled name");
    }

    #[test]
    fn renaming_the_pool_defines_every_stat_again_under_the_new_name() {
        let host = MockHost::new();
        let metrics = Metrics::new();
        let routed = metrics.announced_counter("wasm_epp.requests_routed");
        let healthy = metrics.gauge("wasm_epp.pods_healthy");
        metrics.increment(routed);
        metrics.set(healthy, 2);
        metrics.flush(&host);
        metrics.label_pool("qwen");
        metrics.flush(&host);
        assert_eq!(host.metric("wasm_epp.requests_routed"), 1, "the old name keeps its count");
        assert_eq!(host.metric("wasm_epp.pool.qwen.pods_healthy"), 2, "a gauge keeps its value");
        assert!(host.metric_names.borrow().iter().any(|(n, _)| n == "wasm_epp.pool.qwen.requests_routed"));
        metrics.increment(routed);
        metrics.flush(&host);
        assert_eq!(host.metric("wasm_epp.pool.qwen.requests_routed"), 1);
    }
}
