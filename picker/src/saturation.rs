//! When is a pod, or the whole pool, too busy to take more work?
//!
//! As llm-d's saturation detector: a pod with fresh metrics is saturated when its queue or
//! its KV-cache usage is at a threshold. The pool is saturated when every pod with usable
//! data is. Pods without usable data never count as saturated: not knowing is not a reason
//! to shed a request.

use serde::Deserialize;

use crate::scheduler::Candidate;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SaturationLimits {
    /// Waiting requests at which a pod counts as saturated.
    pub queue_threshold: f64,
    /// KV-cache usage (0..1) at which a pod counts as saturated.
    pub kv_cache_threshold: f64,
}

impl Default for SaturationLimits {
    fn default() -> Self {
        Self { queue_threshold: 5.0, kv_cache_threshold: 0.8 }
    }
}

impl SaturationLimits {
    pub fn validate(&self) -> Result<(), String> {
        if !self.queue_threshold.is_finite() || self.queue_threshold < 1.0 {
            return Err(format!("saturation.queue_threshold = {}, must be at least 1", self.queue_threshold));
        }
        if !(0.0..=1.0).contains(&self.kv_cache_threshold) {
            return Err(format!("saturation.kv_cache_threshold = {}, must be within 0..=1", self.kv_cache_threshold));
        }
        Ok(())
    }

    /// The pod's queue is at the threshold. This alone releases prefix and session affinity:
    /// a high KV usage is normal for a pod that caches well (vLLM queues what does not fit,
    /// which this then sees), and leaving a warm pod for it would throw its cache away.
    pub fn queue_full(&self, pod: &Candidate<'_>) -> bool {
        pod.usable && pod.waiting >= self.queue_threshold
    }

    /// Queue or KV cache at the thresholds: the pod should not take sheddable work.
    pub fn is_saturated(&self, pod: &Candidate<'_>) -> bool {
        pod.usable
            && (pod.waiting >= self.queue_threshold || pod.kv_usage.is_some_and(|kv| kv >= self.kv_cache_threshold))
    }

    /// Every pod with usable data is saturated (and there is at least one).
    pub fn pool_saturated(&self, pods: &[Candidate<'_>]) -> bool {
        let mut usable = pods.iter().filter(|p| p.usable).peekable();
        usable.peek().is_some() && usable.all(|p| self.is_saturated(p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(usable: bool, waiting: f64, kv: f64) -> Candidate<'static> {
        Candidate::with_load("x", usable, waiting, Some(kv), 0)
    }

    #[test]
    fn pool_is_saturated_only_when_every_known_pod_is() {
        let limits = SaturationLimits::default();
        assert!(limits.pool_saturated(&[pod(true, 9.0, 0.1), pod(true, 0.0, 0.95), pod(false, 0.0, 0.0)]));
        assert!(!limits.pool_saturated(&[pod(true, 9.0, 0.1), pod(true, 1.0, 0.5)]));
        assert!(!limits.pool_saturated(&[pod(false, 99.0, 1.0)]), "unknown is not saturated");
        assert!(!limits.pool_saturated(&[]));
    }

    #[test]
    fn bounds_are_checked() {
        assert!(SaturationLimits { queue_threshold: 0.0, ..SaturationLimits::default() }.validate().is_err());
        assert!(SaturationLimits { kv_cache_threshold: 1.5, ..SaturationLimits::default() }.validate().is_err());
    }
}
