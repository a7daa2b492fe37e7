//! Envoy stats defined by the plugin (`define_metric`).
//!
//! They show in `/stats/prometheus` as `wasm_epp_*`. A failure to define or bump a metric
//! is ignored: stats must never fail a request. Per-pod counters encode the pod in the
//! name (`wasm_epp.picks.pod.<ip_port>`); the bootstrap's `stats_tags` turn that into a
//! `pod` label. Their number is bounded by the pool size bound.

use hashbrown::HashMap;
use picker::pod_table::MAX_PODS;
use proxy_wasm::hostcalls;
use proxy_wasm::types::MetricType;

/// A counter; a no-op if the host refused to define it.
#[derive(Clone, Copy, Debug)]
pub struct Counter(Option<u32>);

impl Counter {
    pub fn define(name: &str) -> Self {
        Self(hostcalls::define_metric(MetricType::Counter, name).ok())
    }

    pub fn add(self, value: u64) {
        if let Some(id) = self.0 {
            let _ = hostcalls::increment_metric(id, i64::try_from(value).unwrap_or(i64::MAX));
        }
    }

    pub fn increment(self) {
        self.add(1);
    }
}

/// A gauge; a no-op if the host refused to define it.
#[derive(Clone, Copy, Debug)]
pub struct Gauge(Option<u32>);

impl Gauge {
    pub fn define(name: &str) -> Self {
        Self(hostcalls::define_metric(MetricType::Gauge, name).ok())
    }

    pub fn set(self, value: u64) {
        if let Some(id) = self.0 {
            let _ = hostcalls::record_metric(id, value);
        }
    }
}

/// Counters keyed by a label value (a pod), defined the first time each value is seen.
pub struct LabelledCounters {
    prefix: String,
    counters: HashMap<String, Counter>,
}

impl LabelledCounters {
    /// `prefix` is the stat name up to the label, e.g. `wasm_epp.picks.pod`.
    pub fn new(prefix: &str) -> Self {
        Self { prefix: prefix.to_string(), counters: HashMap::new() }
    }

    pub fn increment(&mut self, label: &str) {
        if let Some(counter) = self.counters.get(label) {
            counter.increment();
            return;
        }
        if self.counters.len() >= MAX_PODS {
            return; // Bounded: stat names are never created per request.
        }
        let counter = Counter::define(&format!("{}.{label}", self.prefix));
        counter.increment();
        self.counters.insert(label.to_string(), counter);
    }
}
