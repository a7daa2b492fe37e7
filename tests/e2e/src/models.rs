//! A pool whose pods serve different models and adapters (each pod its own simulator flags),
//! behind a real Envoy with wasm-epp.

use std::time::Duration;

use launcher::envoy::EnvoyOptions;
use launcher::http::Reply;
use launcher::pods::Pod;

use crate::Cluster;

impl Cluster {
    /// One pod per entry of `pod_args` (its own simulator flags), Envoy for all of them,
    /// `adjust` applied to the options; waits until the singleton saw every pod healthy.
    pub fn start_mixed(name: &str, pod_args: &[Vec<&str>], adjust: impl FnOnce(&mut EnvoyOptions)) -> Self {
        let dir = launcher::paths::run_dir(name).unwrap_or_else(|e| panic!("run dir: {e}"));
        let pods: Vec<Pod> = pod_args
            .iter()
            .map(|args| {
                let port = launcher::free_port().unwrap_or_else(|e| panic!("port: {e}"));
                Pod::start(port, args, &dir).unwrap_or_else(|e| panic!("pod: {e}"))
            })
            .collect();
        let cluster = Self::in_front_of(pods, dir, adjust);
        let count = pod_args.len() as u64;
        assert!(
            cluster.envoy.wait_for_healthy_pods(count, Duration::from_secs(15)),
            "singleton never saw {count} healthy pods:\n{}",
            cluster.envoy.log_tail(30)
        );
        cluster
    }

    /// A small completion for `model` through Envoy, with extra headers.
    pub fn complete_model(&self, model: &str, prompt: &str, headers: &[(&str, &str)]) -> Reply {
        let body = serde_json::json!({"model": model, "prompt": prompt, "max_tokens": 4});
        self.post("/v1/completions", headers, &body.to_string())
    }

    /// A counter of every pod's `/sim/stats` (e.g. `model_not_found`), summed.
    pub fn pods_stat(&self, name: &str) -> u64 {
        self.pods.iter().map(|pod| pod.stats().ok().and_then(|s| s[name].as_u64()).unwrap_or(0)).sum()
    }
}
