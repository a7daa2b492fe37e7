//! The simulated vLLM pool one workload runs on: started once per workload, emptied between
//! targets with the simulator's `POST /sim/restart` (KV cache emptied, counters reset), so
//! every target starts cold on identical pods.

use std::path::Path;
use std::time::Duration;

use launcher::http;
use launcher::pods::{start_pool, Pod};

use crate::prometheus::{sum_of, PREFIX_HITS, PREFIX_QUERIES};

const ADMIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Prefix-cache counters summed over the pool, in tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PrefixCounters {
    pub queries: f64,
    pub hits: f64,
}

impl PrefixCounters {
    /// Hits over queries between `self` (before) and `after`; `None` without queries.
    pub fn hit_rate_until(&self, after: &PrefixCounters) -> Option<f64> {
        let queries = after.queries - self.queries;
        (queries > 0.0).then(|| (after.hits - self.hits) / queries)
    }
}

pub struct SimulatedPool {
    pods: Vec<Pod>,
}

/// Where a `--prefill-slowdown` list of exactly `count` entries sits in `args`, and its values.
fn per_pod_slowdowns(args: &[String], count: usize) -> Option<(usize, Vec<String>)> {
    let at = args.iter().position(|arg| arg == "--prefill-slowdown")? + 1;
    let values: Vec<String> = args.get(at)?.split(',').map(str::to_string).collect();
    (values.len() == count && count > 1).then_some((at, values))
}

impl SimulatedPool {
    /// Starts `count` pods with the simulator flags `args` on free ports. A list of
    /// `--prefill-slowdown` values, one per pod, gives pod `i` the `i`-th (each pod is its
    /// own single-port process, so the list is split here).
    pub fn start(count: usize, args: &[String], dir: &Path) -> Result<Self, String> {
        let Some((list_at, slowdowns)) = per_pod_slowdowns(args, count) else {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            return Ok(Self { pods: start_pool(count, &args, dir)? });
        };
        let pods = slowdowns
            .iter()
            .map(|slowdown| {
                let args: Vec<&str> = (args.iter().enumerate())
                    .map(|(i, arg)| if i == list_at { slowdown.as_str() } else { arg.as_str() })
                    .collect();
                let port = launcher::free_port().map_err(|e| e.to_string())?;
                Pod::start(port, &args, dir)
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Self { pods })
    }

    /// One pod per entry of `args` (each pod's own simulator flags), on free ports.
    pub fn start_each(args: &[Vec<String>], dir: &Path) -> Result<Self, String> {
        let pods = args
            .iter()
            .map(|flags| {
                let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
                let port = launcher::free_port().map_err(|e| e.to_string())?;
                Pod::start(port, &flags, dir)
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Self { pods })
    }

    /// Every pod's `/sim/stats` document.
    pub fn stats(&self) -> Result<Vec<serde_json::Value>, String> {
        self.pods.iter().map(Pod::stats).collect()
    }

    /// `ip:port` of every pod, as `x-served-by` names them.
    pub fn addresses(&self) -> Vec<String> {
        self.pods.iter().map(Pod::address).collect()
    }

    pub fn metrics_urls(&self) -> Vec<String> {
        self.pods.iter().map(|pod| pod.url("/metrics")).collect()
    }

    /// Empties every pod's cache and resets its counters.
    pub fn restart_all(&self) -> Result<(), String> {
        for pod in &self.pods {
            let reply = http::post(&pod.url("/sim/restart"), &[], "", ADMIN_TIMEOUT)?;
            if reply.status != 200 {
                return Err(format!("{}: /sim/restart answered {} {}", pod.address(), reply.status, reply.body));
            }
        }
        Ok(())
    }

    /// Sets the simulator faults `faults` (`POST /sim/faults`) on the pods at `indices`.
    pub fn set_faults(&self, indices: &[usize], faults: &serde_json::Value) -> Result<(), String> {
        for index in indices {
            let pod =
                self.pods.get(*index).ok_or_else(|| format!("no pod {index} in a pool of {}", self.pods.len()))?;
            pod.set_faults(faults).map_err(|e| format!("{}: {e}", pod.address()))?;
        }
        Ok(())
    }

    /// Clears every pod's simulator faults (`DELETE /sim/faults`); a restart keeps them.
    pub fn clear_faults(&self) -> Result<(), String> {
        for pod in &self.pods {
            pod.clear_faults().map_err(|e| format!("{}: {e}", pod.address()))?;
        }
        Ok(())
    }

    /// The pool's prefix-cache counters now.
    pub fn prefix_counters(&self) -> Result<PrefixCounters, String> {
        let mut total = PrefixCounters::default();
        for (_, counters) in self.prefix_counters_per_pod()? {
            total.queries += counters.queries;
            total.hits += counters.hits;
        }
        Ok(total)
    }

    /// Every pod's prefix-cache counters now, by `ip:port` (as `x-served-by` names them).
    pub fn prefix_counters_per_pod(&self) -> Result<Vec<(String, PrefixCounters)>, String> {
        self.pods
            .iter()
            .map(|pod| {
                let reply = http::get(&pod.url("/metrics"), ADMIN_TIMEOUT)?;
                let queries = sum_of(&reply.body, PREFIX_QUERIES)
                    .ok_or_else(|| format!("{}: no {PREFIX_QUERIES} in /metrics", pod.address()))?;
                let hits = sum_of(&reply.body, PREFIX_HITS).unwrap_or(0.0);
                Ok((pod.address(), PrefixCounters { queries, hits }))
            })
            .collect()
    }

    /// One line per pod, each starting with `label`: requests served, mean TTFT and mean queue
    /// wait as the pod measured them (its `vllm:` histograms). A pod that does not answer is
    /// left out.
    pub fn print_pod_timings(&self, label: &str) {
        for url in self.metrics_urls() {
            let Ok(reply) = http::get(&url, ADMIN_TIMEOUT) else { continue };
            let read = |name: &str| sum_of(&reply.body, name).unwrap_or(0.0);
            let mean_ms = |metric: &str| {
                let count = read(&format!("{metric}_count"));
                if count > 0.0 {
                    1000.0 * read(&format!("{metric}_sum")) / count
                } else {
                    0.0
                }
            };
            println!(
                "    {label:<7} {url:<36} requests {:>4.0}  mean TTFT {:>5.0} ms  mean queue {:>5.0} ms",
                read("vllm:time_to_first_token_seconds_count"),
                mean_ms("vllm:time_to_first_token_seconds"),
                mean_ms("vllm:request_queue_time_seconds"),
            );
        }
    }
}
