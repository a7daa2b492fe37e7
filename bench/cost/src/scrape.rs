//! What the singleton's scraping costs Envoy: main-thread CPU share and poll latency while it
//! polls N pods every 100 ms, with no request traffic.
//!
//! The singleton runs on Envoy's main thread (`/proc/<pid>/task/<pid>`), so its share of one
//! core is read there. Poll latency comes from two places: Envoy's own `upstream_rq_time`
//! histogram of the `wasm_epp_metrics` cluster (whole milliseconds, as Envoy records it), and
//! the pods' side: how long one round of scrapes takes to reach every pod (first to last
//! arrival), which grows if dispatching N calls keeps the main thread busy.

use std::time::{Duration, Instant};

use launcher::proc_stats;

use crate::envoys::{RunningEnvoy, Variant};
use crate::metrics_page;
use crate::results::{Distribution, Results};
use crate::upstream::Upstream;

/// The metrics cluster the singleton scrapes through.
const METRICS_CLUSTER: &str = "wasm_epp_metrics";

#[derive(Debug, Clone)]
pub struct ScrapeOptions {
    pub pod_counts: Vec<usize>,
    pub poll_interval_ms: u64,
    /// Also scrape the whole page (`/metrics`, the figures before `name[]` filtering).
    pub full_page_too: bool,
    /// Measurement window (Envoy merges histograms every 5 s: use at least 10 s).
    pub window: Duration,
}

/// How the singleton asks for a page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PagePath {
    /// The shipped default: only the series the picker reads (`name[]` filters).
    Filtered,
    /// `/metrics` whole (the earlier default; its figures keep their old keys).
    Full,
}

/// `(lower bound, width, count)` of Envoy's cumulative histogram buckets.
type Buckets = Vec<(f64, f64, f64)>;

/// Reads the cumulative buckets of `cluster.<name>.upstream_rq_time` (ms).
fn rq_time_buckets(envoy: &RunningEnvoy, cluster: &str) -> Buckets {
    let path = format!("/stats?format=json&histogram_buckets=detailed&filter=^cluster\\.{cluster}\\.upstream_rq_time$");
    let Ok(text) = envoy.admin(&path) else { return Vec::new() };
    let Ok(json) = serde_json::from_str::<serde_json::Value>(&text) else { return Vec::new() };
    let details =
        json.pointer("/stats/0/histograms/details/0/totals").and_then(|t| t.as_array()).cloned().unwrap_or_default();
    details
        .iter()
        .filter_map(|b| Some((b.get("lower_bound")?.as_f64()?, b.get("width")?.as_f64()?, b.get("count")?.as_f64()?)))
        .collect()
}

/// Percentile `p` of the samples that arrived between two snapshots of cumulative buckets.
fn bucket_percentile(before: &Buckets, after: &Buckets, p: f64) -> f64 {
    let delta: Vec<(f64, f64, f64)> = after
        .iter()
        .map(|&(lower, width, count)| {
            let old = before.iter().find(|b| b.0 == lower).map_or(0.0, |b| b.2);
            (lower, width, count - old)
        })
        .filter(|b| b.2 > 0.0)
        .collect();
    let total: f64 = delta.iter().map(|b| b.2).sum();
    let target = total * p / 100.0;
    let mut seen = 0.0;
    for (lower, width, count) in delta {
        seen += count;
        if seen >= target {
            return lower + width;
        }
    }
    f64::NAN
}

/// Splits scrape arrivals into rounds (gaps longer than half an interval) and returns each
/// round's spread from first to last arrival, in ms.
fn round_spreads(mut arrivals: Vec<Instant>, interval: Duration) -> Vec<f64> {
    arrivals.sort();
    let mut spreads = Vec::new();
    let mut first: Option<Instant> = None;
    let mut last: Option<Instant> = None;
    for at in arrivals {
        match (first, last) {
            (Some(f), Some(l)) if at.duration_since(l) > interval / 2 => {
                spreads.push(l.duration_since(f).as_secs_f64() * 1e3);
                first = Some(at);
            }
            (None, _) => first = Some(at),
            _ => {}
        }
        last = Some(at);
    }
    spreads
}

fn main_thread_cpu(pid: u32) -> (Duration, Duration) {
    (proc_stats::thread_cpu(pid, pid).unwrap_or_default(), proc_stats::thread_scheduled(pid, pid).unwrap_or_default())
}

/// Measures the scrape cost for each pod count, into `results`.
pub fn run(options: &ScrapeOptions, results: &mut Results) -> Result<(), String> {
    println!("\n== scrape cost: singleton polling N pods every {} ms, no request traffic ==", options.poll_interval_ms);
    println!(
        "  {:>5} {:>8} {:>12} {:>14} {:>12} {:>10} {:>14} {:>16} {:>16}",
        "pods",
        "page",
        "main thread",
        "(schedstat)",
        "process",
        "scrapes/s",
        "expected/s",
        "rq_time p50/p99",
        "round spread p50/p99"
    );
    let paths: &[PagePath] =
        if options.full_page_too { &[PagePath::Full, PagePath::Filtered] } else { &[PagePath::Filtered] };
    for (&pods, &path) in options.pod_counts.iter().flat_map(|p| paths.iter().map(move |path| (p, path))) {
        let upstream = Upstream::start(pods, metrics_page::vllm_page(0))?;
        let pool = upstream.addresses();
        let poller = match path {
            PagePath::Full => {
                serde_json::json!({ "pool": pool, "poll_interval_ms": options.poll_interval_ms, "metrics_path": "/metrics" })
            }
            PagePath::Filtered => serde_json::json!({ "pool": pool, "poll_interval_ms": options.poll_interval_ms }),
        };
        let envoy = RunningEnvoy::start_configured(Variant::WasmEpp, &pool, Some(poller), None)?;
        // Let connections settle, then start a clean window.
        std::thread::sleep(Duration::from_secs(2));
        let pid = envoy.pid();
        let success = |e: &RunningEnvoy| e.stat("wasm_epp_poll_success").unwrap_or(0.0);
        let failure = |e: &RunningEnvoy| e.stat("wasm_epp_poll_failure").unwrap_or(0.0);
        let (ok_before, failed_before) = (success(&envoy), failure(&envoy));
        let buckets_before = rq_time_buckets(&envoy, METRICS_CLUSTER);
        let (main_before, main_sched_before) = main_thread_cpu(pid);
        let process_before = proc_stats::process_cpu(pid).unwrap_or_default();
        upstream.take_scrape_arrivals();
        let start = Instant::now();
        std::thread::sleep(options.window);
        let arrivals = upstream.take_scrape_arrivals();
        let (main_after, main_sched_after) = main_thread_cpu(pid);
        let process_after = proc_stats::process_cpu(pid).unwrap_or_default();
        let elapsed = start.elapsed().as_secs_f64();
        let buckets_after = rq_time_buckets(&envoy, METRICS_CLUSTER);
        let (ok_after, failed_after) = (success(&envoy), failure(&envoy));

        let share = |a: Duration, b: Duration| a.saturating_sub(b).as_secs_f64() / elapsed * 100.0;
        let main_share = share(main_after, main_before);
        let main_sched_share = share(main_sched_after, main_sched_before);
        let process_share = share(process_after, process_before);
        let scrapes_per_second = (ok_after - ok_before) / elapsed;
        let expected = pods as f64 * 1000.0 / options.poll_interval_ms as f64;
        let rq50 = bucket_percentile(&buckets_before, &buckets_after, 50.0);
        let rq99 = bucket_percentile(&buckets_before, &buckets_after, 99.0);
        let spreads = Distribution::new(round_spreads(arrivals, Duration::from_millis(options.poll_interval_ms)));
        println!(
            "  {:>5} {:>8} {:>11.2}% {:>13.2}% {:>11.2}% {:>10.0} {:>14.0} {:>8.1}/{:<7.1} {:>8.2}/{:<7.2}",
            pods,
            if path == PagePath::Full { "full" } else { "filtered" },
            main_share,
            main_sched_share,
            process_share,
            scrapes_per_second,
            expected,
            rq50,
            rq99,
            spreads.percentile(50.0),
            spreads.percentile(99.0)
        );
        // The old key measured the whole page; the shipped filtered scrape gets its own.
        let case = match path {
            PagePath::Full => format!("{pods}_pods/{}ms", options.poll_interval_ms),
            PagePath::Filtered => format!("{pods}_pods/{}ms/filtered", options.poll_interval_ms),
        };
        results.push("scrape", &case, "main_thread_cpu_share", main_share, "percent_of_core");
        results.push("scrape", &case, "main_thread_cpu_share_schedstat", main_sched_share, "percent_of_core");
        results.push("scrape", &case, "process_cpu_share", process_share, "percent_of_core");
        results.push("scrape", &case, "scrapes_per_second", scrapes_per_second, "1/s");
        results.push("scrape", &case, "scrapes_expected_per_second", expected, "1/s");
        results.push("scrape", &case, "scrape_failures", failed_after - failed_before, "count");
        results.push("scrape", &case, "upstream_rq_time_p50", rq50, "ms");
        results.push("scrape", &case, "upstream_rq_time_p99", rq99, "ms");
        results.push("scrape", &case, "round_spread_p50", spreads.percentile(50.0), "ms");
        results.push("scrape", &case, "round_spread_p99", spreads.percentile(99.0), "ms");
        let page = metrics_page::vllm_page(0);
        let filtered = picker::metrics_text::filtered_metrics_path();
        let query = filtered.split_once('?').map(|(_, q)| q);
        let bytes = match path {
            PagePath::Full => page.len(),
            PagePath::Filtered => {
                vllm_sim::metrics::name_filter::restrict_to_query(&page, query).map_or(page.len(), |p| p.len())
            }
        };
        results.push("scrape", &case, "metrics_page_bytes", bytes as f64, "bytes");
        drop(envoy);
        drop(upstream);
    }
    println!("  (main thread = Envoy's main thread, where the singleton runs; rq_time has 1 ms resolution)");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_a_bucket_delta() {
        let before = vec![(0.0, 1.0, 10.0)];
        let after = vec![(0.0, 1.0, 60.0), (1.0, 1.0, 40.0), (5.0, 1.0, 10.0)];
        assert_eq!(bucket_percentile(&before, &after, 50.0), 1.0);
        assert_eq!(bucket_percentile(&before, &after, 99.0), 6.0);
        assert!(bucket_percentile(&after, &after, 50.0).is_nan());
    }

    #[test]
    fn rounds_split_at_long_gaps() {
        let t = Instant::now();
        let ms = |m: u64| t + Duration::from_millis(m);
        let spreads = round_spreads(vec![ms(0), ms(3), ms(100), ms(104), ms(200)], Duration::from_millis(100));
        assert_eq!(spreads, vec![3.0, 4.0]);
    }
}
