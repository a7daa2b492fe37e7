//! Reads the few numbers the picker needs out of an engine's Prometheus `/metrics` text.
//!
//! Engines differ in names (vLLM V1, vLLM's older `gpu_*` names, SGLang, trtllm-serve), and
//! a vLLM pod with data parallelism emits one series per engine, which we sum (a series given
//! twice is read once). A pod may lie or break: NaN or negative samples are ignored, never
//! trusted, loads past any engine's (`+Inf` too) are read at a bound, and a text with none of
//! the load metrics is an error rather than an idle-looking pod.

use crate::prometheus_line::{parse_sample, sample_name, Sample};

/// Every metric name [`apply_sample`] reads; other lines are skipped unparsed.
pub const WANTED: [&str; 18] = [
    "vllm:lora_adapter_loaded",
    "vllm:max_gpu_lora_adapters",
    "vllm:cache_config_info",
    "vllm:lora_requests_info",
    "vllm:num_requests_waiting",
    "vllm:num_requests_running",
    "vllm:kv_cache_usage_perc",
    "vllm:gpu_cache_usage_perc",
    "vllm:prefix_cache_queries_total",
    "vllm:gpu_prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
    "vllm:gpu_prefix_cache_hits_total",
    "sglang:num_queue_reqs",
    "sglang:num_running_reqs",
    "sglang:token_usage",
    "trtllm_num_requests_waiting",
    "trtllm_num_requests_running",
    "trtllm_kv_cache_utilization",
];

/// `/metrics` asking only for [`WANTED`] (`name[]` filters, as `prometheus_client` serves
/// them over a registry of ordinary collectors): a page of about 1 KB instead of tens. A
/// server that ignores the query (vLLM may) still answers the whole page, which parses the
/// same; a multiprocess registry (SGLang's) cannot filter and answers an empty page, and the
/// poller then scrapes that pod at the plain path (`poller::PLAIN_METRICS_PATH`).
pub fn filtered_metrics_path() -> String {
    let mut path = String::from("/metrics?");
    for (i, name) in WANTED.iter().enumerate() {
        if i > 0 {
            path.push('&');
        }
        path.push_str("name%5B%5D=");
        path.push_str(&name.replace(':', "%3A"));
    }
    path
}

/// Lines read at most: a real vLLM `/metrics` has about a thousand; more is not a pod.
pub const MAX_METRIC_LINES: usize = 50_000;

/// Larger gauge samples (`+Inf` too) are read as this: no engine has a billion requests
/// queued, and summing a few huge ones would overflow to infinity, which JSON cannot carry in
/// the pod table. Read at the bound, not dropped: a pod whose page says its queue is endless
/// is not idle, and a dropped sample left its queue at 0, the emptiest of the pool, which
/// drew the requests its healthy neighbours should have had. Counters have no such bound:
/// the prefix-cache ones count tokens since the engine started and pass a billion in hours;
/// a sample dropped there makes the pod's sum fall, which reads as a restart.
const MAX_SANE_GAUGE: f64 = 1e9;

/// What one scrape tells about a pod's load and capacity.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EngineMetrics {
    pub waiting: f64,
    pub running: f64,
    /// KV-cache usage, 0..1, averaged over the pod's engines.
    pub kv_usage: Option<f64>,
    pub block_size: Option<u32>,
    pub num_gpu_blocks: Option<u64>,
    /// Prefix-cache lookups and hits, in tokens, since the engine started.
    pub prefix_queries: Option<f64>,
    pub prefix_hits: Option<f64>,
    pub lora: Option<LoraState>,
    /// Base model and adapters the scrape names (see [`crate::models::residency`]).
    pub models: crate::models::residency::ScrapedModels,
    /// A load sample past what any engine reports, read at its bound: what it was, for the
    /// operator (a KV usage of 87 is an exporter giving a percent; the pod reads as full for
    /// as long as it does, and nothing else would say why).
    pub implausible: Option<String>,
    /// Samples of a series the page gave already (same name and label set), skipped; and the
    /// first one's metric. A true exporter never repeats one: a count above 0 is a broken
    /// exporter the operator should hear of (no allocation per sample: a count and a name
    /// from [`WANTED`]).
    pub repeated_samples: u32,
    pub first_repeated: Option<&'static str>,
}

/// The newest `vllm:lora_requests_info` series.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoraState {
    pub max_loras: u32,
    pub running: Vec<String>,
    pub waiting: Vec<String>,
    /// A name was dropped from a list (over-long, or past the bound).
    pub cut: bool,
}

#[derive(Default)]
struct Totals {
    waiting: Option<f64>,
    running: Option<f64>,
    kv_sum: f64,
    kv_series: u32,
    prefix_queries: Option<f64>,
    prefix_hits: Option<f64>,
    lora_timestamp: f64,
}

/// Parses a scrape, keeping at most `max_names` names in each model and adapter list (the
/// pool service's `max_names_per_pod`). Errors name why the text is not usable engine metrics.
pub fn parse_engine_metrics(text: &str, max_names: usize) -> Result<EngineMetrics, String> {
    let mut totals = Totals::default();
    let mut names = crate::models::residency::ScrapedNames::new(max_names);
    let mut metrics = EngineMetrics::default();
    // Keys of the wanted series read so far: a few dozen on a true page, at most
    // MAX_METRIC_LINES (8 bytes each) on a lying one.
    let mut series = hashbrown::HashSet::new();
    for line in text.lines().take(MAX_METRIC_LINES) {
        let line = line.trim_start();
        // Most of a vLLM scrape is comments and histogram buckets: skip them by name alone,
        // before any label is parsed (the singleton parses every pod's page every interval).
        if line.is_empty() || line.starts_with('#') || !WANTED.contains(&sample_name(line)) {
            continue;
        }
        let Some(sample) = parse_sample(line.trim_end()) else {
            continue;
        };
        // A series given twice (invalid text: a broken or lying exporter) would count twice
        // in a sum. The first is kept, as Prometheus keeps it (it drops a later sample of a
        // series at the same scrape as a duplicate). Engines' series differ by label (vLLM's
        // data-parallel `engine`, `model_name`): those are all summed.
        if !series.insert(sample.series_key()) {
            metrics.repeated_samples = metrics.repeated_samples.saturating_add(1);
            if metrics.first_repeated.is_none() {
                metrics.first_repeated = WANTED.iter().copied().find(|&name| name == sample.name);
            }
            continue;
        }
        apply_sample(&sample, max_names, &mut totals, &mut names, &mut metrics);
    }
    metrics.models = names.finish();
    match (totals.waiting, totals.running) {
        (None, None) => return Err("no queue or running-request metric in the scrape".into()),
        (waiting, running) => {
            metrics.waiting = waiting.unwrap_or(0.0);
            metrics.running = running.unwrap_or(0.0);
        }
    }
    if totals.kv_series > 0 {
        metrics.kv_usage = Some((totals.kv_sum / f64::from(totals.kv_series)).clamp(0.0, 1.0));
    }
    metrics.prefix_queries = totals.prefix_queries;
    metrics.prefix_hits = totals.prefix_hits;
    Ok(metrics)
}

fn add(slot: &mut Option<f64>, value: f64) {
    *slot = Some(slot.unwrap_or(0.0) + value);
}

/// Adds a counter sample, saturating at the largest finite number: a lying pod's huge
/// counters still sum to a finite value, and a true one only ever grows.
fn add_counter(slot: &mut Option<f64>, value: f64) {
    *slot = Some((slot.unwrap_or(0.0) + value).min(f64::MAX));
}

fn apply_sample(
    sample: &Sample<'_>,
    max_names: usize,
    totals: &mut Totals,
    names: &mut crate::models::residency::ScrapedNames,
    metrics: &mut EngineMetrics,
) {
    let value = sample.value;
    // Info series carry their data in labels; their value is 1 or a timestamp.
    match sample.name {
        "vllm:cache_config_info" => {
            // 0 is no size: a block of 0 tokens hashed prompts in 1-byte blocks, so any two
            // sharing their first few hundred bytes matched whole and went to one pod; a pod
            // of 0 blocks held one block in the index. Unknown, the configured ones are used.
            let positive = |label| sample.label(label).and_then(|v| v.parse().ok()).filter(|&n: &u64| n > 0);
            metrics.block_size = positive("block_size").and_then(|n| u32::try_from(n).ok());
            metrics.num_gpu_blocks = positive("num_gpu_blocks");
            return;
        }
        "vllm:lora_requests_info" => {
            if value.is_finite() && value >= totals.lora_timestamp {
                totals.lora_timestamp = value;
                let (running, running_cut) = split_list(sample.label_text("running_lora_adapters"), max_names);
                let (waiting, waiting_cut) = split_list(sample.label_text("waiting_lora_adapters"), max_names);
                metrics.lora = Some(LoraState {
                    max_loras: sample.label("max_lora").and_then(|v| v.parse().ok()).unwrap_or(0),
                    running,
                    waiting,
                    cut: running_cut || waiting_cut,
                });
            }
            return;
        }
        _ => {}
    }
    if crate::models::residency::apply(sample, names) {
        return;
    }
    if value.is_nan() || value < 0.0 {
        return; // A pod that reports NaN or a negative number is not believed.
    }
    match sample.name {
        "vllm:prefix_cache_queries_total" | "vllm:gpu_prefix_cache_queries_total" if value.is_finite() => {
            add_counter(&mut totals.prefix_queries, value)
        }
        "vllm:prefix_cache_hits_total" | "vllm:gpu_prefix_cache_hits_total" if value.is_finite() => {
            add_counter(&mut totals.prefix_hits, value)
        }
        _ => {
            let bounded = apply_gauge(sample.name, value, totals);
            if bounded && metrics.implausible.is_none() {
                metrics.implausible = Some(format!("{} {value}", sample.name));
            }
        }
    }
}

/// Adds a load gauge's non-negative sample, read at most at its bound ([`MAX_SANE_GAUGE`] for
/// counts: at most [`MAX_METRIC_LINES`] of them, so their sum stays finite; 1 for a usage).
/// Whether it was past the bound.
fn apply_gauge(name: &str, value: f64, totals: &mut Totals) -> bool {
    match name {
        "vllm:num_requests_waiting" | "sglang:num_queue_reqs" | "trtllm_num_requests_waiting" => {
            add(&mut totals.waiting, value.min(MAX_SANE_GAUGE));
            value > MAX_SANE_GAUGE
        }
        "vllm:num_requests_running" | "sglang:num_running_reqs" | "trtllm_num_requests_running" => {
            add(&mut totals.running, value.min(MAX_SANE_GAUGE));
            value > MAX_SANE_GAUGE
        }
        "vllm:kv_cache_usage_perc"
        | "vllm:gpu_cache_usage_perc"
        | "sglang:token_usage"
        | "trtllm_kv_cache_utilization" => {
            totals.kv_sum += value.min(1.0);
            totals.kv_series += 1;
            value > 1.0
        }
        _ => false,
    }
}

/// Longest adapter name kept, in bytes; longer names are dropped, not cut (a cut name
/// would match a different adapter).
pub const MAX_ADAPTER_NAME_BYTES: usize = 256;

/// A comma-separated adapter list, bounded as every name list a pod gives
/// ([`crate::models::name_list::NameList`]): it is stored in the pod table and published to
/// every worker, so a pod may not make it grow without limit. `true` beside it when a name
/// was dropped.
fn split_list(value: Option<std::borrow::Cow<'_, str>>, max: usize) -> (Vec<String>, bool) {
    let mut list = crate::models::name_list::NameList::new(max);
    let mut cut = false;
    for name in value.as_deref().unwrap_or("").split(',').map(str::trim) {
        cut |= !list.push(name);
    }
    (list.into_names(), cut)
}

#[cfg(test)]
mod tests {
    use super::*;

    const VLLM_TWO_ENGINES: &str = r#"
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 3.0
vllm:num_requests_waiting{engine="1",model_name="m"} 2.0
vllm:num_requests_running{engine="0",model_name="m"} 4.0
vllm:num_requests_running{engine="1",model_name="m"} 1.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.25
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1000.0
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 640.0
vllm:cache_config_info{block_size="16",cache_dtype="auto",engine="0",num_gpu_blocks="27000"} 1.0
vllm:lora_requests_info{max_lora="2",running_lora_adapters="a",waiting_lora_adapters=""} 1.7e9
vllm:lora_requests_info{max_lora="2",running_lora_adapters="a,b",waiting_lora_adapters="c"} 1.8e9
"#;

    /// The pool service's default `max_names_per_pod`.
    const NAMES: usize = crate::models::DEFAULT_NAMES_PER_POD;

    #[test]
    fn adapter_lists_from_a_lying_pod_are_bounded() {
        let many: Vec<String> = (0..10_000).map(|i| format!("adapter-{i}")).collect();
        let long = "x".repeat(MAX_ADAPTER_NAME_BYTES + 1);
        let (list, cut) = split_list(Some(format!("{long},{}", many.join(",")).into()), NAMES);
        assert_eq!(list.len(), NAMES);
        assert_eq!(list.first().map(String::as_str), Some("adapter-0"), "an over-long name is dropped");
        assert!(cut, "and the list says it lacks names");
        assert_eq!(split_list(Some("a, b,".into()), NAMES), (vec!["a".to_owned(), "b".to_owned()], false));
    }

    #[test]
    fn running_and_waiting_lists_keep_the_configured_number_of_names() {
        let names = |from: usize, count: usize| (from..from + count).map(|i| format!("t-{i}")).collect::<Vec<_>>();
        let page = |running: usize, waiting: usize| {
            format!(
                "vllm:num_requests_running 1\nvllm:lora_requests_info{{max_lora=\"4\",running_lora_adapters=\"{}\",\
                 waiting_lora_adapters=\"{}\"}} 1.8e9\n",
                names(0, running).join(","),
                names(1000, waiting).join(",")
            )
        };
        for (max, running, waiting, cut) in [(256, 256, 100, false), (256, 100, 257, true), (256, 257, 0, true)] {
            let lora = parse_engine_metrics(&page(running, waiting), max).unwrap().lora.unwrap();
            let expected = (names(0, running.min(max)), names(1000, waiting.min(max)), cut);
            assert_eq!((lora.running, lora.waiting, lora.cut), expected, "{running} running, {waiting} waiting");
        }
    }

    #[test]
    fn sums_engines_and_reads_info_labels() {
        let m = parse_engine_metrics(VLLM_TWO_ENGINES, NAMES).unwrap();
        assert_eq!((m.waiting, m.running), (5.0, 5.0));
        assert_eq!(m.kv_usage, Some(0.375));
        assert_eq!((m.block_size, m.num_gpu_blocks), (Some(16), Some(27000)));
        assert_eq!((m.prefix_queries, m.prefix_hits), (Some(1000.0), Some(640.0)));
        let lora = m.lora.unwrap();
        assert_eq!((lora.max_loras, lora.running, lora.waiting), (2, vec!["a".into(), "b".into()], vec!["c".into()]));
    }

    #[test]
    fn a_series_given_twice_is_read_once_and_engines_still_sum() {
        // A broken or lying exporter repeating its series (in any label order) doubled its
        // queue and running counts, and its prefix-cache counters.
        let page = format!(
            "{VLLM_TWO_ENGINES}vllm:num_requests_waiting{{engine=\"0\",model_name=\"m\"}} 30.0\n\
             vllm:num_requests_running{{model_name=\"m\",engine=\"1\"}} 1.0\n\
             vllm:kv_cache_usage_perc{{engine=\"1\",model_name=\"m\"}} 0.25\n\
             vllm:prefix_cache_queries_total{{engine=\"0\",model_name=\"m\"}} 1000.0\n"
        );
        let m = parse_engine_metrics(&page, NAMES).unwrap();
        assert_eq!((m.waiting, m.running), (5.0, 5.0), "the first of a series is kept");
        assert_eq!(m.kv_usage, Some(0.375));
        assert_eq!(m.prefix_queries, Some(1000.0));
        assert_eq!((m.repeated_samples, m.first_repeated), (4, Some("vllm:num_requests_waiting")), "and told");
        // Series that differ in any label (a model, an engine) are different series: summed.
        let models = "vllm:num_requests_waiting{model_name=\"a\"} 2\nvllm:num_requests_waiting{model_name=\"b\"} 2\n\
            vllm:num_requests_waiting{model_name=\"b\",engine=\"1\"} 2\nvllm:num_requests_running 1\n";
        let m = parse_engine_metrics(models, NAMES).unwrap();
        assert_eq!(m.waiting, 6.0);
        assert_eq!((m.repeated_samples, m.first_repeated), (0, None), "a true page repeats nothing");
    }

    #[test]
    fn reads_legacy_sglang_and_trtllm_names() {
        let legacy = "vllm:num_requests_waiting 1\nvllm:gpu_cache_usage_perc 0.9\n";
        assert_eq!(parse_engine_metrics(legacy, NAMES).unwrap().kv_usage, Some(0.9));
        let sglang = "sglang:num_queue_reqs{model_name=\"m\"} 7\nsglang:num_running_reqs 2\nsglang:token_usage 0.1\n";
        let m = parse_engine_metrics(sglang, NAMES).unwrap();
        assert_eq!((m.waiting, m.running, m.kv_usage), (7.0, 2.0, Some(0.1)));
        let trt = "trtllm_num_requests_waiting 0\ntrtllm_num_requests_running 3\ntrtllm_kv_cache_utilization 0.2\n";
        assert_eq!(parse_engine_metrics(trt, NAMES).unwrap().running, 3.0);
    }

    #[test]
    fn counters_past_a_billion_are_kept_and_summed() {
        let engines = "vllm:num_requests_waiting 0\n\
            vllm:prefix_cache_queries_total{engine=\"0\"} 1001000000\n\
            vllm:prefix_cache_queries_total{engine=\"1\"} 901000000\n\
            vllm:prefix_cache_hits_total{engine=\"0\"} 2e12\n";
        let m = parse_engine_metrics(engines, NAMES).unwrap();
        assert_eq!((m.prefix_queries, m.prefix_hits), (Some(1_902_000_000.0), Some(2e12)));
        let lies = "vllm:num_requests_waiting 0\nvllm:prefix_cache_queries_total{engine=\"0\"} 1e308\n\
            vllm:prefix_cache_queries_total{engine=\"1\"} 1e308\nvllm:prefix_cache_hits_total -1\n";
        let m = parse_engine_metrics(lies, NAMES).unwrap();
        assert_eq!((m.prefix_queries, m.prefix_hits), (Some(f64::MAX), None), "finite, and never negative");
    }

    #[test]
    fn an_endless_queue_is_a_full_one_not_an_empty_one() {
        // A pod whose page says its queue (or batch, or KV cache) is past any engine's is read
        // at the bound: dropping the sample read its queue as 0, the pool's emptiest.
        for waiting in ["+Inf", "1e300", "3e9"] {
            let page = format!(
                "vllm:num_requests_waiting {waiting}\nvllm:num_requests_running 4\nvllm:kv_cache_usage_perc +Inf\n"
            );
            let m = parse_engine_metrics(&page, NAMES).unwrap();
            assert_eq!((m.waiting, m.running, m.kv_usage), (MAX_SANE_GAUGE, 4.0, Some(1.0)), "{waiting}");
        }
        let page =
            "vllm:num_requests_waiting 0\nvllm:num_requests_running +Inf\nvllm:prefix_cache_queries_total +Inf\n";
        let m = parse_engine_metrics(page, NAMES).unwrap();
        assert_eq!((m.waiting, m.running, m.prefix_queries), (0.0, MAX_SANE_GAUGE, None));
        assert_eq!(m.implausible.as_deref(), Some("vllm:num_requests_running inf"), "told");
    }

    #[test]
    fn a_kv_usage_given_as_a_percent_reads_as_full_and_is_told() {
        let page = "vllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc{engine=\"0\"} 87.5\n\
            vllm:kv_cache_usage_perc{engine=\"1\"} 0.5\n";
        let m = parse_engine_metrics(page, NAMES).unwrap();
        assert_eq!(m.kv_usage, Some(0.75));
        assert_eq!(m.implausible.as_deref(), Some("vllm:kv_cache_usage_perc 87.5"));
        let m = parse_engine_metrics(VLLM_TWO_ENGINES, NAMES).unwrap();
        assert_eq!(m.implausible, None, "a true page says nothing");
    }

    #[test]
    fn a_cache_of_zero_blocks_or_blocks_of_zero_tokens_is_unknown() {
        let page = "vllm:num_requests_waiting 0\n\
            vllm:cache_config_info{block_size=\"0\",num_gpu_blocks=\"0\"} 1\n";
        let m = parse_engine_metrics(page, NAMES).unwrap();
        assert_eq!((m.block_size, m.num_gpu_blocks), (None, None));
        let page = "vllm:num_requests_waiting 0\n\
            vllm:cache_config_info{block_size=\"4294967296\",num_gpu_blocks=\"None\"} 1\n";
        let m = parse_engine_metrics(page, NAMES).unwrap();
        assert_eq!((m.block_size, m.num_gpu_blocks), (None, None));
    }

    #[test]
    fn distrusts_lies_and_refuses_foreign_text() {
        let huge = "vllm:num_requests_waiting{engine=\"0\"} 1e308\nvllm:num_requests_waiting{engine=\"1\"} 1e308\n\
            vllm:num_requests_running 1\n";
        assert_eq!(
            parse_engine_metrics(huge, NAMES).unwrap().waiting,
            2e9,
            "sums of absurd samples never reach infinity"
        );
        let lies = "vllm:num_requests_waiting NaN\nvllm:num_requests_waiting -4\nvllm:num_requests_running 2\nvllm:kv_cache_usage_perc 7\n";
        let m = parse_engine_metrics(lies, NAMES).unwrap();
        assert_eq!((m.waiting, m.running, m.kv_usage), (0.0, 2.0, Some(1.0)));
        assert!(parse_engine_metrics("<html>not found</html>", NAMES).is_err());
        assert!(parse_engine_metrics("", NAMES).is_err());
    }
}
