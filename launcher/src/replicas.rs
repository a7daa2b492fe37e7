//! Several wasm-epp Envoys over one pool, as a gateway scaled out: each replica has its own
//! listener, admin and peer ports, shares its routing decisions with the others when
//! peering is on (docs/design.md, "Several gateway replicas"), and a plain round-robin
//! "front" Envoy spreads clients over the replicas as a cloud load balancer would.
//!
//! Every port is chosen and held ([`crate::PortReservation`]) before any replica starts, so
//! each replica's static peer list can name replicas that start later (catch-up) or die
//! (faults). Each replica lives in its own folder (`replica-<i>/envoy.yaml`, `envoy.log`)
//! and is stopped by pid when dropped.

use std::path::{Path, PathBuf};

use crate::baseline::{BaselineEnvoy, BaselineOptions, LbPolicy};
use crate::envoy::{Envoy, EnvoyOptions, Peering};

/// The shared secret local replicas use (tests and benchmarks only; a deployment keeps its
/// own in a Kubernetes Secret).
pub const LOCAL_PEER_SECRET: &str = "local-replicas-shared-secret";

/// The ports of one replica.
#[derive(Debug, Clone, Copy)]
pub struct ReplicaPorts {
    pub listen: u16,
    pub admin: u16,
    pub peer: u16,
}

impl ReplicaPorts {
    pub fn peer_address(&self) -> String {
        format!("127.0.0.1:{}", self.peer)
    }

    /// Where this replica's `wasm_epp_*` stats are (the front Envoy has none).
    pub fn stats_url(&self) -> String {
        format!("http://127.0.0.1:{}/stats/prometheus", self.admin)
    }
}

/// How a set of replicas is started.
#[derive(Debug)]
pub struct ReplicaPlan {
    /// The pool's pods, `ip:port`.
    pub pool: Vec<String>,
    pub ports: Vec<ReplicaPorts>,
    /// Each replica's ports stay held until it starts (a later replica's could otherwise be
    /// taken meanwhile); emptied as each starts.
    held: std::sync::Mutex<Vec<Vec<crate::PortReservation>>>,
    /// Share decisions (peer listener, cluster and the singleton's `peers` section).
    pub peering: bool,
    pub secret: String,
    /// Worker threads per replica.
    pub concurrency: u32,
}

impl ReplicaPlan {
    /// `count` replicas over `pool` on free ports.
    pub fn new(pool: &[String], count: usize, peering: bool) -> Result<Self, String> {
        let reserve = || crate::PortReservation::new().map_err(|e| format!("free port: {e}"));
        let (mut ports, mut held) = (Vec::with_capacity(count), Vec::with_capacity(count));
        for _ in 0..count {
            let (listen, admin, peer) = (reserve()?, reserve()?, reserve()?);
            ports.push(ReplicaPorts { listen: listen.port(), admin: admin.port(), peer: peer.port() });
            held.push(vec![listen, admin, peer]);
        }
        Ok(Self {
            pool: pool.to_vec(),
            ports,
            held: std::sync::Mutex::new(held),
            peering,
            secret: LOCAL_PEER_SECRET.into(),
            concurrency: 2,
        })
    }

    /// The Envoy options of replica `index`: every replica lists every peer listener (its
    /// own included: the plugin recognises its own messages and ignores them).
    pub fn options(&self, index: usize) -> Result<EnvoyOptions, String> {
        let ports = self.ports.get(index).ok_or_else(|| format!("no replica {index}"))?;
        let mut options = EnvoyOptions::for_pool(&self.pool, ports.listen, ports.admin);
        options.concurrency = self.concurrency;
        if self.peering {
            let peering = Peering {
                listen_address: "127.0.0.1".into(),
                port: ports.peer,
                secret: self.secret.clone(),
                peers: self.ports.iter().map(ReplicaPorts::peer_address).collect(),
            };
            options = options.with_peering(peering);
        }
        Ok(options)
    }

    /// Starts replica `index` in `dir/replica-<index>`.
    pub fn start_replica(&self, index: usize, dir: &Path) -> Result<Envoy, String> {
        self.start_replica_with(index, dir, |_| {})
    }

    /// As [`ReplicaPlan::start_replica`], after `adjust` has changed the options.
    pub fn start_replica_with(
        &self,
        index: usize,
        dir: &Path,
        adjust: impl FnOnce(&mut EnvoyOptions),
    ) -> Result<Envoy, String> {
        let mut options = self.options(index)?;
        adjust(&mut options);
        let folder = replica_dir(dir, index)?;
        // Freed just before Envoy binds them (a restarted replica finds them freed already).
        if let Some(held) = self.held.lock().map_err(|_| "port reservations poisoned")?.get_mut(index) {
            held.clear();
        }
        Envoy::start(&options, &folder).map_err(|e| format!("replica {index}: {e}"))
    }

    /// Starts the round-robin front Envoy over every replica's listener (started or not:
    /// Envoy's outlier-free round robin simply fails a request to a dead one).
    pub fn start_front(&self, dir: &Path) -> Result<BaselineEnvoy, String> {
        let port = || crate::free_port().map_err(|e| format!("free port: {e}"));
        self.start_front_on(dir, port()?, port()?)
    }

    /// As [`ReplicaPlan::start_front`], listening on `listen_port` (admin on `admin_port`).
    pub fn start_front_on(&self, dir: &Path, listen_port: u16, admin_port: u16) -> Result<BaselineEnvoy, String> {
        let listeners: Vec<String> = self.ports.iter().map(|p| format!("127.0.0.1:{}", p.listen)).collect();
        let mut options = BaselineOptions::new(&listeners, LbPolicy::RoundRobin, listen_port, admin_port);
        options.concurrency = self.concurrency;
        let folder = dir.join("front");
        std::fs::create_dir_all(&folder).map_err(|e| format!("{}: {e}", folder.display()))?;
        BaselineEnvoy::start(&options, &folder)
    }
}

fn replica_dir(dir: &Path, index: usize) -> Result<PathBuf, String> {
    let folder = dir.join(format!("replica-{index}"));
    std::fs::create_dir_all(&folder).map_err(|e| format!("{}: {e}", folder.display()))?;
    Ok(folder)
}

/// Every replica of a plan started, plus the front Envoy; all stopped when dropped.
pub struct Replicas {
    pub plan: ReplicaPlan,
    /// `None` once a replica was killed.
    pub replicas: Vec<Option<Envoy>>,
    pub front: BaselineEnvoy,
}

impl Replicas {
    /// Starts every replica of `plan` (one after another) and the front Envoy.
    pub fn start(plan: ReplicaPlan, dir: &Path) -> Result<Self, String> {
        let replicas = (0..plan.ports.len()).map(|i| plan.start_replica(i, dir).map(Some)).collect::<Result<_, _>>()?;
        let front = plan.start_front(dir)?;
        Ok(Self { plan, replicas, front })
    }

    /// The replicas still running.
    pub fn live(&self) -> impl Iterator<Item = &Envoy> {
        self.replicas.iter().flatten()
    }

    /// Process ids of the running replicas (for CPU accounting).
    pub fn pids(&self) -> Vec<u32> {
        self.live().map(Envoy::pid).collect()
    }

    /// Sum of one `wasm_epp*` stat over the running replicas (absent reads as 0).
    pub fn stat_sum(&self, name: &str) -> f64 {
        self.live().map(|r| r.stat(name).unwrap_or(0.0)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peering_replica_renders_its_listener_cluster_and_peers_section() {
        let pool = vec!["127.0.0.1:8001".to_string(), "127.0.0.1:8002".to_string()];
        let plan = ReplicaPlan::new(&pool, 2, true).unwrap();
        let template = std::fs::read_to_string(crate::paths::envoy_template()).unwrap();
        let rendered = crate::envoy::render(&template, &plan.options(0).unwrap());
        assert!(!rendered.contains("{{"), "every placeholder filled");
        assert!(rendered.contains("name: wasm_epp_peer\n") && rendered.contains("name: wasm_epp_peers\n"));
        assert!(rendered.contains(&format!("port_value: {}", plan.ports[0].peer)));
        assert!(rendered
            .contains(r#"{"peer_receiver":{"path":"/wasm-epp/v1/peer","secret":"local-replicas-shared-secret"}}"#));
        for ports in &plan.ports {
            assert!(rendered.contains(&ports.peer_address()), "the singleton lists every peer");
        }
        // Nothing on the peer listener is routed: its only route is a direct 404.
        let listener = rendered.split_once("- name: wasm_epp_peer\n").unwrap().1.split("  clusters:").next().unwrap();
        assert!(listener.contains("direct_response: { status: 404 }") && !listener.contains("cluster: pool"));
    }

    #[test]
    fn a_replicas_ports_are_held_until_it_starts_and_refuse_connections_meanwhile() {
        let plan = ReplicaPlan::new(&["127.0.0.1:8001".to_string()], 2, true).unwrap();
        let ports = plan.ports[1];
        let all = [ports.listen, ports.admin, ports.peer];
        for port in all {
            assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err(), "held, not listening: {port}");
        }
        // What start_replica_with does before Envoy binds them.
        plan.held.lock().unwrap()[1].clear();
        for port in all {
            let listener = std::net::TcpListener::bind(("127.0.0.1", port));
            assert!(listener.is_ok(), "free once released: {port}");
        }
        assert_eq!(plan.held.lock().unwrap()[0].len(), 3, "replica 0's ports are still held");
    }

    #[test]
    fn each_replicas_stats_are_on_its_own_admin_port() {
        let plan = ReplicaPlan::new(&["127.0.0.1:8001".to_string()], 2, false).unwrap();
        for (index, ports) in plan.ports.iter().enumerate() {
            let options = plan.options(index).unwrap();
            assert_eq!(ports.stats_url(), format!("http://127.0.0.1:{}/stats/prometheus", options.admin_port));
        }
        assert_ne!(plan.ports[0].stats_url(), plan.ports[1].stats_url());
    }

    #[test]
    fn without_peering_nothing_of_it_is_rendered() {
        let plan = ReplicaPlan::new(&["127.0.0.1:8001".to_string()], 2, false).unwrap();
        let template = std::fs::read_to_string(crate::paths::envoy_template()).unwrap();
        let rendered = crate::envoy::render(&template, &plan.options(1).unwrap());
        assert!(!rendered.contains("wasm_epp_peer") && !rendered.contains("peer_receiver") && !rendered.contains("{{"));
    }
}
