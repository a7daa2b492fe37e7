//! Calibration: run the reference workload against two small-preset pods and compare with what
//! a real vLLM measured on the same workload (Qwen3-0.6B-FP8, two pods on one GPU).
//!
//! The hit rate follows from exact cache accounting plus prompt order; TTFT and TPOT follow from
//! the latency model, whose small preset was tuned with this command. The benchmark tool reuses
//! [`scenario`] for its own runs.

pub mod scenario;

use std::time::Duration;

use crate::client::SimClient;
use crate::config::{PodConfig, Preset};
use crate::http::spawn_pod;
use scenario::{run_scenario, ScenarioResult, SharedPrefixScenario};

/// Prefix cache hit rate real vLLM reported on the reference workload.
pub const REFERENCE_HIT_RATE: f64 = 0.639;
/// Range of mean TTFT real vLLM showed on the reference workload, milliseconds.
pub const REFERENCE_TTFT_MS: (f64, f64) = (50.0, 66.0);
/// Mean TPOT real vLLM showed on the reference workload, milliseconds.
pub const REFERENCE_TPOT_MS: f64 = 15.0;
/// Pods the reference run used.
pub const REFERENCE_PODS: usize = 2;

/// The measured figures next to the reference.
#[derive(Debug, Clone)]
pub struct CalibrationReport {
    /// The raw run.
    pub result: ScenarioResult,
    /// The workload.
    pub scenario: SharedPrefixScenario,
}

impl CalibrationReport {
    /// Mean client-side TTFT in milliseconds.
    pub fn mean_ttft_ms(&self) -> f64 {
        mean(self.result.timings.iter().map(|timing| timing.ttft))
    }

    /// Median client-side TTFT in milliseconds.
    pub fn median_ttft_ms(&self) -> f64 {
        let mut values: Vec<f64> = self.result.timings.iter().map(|timing| millis(timing.ttft)).collect();
        values.sort_by(f64::total_cmp);
        values.get(values.len() / 2).copied().unwrap_or(0.0)
    }

    /// Mean client-side TPOT in milliseconds.
    pub fn mean_tpot_ms(&self) -> f64 {
        mean(self.result.timings.iter().filter_map(|timing| timing.tpot()))
    }

    /// Fraction of prompt tokens reported as cached in `usage` (client side).
    pub fn usage_cached_fraction(&self) -> f64 {
        let cached: u64 = self.result.timings.iter().filter_map(|timing| timing.cached_tokens).sum();
        let prompt: u64 = self.result.timings.iter().filter_map(|timing| timing.prompt_tokens).sum();
        if prompt == 0 {
            0.0
        } else {
            cached as f64 / prompt as f64
        }
    }

    /// A plain-text table: measured vs reference.
    pub fn table(&self) -> String {
        let hit_rate = self.result.hit_rate.map_or("n/a".to_owned(), |rate| format!("{:.1} %", rate * 100.0));
        let (ttft_low, ttft_high) = REFERENCE_TTFT_MS;
        let rows = [
            ("prefix cache hit rate (/metrics)", hit_rate, format!("{:.1} %", REFERENCE_HIT_RATE * 100.0)),
            ("cached tokens (usage)", format!("{:.1} %", self.usage_cached_fraction() * 100.0), "-".to_owned()),
            ("mean TTFT", format!("{:.1} ms", self.mean_ttft_ms()), format!("{ttft_low:.0}-{ttft_high:.0} ms")),
            ("median TTFT", format!("{:.1} ms", self.median_ttft_ms()), "-".to_owned()),
            ("mean TPOT", format!("{:.1} ms", self.mean_tpot_ms()), format!("~{REFERENCE_TPOT_MS:.0} ms")),
            (
                "requests ok / failed",
                format!("{} / {}", self.result.timings.len(), self.result.errors.len()),
                format!("{} / 0", self.scenario.prompts),
            ),
            ("wall time", format!("{:.1} s", self.result.wall.as_secs_f64()), "-".to_owned()),
        ];
        let mut table = format!("{:<34} {:>14} {:>14}\n", "metric", "measured", "reference");
        for (name, measured, reference) in rows {
            table.push_str(&format!("{name:<34} {measured:>14} {reference:>14}\n"));
        }
        let spread: Vec<String> = self.result.served_by.iter().map(|(pod, count)| format!("{pod}={count}")).collect();
        table.push_str(&format!("requests per pod: {}\n", spread.join(" ")));
        table
    }
}

/// Runs the reference workload against `urls`, or against two small-preset pods started here.
pub async fn run_calibration(urls: Option<Vec<String>>, model: &str, seed: u64) -> Result<CalibrationReport, String> {
    let scenario = SharedPrefixScenario { seed, ..SharedPrefixScenario::default() };
    let client = SimClient::new();
    if let Some(urls) = urls {
        let result = run_scenario(&client, &urls, model, &scenario).await?;
        return Ok(CalibrationReport { result, scenario });
    }
    let mut pods = Vec::with_capacity(REFERENCE_PODS);
    for _ in 0..REFERENCE_PODS {
        // The run reads cached tokens from usage, which needs prompt token details (vLLM's flag).
        let config = PodConfig {
            model: model.to_owned(),
            seed,
            prompt_tokens_details: true,
            ..PodConfig::for_preset(Preset::Small)
        };
        pods.push(spawn_pod(config).await?);
    }
    let urls: Vec<String> = pods.iter().map(|pod| pod.base_url()).collect();
    let outcome = run_scenario(&client, &urls, model, &scenario).await;
    for pod in pods {
        pod.shutdown().await;
    }
    Ok(CalibrationReport { result: outcome?, scenario })
}

fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

fn mean(durations: impl Iterator<Item = Duration>) -> f64 {
    let (sum, count) = durations.fold((0.0, 0usize), |(sum, count), duration| (sum + millis(duration), count + 1));
    if count == 0 {
        0.0
    } else {
        sum / count as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenizer::tokenize;

    #[test]
    fn reference_prompts_share_prefixes_and_are_shuffled_reproducibly() {
        let scenario = SharedPrefixScenario::default();
        let prompts = scenario.build_prompts();
        assert_eq!(prompts.len(), 100);
        assert!(prompts.iter().all(|prompt| tokenize(prompt).len() == 640));
        let prefixes: std::collections::BTreeSet<Vec<u32>> =
            prompts.iter().map(|prompt| tokenize(prompt)[..512].to_vec()).collect();
        assert_eq!(prefixes.len(), 5);
        assert_eq!(prompts, scenario.build_prompts(), "same seed, same order");
        let first_five: std::collections::BTreeSet<Vec<u32>> =
            prompts[..5].iter().map(|prompt| tokenize(prompt)[..512].to_vec()).collect();
        assert!(first_five.len() > 1, "shuffled, not grouped by prefix");
        let other_seed = SharedPrefixScenario { seed: 1, ..scenario }.build_prompts();
        assert_ne!(prompts, other_seed);
    }

    #[test]
    fn uneven_splits_still_produce_every_prompt() {
        let scenario = SharedPrefixScenario { prefixes: 3, prompts: 10, ..SharedPrefixScenario::default() };
        assert_eq!(scenario.build_prompts().len(), 10);
    }
}
