//! The filter's `comparison` section: a live A/B test of the picker against a plain load
//! balancer on the same traffic (off by default). See [`crate::comparison`].

use serde::Deserialize;

/// How the baseline arm picks among its pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BaselinePolicy {
    /// The fewest requests in flight (this gateway's exact count, every worker), ties at
    /// random: Envoy's `least_request` without its sampling, so a baseline at least as good.
    #[default]
    LeastRequest,
    /// Any pod, uniformly: Envoy's `random`.
    Random,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ComparisonConfig {
    /// Share of the pool's pods, and with them of its requests, given to the baseline
    /// (0 = off). The pods are split so both arms carry the same load per pod.
    pub baseline_share: f64,
    pub baseline: BaselinePolicy,
}

impl Default for ComparisonConfig {
    fn default() -> Self {
        Self { baseline_share: 0.0, baseline: BaselinePolicy::LeastRequest }
    }
}

impl ComparisonConfig {
    pub fn enabled(&self) -> bool {
        self.baseline_share > 0.0
    }

    pub fn validate(&self) -> Result<(), String> {
        // Below 1: the picker keeps at least one pod, or there is nothing to compare.
        if !self.baseline_share.is_finite() || !(0.0..1.0).contains(&self.baseline_share) {
            return Err(format!("comparison.baseline_share = {}, must be within 0..1", self.baseline_share));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_json;

    #[test]
    fn off_by_default_and_bounded_below_one() {
        let config = ComparisonConfig::default();
        assert!(!config.enabled());
        assert_eq!(config.validate(), Ok(()));
        let half: ComparisonConfig = parse_json(br#"{"baseline_share": 0.5, "baseline": "random"}"#).unwrap();
        assert!(half.enabled() && half.validate().is_ok());
        assert_eq!(half.baseline, BaselinePolicy::Random);
        for bad in [1.0, -0.1, f64::NAN] {
            let config = ComparisonConfig { baseline_share: bad, ..ComparisonConfig::default() };
            assert!(config.validate().unwrap_err().contains("baseline_share"), "{bad}");
        }
        assert!(parse_json::<ComparisonConfig>(br#"{"baseline": "round_robin"}"#).is_err());
        assert!(parse_json::<ComparisonConfig>(br#"{"share": 0.5}"#).is_err(), "typos are refused");
    }
}
