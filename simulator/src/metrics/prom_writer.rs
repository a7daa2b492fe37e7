//! Prometheus text format 0.0.4, written the way Python's `prometheus_client` writes it.
//!
//! Real vLLM pods are scraped by `prometheus_client` output: `# HELP`/`# TYPE` per family,
//! floats like `1.0` and `+Inf`, counters with `_total` and `_created` samples. The picker's
//! parser is tested against this writer, so it follows those conventions rather than the
//! shortest legal output.

use super::histogram::Histogram;

/// Metric family types used here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// Instantaneous value.
    Gauge,
    /// Monotonic total.
    Counter,
    /// Bucketed distribution.
    Histogram,
}

impl MetricKind {
    fn name(self) -> &'static str {
        match self {
            MetricKind::Gauge => "gauge",
            MetricKind::Counter => "counter",
            MetricKind::Histogram => "histogram",
        }
    }
}

/// Formats a sample value as `prometheus_client` does (`1.0`, `0.25`, `NaN`, `+Inf`).
pub fn format_value(value: f64) -> String {
    if value.is_nan() {
        "NaN".to_owned()
    } else if value.is_infinite() {
        if value > 0.0 { "+Inf" } else { "-Inf" }.to_owned()
    } else if value.fract() == 0.0 && value.abs() < 1e16 {
        format!("{value:.1}")
    } else {
        format!("{value}")
    }
}

/// Builds one exposition document.
#[derive(Debug, Default)]
pub struct PromWriter {
    out: String,
}

impl PromWriter {
    /// An empty document.
    pub fn new() -> Self {
        Self::default()
    }

    /// Writes the `# HELP` and `# TYPE` lines of a family.
    pub fn family(&mut self, name: &str, kind: MetricKind, help: &str) {
        self.out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {}\n", kind.name()));
    }

    /// Writes one sample line.
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (index, (key, label_value)) in labels.iter().enumerate() {
                if index > 0 {
                    self.out.push(',');
                }
                self.out.push_str(key);
                self.out.push_str("=\"");
                self.out.push_str(&escape_label_value(label_value));
                self.out.push('"');
            }
            self.out.push('}');
        }
        self.out.push(' ');
        self.out.push_str(&format_value(value));
        self.out.push('\n');
    }

    /// A gauge family with one series.
    pub fn gauge(&mut self, name: &str, help: &str, labels: &[(&str, &str)], value: f64) {
        self.family(name, MetricKind::Gauge, help);
        self.sample(name, labels, value);
    }

    /// A counter family `base_total` with one series and its `base_created` timestamp.
    pub fn counter(&mut self, base: &str, help: &str, labels: &[(&str, &str)], value: f64, created: f64) {
        let total = format!("{base}_total");
        self.family(&total, MetricKind::Counter, help);
        self.sample(&total, labels, value);
        self.sample(&format!("{base}_created"), labels, created);
    }

    /// A histogram family with one series: `_bucket` lines, `_count`, `_sum`, `_created`.
    pub fn histogram(&mut self, name: &str, help: &str, labels: &[(&str, &str)], histogram: &Histogram, created: f64) {
        self.family(name, MetricKind::Histogram, help);
        let bucket_name = format!("{name}_bucket");
        for (bound, cumulative) in histogram.cumulative() {
            let le = format_value(bound);
            let mut bucket_labels: Vec<(&str, &str)> = labels.to_vec();
            bucket_labels.push(("le", &le));
            self.sample(&bucket_name, &bucket_labels, cumulative as f64);
        }
        self.sample(&format!("{name}_count"), labels, histogram.count() as f64);
        self.sample(&format!("{name}_sum"), labels, histogram.sum());
        self.sample(&format!("{name}_created"), labels, created);
    }

    /// The finished document.
    pub fn finish(self) -> String {
        self.out
    }
}

fn escape_label_value(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_look_like_prometheus_client_output() {
        assert_eq!(format_value(3.0), "3.0");
        assert_eq!(format_value(0.25), "0.25");
        assert_eq!(format_value(f64::NAN), "NaN");
        assert_eq!(format_value(f64::INFINITY), "+Inf");
        assert_eq!(format_value(-2.0), "-2.0");
    }

    #[test]
    fn counters_and_histograms_have_their_suffixes() {
        let mut writer = PromWriter::new();
        writer.counter("vllm:x", "help", &[("model_name", "m")], 5.0, 1.5);
        let mut histogram = Histogram::new(&[1.0]);
        histogram.observe(0.5);
        writer.histogram("vllm:h", "help", &[("engine", "0")], &histogram, 1.5);
        let text = writer.finish();
        assert!(text.contains("# TYPE vllm:x_total counter\nvllm:x_total{model_name=\"m\"} 5.0\n"));
        assert!(text.contains("vllm:x_created{model_name=\"m\"} 1.5\n"));
        assert!(text.contains("vllm:h_bucket{engine=\"0\",le=\"1.0\"} 1.0\n"));
        assert!(text.contains("vllm:h_bucket{engine=\"0\",le=\"+Inf\"} 1.0\n"));
        assert!(text.contains("vllm:h_count{engine=\"0\"} 1.0\nvllm:h_sum{engine=\"0\"} 0.5\n"));
    }

    #[test]
    fn label_values_are_escaped() {
        let mut writer = PromWriter::new();
        writer.sample("m", &[("k", "a\"b\\c\nd")], 1.0);
        assert_eq!(writer.finish(), "m{k=\"a\\\"b\\\\c\\nd\"} 1.0\n");
    }
}
