//! Reading numbers out of Prometheus text without a full parser (enough for counters in tests,
//! the calibration and the benchmark tool).

/// Sum of every sample of metric `name` (exact name, any labels) in Prometheus text.
///
/// Summing is what readers must do for pods with several engines (one series per engine).
pub fn sum_metric(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let rest = line.strip_prefix(name)?;
            let after_labels = match rest.chars().next()? {
                '{' => rest.split_once('}')?.1,
                ' ' => rest,
                _ => return None,
            };
            after_labels.split_whitespace().next()?.parse::<f64>().ok()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_series_by_exact_name() {
        let text = "# HELP x\nvllm:hits_total{engine=\"0\"} 3.0\nvllm:hits_total{engine=\"1\"} 4.0\n\
                    vllm:hits_total_other 100\nvllm:hits_created{engine=\"0\"} 9.0\nplain 2\n";
        assert_eq!(sum_metric(text, "vllm:hits_total"), 7.0);
        assert_eq!(sum_metric(text, "plain"), 2.0);
        assert_eq!(sum_metric(text, "absent"), 0.0);
    }
}
