//! The shared-prefix workload, and a closed-loop runner that spreads it round robin over pods.
//!
//! Prompt order follows vLLM's own benchmark (`vllm bench serve --dataset-name
//! prefix_repetition`): for each prefix, its prompts (prefix + a distinct suffix) are generated
//! in turn, then the whole list is shuffled once with a fixed seed. The runner keeps
//! `concurrency` requests in flight and sends request `i` to pod `i mod pods`, streaming, and
//! reads the hit rate from the pods' own `/metrics` counters (hits / queries, summed over pods).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::task::JoinSet;

use crate::client::{sum_metric, ClientTiming, SimClient};
use crate::hashing::{mix64, SplitMix64};
use crate::tokenizer::text_of_tokens;

/// Most prompts one scenario may have.
pub const MAX_SCENARIO_PROMPTS: usize = 100_000;
/// Most requests in flight at once.
pub const MAX_SCENARIO_CONCURRENCY: usize = 4096;

/// Shared prefixes with distinct suffixes: the workload prefix-aware routing is built for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedPrefixScenario {
    /// Distinct shared prefixes.
    pub prefixes: usize,
    /// Tokens per prefix.
    pub prefix_tokens: usize,
    /// Tokens per distinct suffix.
    pub suffix_tokens: usize,
    /// Tokens generated per request (`max_tokens`, `ignore_eos`).
    pub output_tokens: usize,
    /// Requests in total.
    pub prompts: usize,
    /// Requests in flight.
    pub concurrency: usize,
    /// Seed of the texts and of the shuffle.
    pub seed: u64,
}

impl Default for SharedPrefixScenario {
    /// The reference run: 5 prefixes of 512 tokens, 128-token suffixes, 128 output tokens,
    /// 100 prompts, 8 in flight.
    fn default() -> Self {
        Self {
            prefixes: 5,
            prefix_tokens: 512,
            suffix_tokens: 128,
            output_tokens: 128,
            prompts: 100,
            concurrency: 8,
            seed: 0,
        }
    }
}

impl SharedPrefixScenario {
    /// The prompts in send order (generated per prefix, then shuffled with `seed`).
    pub fn build_prompts(&self) -> Vec<String> {
        let prefixes = self.prefixes.max(1);
        let prompts = self.prompts.min(MAX_SCENARIO_PROMPTS);
        let mut texts = Vec::with_capacity(prompts);
        for prefix_index in 0..prefixes {
            let prefix = text_of_tokens(self.prefix_tokens, mix64(self.seed ^ (prefix_index as u64 + 1)));
            // Spread the remainder over the first prefixes, so every prompt has one.
            let count = prompts / prefixes + usize::from(prefix_index < prompts % prefixes);
            for _ in 0..count {
                let suffix_seed = mix64(self.seed ^ 0x7375_6666 ^ texts.len() as u64); // "suff"
                texts.push(format!("{prefix} {}", text_of_tokens(self.suffix_tokens, suffix_seed)));
            }
        }
        shuffle(&mut texts, self.seed);
        texts
    }
}

/// Fisher-Yates with the simulator's seeded generator (reproducible across runs and builds).
fn shuffle<T>(items: &mut [T], seed: u64) {
    let mut rng = SplitMix64::new(mix64(seed ^ 0x7368_7566)); // "shuf"
    for index in (1..items.len()).rev() {
        let other = rng.next_below(index as u64 + 1) as usize;
        items.swap(index, other);
    }
}

/// Outcome of one scenario run.
#[derive(Debug, Clone)]
pub struct ScenarioResult {
    /// Successful requests' timings, in completion order.
    pub timings: Vec<ClientTiming>,
    /// Failed requests' messages.
    pub errors: Vec<String>,
    /// Hits / queries from the pods' `/metrics` over the run (`None` if nothing was queried).
    pub hit_rate: Option<f64>,
    /// Requests per `x-served-by` value.
    pub served_by: BTreeMap<String, usize>,
    /// Wall time of the whole run.
    pub wall: Duration,
}

/// Runs `scenario` against `base_urls` (e.g. `http://127.0.0.1:8001`), round robin.
pub async fn run_scenario(
    client: &SimClient,
    base_urls: &[String],
    model: &str,
    scenario: &SharedPrefixScenario,
) -> Result<ScenarioResult, String> {
    if base_urls.is_empty() {
        return Err("no pod URLs".to_owned());
    }
    let before = scrape_prefix_counters(client, base_urls).await?;
    let started = Instant::now();
    let prompts = Arc::new(scenario.build_prompts());
    let next = Arc::new(AtomicUsize::new(0));
    let urls: Arc<Vec<String>> = Arc::new(base_urls.iter().map(|url| format!("{url}/v1/completions")).collect());
    let mut workers = JoinSet::new();
    for _ in 0..scenario.concurrency.clamp(1, MAX_SCENARIO_CONCURRENCY) {
        let (client, prompts, next, urls) =
            (client.clone(), Arc::clone(&prompts), Arc::clone(&next), Arc::clone(&urls));
        let (model, output_tokens) = (model.to_owned(), scenario.output_tokens);
        workers.spawn(async move {
            let mut outcomes = Vec::new();
            // Each pass takes the next prompt; the prompt list bounds the loop.
            loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                let Some(prompt) = prompts.get(index) else { break };
                // Round robin by global request index, as a plain load balancer would.
                let url = urls.get(index % urls.len().max(1)).cloned().unwrap_or_default();
                let body = json!({"model": model, "prompt": prompt, "max_tokens": output_tokens,
                                  "ignore_eos": true, "temperature": 0.0});
                outcomes.push(client.stream_completion(&url, &body).await);
            }
            outcomes
        });
    }
    let mut result = ScenarioResult {
        timings: Vec::new(),
        errors: Vec::new(),
        hit_rate: None,
        served_by: BTreeMap::new(),
        wall: Duration::ZERO,
    };
    while let Some(joined) = workers.join_next().await {
        for outcome in joined.map_err(|error| format!("worker failed: {error}"))? {
            match outcome {
                Ok(timing) => {
                    let pod = timing.served_by.clone().unwrap_or_else(|| "unknown".to_owned());
                    *result.served_by.entry(pod).or_default() += 1;
                    result.timings.push(timing);
                }
                Err(error) => result.errors.push(error.to_string()),
            }
        }
    }
    result.wall = started.elapsed();
    let after = scrape_prefix_counters(client, base_urls).await?;
    let queries = after.1 - before.1;
    result.hit_rate = (queries > 0.0).then(|| (after.0 - before.0) / queries);
    Ok(result)
}

/// `(hits, queries)` summed over pods, from V1 names, or legacy names on engines without them
/// (vLLM 0.9 and 0.10 expose both, so adding both would count twice).
pub async fn scrape_prefix_counters(client: &SimClient, base_urls: &[String]) -> Result<(f64, f64), String> {
    let mut totals = (0.0, 0.0);
    for url in base_urls {
        let (status, text) = client.get_text(&format!("{url}/metrics")).await.map_err(|error| error.to_string())?;
        if status != 200 {
            return Err(format!("{url}/metrics answered {status}"));
        }
        let prefix = if text.contains("vllm:prefix_cache_queries_total") {
            "vllm:prefix_cache"
        } else {
            "vllm:gpu_prefix_cache"
        };
        totals.0 += sum_metric(&text, &format!("{prefix}_hits_total"));
        totals.1 += sum_metric(&text, &format!("{prefix}_queries_total"));
    }
    Ok(totals)
}
