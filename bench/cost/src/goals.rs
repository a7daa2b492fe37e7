//! Issue 17's goals, judged inside one run of `make bench-cost`: each goal is a ratio (or a
//! share, or a native time) computed from the run's records, so machine speed cancels out.
//!
//! [`evaluate`] reads the records (later ones win, so this run's figures override the file's),
//! [`print()`] shows goal, target, measured, met or missed and the records each came from, and
//! [`record`] writes them as benchmark `goals` (case = goal name; metrics `measured`, `target`,
//! `met`, and `missing_sources`, non-zero when a figure was absent and `measured` is stale).

use crate::results::{Record, Results};

/// One figure a goal reads from `cost.json`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Source {
    pub benchmark: &'static str,
    pub case: &'static str,
    pub metric: &'static str,
}

const fn source(benchmark: &'static str, case: &'static str, metric: &'static str) -> Source {
    Source { benchmark, case, metric }
}

/// How a goal's measured value is made from its sources.
#[derive(Debug, Clone, Copy)]
pub enum Formula {
    /// The figure itself.
    Value(Source),
    /// `a / b` (`b` must be positive).
    Ratio(Source, Source),
    /// `(a - b) / c`: an extra cost over a baseline, against a reference (`c` positive).
    ExtraRatio(Source, Source, Source),
}

impl Formula {
    fn sources(&self) -> Vec<Source> {
        match *self {
            Formula::Value(a) => vec![a],
            Formula::Ratio(a, b) => vec![a, b],
            Formula::ExtraRatio(a, b, c) => vec![a, b, c],
        }
    }

    /// The value from the sources' values, in [`Formula::sources`] order; `None` when one is
    /// missing or a divisor is not positive (a ratio to nothing means nothing).
    fn compute(&self, values: &[Option<f64>]) -> Option<f64> {
        let positive = |v: f64| (v > 0.0).then_some(v);
        match (self, values) {
            (Formula::Value(_), [a]) => *a,
            (Formula::Ratio(..), [a, b]) => Some((*a)? / positive((*b)?)?),
            (Formula::ExtraRatio(..), [a, b, c]) => Some(((*a)? - (*b)?) / positive((*c)?)?),
            _ => None,
        }
    }
}

/// Which side of the target passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    AtLeast,
    AtMost,
}

/// One goal of the issue.
#[derive(Debug, Clone, Copy)]
pub struct Goal {
    /// The record's case.
    pub name: &'static str,
    pub bound: Bound,
    pub target: f64,
    pub unit: &'static str,
    pub formula: Formula,
}

/// Where the latency and throughput runs put wasm-epp as shipped and the body-reading
/// do-nothing filter at 4 KB (16 pods, see `main.rs`).
const WASM_EPP_4KB: &str = "wasm-epp/4096B";
const BODY_READING_4KB: &str = "header-buffered-read/4096B";

/// The goals of issue 17, in its order (the scrape goal as its two cases).
pub const GOALS: [Goal; 6] = [
    Goal {
        name: "throughput_wasm_epp_vs_plain",
        bound: Bound::AtLeast,
        target: 0.8,
        unit: "ratio",
        formula: Formula::Ratio(
            source("throughput", WASM_EPP_4KB, "requests_per_second"),
            source("throughput", "plain/4096B", "requests_per_second"),
        ),
    },
    Goal {
        name: "added_p50_4KB_16pods_vs_body_reading_filter",
        bound: Bound::AtMost,
        target: 2.0,
        unit: "ratio",
        formula: Formula::Ratio(
            source("latency_sequential", WASM_EPP_4KB, "added_p50_vs_plain"),
            source("latency_sequential", BODY_READING_4KB, "added_p50_vs_plain"),
        ),
    },
    Goal {
        name: "plugin_envoy_cpu_vs_native_filter_path",
        bound: Bound::AtMost,
        target: 4.0,
        unit: "ratio",
        formula: Formula::ExtraRatio(
            source("latency_concurrent32", WASM_EPP_4KB, "envoy_cpu_per_request"),
            source("latency_concurrent32", BODY_READING_4KB, "envoy_cpu_per_request"),
            source("native_decision", "filter_path/completions/4KB/16pods", "median_time"),
        ),
    },
    Goal {
        name: "scrape_100_pods_every_100ms",
        bound: Bound::AtMost,
        target: 5.0,
        unit: "percent_of_core",
        formula: Formula::Value(source("scrape", "100_pods/100ms/filtered", "main_thread_cpu_share")),
    },
    Goal {
        name: "scrape_1000_pods_every_1s",
        bound: Bound::AtMost,
        target: 5.0,
        unit: "percent_of_core",
        formula: Formula::Value(source("scrape", "1000_pods/1000ms/filtered", "main_thread_cpu_share")),
    },
    Goal {
        name: "native_decision_chat_32KB_64pods",
        bound: Bound::AtMost,
        target: 20.0,
        unit: "us",
        formula: Formula::Value(source("native_decision", "decision/chat/32KB/64pods", "median_time")),
    },
];

/// One goal judged.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub goal: Goal,
    pub measured: Option<f64>,
    /// Every source with the value found (`None`: absent).
    pub sources: Vec<(Source, Option<f64>)>,
}

impl Outcome {
    pub fn met(&self) -> bool {
        self.measured.is_some_and(|m| match self.goal.bound {
            Bound::AtLeast => m >= self.goal.target,
            Bound::AtMost => m <= self.goal.target,
        })
    }

    fn missing(&self) -> usize {
        self.sources.iter().filter(|(_, v)| v.is_none()).count()
    }
}

/// The last record of `source` in `records` (a run's own records come after the file's).
fn find(records: &[Record], source: Source) -> Option<f64> {
    records
        .iter()
        .rev()
        .find(|r| r.benchmark == source.benchmark && r.case == source.case && r.metric == source.metric)
        .map(|r| r.value)
}

/// Judges every goal of [`GOALS`] on `records`.
pub fn evaluate(records: &[Record]) -> Vec<Outcome> {
    GOALS
        .iter()
        .map(|goal| {
            let sources: Vec<(Source, Option<f64>)> =
                goal.formula.sources().into_iter().map(|s| (s, find(records, s))).collect();
            let values: Vec<Option<f64>> = sources.iter().map(|(_, v)| *v).collect();
            Outcome { goal: *goal, measured: goal.formula.compute(&values), sources }
        })
        .collect()
}

/// Prints the goals table, each goal followed by the records it came from.
pub fn print(outcomes: &[Outcome]) {
    println!("\n== issue 17 goals (ratios inside this run) ==");
    println!("  {:<44} {:>12} {:>12}  {:<8}", "goal", "target", "measured", "");
    for outcome in outcomes {
        let goal = &outcome.goal;
        let sign = if goal.bound == Bound::AtLeast { "≥" } else { "≤" };
        let target = format!("{sign} {} {}", goal.target, short_unit(goal.unit));
        let measured = outcome.measured.map_or("absent".to_owned(), |m| format!("{m:.3}"));
        let verdict = if outcome.met() { "met" } else { "MISSED" };
        println!("  {:<44} {:>12} {:>12}  {:<8}", goal.name, target, measured, verdict);
        for (source, value) in &outcome.sources {
            let value = value.map_or("absent".to_owned(), |v| format!("{v}"));
            println!("      from {} {} {} = {value}", source.benchmark, source.case, source.metric);
        }
    }
}

fn short_unit(unit: &str) -> &str {
    match unit {
        "ratio" => "×",
        "percent_of_core" => "%",
        "us" => "µs",
        other => other,
    }
}

/// Adds the outcomes to `results` as benchmark `goals`.
pub fn record(outcomes: &[Outcome], results: &mut Results) {
    for outcome in outcomes {
        let goal = &outcome.goal;
        if let Some(measured) = outcome.measured {
            results.push("goals", goal.name, "measured", measured, goal.unit);
        }
        results.push("goals", goal.name, "target", goal.target, goal.unit);
        results.push("goals", goal.name, "met", f64::from(u8::from(outcome.met())), "bool");
        results.push("goals", goal.name, "missing_sources", outcome.missing() as f64, "count");
    }
}

#[cfg(test)]
#[path = "goals_tests.rs"]
mod tests;
