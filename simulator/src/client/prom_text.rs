//! Reading numbers out of Prometheus text without a full parser: the one copy used by the
//! simulator's tests and calibration, the launcher (Envoy's `/stats/prometheus`) and both
//! benchmarks (pods' `/metrics`).

/// Sum of every sample of metric `name` (exact name, any labels); `None` when it is absent.
/// Summing is what readers must do for pods with several engines (one series per engine).
pub fn sum_of(text: &str, name: &str) -> Option<f64> {
    let mut total = None;
    for line in text.lines().filter(|line| !line.starts_with('#')) {
        let Some(rest) = line.strip_prefix(name) else { continue };
        let after_labels = match rest.chars().next() {
            Some('{') => rest.rsplit_once('}').map_or("", |(_, value)| value),
            Some(' ') => rest,
            _ => continue,
        };
        let Some(value) = after_labels.split_whitespace().next().and_then(|v| v.parse::<f64>().ok()) else { continue };
        if value.is_finite() {
            *total.get_or_insert(0.0) += value;
        }
    }
    total
}

/// [`sum_of`], absent counting as 0.
pub fn sum_metric(text: &str, name: &str) -> f64 {
    sum_of(text, name).unwrap_or(0.0)
}

/// The value of one exact series (`name{labels}`, or `name` written by Envoy as `name{}`).
pub fn series(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let (name, value) = line.rsplit_once(' ')?;
        let matches = name == series || (!series.contains('{') && name.strip_suffix("{}") == Some(series));
        matches.then(|| value.parse().ok()).flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_series_by_exact_name() {
        let text = "# HELP x\nvllm:hits_total{engine=\"0\"} 3.0\nvllm:hits_total{engine=\"1\"} 4.0\n\
                    vllm:hits_total_other 100\nvllm:hits_created{engine=\"0\"} 9.0\nplain 2\n";
        assert_eq!(sum_metric(text, "vllm:hits_total"), 7.0);
        assert_eq!(sum_of(text, "plain"), Some(2.0));
        assert_eq!(sum_of(text, "absent"), None);
    }

    #[test]
    fn reads_one_envoy_series() {
        let text = "wasm_epp_routed{} 12\nwasm_epp_picks{pod=\"a\"} 3\n";
        assert_eq!(series(text, "wasm_epp_routed"), Some(12.0));
        assert_eq!(series(text, "wasm_epp_picks{pod=\"a\"}"), Some(3.0));
        assert_eq!(series(text, "wasm_epp_picks"), None);
    }
}
