//! Gateway replicas sharing what they learn: the sender's side (in the pool service) and the
//! receiver's side (the filter on the internal peer listener).

use serde::Deserialize;

use super::{check_range, parse_pool};
use crate::address::PodAddress;
use crate::discovery::KubernetesConfig;
use crate::inflight::SLOT_STALE_MS;

/// The path peer messages are posted to on the peer listener.
pub const DEFAULT_PEER_PATH: &str = "/wasm-epp/v1/peer";

/// The header that carries the shared secret.
pub const PEER_SECRET_HEADER: &str = "x-wasm-epp-peer-secret";

/// The header in which a peer listener names its replica (hex id) when it answers: a replica
/// that reads its own id there is talking to itself.
pub const PEER_REPLICA_HEADER: &str = "x-wasm-epp-replica";

/// The longest a replica may go between two sends of its in-flight counts, and between two
/// publishes of its peers' counts to its workers: a peer's counts are dropped
/// [`SLOT_STALE_MS`] after its last message, and the workers drop the published sum as long
/// after its last publish. Half of it, so that one late or lost message does not drop a live
/// peer's load (it flickered off and on between sends).
pub const MAX_LOAD_CADENCE_MS: u64 = SLOT_STALE_MS / 2;

/// Shortest secret accepted: anything shorter can be guessed.
const MIN_SECRET_BYTES: usize = 16;

fn check_secret(secret: &str) -> Result<(), String> {
    if secret.len() < MIN_SECRET_BYTES || !secret.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!("peers: secret must be at least {MIN_SECRET_BYTES} visible ASCII characters"));
    }
    Ok(())
}

/// The pool service's peers: where to send this replica's decisions and load.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PeersConfig {
    /// The other replicas' peer listeners, as literal `ip:port` (this replica may be listed:
    /// it recognises its own messages and ignores them).
    pub peers: Vec<String>,
    /// Or find them in Kubernetes: the gateway's own pods by label selector, `target_port`
    /// being the peer listener's port.
    pub kubernetes: Option<KubernetesConfig>,
    /// An ORIGINAL_DST cluster following `destination_header` (the pool service's), used to
    /// reach each peer's listener.
    pub cluster: String,
    pub path: String,
    /// Shared by every replica; sent in [`PEER_SECRET_HEADER`].
    pub secret: String,
    /// How often new decisions are sent (load is sent at least every `heartbeat_ms`, on the
    /// pool service's ticks: see [`MAX_LOAD_CADENCE_MS`]).
    pub send_interval_ms: u64,
    pub heartbeat_ms: u64,
    pub timeout_ms: u64,
}

impl Default for PeersConfig {
    fn default() -> Self {
        Self {
            peers: Vec::new(),
            kubernetes: None,
            cluster: "wasm_epp_peers".into(),
            path: DEFAULT_PEER_PATH.into(),
            secret: String::new(),
            send_interval_ms: 50,
            heartbeat_ms: 500,
            timeout_ms: 500,
        }
    }
}

impl PeersConfig {
    pub fn validate(&self) -> Result<Vec<PodAddress>, String> {
        check_secret(&self.secret)?;
        if self.cluster.is_empty() || !self.path.starts_with('/') {
            return Err("peers: cluster must be set and path must start with '/'".into());
        }
        check_range("peers.send_interval_ms", self.send_interval_ms, 5, MAX_LOAD_CADENCE_MS)?;
        check_range("peers.heartbeat_ms", self.heartbeat_ms, self.send_interval_ms, MAX_LOAD_CADENCE_MS)?;
        check_range("peers.timeout_ms", self.timeout_ms, 10, 60_000)?;
        let peers = parse_pool(&self.peers).map_err(|e| format!("peers: {e}"))?;
        if let Some(kubernetes) = &self.kubernetes {
            kubernetes.validate().map_err(|e| format!("peers.kubernetes: {e}"))?;
        }
        // As the pool: a list the first Kubernetes list would silently replace, or no one to
        // share with, is not what a peers section means.
        match (peers.is_empty(), self.kubernetes.is_some()) {
            (false, true) => Err("peers: set one of peers and kubernetes, not both".into()),
            (true, false) => Err("peers: no replica to share with: set peers (ip:port list) or kubernetes".into()),
            _ => Ok(peers),
        }
    }
}

impl PeersConfig {
    /// How often the in-flight counts go out: the pool service sends on its ticks (every
    /// `poll_interval_ms`) once `heartbeat_ms` has passed, so every heartbeat rounded up to
    /// whole ticks. Its peers' counts reach its workers once a tick too.
    pub fn load_cadence_ms(&self, poll_interval_ms: u64) -> u64 {
        self.heartbeat_ms.div_ceil(poll_interval_ms.max(1)).saturating_mul(poll_interval_ms)
    }

    /// Refuses a cadence the peers' expiry cannot cover (see [`MAX_LOAD_CADENCE_MS`]).
    pub fn check_load_cadence(&self, poll_interval_ms: u64) -> Result<(), String> {
        let cadence = self.load_cadence_ms(poll_interval_ms);
        if cadence > MAX_LOAD_CADENCE_MS {
            return Err(format!(
                "peers: in-flight counts would go out every {cadence} ms (heartbeat_ms {} rounded up to whole \
                 poll_interval_ms of {poll_interval_ms}), but peers drop them {SLOT_STALE_MS} ms after the last \
                 message: lower heartbeat_ms or poll_interval_ms so that this is at most {MAX_LOAD_CADENCE_MS} ms",
                self.heartbeat_ms
            ));
        }
        Ok(())
    }
}

/// The filter's side, set only on the internal peer listener: every request there is a peer
/// message (answered locally, never routed); without this section the path means nothing.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PeerReceiverConfig {
    pub path: String,
    pub secret: String,
}

impl Default for PeerReceiverConfig {
    fn default() -> Self {
        Self { path: DEFAULT_PEER_PATH.into(), secret: String::new() }
    }
}

impl PeerReceiverConfig {
    pub fn validate(&self) -> Result<(), String> {
        check_secret(&self.secret)?;
        if !self.path.starts_with('/') {
            return Err("peer_receiver: path must start with '/'".into());
        }
        Ok(())
    }
}
