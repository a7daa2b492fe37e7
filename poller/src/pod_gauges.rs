//! Per-pod gauges as the picker sees them, set each time the pool service publishes a table:
//! queue (`waiting`, `running`), KV-cache use, this Envoy's requests and uncached prompt
//! tokens in flight, age of the pod's data and whether it is in rotation.
//!
//! Each gauge is named `wasm_epp.<gauge>.pod.<ip:port>`; the bootstrap's `stats_tags` rule
//! (envoy/envoy.yaml.template) turns the address into a label, so `/stats/prometheus` shows
//! `wasm_epp_pod_waiting{pod="10.0.0.1:8000"}`. Envoy never deletes a stat, so a pod that
//! left the pool keeps its series: its gauges are set to 0 (and `healthy` to 0) once, and a
//! dashboard reads only pods with `wasm_epp_pod_in_pool == 1`.

use hashbrown::HashMap;
use picker::address::PodAddress;
use picker::inflight::Load;
use picker::pod_table::PodTable;
use wasm_epp_host::{Gauge, Metrics};

/// Pods that get per-pod series, at most. A dashboard cannot show more lines usefully, a
/// Prometheus series costs memory for as long as it is kept, and each gauge changed is one
/// host call per publish (8 gauges x 256 pods = 2,048 calls per poll interval at worst). Pods
/// beyond it (in table order) are counted in `wasm_epp_pod_series_omitted`.
pub const MAX_POD_SERIES: usize = 256;

/// The families, in the order [`PodValues::as_array`] gives their values.
const FAMILIES: [&str; 8] = [
    "wasm_epp.pod_in_pool.pod",
    "wasm_epp.pod_healthy.pod",
    "wasm_epp.pod_waiting.pod",
    "wasm_epp.pod_running.pod",
    "wasm_epp.pod_kv_usage_permille.pod",
    "wasm_epp.pod_inflight.pod",
    "wasm_epp.pod_prompt_tokens_in_flight.pod",
    "wasm_epp.pod_data_age_ms.pod",
];

/// One pod's gauge values (integers: Envoy gauges are u64).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct PodValues {
    in_pool: u64,
    healthy: u64,
    waiting: u64,
    running: u64,
    /// KV-cache use in thousandths (vLLM reports a fraction 0..1).
    kv_usage_permille: u64,
    inflight: u64,
    /// Uncached prompt tokens sent and not yet answered (the token load learning and P/D
    /// weigh pods by; 0 with both off).
    prompt_tokens_in_flight: u64,
    data_age_ms: u64,
}

impl PodValues {
    fn as_array(self) -> [u64; 8] {
        [
            self.in_pool,
            self.healthy,
            self.waiting,
            self.running,
            self.kv_usage_permille,
            self.inflight,
            self.prompt_tokens_in_flight,
            self.data_age_ms,
        ]
    }
}

/// A non-negative count from the engine's float, rounded (NaN and negatives read as 0).
fn whole(value: f64) -> u64 {
    if value.is_finite() && value > 0.0 {
        value.round() as u64
    } else {
        0
    }
}

/// Addresses that ever get series, at most: Envoy keeps a stat for good, so each pod of every
/// rollout (a new IP each) adds 8 that stay. A pool of 16 rolled out 256 times.
pub const MAX_POD_SERIES_EVER: usize = 4_096;

/// The pods with series in the pool now, and what each was last set to (only changes reach
/// the host); the addresses that were ever given series.
pub struct PodGauges {
    last: HashMap<PodAddress, PodValues>,
    /// When each pod with series was first published: a pod never scraped yet has no data,
    /// and its data's age is the time since it joined (counted from the clock's zero, it
    /// would read ~1.7e12 ms, flattening every other pod's line on the dashboard).
    joined_ms: HashMap<PodAddress, u64>,
    created: hashbrown::HashSet<PodAddress>,
    omitted: Gauge,
}

impl PodGauges {
    pub fn define(metrics: &Metrics) -> Self {
        Self {
            last: HashMap::new(),
            joined_ms: HashMap::new(),
            created: hashbrown::HashSet::new(),
            omitted: metrics.gauge("wasm_epp.pod_series_omitted"),
        }
    }

    /// Sets every pod's gauges from the table just published and `inflight` (this Envoy's
    /// load per pod, every worker summed).
    pub fn record(&mut self, metrics: &Metrics, table: &PodTable, inflight: &HashMap<String, Load>, now_ms: u64) {
        // Departed pods first: their places go to the pods of this table.
        let gone: Vec<PodAddress> =
            self.last.keys().filter(|address| !table.pods.iter().any(|p| &p.address == *address)).cloned().collect();
        for address in gone {
            self.set(metrics, &address, PodValues::default());
            // Its series stays at 0 in Envoy; its place goes to the pods that replace it.
            self.last.remove(&address);
            self.joined_ms.remove(&address);
        }
        let mut seen = 0usize;
        for pod in &table.pods {
            let new_series = !self.created.contains(&pod.address);
            if !self.last.contains_key(&pod.address)
                && (self.last.len() >= MAX_POD_SERIES || (new_series && self.created.len() >= MAX_POD_SERIES_EVER))
            {
                continue;
            }
            seen += 1;
            let joined_ms = *self.joined_ms.entry(pod.address.clone()).or_insert(now_ms);
            // `last_success_ms` 0: never answered (the host's clock is never 0).
            let data_since_ms = if pod.last_success_ms == 0 { joined_ms } else { pod.last_success_ms };
            let load = inflight.get(pod.address.as_str()).copied().unwrap_or_default();
            let values = PodValues {
                in_pool: 1,
                healthy: u64::from(pod.healthy),
                waiting: whole(pod.waiting),
                running: whole(pod.running),
                kv_usage_permille: pod.kv_usage.map_or(0, |kv| whole(kv * 1000.0)),
                inflight: u64::from(load.count),
                prompt_tokens_in_flight: u64::from(load.tokens),
                data_age_ms: now_ms.saturating_sub(data_since_ms),
            };
            self.set(metrics, &pod.address, values);
        }
        metrics.set(self.omitted, table.pods.len().saturating_sub(seen) as u64);
    }

    fn set(&mut self, metrics: &Metrics, address: &PodAddress, values: PodValues) {
        let before = self.last.get(address).copied();
        let changed = values.as_array();
        for (index, (family, value)) in FAMILIES.iter().zip(changed).enumerate() {
            let old = before.map(|b| b.as_array()).and_then(|a| a.get(index).copied());
            if old != Some(value) {
                // Bounded here by MAX_POD_SERIES_EVER addresses, not the metrics' default
                // bound per family (1,024): past that the gauges were dropped silently while
                // the pod counted as having series.
                metrics.set_labelled_within(family, address.as_str(), value, MAX_POD_SERIES_EVER);
            }
        }
        self.last.insert(address.clone(), values);
        if !self.created.contains(address) {
            self.created.insert(address.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use picker::pod_table::PodState;
    use wasm_epp_host::MockHost;

    fn pod(address: &str, waiting: f64, kv: f64) -> PodState {
        PodState {
            healthy: true,
            waiting,
            running: 2.0,
            kv_usage: Some(kv),
            last_success_ms: 900,
            ..PodState::unknown(&PodAddress::parse(address).unwrap())
        }
    }

    #[test]
    fn gauges_carry_the_address_and_the_pickers_view() {
        let host = MockHost::new();
        let metrics = Metrics::new();
        let mut gauges = PodGauges::define(&metrics);
        let table = PodTable { pods: vec![pod("10.0.0.1:8000", 3.4, 0.25)], ..PodTable::default() };
        let inflight = HashMap::from([("10.0.0.1:8000".to_string(), Load { count: 5, tokens: 4_096 })]);
        gauges.record(&metrics, &table, &inflight, 1_000);
        metrics.flush(&host);
        assert_eq!(host.metric("wasm_epp.pod_waiting.pod.10.0.0.1:8000"), 3);
        assert_eq!(host.metric("wasm_epp.pod_kv_usage_permille.pod.10.0.0.1:8000"), 250);
        assert_eq!(host.metric("wasm_epp.pod_inflight.pod.10.0.0.1:8000"), 5);
        assert_eq!(host.metric("wasm_epp.pod_prompt_tokens_in_flight.pod.10.0.0.1:8000"), 4_096);
        assert_eq!(host.metric("wasm_epp.pod_data_age_ms.pod.10.0.0.1:8000"), 100);
        assert_eq!(host.metric("wasm_epp.pod_healthy.pod.10.0.0.1:8000"), 1);
    }

    #[test]
    fn a_pod_never_scraped_has_data_as_old_as_its_place_in_the_pool() {
        let host = MockHost::new();
        let metrics = Metrics::new();
        let mut gauges = PodGauges::define(&metrics);
        let joining = PodState { last_success_ms: 0, ..pod("10.0.0.2:8000", 0.0, 0.0) };
        let table = PodTable { pods: vec![pod("10.0.0.1:8000", 1.0, 0.5), joining], ..PodTable::default() };
        let now = 1_700_000_000_000;
        gauges.record(&metrics, &table, &HashMap::new(), now);
        gauges.record(&metrics, &table, &HashMap::new(), now + 2_500);
        metrics.flush(&host);
        assert_eq!(host.metric("wasm_epp.pod_data_age_ms.pod.10.0.0.2:8000"), 2_500, "not the clock's reading");
        assert_eq!(host.metric("wasm_epp.pod_data_age_ms.pod.10.0.0.1:8000"), now + 2_500 - 900);
    }

    #[test]
    fn a_pod_that_left_is_zeroed_and_series_are_bounded() {
        let host = MockHost::new();
        let metrics = Metrics::new();
        let mut gauges = PodGauges::define(&metrics);
        let many: Vec<PodState> =
            (0..MAX_POD_SERIES + 10).map(|i| pod(&format!("10.0.{}.{}:8000", i / 250, i % 250), 1.0, 0.5)).collect();
        gauges.record(&metrics, &PodTable { pods: many, ..PodTable::default() }, &HashMap::new(), 1_000);
        metrics.flush(&host);
        assert_eq!(host.metric("wasm_epp.pod_series_omitted"), 10);
        assert_eq!(host.metric("wasm_epp.pod_in_pool.pod.10.0.0.0:8000"), 1);
        let one = PodTable { pods: vec![pod("10.0.0.1:8000", 1.0, 0.5)], ..PodTable::default() };
        gauges.record(&metrics, &one, &HashMap::new(), 2_000);
        metrics.flush(&host);
        assert_eq!(host.metric("wasm_epp.pod_in_pool.pod.10.0.0.0:8000"), 0, "left the pool");
        assert_eq!(host.metric("wasm_epp.pod_healthy.pod.10.0.0.0:8000"), 0);
        assert_eq!(host.metric("wasm_epp.pod_in_pool.pod.10.0.0.1:8000"), 1);
        assert_eq!(host.metric("wasm_epp.pod_series_omitted"), 0);
    }

    #[test]
    fn pods_of_later_rollouts_get_series_once_the_old_ones_left() {
        let host = MockHost::new();
        let metrics = Metrics::new();
        let mut gauges = PodGauges::define(&metrics);
        // Rollouts of a pool of 16, each pod on a new address: far past the 256 at once.
        for rollout in 0..40 {
            let pods = (0..16).map(|i| pod(&format!("10.{rollout}.0.{i}:8000"), 1.0, 0.5)).collect();
            gauges.record(&metrics, &PodTable { pods, ..PodTable::default() }, &HashMap::new(), 1_000);
        }
        metrics.flush(&host);
        assert_eq!(host.metric("wasm_epp.pod_in_pool.pod.10.39.0.15:8000"), 1, "the latest pods have series");
        assert_eq!(host.metric("wasm_epp.pod_in_pool.pod.10.38.0.0:8000"), 0, "the ones before left");
        assert_eq!(host.metric("wasm_epp.pod_series_omitted"), 0);
    }

    #[test]
    fn pods_churned_past_the_stat_families_bound_still_get_series_until_the_lifetime_bound() {
        let host = MockHost::new();
        let metrics = Metrics::new();
        let mut gauges = PodGauges::define(&metrics);
        let address = |i: usize| format!("10.{}.{}.{}:8000", i / 65_536, (i / 256) % 256, i % 256);
        // Rollouts of a pool of 16, each pod on a new address: 10,000 addresses in all.
        let rollouts = 625;
        for rollout in 0..rollouts {
            let pods = (0..16).map(|i| pod(&address(rollout * 16 + i), 1.0, 0.5)).collect();
            gauges.record(&metrics, &PodTable { pods, ..PodTable::default() }, &HashMap::new(), 1_000);
            metrics.flush(&host);
            let in_pool = |i: usize| host.metric(&format!("wasm_epp.pod_in_pool.pod.{}", address(i)));
            let newest = rollout * 16 + 15;
            if newest < MAX_POD_SERIES_EVER {
                // Past the 1,024 labels a family holds by default, the gauges said nothing and
                // counted the pods as given series.
                assert_eq!(in_pool(newest), 1, "rollout {rollout}: the pool's pods have series");
                assert_eq!(host.metric("wasm_epp.pod_series_omitted"), 0, "rollout {rollout}");
            } else {
                assert_eq!(in_pool(newest), 0, "past the lifetime bound: no series");
                assert_eq!(host.metric("wasm_epp.pod_series_omitted"), 16, "rollout {rollout}: said so");
            }
        }
        let per_pod = host.metric_names.borrow().iter().filter(|(n, _)| n.contains(".pod.")).count();
        assert_eq!(per_pod, FAMILIES.len() * MAX_POD_SERIES_EVER, "Envoy's stats stay bounded");
        assert!(gauges.last.len() <= 16, "departed pods forgotten");
        assert_eq!(gauges.created.len(), MAX_POD_SERIES_EVER);
    }
}
