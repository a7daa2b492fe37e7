//! A prefill/decode pool behind Envoy: prefill pods (`--role prefill`) and decode pods
//! (`--role decode`, whose simulated sidecar acts on `x-prefiller-host-port`), with the roles
//! given to wasm-epp by the singleton's static `roles` and the filter's `pd` section.

use std::time::Duration;

use launcher::envoy::{Envoy, EnvoyOptions};
use launcher::http::{self, Reply};
use launcher::pods::{start_pool, Pod};
use serde_json::{json, Value};

/// The header the filter writes with the prefill pod and the decode pod's sidecar reads.
pub const PREFILLER_HEADER: &str = "x-prefiller-host-port";

pub struct PdCluster {
    pub prefill: Vec<Pod>,
    pub decode: Vec<Pod>,
    pub envoy: Envoy,
    pub dir: std::path::PathBuf,
}

impl PdCluster {
    /// `prefill` + `decode` pods with `sim_args`, roles from the static configuration, the
    /// filter's `pd` section set to `pd`; waits until every pod is healthy.
    pub fn start(name: &str, prefill: usize, decode: usize, sim_args: &[&str], pd: Value) -> Self {
        Self::start_apart(name, (prefill, sim_args), (decode, sim_args), pd)
    }

    /// [`PdCluster::start`], each role's pods with their own count and `sim_args` (models,
    /// adapters).
    pub fn start_apart(name: &str, prefill: (usize, &[&str]), decode: (usize, &[&str]), pd: Value) -> Self {
        let dir = launcher::paths::run_dir(name).unwrap_or_else(|e| panic!("run dir: {e}"));
        fn with_role<'a>(sim_args: &[&'a str], role: &'a str) -> Vec<&'a str> {
            [sim_args, &["--role", role]].concat()
        }
        let prefill =
            start_pool(prefill.0, &with_role(prefill.1, "prefill"), &dir).unwrap_or_else(|e| panic!("pods: {e}"));
        let decode = start_pool(decode.0, &with_role(decode.1, "decode"), &dir).unwrap_or_else(|e| panic!("pods: {e}"));
        let pool: Vec<String> = prefill.iter().chain(&decode).map(Pod::address).collect();
        let roles: serde_json::Map<String, Value> = prefill
            .iter()
            .map(|pod| (pod.address(), json!("prefill")))
            .chain(decode.iter().map(|pod| (pod.address(), json!("decode"))))
            .collect();
        let listen = launcher::free_port().unwrap_or_else(|e| panic!("port: {e}"));
        let admin = launcher::free_port().unwrap_or_else(|e| panic!("port: {e}"));
        let mut options = EnvoyOptions::for_pool(&pool, listen, admin);
        options.filter_config = json!({ "pool": pool, "pd": pd });
        options.poller_config = Some(json!({ "pool": pool, "poll_interval_ms": 100, "roles": roles }));
        let envoy = Envoy::start(&options, &dir).unwrap_or_else(|e| panic!("envoy: {e}"));
        assert!(
            envoy.wait_for_healthy_pods(pool.len() as u64, Duration::from_secs(15)),
            "singleton never saw every pod healthy:\n{}",
            envoy.log_tail(30)
        );
        Self { prefill, decode, envoy, dir }
    }

    /// A completion of `max_tokens` through Envoy, with extra request headers.
    pub fn complete(&self, prompt: &str, max_tokens: u32, headers: &[(&str, &str)]) -> Reply {
        let body = json!({"model": "sim-model", "prompt": prompt, "max_tokens": max_tokens}).to_string();
        http::post(&self.envoy.url("/v1/completions"), headers, &body, crate::REQUEST_TIMEOUT)
            .unwrap_or_else(|e| panic!("request failed: {e}\n{}", self.envoy.log_tail(20)))
    }

    pub fn decode_addresses(&self) -> Vec<String> {
        self.decode.iter().map(Pod::address).collect()
    }

    /// The sum over `pods` of one `/sim/stats` P/D counter (`remote_prefills`, ...).
    pub fn pd_counter(pods: &[Pod], counter: &str) -> u64 {
        pods.iter().map(|pod| pod.stats().ok().and_then(|s| s["pd"][counter].as_u64()).unwrap_or(0)).sum()
    }

    /// The sum over `pods` of a top-level `/sim/stats` number (`prompt_tokens`, ...).
    pub fn stat_sum(pods: &[Pod], name: &str) -> u64 {
        pods.iter().map(|pod| pod.stats().ok().and_then(|s| s[name].as_u64()).unwrap_or(0)).sum()
    }
}

/// `count` one-token words of the simulator's tokenizer (four letters each), distinct per `seed`.
pub fn prompt_of_tokens(count: usize, seed: u64) -> String {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(1);
    let mut words = Vec::with_capacity(count);
    for _ in 0..count {
        state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        let letters: String = (0..4).map(|i| char::from(b'a' + ((state >> (33 + 5 * i)) % 26) as u8)).collect();
        words.push(letters);
    }
    words.join(" ")
}
