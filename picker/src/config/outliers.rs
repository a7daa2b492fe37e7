//! The filter's `outlier_detection` section: pods that fail the requests sent to them are
//! taken out of rotation for a while (on by default). See [`crate::outliers`].

use serde::Deserialize;

use super::check_range;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OutlierConfig {
    pub enabled: bool,
    /// Failed attempts in a row (a 5xx answer, or an attempt Envoy retried on another pod)
    /// that take a pod out of rotation.
    pub consecutive_failures: u32,
    /// How long the first ejection lasts; each ejection that follows without a success in
    /// between lasts twice as long as the one before, up to `max_ejection_ms`.
    pub base_ejection_ms: u64,
    pub max_ejection_ms: u64,
}

impl Default for OutlierConfig {
    fn default() -> Self {
        // Envoy's own outlier detection ejects after 5 consecutive 5xx, for 30 s at first;
        // a picker sees every answer at once, so a shorter first period brings a pod that
        // had a brief fault back sooner, and the doubling keeps a dead one out.
        Self { enabled: true, consecutive_failures: 5, base_ejection_ms: 10_000, max_ejection_ms: 300_000 }
    }
}

impl OutlierConfig {
    pub fn validate(&self) -> Result<(), String> {
        check_range("outlier_detection.consecutive_failures", u64::from(self.consecutive_failures), 1, 1_000)?;
        check_range("outlier_detection.base_ejection_ms", self.base_ejection_ms, 100, 3_600_000)?;
        check_range("outlier_detection.max_ejection_ms", self.max_ejection_ms, self.base_ejection_ms, 86_400_000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_json;

    #[test]
    fn on_by_default_and_bounded() {
        let config = OutlierConfig::default();
        assert!(config.enabled);
        assert_eq!(config.validate(), Ok(()));
        let set: OutlierConfig =
            parse_json(br#"{"consecutive_failures": 2, "base_ejection_ms": 1000, "max_ejection_ms": 4000}"#).unwrap();
        assert_eq!((set.consecutive_failures, set.base_ejection_ms, set.max_ejection_ms), (2, 1_000, 4_000));
        let zero = OutlierConfig { consecutive_failures: 0, ..OutlierConfig::default() };
        assert!(zero.validate().unwrap_err().contains("consecutive_failures"));
        let shorter_max = OutlierConfig { max_ejection_ms: 5_000, ..OutlierConfig::default() };
        assert!(shorter_max.validate().unwrap_err().contains("max_ejection_ms"));
        assert!(parse_json::<OutlierConfig>(br#"{"failures": 3}"#).is_err(), "typos are refused");
    }
}
