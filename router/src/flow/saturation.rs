//! The saturation detector: which pods have room for one more request, and how much room
//! the pool has, in all and on its widest pod (a request of `n` choices needs its places on
//! the one pod it goes to).
//!
//! A pod has room when the requests this gateway has in flight to it (every worker, exact
//! within a publish) are below `max_inflight_per_pod` and its polled metrics do not say it
//! is saturated (queue or KV cache at the `saturation` thresholds, see
//! `picker::saturation`). The in-flight bound is what paces releases: metrics are up to a
//! poll interval old, so a burst released on "the queue looked short" alone would overshoot;
//! the counts move with every release. Pods whose metrics are stale count per
//! `flow_control.stale_metrics`; pods the pool service saw failing have no room.

use picker::config::{FlowControlConfig, StaleMetricsPolicy};
use picker::saturation::SaturationLimits;
use picker::scheduler::Candidate;

/// One pod as the detector reads it.
#[derive(Debug, Clone, Copy)]
pub struct PodLoad<'a> {
    pub address: &'a str,
    /// Its position in the table it was read from (under P/D its role's, the decode or the
    /// prefill pods'; in the static pool without one).
    pub position: usize,
    /// The pool service has data for it (a static-pool pod without a table has none).
    pub known: bool,
    pub healthy: bool,
    /// Its metrics are recent (within `stale_after_ms`).
    pub fresh: bool,
    pub waiting: f64,
    pub kv_usage: Option<f64>,
    pub inflight: u32,
}

/// What the pool can take now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolRoom {
    /// No pod at all (scale from zero: requests wait for one to appear).
    NoPods,
    /// Every pod is saturated.
    Saturated,
    /// This many more requests fit before every pod is at its in-flight bound.
    Free(u32),
}

/// Whether `pod` is saturated under the flow-control rules.
pub fn pod_saturated(pod: &PodLoad<'_>, limits: &SaturationLimits, flow: &FlowControlConfig) -> bool {
    if pod.inflight >= flow.max_inflight_per_pod {
        return true;
    }
    if !pod.known {
        // A static-pool pod without data: only the in-flight bound applies.
        return false;
    }
    if !pod.healthy {
        // The pool service saw it failing: releasing to it would only fail.
        return true;
    }
    if !pod.fresh {
        return flow.stale_metrics == StaleMetricsPolicy::Saturated;
    }
    let candidate = Candidate::with_load(pod.address, true, pod.waiting, pod.kv_usage, pod.inflight);
    limits.is_saturated(&candidate)
}

/// Free in-flight places of the pods that have room: in all, and on the widest one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Places {
    /// Summed over the pods.
    pub total: u32,
    /// On the one pod with the most: a request goes to one pod, so the most it can be given
    /// without taking a pod past its bound.
    pub widest: u32,
}

impl Places {
    fn add(self, free: u32) -> Self {
        Self { total: self.total.saturating_add(free), widest: self.widest.max(free) }
    }
}

/// The free places of the pods that have room, in one pass: all of them (`all`), and those
/// open to bands below `reserved_min_priority` (`standard`: each pod's free places above the
/// `reserved_per_pod` kept for higher bands). Counted per pod, as the reserve is configured:
/// a pod with no room (at its bound, saturated, failing) has no free places to reserve, so it
/// must not take the reserve out of the others' room.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FreePlaces {
    pub all: Places,
    pub standard: Places,
}

impl FreePlaces {
    /// Both pods' (or groups of pods') places together.
    pub fn with(self, other: FreePlaces) -> Self {
        let join =
            |a: Places, b: Places| Places { total: a.total.saturating_add(b.total), widest: a.widest.max(b.widest) };
        Self { all: join(self.all, other.all), standard: join(self.standard, other.standard) }
    }
}

/// One pod's [`FreePlaces`]: none when it has no room.
pub fn pod_places(pod: &PodLoad<'_>, limits: &SaturationLimits, flow: &FlowControlConfig) -> FreePlaces {
    if pod_saturated(pod, limits, flow) {
        return FreePlaces::default();
    }
    let open_per_pod = flow.max_inflight_per_pod.saturating_sub(flow.reserved_per_pod);
    FreePlaces {
        all: Places::default().add(flow.max_inflight_per_pod.saturating_sub(pod.inflight)),
        standard: Places::default().add(open_per_pod.saturating_sub(pod.inflight)),
    }
}

/// The pods' [`FreePlaces`].
pub fn free_places(pods: &[PodLoad<'_>], limits: &SaturationLimits, flow: &FlowControlConfig) -> FreePlaces {
    pods.iter().fold(FreePlaces::default(), |places, pod| places.with(pod_places(pod, limits, flow)))
}

/// The pool's room: the sum of the free in-flight places of every pod that has room.
pub fn pool_room(pods: &[PodLoad<'_>], limits: &SaturationLimits, flow: &FlowControlConfig) -> PoolRoom {
    let free = free_places(pods, limits, flow).all.total;
    if pods.is_empty() {
        PoolRoom::NoPods
    } else if free == 0 {
        PoolRoom::Saturated
    } else {
        PoolRoom::Free(free)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(fresh: bool, waiting: f64, kv: f64, inflight: u32) -> PodLoad<'static> {
        PodLoad {
            address: "10.0.0.1:8000",
            position: 0,
            known: true,
            healthy: true,
            fresh,
            waiting,
            kv_usage: Some(kv),
            inflight,
        }
    }

    fn flow(policy: StaleMetricsPolicy) -> FlowControlConfig {
        FlowControlConfig { max_inflight_per_pod: 4, stale_metrics: policy, ..FlowControlConfig::default() }
    }

    #[test]
    fn room_is_the_free_inflight_places_of_unsaturated_pods() {
        let limits = SaturationLimits::default();
        let config = flow(StaleMetricsPolicy::Ignore);
        let pods = [pod(true, 0.0, 0.1, 1), pod(true, 9.0, 0.1, 0), pod(true, 0.0, 0.95, 0), pod(true, 0.0, 0.1, 4)];
        assert_eq!(pool_room(&pods, &limits, &config), PoolRoom::Free(3), "queue, KV and in-flight each saturate");
        assert_eq!(pool_room(&pods[1..], &limits, &config), PoolRoom::Saturated);
        assert_eq!(pool_room(&[], &limits, &config), PoolRoom::NoPods);
    }

    #[test]
    fn stale_metrics_follow_the_policy() {
        let limits = SaturationLimits::default();
        let stale = [pod(false, 99.0, 1.0, 1)];
        assert_eq!(pool_room(&stale, &limits, &flow(StaleMetricsPolicy::Ignore)), PoolRoom::Free(3));
        assert_eq!(pool_room(&stale, &limits, &flow(StaleMetricsPolicy::Saturated)), PoolRoom::Saturated);
        let unknown = [PodLoad { known: false, fresh: false, ..stale[0] }];
        assert_eq!(
            pool_room(&unknown, &limits, &flow(StaleMetricsPolicy::Saturated)),
            PoolRoom::Free(3),
            "a static pool without data is bounded by in-flight counts only"
        );
        let failing = [PodLoad { healthy: false, ..pod(false, 0.0, 0.0, 0) }];
        assert_eq!(pool_room(&failing, &limits, &flow(StaleMetricsPolicy::Ignore)), PoolRoom::Saturated);
    }

    #[test]
    fn the_reserve_is_kept_on_each_pod_with_room_not_on_pods_without() {
        let limits = SaturationLimits::default();
        let config = FlowControlConfig { reserved_per_pod: 2, ..flow(StaleMetricsPolicy::Ignore) };
        let failing = PodLoad { healthy: false, ..pod(true, 0.0, 0.1, 0) };
        let full_kv = pod(true, 0.0, 0.95, 0);
        for other in [failing, full_kv] {
            assert_eq!(free_places(&[pod(true, 0.0, 0.1, 0), other], &limits, &config).standard.total, 2, "{other:?}");
        }
        let busy = [pod(true, 0.0, 0.1, 1), pod(true, 0.0, 0.1, 3), pod(true, 0.0, 0.1, 4)];
        assert_eq!(
            free_places(&busy, &limits, &config).standard.total,
            1,
            "1 of the first's 2, none in the second's reserve"
        );
        let unreserved = FlowControlConfig { reserved_per_pod: 0, ..config.clone() };
        assert_eq!(
            free_places(&busy, &limits, &unreserved).all,
            Places { total: 4, widest: 3 },
            "3 and 1 free: 4 in all, but a request of 4 fits on no pod"
        );
        let saturated_but_idle = [pod(true, 9.0, 0.1, 0), pod(true, 0.0, 0.1, 2)];
        assert_eq!(
            free_places(&saturated_but_idle, &limits, &config),
            FreePlaces { all: Places { total: 2, widest: 2 }, standard: Places { total: 0, widest: 0 } },
            "a saturated pod's places are no one's"
        );
        assert_eq!(
            PoolRoom::Free(free_places(&busy, &limits, &unreserved).standard.total),
            pool_room(&busy, &limits, &unreserved)
        );
    }
}
