//! From what a worker knows (the pod table, in-flight counts, the fallback pool) to one pod
//! address for one request.
//!
//! The address written into the destination header always comes out of here, and always
//! passes [`PodAddress::parse`] on the way: only pool members, only literal `ip:port`.

use crate::address::PodAddress;
use crate::config::ScorerWeights;
use crate::inflight::InflightCounts;
use crate::pod_table::PodTable;
use crate::random::TieBreaker;
use crate::saturation::SaturationLimits;
use crate::scheduler::{pick, Candidate};

/// Everything one routing decision reads.
pub struct RoutingView<'a> {
    /// The singleton's latest table, if one was ever published.
    pub table: Option<&'a PodTable>,
    /// Used when there is no table or it lists no pod.
    pub fallback_pool: &'a [PodAddress],
    pub inflight: &'a InflightCounts,
    pub now_ms: u64,
    pub stale_after_ms: u64,
    pub inflight_expiry_ms: u64,
}

/// Where one request goes, and how the choice was made.
#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    pub address: PodAddress,
    /// Runners-up, best first: Envoy's override_host policy retries on them in order.
    pub fallbacks: Vec<PodAddress>,
    /// No pod had fresh, healthy data: chosen by in-flight counts alone.
    pub fail_open: bool,
    /// Every pod with usable data is saturated (see [`SaturationLimits`]).
    pub pool_saturated: bool,
    pub score: f64,
}

/// Chooses a pod, or `None` when the pool is empty (the caller answers 503).
pub fn choose(
    view: &RoutingView<'_>,
    weights: &ScorerWeights,
    limits: &SaturationLimits,
    random: &mut TieBreaker,
    fallbacks: usize,
) -> Option<Route> {
    let inflight = |address: &str| view.inflight.count(address, view.now_ms, view.inflight_expiry_ms);
    let from_table: Vec<Candidate<'_>> = view
        .table
        .map(|table| {
            table
                .pods
                .iter()
                .map(|pod| Candidate {
                    address: pod.address.as_str(),
                    usable: pod.healthy && view.now_ms.saturating_sub(pod.last_success_ms) <= view.stale_after_ms,
                    waiting: pod.waiting,
                    running: pod.running,
                    kv_usage: pod.kv_usage,
                    inflight: inflight(&pod.address),
                })
                .collect()
        })
        .unwrap_or_default();
    let candidates = if from_table.is_empty() {
        view.fallback_pool
            .iter()
            .map(|address| Candidate {
                address: address.as_str(),
                usable: false,
                waiting: 0.0,
                running: 0.0,
                kv_usage: None,
                inflight: inflight(address.as_str()),
            })
            .collect()
    } else {
        from_table
    };
    let decision = pick(&candidates, weights, random, fallbacks)?;
    let chosen = candidates.get(decision.index)?;
    let address = PodAddress::parse(chosen.address).ok()?;
    let fallbacks = decision
        .fallbacks
        .iter()
        .filter_map(|&i| candidates.get(i))
        .filter_map(|c| PodAddress::parse(c.address).ok())
        .collect();
    let pool_saturated = limits.pool_saturated(&candidates);
    Some(Route { address, fallbacks, fail_open: decision.fail_open, pool_saturated, score: decision.score })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod_table::PodState;

    fn healthy(address: &str, waiting: f64, seen_ms: u64) -> PodState {
        let mut pod = PodState::unknown(&PodAddress::parse(address).unwrap());
        pod.healthy = true;
        pod.waiting = waiting;
        pod.last_success_ms = seen_ms;
        pod
    }

    fn view<'a>(
        table: Option<&'a PodTable>,
        pool: &'a [PodAddress],
        inflight: &'a InflightCounts,
        now_ms: u64,
    ) -> RoutingView<'a> {
        RoutingView { table, fallback_pool: pool, inflight, now_ms, stale_after_ms: 1_000, inflight_expiry_ms: 60_000 }
    }

    #[test]
    fn routes_by_table_and_fails_open_when_stale() {
        let table = PodTable {
            pods: vec![healthy("10.0.0.1:80", 20.0, 0), healthy("10.0.0.2:80", 0.0, 0)],
            ..PodTable::default()
        };
        let counts = InflightCounts::default();
        let fresh = choose(
            &view(Some(&table), &[], &counts, 500),
            &ScorerWeights::default(),
            &SaturationLimits::default(),
            &mut TieBreaker::new(1),
            0,
        )
        .unwrap();
        assert_eq!((fresh.address.as_str(), fresh.fail_open), ("10.0.0.2:80", false));
        let stale = choose(
            &view(Some(&table), &[], &counts, 5_000),
            &ScorerWeights::default(),
            &SaturationLimits::default(),
            &mut TieBreaker::new(1),
            0,
        )
        .unwrap();
        assert!(stale.fail_open, "data 5 s old is not trusted");
    }

    #[test]
    fn reports_a_saturated_pool() {
        let table = PodTable {
            pods: vec![healthy("10.0.0.1:80", 20.0, 0), healthy("10.0.0.2:80", 6.0, 0)],
            ..PodTable::default()
        };
        let counts = InflightCounts::default();
        let limits = SaturationLimits::default();
        let route = choose(
            &view(Some(&table), &[], &counts, 0),
            &ScorerWeights::default(),
            &limits,
            &mut TieBreaker::new(1),
            0,
        );
        assert!(route.unwrap().pool_saturated);
        let stale = choose(
            &view(Some(&table), &[], &counts, 9_000),
            &ScorerWeights::default(),
            &limits,
            &mut TieBreaker::new(1),
            0,
        );
        assert!(!stale.unwrap().pool_saturated, "no usable data: never shed");
    }

    #[test]
    fn falls_back_to_the_configured_pool_and_never_invents_pods() {
        let pool = [PodAddress::parse("10.0.0.9:80").unwrap()];
        let counts = InflightCounts::default();
        let route = choose(
            &view(None, &pool, &counts, 0),
            &ScorerWeights::default(),
            &SaturationLimits::default(),
            &mut TieBreaker::new(3),
            1,
        )
        .unwrap();
        assert_eq!((route.address.as_str(), route.fail_open), ("10.0.0.9:80", true));
        assert!(choose(
            &view(None, &[], &counts, 0),
            &ScorerWeights::default(),
            &SaturationLimits::default(),
            &mut TieBreaker::new(3),
            1
        )
        .is_none());
    }
}
