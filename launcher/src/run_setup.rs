//! What `make run` is asked to start, read from its environment (`wasm-epp-launch --help`)
//! and checked whole before anything starts: a mistake is one line, and no process is left
//! behind for it.

use crate::envoy::{EnvoyOptions, ServedPool};

/// The pods' ports when `POD_PORTS` is not set.
pub const DEFAULT_POD_PORTS: &str = "8001,8002,8003,8004";
/// The request header that chooses a pool with `POOLS`.
pub const POOL_HEADER: &str = "x-pool";
/// Flags every simulated pod of `make run` gets before `SIM_ARGS`: keep Responses API answers
/// (vLLM's `VLLM_ENABLE_RESPONSES_API_STORE=1`), so a `previous_response_id` continues on the
/// pod that stored it, as the README's example does; without it the pod answers 400. A pod
/// keeps at most [`vllm_sim::api::responses_api::MAX_STORED_RESPONSES`], the oldest dropped
/// first. Tests and benchmarks start their pods without it, as vLLM runs by default.
pub const MAKE_RUN_SIM_ARGS: [&str; 1] = ["--responses-store"];

/// Everything `make run` starts, as its environment asked.
#[derive(Debug, Clone)]
pub struct RunSetup {
    /// The simulated pods' ports on 127.0.0.1, in `POD_PORTS` order.
    pub sim_ports: Vec<u16>,
    /// Every pod's `ip:port`, in order: the pool Envoy's cluster and the singleton get.
    pub pool: Vec<String>,
    /// Flags every simulated pod gets ([`MAKE_RUN_SIM_ARGS`], then `SIM_ARGS`).
    pub sim_args: Vec<String>,
    /// `POOLS`: the pods split in turn between these pools (pod `i` to pool `i % n`), each
    /// pod serving its pool's name as model; none serves the one pool.
    pub pool_names: Vec<String>,
    /// `REPLICAS`: wasm-epp Envoys behind a round-robin front (1: Envoy alone).
    pub replicas: usize,
    pub listen_port: u16,
    pub admin_port: u16,
}

fn parse_port(name: &str, text: &str) -> Result<u16, String> {
    text.trim().parse().map_err(|_| format!("{name}: '{text}' is not a port"))
}

/// A comma-separated list, its items trimmed, empty ones left out.
fn list(text: &str) -> Vec<String> {
    text.split(',').map(str::trim).filter(|item| !item.is_empty()).map(String::from).collect()
}

impl RunSetup {
    /// Reads the setup from `var` (the environment: `|name| std::env::var(name).ok()`).
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let or = |name: &str, default: &str| var(name).unwrap_or_else(|| default.to_string());
        let sim_ports: Vec<u16> = or("POD_PORTS", DEFAULT_POD_PORTS)
            .split(',')
            .map(|p| parse_port("POD_PORTS", p))
            .collect::<Result<_, _>>()?;
        let replicas = or("REPLICAS", "1").trim().parse().map_err(|_| "REPLICAS: not a number".to_string())?;
        let setup = Self {
            pool: sim_ports.iter().map(|port| format!("127.0.0.1:{port}")).collect(),
            sim_ports,
            sim_args: MAKE_RUN_SIM_ARGS
                .into_iter()
                .chain(or("SIM_ARGS", "").split_whitespace())
                .map(String::from)
                .collect(),
            pool_names: list(&or("POOLS", "")),
            replicas,
            listen_port: parse_port("LISTEN_PORT", &or("LISTEN_PORT", "10000"))?,
            admin_port: parse_port("ADMIN_PORT", &or("ADMIN_PORT", "9901"))?,
        };
        if !setup.pool_names.is_empty() {
            if setup.replicas > 1 {
                return Err("POOLS and REPLICAS: one at a time in make run".into());
            }
            if setup.sim_ports.len() < setup.pool_names.len() {
                return Err(format!("POOLS: {} pools need at least as many POD_PORTS", setup.pool_names.len()));
            }
        }
        Ok(setup)
    }

    /// The POOLS pool pod `index` belongs to, if the pods are split into pools.
    pub fn pool_of(&self, index: usize) -> Option<&str> {
        let count = self.pool_names.len();
        (count > 0).then(|| self.pool_names.get(index % count)).flatten().map(String::as_str)
    }

    /// The simulator flags of pod `index`: `SIM_ARGS`, then its pool's name as model.
    pub fn pod_args(&self, index: usize) -> Vec<String> {
        let mut args = self.sim_args.clone();
        if let Some(name) = self.pool_of(index) {
            args.extend(["--model".to_string(), name.to_string()]);
        }
        args
    }

    /// The POOLS pools, each of its pods, chosen by the [`POOL_HEADER`] header.
    pub fn served_pools(&self) -> Vec<ServedPool> {
        let pools = self.pool_names.iter().map(|name| {
            let members: Vec<String> = (0..self.pool.len())
                .filter(|&index| self.pool_of(index) == Some(name.as_str()))
                .filter_map(|index| self.pool.get(index).cloned())
                .collect();
            ServedPool::by_header(name, &members, POOL_HEADER)
        });
        pools.collect()
    }

    /// The options of the one wasm-epp Envoy (of each replica, listening elsewhere):
    /// the pool, or the POOLS pools.
    pub fn envoy_options(&self) -> EnvoyOptions {
        match self.pool_names.is_empty() {
            true => EnvoyOptions::for_pool(&self.pool, self.listen_port, self.admin_port),
            false => EnvoyOptions::for_pools(self.served_pools(), self.listen_port, self.admin_port),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The setup from these variables alone.
    pub(crate) fn setup(vars: &[(&str, &str)]) -> Result<RunSetup, String> {
        RunSetup::from_env(|name| vars.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string()))
    }

    #[test]
    fn nothing_set_is_four_simulated_pods_behind_one_envoy() {
        let run = setup(&[]).unwrap();
        assert_eq!(run.sim_ports, [8001, 8002, 8003, 8004]);
        assert_eq!(run.pool, ["127.0.0.1:8001", "127.0.0.1:8002", "127.0.0.1:8003", "127.0.0.1:8004"]);
        assert_eq!((run.listen_port, run.admin_port, run.replicas), (10_000, 9_901, 1));
        assert_eq!(run.pod_args(0), ["--responses-store"], "previous_response_id works as the README shows");
        let options = run.envoy_options();
        assert_eq!(options.pool, run.pool);
        assert_eq!(options.filter_config, serde_json::json!({ "pool": run.pool }));
    }

    #[test]
    fn pools_take_the_pods_in_turn_and_each_pod_serves_its_pools_name() {
        let run = setup(&[("POOLS", "llama, qwen"), ("SIM_ARGS", "--preset large")]).unwrap();
        let pools = run.served_pools();
        assert_eq!(
            pools.iter().map(|p| p.pods.clone()).collect::<Vec<_>>(),
            [["127.0.0.1:8001", "127.0.0.1:8003"], ["127.0.0.1:8002", "127.0.0.1:8004"]]
        );
        assert_eq!(run.pod_args(3), ["--responses-store", "--preset", "large", "--model", "qwen"]);
        assert_eq!(run.envoy_options().pools.len(), 2);
        assert!(setup(&[("POOLS", "a,b,c"), ("POD_PORTS", "9001,9002")]).unwrap_err().contains("3 pools"));
        assert!(setup(&[("POOLS", "a,b"), ("REPLICAS", "2")]).unwrap_err().contains("one at a time"));
    }

    #[test]
    fn a_value_that_is_no_port_or_number_is_named() {
        assert_eq!(setup(&[("POD_PORTS", "8001,80x2")]).unwrap_err(), "POD_PORTS: '80x2' is not a port");
        assert!(setup(&[("LISTEN_PORT", "70000")]).unwrap_err().starts_with("LISTEN_PORT"));
        assert!(setup(&[("REPLICAS", "many")]).unwrap_err().starts_with("REPLICAS"));
    }
}
