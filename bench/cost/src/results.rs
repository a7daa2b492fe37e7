//! Figures as records (`benchmark`, `case`, `metric`, `value`, `unit`) in one JSON list,
//! `bench/results/cost.json`, and the percentiles they are computed with.
//!
//! Each run replaces the records it measured (same benchmark, case and metric) and keeps the
//! others, so running one benchmark alone does not erase the rest of the file.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// One measured figure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub benchmark: String,
    pub case: String,
    pub metric: String,
    pub value: f64,
    pub unit: String,
}

/// The figures of one run, in the order they were measured.
#[derive(Debug, Default)]
pub struct Results {
    pub records: Vec<Record>,
}

impl Results {
    pub fn push(&mut self, benchmark: &str, case: &str, metric: &str, value: f64, unit: &str) {
        let value = if value.is_finite() { (value * 1000.0).round() / 1000.0 } else { 0.0 };
        self.records.push(Record {
            benchmark: benchmark.into(),
            case: case.into(),
            metric: metric.into(),
            value,
            unit: unit.into(),
        });
    }

    /// Merges this run into the JSON list at `path` (created if missing).
    pub fn merge_into(&self, path: &Path) -> Result<(), String> {
        let mut all: Vec<Record> = match std::fs::read_to_string(path) {
            Ok(text) => serde_json::from_str(&text).unwrap_or_default(),
            Err(_) => Vec::new(),
        };
        let same = |a: &Record, b: &Record| a.benchmark == b.benchmark && a.case == b.case && a.metric == b.metric;
        all.retain(|old| !self.records.iter().any(|new| same(old, new)));
        all.extend(self.records.iter().cloned());
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        }
        let text = serde_json::to_string_pretty(&all).map_err(|e| e.to_string())?;
        std::fs::write(path, text + "\n").map_err(|e| format!("{}: {e}", path.display()))
    }
}

/// `bench/results/cost.json` in the workspace.
pub fn default_path() -> PathBuf {
    launcher::paths::workspace_root().join("bench/results/cost.json")
}

/// Sorted samples, for percentiles.
#[derive(Debug, Clone, Default)]
pub struct Distribution {
    sorted: Vec<f64>,
}

impl Distribution {
    pub fn new(mut samples: Vec<f64>) -> Self {
        samples.retain(|s| s.is_finite());
        samples.sort_by(f64::total_cmp);
        Self { sorted: samples }
    }

    pub fn len(&self) -> usize {
        self.sorted.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sorted.is_empty()
    }

    /// The nearest-rank percentile `p` (0..=100); NaN when empty.
    pub fn percentile(&self, p: f64) -> f64 {
        if self.sorted.is_empty() {
            return f64::NAN;
        }
        let rank = ((p / 100.0) * self.sorted.len() as f64).ceil() as usize;
        let index = rank.clamp(1, self.sorted.len()) - 1;
        self.sorted.get(index).copied().unwrap_or(f64::NAN)
    }

    pub fn mean(&self) -> f64 {
        self.sorted.iter().sum::<f64>() / self.sorted.len() as f64
    }
}

/// The median of a few values (rounds of one measurement).
pub fn median(values: &[f64]) -> f64 {
    Distribution::new(values.to_vec()).percentile(50.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank() {
        let d = Distribution::new((1..=100).map(f64::from).collect());
        assert_eq!((d.percentile(50.0), d.percentile(99.0), d.percentile(100.0)), (50.0, 99.0, 100.0));
        assert!(Distribution::new(vec![]).percentile(50.0).is_nan());
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
    }

    #[test]
    fn merge_replaces_only_what_was_measured() {
        let path = std::env::temp_dir().join(format!("bench-cost-merge-{}.json", std::process::id()));
        let mut first = Results::default();
        first.push("a", "x", "p50", 1.0, "us");
        first.push("b", "x", "p50", 2.0, "us");
        first.merge_into(&path).unwrap();
        let mut second = Results::default();
        second.push("a", "x", "p50", 3.0, "us");
        second.merge_into(&path).unwrap();
        let all: Vec<Record> = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let _ = std::fs::remove_file(&path);
        assert_eq!(all.len(), 2);
        assert!(all.iter().any(|r| r.benchmark == "a" && r.value == 3.0));
    }
}
