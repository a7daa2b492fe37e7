//! Why a pod's model list could not be had, and which of those the operator was told of.
//!
//! A pod whose `/v1/models` fails keeps only the models its metrics name: its LoRA adapters
//! and other served names stay unknown, and the gateway answers requests for them 404 without
//! asking any pod, so nothing else would show it. Each failure is counted by the pool service;
//! a warning is worth giving once per pod and kind of failure (a pod refusing every fetch for
//! want of an API key would otherwise log every `models_interval_ms`, and a pool of them at
//! once). What was told is forgotten when the pod leaves the pool, so a pod that comes back
//! at the same address is told of anew.

use hashbrown::HashMap;

use crate::address::PodAddress;
use crate::pod_table::MAX_PODS;

/// Kinds of failure remembered per pod: the statuses a server answers a list with (401, 403,
/// 404, 5xx) and the three failures without one; a pod answering more kinds than this is
/// not told of past them (still counted).
const MAX_KINDS_PER_POD: usize = 8;

/// Why a model-list fetch gave nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CatalogFailure {
    /// The pod answered with this status, not 200 (401 or 403: it wants an API key).
    Status(u16),
    /// No answer within the timeout, or the connection failed.
    NoAnswer,
    /// An answer over `max_models_bytes`.
    TooLarge,
    /// A 200 whose body is not a model list.
    Unreadable,
}

impl CatalogFailure {
    /// Whether the pod refused the fetch for its credentials (vLLM's `--api-key`).
    pub fn is_refused(self) -> bool {
        matches!(self, Self::Status(401 | 403))
    }
}

/// The failures already told of, by pod.
#[derive(Debug, Default)]
pub struct FailuresTold {
    told: HashMap<PodAddress, Vec<CatalogFailure>>,
}

impl FailuresTold {
    /// Notes `failure` of `pod`; true the first time this pod fails this way (tell the
    /// operator), false after (and for pods past the bounds).
    pub fn first_time(&mut self, pod: &PodAddress, failure: CatalogFailure) -> bool {
        if !self.told.contains_key(pod) && self.told.len() >= MAX_PODS {
            return false;
        }
        let kinds = self.told.entry(pod.clone()).or_default();
        if kinds.contains(&failure) || kinds.len() >= MAX_KINDS_PER_POD {
            return false;
        }
        kinds.push(failure);
        true
    }

    /// Forgets the pods no longer in `pool`.
    pub fn retain(&mut self, pool: &[PodAddress]) {
        self.told.retain(|pod, _| pool.contains(pod));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(text: &str) -> PodAddress {
        PodAddress::parse(text).unwrap()
    }

    #[test]
    fn each_pod_is_told_once_per_kind_until_it_leaves() {
        let (a, b) = (pod("10.0.0.1:8000"), pod("10.0.0.2:8000"));
        let mut told = FailuresTold::default();
        assert!(told.first_time(&a, CatalogFailure::Status(401)));
        assert!(!told.first_time(&a, CatalogFailure::Status(401)), "once per pod and status");
        assert!(told.first_time(&b, CatalogFailure::Status(401)), "another pod is told of");
        assert!(told.first_time(&a, CatalogFailure::Status(503)), "another status is news");
        assert!(told.first_time(&a, CatalogFailure::NoAnswer));
        told.retain(std::slice::from_ref(&b));
        assert!(told.first_time(&a, CatalogFailure::Status(401)), "a pod back in the pool is told of anew");
        assert!(!told.first_time(&b, CatalogFailure::Status(401)));
    }

    #[test]
    fn what_is_remembered_stays_bounded() {
        let mut told = FailuresTold::default();
        let a = pod("10.0.0.1:8000");
        let news = (400..500).filter(|&status| told.first_time(&a, CatalogFailure::Status(status))).count();
        assert_eq!(news, MAX_KINDS_PER_POD);
        let pods: Vec<_> = (0..MAX_PODS + 10).map(|i| pod(&format!("10.1.{}.{}:80", i / 256, i % 256))).collect();
        let news = pods.iter().filter(|p| told.first_time(p, CatalogFailure::NoAnswer)).count();
        assert_eq!(news, MAX_PODS - 1, "a is one of the remembered pods");
        assert!(told.told.len() <= MAX_PODS);
    }

    #[test]
    fn refusals_are_401_and_403() {
        assert!(CatalogFailure::Status(401).is_refused() && CatalogFailure::Status(403).is_refused());
        assert!(!CatalogFailure::Status(404).is_refused() && !CatalogFailure::NoAnswer.is_refused());
    }
}
