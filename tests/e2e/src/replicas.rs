//! Several real wasm-epp Envoys over one pool of simulated pods (tests/replicas*.rs): each
//! replica can be started late or killed, and requests go to a chosen replica directly.

use std::time::Duration;

use launcher::envoy::{Envoy, EnvoyOptions};
use launcher::http::{self, Reply};
use launcher::pods::{start_pool, Pod};
use launcher::replicas::ReplicaPlan;

use crate::REQUEST_TIMEOUT;

/// Long enough for a busy 2-core machine: Envoy starts, first scrapes, peer messages.
pub const SETTLE: Duration = Duration::from_secs(20);

/// About 2 KB of text that a group of prompts shares (≈ 32 blocks of 64 bytes).
pub fn shared_prefix(group: usize) -> String {
    (0..300).map(|i| format!("r{group}w{i}")).collect::<Vec<_>>().join(" ")
}

pub fn prompt(group: usize, suffix: usize) -> String {
    format!("{} question {suffix} please answer briefly", shared_prefix(group))
}

/// Cold prompts placed by each worker's own history instead of rendezvous hashing, so two
/// replicas agree on a prefix only if one told the other.
pub fn least_recent(options: &mut EnvoyOptions) {
    if let Some(filter) = options.filter_config.as_object_mut() {
        filter.insert("prefix".into(), serde_json::json!({ "cold_placement": "least_recent" }));
    }
}

pub struct ReplicaCluster {
    pub pods: Vec<Pod>,
    pub plan: ReplicaPlan,
    /// `None`: not started yet, or killed.
    pub replicas: Vec<Option<Envoy>>,
    pub dir: std::path::PathBuf,
    adjust: fn(&mut EnvoyOptions),
}

impl ReplicaCluster {
    /// `pods` pods and a plan of `total` replicas (every one listed as every one's peer
    /// when `peering`), of which the first `started` are started and ready.
    pub fn start(
        name: &str,
        pods: usize,
        total: usize,
        started: usize,
        peering: bool,
        adjust: fn(&mut EnvoyOptions),
    ) -> Self {
        Self::start_with_pods(name, &["--time-scale", "0"], pods, total, started, peering, adjust)
    }

    /// [`Self::start`] with pods started with `sim_args` (the simulator's own pace when empty,
    /// instead of answering at once).
    pub fn start_with_pods(
        name: &str,
        sim_args: &[&str],
        pods: usize,
        total: usize,
        started: usize,
        peering: bool,
        adjust: fn(&mut EnvoyOptions),
    ) -> Self {
        let dir = launcher::paths::run_dir(name).unwrap_or_else(|e| panic!("run dir: {e}"));
        let pods = start_pool(pods, sim_args, &dir).unwrap_or_else(|e| panic!("pods: {e}"));
        let pool: Vec<String> = pods.iter().map(Pod::address).collect();
        let plan = ReplicaPlan::new(&pool, total, peering).unwrap_or_else(|e| panic!("plan: {e}"));
        let mut cluster = Self { pods, plan, replicas: (0..total).map(|_| None).collect(), dir, adjust };
        for index in 0..started {
            cluster.start_replica(index);
        }
        cluster
    }

    /// Starts replica `index` and waits until it sees every pod healthy.
    pub fn start_replica(&mut self, index: usize) {
        let envoy = self.plan.start_replica_with(index, &self.dir, self.adjust).unwrap_or_else(|e| panic!("{e}"));
        let pods = self.pods.len() as u64;
        assert!(
            envoy.wait_for_healthy_pods(pods, SETTLE),
            "replica {index} never saw the pods:\n{}",
            envoy.log_tail(30)
        );
        self.replicas[index] = Some(envoy);
    }

    pub fn replica(&self, index: usize) -> &Envoy {
        self.replicas[index].as_ref().unwrap_or_else(|| panic!("replica {index} is not running"))
    }

    /// SIGTERM, as the kubelet stops a gateway pod (after its preStop hook).
    pub fn stop(&mut self, index: usize) {
        if let Some(mut envoy) = self.replicas[index].take() {
            envoy.stop();
        }
    }

    /// SIGKILL, as a crashed gateway pod.
    pub fn kill(&mut self, index: usize) {
        if let Some(mut envoy) = self.replicas[index].take() {
            envoy.kill();
        }
    }

    pub fn complete_via(&self, index: usize, prompt: &str) -> Reply {
        let body = serde_json::json!({"model": "sim-model", "prompt": prompt, "max_tokens": 4});
        let envoy = self.replica(index);
        http::post(&envoy.url("/v1/completions"), &[], &body.to_string(), REQUEST_TIMEOUT)
            .unwrap_or_else(|e| panic!("replica {index}: {e}\n{}", envoy.log_tail(20)))
    }

    /// The pool member that served `prompt` through replica `index` (asserts a 200).
    pub fn served_via(&self, index: usize, prompt: &str) -> String {
        let reply = self.complete_via(index, prompt);
        assert_eq!(reply.status, 200, "replica {index}: {}", reply.body);
        let pod = reply.served_by().unwrap_or_else(|| panic!("no x-served-by: {}", reply.body)).to_string();
        assert!(self.pods.iter().any(|p| p.address() == pod), "served by {pod}, not a pool member");
        pod
    }

    pub fn stat(&self, index: usize, name: &str) -> f64 {
        self.replica(index).stat(name).unwrap_or(0.0)
    }

    /// Polls a stat of replica `index` until it reaches `at_least`; returns the last value.
    pub fn wait_stat(&self, index: usize, name: &str, at_least: f64) -> f64 {
        let mut last = 0.0;
        let reached = launcher::wait_until(SETTLE, || {
            last = self.stat(index, name);
            last >= at_least
        });
        assert!(
            reached,
            "replica {index}: {name} = {last}, wanted >= {at_least}\n{}",
            self.replica(index).log_tail(20)
        );
        last
    }

    /// The URL of replica `index`'s peer listener.
    pub fn peer_url(&self, index: usize, path: &str) -> String {
        format!("http://{}{path}", self.plan.ports[index].peer_address())
    }

    /// No Wasm failure in any running replica's log.
    pub fn assert_plugins_healthy(&self) {
        for envoy in self.replicas.iter().flatten() {
            let log = envoy.log();
            for fatal in ["panicked", "wasm trap", "Function: proxy_on"] {
                assert!(!log.contains(fatal), "Envoy log shows a Wasm failure ({fatal}):\n{}", envoy.log_tail(40));
            }
        }
    }
}
