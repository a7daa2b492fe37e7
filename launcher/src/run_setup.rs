//! What `make run` is asked to start, read from its environment (`wasm-epp-launch --help`)
//! and checked whole before anything starts: a mistake is one line, and no process is left
//! behind for it.

use picker::role::PodRole;
use serde_json::Value;

use crate::envoy::{EnvoyOptions, ServedPool};
use crate::filter_file::{self, FilterFile};

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
    /// The simulated pods' ports on 127.0.0.1, in `POD_PORTS` order; none with
    /// `POD_ADDRESSES`, whose pods run already.
    pub sim_ports: Vec<u16>,
    /// Every pod's `ip:port`, in order: the pool Envoy's cluster and the singleton get
    /// (`POD_ADDRESSES` as the plugin writes them: IPv6 in brackets).
    pub pool: Vec<String>,
    /// Flags every simulated pod gets ([`MAKE_RUN_SIM_ARGS`], then `SIM_ARGS`).
    pub sim_args: Vec<String>,
    /// `POOLS`: the pods split in turn between these pools (pod `i` to pool `i % n`), each
    /// pod serving its pool's name as model; empty for one pool of every pod.
    pub pool_names: Vec<String>,
    /// `REPLICAS`: wasm-epp Envoys behind a round-robin front (1: Envoy alone).
    pub replicas: usize,
    pub listen_port: u16,
    pub admin_port: u16,
    /// `FILTER_CONFIG`: the filter configuration to start with, over `make run`'s own.
    pub filter_file: Option<FilterFile>,
    /// `POD_ROLES`: each pod's role in a prefill/decode pool, in pod order; none by default.
    pub roles: Vec<PodRole>,
}

/// The role's name, as the simulator's `--role` and the singleton's `roles` take it.
pub fn role_name(role: PodRole) -> &'static str {
    match role {
        PodRole::Prefill => "prefill",
        PodRole::Decode => "decode",
        PodRole::Both => "both",
    }
}

/// `POD_ROLES`: one role per pod, at least one pod a request can go to.
fn pod_roles(text: &str, pods: usize) -> Result<Vec<PodRole>, String> {
    let roles = list(text)
        .iter()
        .map(|name| {
            PodRole::from_label(name).ok_or_else(|| format!("POD_ROLES: '{name}' is not prefill, decode or both"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if roles.len() != pods {
        return Err(format!("POD_ROLES: {} roles for {pods} pods (one per pod, in the pods' order)", roles.len()));
    }
    if !roles.iter().any(|role| role.decodes()) {
        return Err("POD_ROLES: no decode (or both) pod: a request's destination is one".into());
    }
    Ok(roles)
}

fn parse_port(name: &str, text: &str) -> Result<u16, String> {
    text.trim().parse().map_err(|_| format!("{name}: '{text}' is not a port"))
}

/// A comma-separated list, its items trimmed, empty ones left out.
fn list(text: &str) -> Vec<String> {
    text.split(',').map(str::trim).filter(|item| !item.is_empty()).map(String::from).collect()
}

/// Why `POOLS` takes simulated pods only.
const POOLS_NEED_SIMULATED_PODS: &str = "POOLS splits simulated pods, each serving its pool's name as model; for \
     pools of your own pods start from envoy/examples/two-pools.yaml (docs/deployment.md)";

/// `POD_ADDRESSES`: pods that run already, checked as the plugin checks its `pool` (literal
/// `ip:port`, each once, at most `picker::pod_table::MAX_PODS`), in its canonical form.
fn running_pods(text: &str) -> Result<Vec<String>, String> {
    let hint = "literal ip:port, IPv6 as [addr]:port: Envoy's pool cluster and the scrapes connect to \
                addresses, not names";
    let entries = list(text);
    if entries.is_empty() {
        return Err("POD_ADDRESSES: no address".into());
    }
    let pool = picker::config::parse_pool(&entries).map_err(|e| {
        let reason = e.strip_prefix("pool: ").unwrap_or(&e);
        format!("POD_ADDRESSES: {reason} ({hint})")
    })?;
    Ok(pool.iter().map(|address| address.as_str().to_string()).collect())
}

impl RunSetup {
    /// Reads the setup from `var` (the environment: `|name| std::env::var(name).ok()`).
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let or = |name: &str, default: &str| var(name).unwrap_or_else(|| default.to_string());
        let set = |name: &str| var(name).is_some_and(|value| !value.trim().is_empty());
        let (sim_ports, pool, sim_args) = match var("POD_ADDRESSES").filter(|text| !text.trim().is_empty()) {
            Some(addresses) => {
                for (other, why) in [
                    ("POD_PORTS", "POD_PORTS starts simulated pods, POD_ADDRESSES points at running ones"),
                    ("SIM_ARGS", "SIM_ARGS are simulator flags, and POD_ADDRESSES starts no simulator"),
                    ("POOLS", POOLS_NEED_SIMULATED_PODS),
                ] {
                    if set(other) {
                        return Err(format!("{other} and POD_ADDRESSES: one or the other ({why})"));
                    }
                }
                (Vec::new(), running_pods(&addresses)?, Vec::new())
            }
            None => {
                let ports: Vec<u16> = or("POD_PORTS", DEFAULT_POD_PORTS)
                    .split(',')
                    .map(|p| parse_port("POD_PORTS", p))
                    .collect::<Result<_, _>>()?;
                let pool = ports.iter().map(|port| format!("127.0.0.1:{port}")).collect();
                let extra = or("SIM_ARGS", "");
                let args = MAKE_RUN_SIM_ARGS.into_iter().chain(extra.split_whitespace()).map(String::from).collect();
                (ports, pool, args)
            }
        };
        let mut setup = Self {
            sim_ports,
            pool,
            sim_args,
            pool_names: list(&or("POOLS", "")),
            replicas: or("REPLICAS", "1").trim().parse().map_err(|_| "REPLICAS: not a number".to_string())?,
            listen_port: parse_port("LISTEN_PORT", &or("LISTEN_PORT", "10000"))?,
            admin_port: parse_port("ADMIN_PORT", &or("ADMIN_PORT", "9901"))?,
            filter_file: match var("FILTER_CONFIG").filter(|path| !path.trim().is_empty()) {
                Some(path) => Some(FilterFile::read(std::path::Path::new(path.trim()))?),
                None => None,
            },
            roles: Vec::new(),
        };
        if let Some(roles) = var("POD_ROLES").filter(|text| !text.trim().is_empty()) {
            if !setup.pool_names.is_empty() {
                return Err("POOLS and POD_ROLES: one at a time in make run".into());
            }
            setup.roles = pod_roles(&roles, setup.pool.len())?;
        }
        if !setup.pool_names.is_empty() {
            if setup.replicas > 1 {
                return Err("POOLS and REPLICAS: one at a time in make run".into());
            }
            if setup.sim_ports.len() < setup.pool_names.len() {
                return Err(format!("POOLS: {} pools need at least as many POD_PORTS", setup.pool_names.len()));
            }
        }
        filter_file::check(&setup.envoy_options()).map_err(|reason| match &setup.filter_file {
            Some(file) => format!("FILTER_CONFIG {}: the plugin would refuse it: {reason}", file.path.display()),
            None => format!("the plugin would refuse make run's filter configuration: {reason}"),
        })?;
        Ok(setup)
    }

    /// Whether the pods run already (`POD_ADDRESSES`): `make run` neither starts nor stops them.
    pub fn pods_run_already(&self) -> bool {
        self.sim_ports.is_empty()
    }

    /// The POOLS pool pod `index` belongs to, if the pods are split into pools.
    pub fn pool_of(&self, index: usize) -> Option<&str> {
        let count = self.pool_names.len();
        (count > 0).then(|| self.pool_names.get(index % count)).flatten().map(String::as_str)
    }

    /// The simulator flags of pod `index`: `SIM_ARGS`, its role, its pool's name as model
    /// (none for pods that run already).
    pub fn pod_args(&self, index: usize) -> Vec<String> {
        if self.pods_run_already() {
            return Vec::new();
        }
        let mut args = self.sim_args.clone();
        if let Some(role) = self.roles.get(index) {
            args.extend(["--role".to_string(), role_name(*role).to_string()]);
        }
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
        let mut options = match self.pool_names.is_empty() {
            true => EnvoyOptions::for_pool(&self.pool, self.listen_port, self.admin_port),
            false => EnvoyOptions::for_pools(self.served_pools(), self.listen_port, self.admin_port),
        };
        self.configure(&mut options);
        options
    }

    /// Makes `options`, built for this setup's pool or pools, start as asked: the filter
    /// configuration with `FILTER_CONFIG`'s fields (checked by [`RunSetup::from_env`]); with
    /// `POD_ROLES`, the singleton's `roles` and, unless that file has one, a `pd` section of
    /// the defaults, so the pool is split as llm-d splits it.
    pub fn configure(&self, options: &mut EnvoyOptions) {
        if let Some(file) = &self.filter_file {
            file.apply(options);
        }
        if self.roles.is_empty() {
            return;
        }
        let roles = self.pool.iter().zip(&self.roles).map(|(pod, role)| (pod.clone(), role_name(*role).into()));
        if let Some(poller) = options.poller_config.as_mut().and_then(Value::as_object_mut) {
            poller.insert("roles".into(), Value::Object(roles.collect()));
        }
        if let Some(filter) = options.filter_config.as_object_mut() {
            filter.entry("pd").or_insert_with(|| serde_json::json!({}));
        }
    }
}

/// The first model of a `GET /v1/models` answer (`data[0].id`), for the request `make run`
/// suggests when the pods are not simulated.
pub fn first_model(models_answer: &str) -> Option<String> {
    let models: Value = serde_json::from_str(models_answer).ok()?;
    models.get("data")?.get(0)?.get("id")?.as_str().map(String::from)
}

#[cfg(test)]
mod tests;
