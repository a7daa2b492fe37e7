//! A pool of simulated pods behind a real Envoy with wasm-epp, started per test.
//!
//! Every test builds its own [`Cluster`] on free ports, so tests do not share state; the
//! processes stop when the cluster is dropped, pass or fail. Run through `make test`,
//! which builds the `.wasm` modules, the simulator and installs Envoy first.

#![forbid(unsafe_code)]

pub mod chaos;
pub mod drain;
pub mod fake_pod;
pub mod h2;
pub mod header_fuzz;
pub mod hostile;
pub mod models;
pub mod pd;
pub mod prometheus;
pub mod replicas;
pub mod slow_clients;

use std::collections::BTreeMap;
use std::time::Duration;

use launcher::envoy::{Envoy, EnvoyOptions};
use launcher::http::{self, Reply};
use launcher::pods::{start_pool, Pod};

pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

pub struct Cluster {
    pub pods: Vec<Pod>,
    pub envoy: Envoy,
    pub dir: std::path::PathBuf,
}

impl Cluster {
    /// `pods` simulated pods (with `sim_args`) and Envoy configured for them; `adjust`
    /// may change the Envoy options (filter or singleton configuration) before start.
    pub fn start(name: &str, pods: usize, sim_args: &[&str], adjust: impl FnOnce(&mut EnvoyOptions)) -> Self {
        let dir = launcher::paths::run_dir(name).unwrap_or_else(|e| panic!("run dir: {e}"));
        let pods = start_pool(pods, sim_args, &dir).unwrap_or_else(|e| panic!("pods: {e}"));
        Self::in_front_of(pods, dir, adjust)
    }

    /// Envoy with wasm-epp in front of `pods` already started, `adjust` applied to the options.
    pub fn in_front_of(pods: Vec<Pod>, dir: std::path::PathBuf, adjust: impl FnOnce(&mut EnvoyOptions)) -> Self {
        let pool: Vec<String> = pods.iter().map(Pod::address).collect();
        let listen = launcher::free_port().unwrap_or_else(|e| panic!("port: {e}"));
        let admin = launcher::free_port().unwrap_or_else(|e| panic!("port: {e}"));
        let mut options = EnvoyOptions::for_pool(&pool, listen, admin);
        adjust(&mut options);
        let envoy = Envoy::start(&options, &dir).unwrap_or_else(|e| panic!("envoy: {e}"));
        Self { pods, envoy, dir }
    }

    /// Starts with defaults and waits until the singleton has seen every pod healthy.
    pub fn start_ready(name: &str, pods: usize, sim_args: &[&str]) -> Self {
        Self::start_ready_with(name, pods, sim_args, |_| {})
    }

    /// [`Cluster::start`] (with `adjust`), then waits until the singleton has seen every pod
    /// healthy.
    pub fn start_ready_with(
        name: &str,
        pods: usize,
        sim_args: &[&str],
        adjust: impl FnOnce(&mut EnvoyOptions),
    ) -> Self {
        let cluster = Self::start(name, pods, sim_args, adjust);
        assert!(
            cluster.envoy.wait_for_healthy_pods(pods as u64, Duration::from_secs(15)),
            "singleton never saw {pods} healthy pods:\n{}",
            cluster.envoy.log_tail(30)
        );
        cluster
    }

    pub fn pool(&self) -> Vec<String> {
        self.pods.iter().map(Pod::address).collect()
    }

    /// A small completion through Envoy.
    pub fn complete(&self, prompt: &str) -> Reply {
        let body = serde_json::json!({"model": "sim-model", "prompt": prompt, "max_tokens": 4});
        self.post("/v1/completions", &[], &body.to_string())
    }

    pub fn post(&self, path: &str, headers: &[(&str, &str)], body: &str) -> Reply {
        http::post(&self.envoy.url(path), headers, body, REQUEST_TIMEOUT)
            .unwrap_or_else(|e| panic!("POST {path} failed: {e}\n{}", self.envoy.log_tail(20)))
    }

    /// Asserts the reply came from a pool member and returns that member.
    pub fn served_by_pool(&self, reply: &Reply) -> String {
        let pod = reply.served_by().unwrap_or_else(|| panic!("no x-served-by: {} {}", reply.status, reply.body));
        assert!(self.pool().iter().any(|p| p == pod), "served by {pod}, not a pool member");
        pod.to_string()
    }

    /// The Wasm VM is alive: no VM failure in the log and a normal request still routes.
    pub fn assert_plugin_healthy(&self) {
        let log = self.envoy.log();
        for fatal in ["panicked", "Plugin configured to fail closed", "wasm trap", "Function: proxy_on"] {
            assert!(!log.contains(fatal), "Envoy log shows a Wasm failure ({fatal}):\n{}", self.envoy.log_tail(40));
        }
        let reply = self.complete("still alive?");
        assert_eq!(reply.status, 200, "{}", reply.body);
        self.served_by_pool(&reply);
    }

    /// Envoy's stat `name` (Prometheus form), 0 while it does not exist.
    pub fn stat(&self, name: &str) -> f64 {
        self.envoy.stat(name).unwrap_or(0.0)
    }

    /// Waits (10 s at most) until the counter `name` reaches `count`, so a test sends its next
    /// request once the plugin has done what it waits for (a blocker gone on to its pod, a
    /// request queued): a fixed pause in its place loses to a loaded machine.
    pub fn wait_for_stat(&self, name: &str, count: f64) {
        let reached = launcher::wait_until(std::time::Duration::from_secs(10), || self.stat(name) >= count);
        assert!(reached, "{name} never reached {count} (now {}):\n{}", self.stat(name), self.envoy.log_tail(20));
    }
}

/// Adds `address` (a fake pod a test serves itself) to a static pool's three lists: the pool
/// cluster's endpoints, the filter's `pool` and the singleton's.
pub fn add_to_pool(options: &mut EnvoyOptions, address: &str) {
    options.pool.push(address.to_owned());
    let pool = serde_json::json!(options.pool);
    options.filter_config["pool"] = pool.clone();
    if let Some(poller) = options.poller_config.as_mut() {
        poller["pool"] = pool;
    }
}

/// How long the workers take to read a table the pool service published: a few of their
/// 20 ms ticks, with room for a loaded machine.
pub const TABLE_REACHES_WORKERS: Duration = Duration::from_millis(200);

/// Waits until the pool service has published `pod`'s per-pod gauge `wasm_epp_pod_<gauge>`
/// at `value` (say `waiting` at 50 after a `/sim/faults` report), then for the workers to read
/// that table. A scrape comes late on a loaded machine, so the wait is generous: a fixed sleep
/// in its place let requests go out on the table before, and the test fail.
pub fn wait_for_pod_gauge(envoy: &Envoy, gauge: &str, pod: &str, value: f64) {
    let series = format!("wasm_epp_pod_{gauge}{{pod=\"{pod}\"}}");
    let published = launcher::wait_until(Duration::from_secs(15), || envoy.stat(&series) == Some(value));
    assert!(published, "{series} never read {value} (now {:?}):\n{}", envoy.stat(&series), envoy.log_tail(20));
    std::thread::sleep(TABLE_REACHES_WORKERS);
}

/// How many replies each pod served.
pub fn tally<'a>(pods: impl IntoIterator<Item = &'a str>) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for pod in pods {
        *counts.entry(pod.to_string()).or_insert(0) += 1;
    }
    counts
}
