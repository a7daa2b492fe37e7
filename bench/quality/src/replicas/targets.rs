//! The replicas dimension's targets: N wasm-epp Envoys over one pool behind a round-robin
//! front Envoy (as a cloud load balancer spreads clients over gateway pods), with peering
//! on or off, plus the two references: the placement before issue 12 without peering, and
//! plain round robin over the pods.

use std::path::Path;
use std::time::Duration;

use launcher::baseline::{BaselineEnvoy, BaselineOptions, LbPolicy};
use launcher::replicas::{ReplicaPlan, Replicas};

/// How long each replica's singleton may take to see every pod (and its peers).
const READY_TIMEOUT: Duration = Duration::from_secs(20);

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ReplicaTarget {
    /// One wasm-epp Envoy behind the front Envoy.
    #[value(name = "wasm-epp-x1")]
    X1,
    #[value(name = "wasm-epp-x2")]
    X2,
    #[value(name = "wasm-epp-x4")]
    X4,
    #[value(name = "wasm-epp-x2-no-peering")]
    X2NoPeering,
    #[value(name = "wasm-epp-x4-no-peering")]
    X4NoPeering,
    /// Four replicas, no peering, cold prompts placed by each worker's history
    /// (`cold_placement: least_recent`): how replicas behaved before issue 12.
    #[value(name = "wasm-epp-x4-least-recent")]
    X4LeastRecent,
    /// Four replicas, no peering, `prefix.reuse_prior: 1`: new prefixes placed by hash from
    /// the first request (the setting for replicas that cannot peer, on shared-prefix traffic).
    #[value(name = "wasm-epp-x4-no-peering-prior")]
    X4NoPeeringPrior,
    /// Envoy round robin straight over the pods: no picker at all.
    #[value(name = "envoy-round-robin")]
    RoundRobin,
}

impl ReplicaTarget {
    pub fn label(self) -> &'static str {
        match self {
            ReplicaTarget::X1 => "wasm-epp-x1",
            ReplicaTarget::X2 => "wasm-epp-x2",
            ReplicaTarget::X4 => "wasm-epp-x4",
            ReplicaTarget::X2NoPeering => "wasm-epp-x2-no-peering",
            ReplicaTarget::X4NoPeering => "wasm-epp-x4-no-peering",
            ReplicaTarget::X4LeastRecent => "wasm-epp-x4-least-recent",
            ReplicaTarget::X4NoPeeringPrior => "wasm-epp-x4-no-peering-prior",
            ReplicaTarget::RoundRobin => "envoy-round-robin",
        }
    }

    /// Replicas and whether they peer (0 replicas: round robin over the pods).
    pub fn shape(self) -> (usize, bool) {
        match self {
            ReplicaTarget::X1 => (1, false),
            ReplicaTarget::X2 => (2, true),
            ReplicaTarget::X4 => (4, true),
            ReplicaTarget::X2NoPeering => (2, false),
            ReplicaTarget::X4NoPeering | ReplicaTarget::X4LeastRecent | ReplicaTarget::X4NoPeeringPrior => (4, false),
            ReplicaTarget::RoundRobin => (0, false),
        }
    }
}

/// A started target; every process stops (by pid) when it is dropped.
pub enum Running {
    Replicas(Replicas),
    RoundRobin(BaselineEnvoy),
}

impl Running {
    pub fn base_url(&self) -> String {
        match self {
            Running::Replicas(set) => set.front.url(""),
            Running::RoundRobin(envoy) => envoy.url(""),
        }
    }

    /// The wasm-epp replicas (none for round robin).
    pub fn replicas(&self) -> Option<&Replicas> {
        match self {
            Running::Replicas(set) => Some(set),
            Running::RoundRobin(_) => None,
        }
    }

    /// Any process of the target died during the run.
    pub fn has_exited(&mut self) -> bool {
        match self {
            Running::Replicas(set) => {
                set.front.has_exited() || set.replicas.iter_mut().flatten().any(|r| r.has_exited())
            }
            Running::RoundRobin(envoy) => envoy.has_exited(),
        }
    }
}

/// `WASM_EPP_PEERS_CONFIG`, a JSON object, is merged over each peering replica's `peers`
/// section (e.g. `{"heartbeat_ms": 100}`), to measure a tuning without editing code.
fn peer_overrides() -> Result<Option<serde_json::Map<String, serde_json::Value>>, String> {
    let Ok(text) = std::env::var("WASM_EPP_PEERS_CONFIG") else { return Ok(None) };
    match serde_json::from_str(&text) {
        Ok(serde_json::Value::Object(map)) => Ok(Some(map)),
        _ => Err("WASM_EPP_PEERS_CONFIG must be a JSON object".into()),
    }
}

fn port() -> Result<u16, String> {
    launcher::free_port().map_err(|e| format!("no free port: {e}"))
}

/// Starts `target` over `pool`, logs and configurations in `dir`, and waits until every
/// replica sees every pod and, when peering, hears every other replica.
pub fn start(target: ReplicaTarget, pool: &[String], dir: &Path) -> Result<Running, String> {
    let (count, peering) = target.shape();
    if count == 0 {
        let options = BaselineOptions::new(pool, LbPolicy::RoundRobin, port()?, port()?);
        return Ok(Running::RoundRobin(BaselineEnvoy::start(&options, dir)?));
    }
    let plan = ReplicaPlan::new(pool, count, peering)?;
    let overrides = peer_overrides()?;
    let least_recent = target == ReplicaTarget::X4LeastRecent;
    let prior = target == ReplicaTarget::X4NoPeeringPrior;
    let replicas = (0..count)
        .map(|index| {
            plan.start_replica_with(index, dir, |options| {
                if let Err(error) = crate::targets::merge_filter_overrides(options) {
                    eprintln!("  warning: {error}");
                }
                if let (Some(filter), true) = (options.filter_config.as_object_mut(), least_recent) {
                    filter.insert("prefix".into(), serde_json::json!({ "cold_placement": "least_recent" }));
                }
                if let (Some(filter), true) = (options.filter_config.as_object_mut(), prior) {
                    filter.insert("prefix".into(), serde_json::json!({ "reuse_prior": 1.0 }));
                }
                let section = options.poller_config.as_mut().and_then(|c| c.get_mut("peers"));
                if let (Some(section), Some(overrides)) = (section.and_then(|s| s.as_object_mut()), &overrides) {
                    section.extend(overrides.clone());
                }
            })
            .map(Some)
        })
        .collect::<Result<Vec<_>, String>>()?;
    let front = plan.start_front(dir)?;
    let set = Replicas { plan, replicas, front };
    for (index, replica) in set.live().enumerate() {
        if !replica.wait_for_healthy_pods(pool.len() as u64, READY_TIMEOUT) {
            eprintln!("  warning: replica {index} does not see all {} pods healthy; running anyway", pool.len());
        }
        let others = (count - 1) as f64;
        if peering && !launcher::wait_until(READY_TIMEOUT, || replica.stat("wasm_epp_peers_live") >= Some(others)) {
            eprintln!("  warning: replica {index} does not hear its {others} peers; running anyway");
        }
    }
    Ok(Running::Replicas(set))
}
