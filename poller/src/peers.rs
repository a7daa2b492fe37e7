//! Gateway replicas routing as one: each replica's pool service sends its workers' new
//! routing decisions, its requests in flight per pod and how many of its workers hold
//! requests waiting (flow control) to every peer, and feeds what peers send into its own
//! ring, in-flight view and flow control's share of the pool. No store, no extra process:
//! the replicas are Envoys that talk HTTP to each other's internal peer listener.
//!
//! Sending: every `send_interval_ms` when there are new decisions, at least every
//! `heartbeat_ms` for the load; one POST per peer, never more than
//! [`MAX_OUTSTANDING_PER_PEER`] unanswered, so nothing queues behind a dead peer.
//! Receiving: the filter on the peer listener checks the secret and hands the body to this
//! service over the `peer-inbox` queue; here each message is decoded, checked against
//! replays ([`PeerLedger`]) and its decisions translated to this replica's epochs: an event
//! under the peer's current epoch for a pod is recorded under ours; under an older one it
//! is stale and dropped, so a restarted pod's empty cache is respected across replicas.

use std::collections::VecDeque;

use hashbrown::HashMap;
use picker::address::PodAddress;
use picker::config::PEER_REPLICA_HEADER;
use picker::config::{PeersConfig, PEER_SECRET_HEADER};
use picker::flow_share::{publish_peer_waiting, waiting_view, Waiting, SERVICE_STALE_AFTER_MS};
use picker::inflight::{envoy_loads, publish_peer_counts, Load, SLOT_STALE_MS};
use picker::keys::{PEER_INBOX, REPLICA_ID};
use picker::peer::{PeerLedger, PeerMessage, PeerPod, Refused, MAX_MESSAGE_BYTES};
use picker::pod_table::PodState;
use picker::prefix::events::{count_within, encode_batch, RoutingEvent, MAX_EVENTS_PER_BATCH, NO_ORIGIN};
use wasm_epp_host::{Counter, Gauge, Host, Metrics};

use crate::clock_skew::ClockSkewWarning;
use crate::discovery::{Discovery, DiscoveryTarget, Env};

/// Decisions waiting to be sent at most; older ones are dropped first (and counted) when
/// decisions come faster than messages carry them (each carries what fits in
/// [`MAX_MESSAGE_BYTES`], at most a full batch).
const MAX_OUTBOX_EVENTS: usize = MAX_EVENTS_PER_BATCH;

/// Unanswered sends per peer at most: a peer that does not answer gets no more until it
/// does or the calls time out.
pub const MAX_OUTSTANDING_PER_PEER: usize = 2;

/// Inbox messages handled per wake (each POST from a peer makes one).
const MAX_INBOX_PER_WAKE: usize = 64;

struct Stats {
    messages_sent: Counter,
    bytes_sent: Counter,
    events_sent: Counter,
    send_failed: Counter,
    send_skipped: Counter,
    outbox_dropped: Counter,
    messages_received: Counter,
    events_received: Counter,
    events_stale: Counter,
    snapshot_events: Counter,
    rejected: Counter,
    /// Of the rejected, those sent too far from this replica's clock.
    out_of_time: Counter,
    replayed: Counter,
    lag_ms: Gauge,
    live_peers: Gauge,
    /// The live peers' workers with requests waiting in flow control, summed.
    peer_waiting_workers: Gauge,
    /// 1 once this replica found itself in its peer list (and stopped sending there).
    self_listed: Gauge,
}

impl Stats {
    fn define(metrics: &Metrics) -> Self {
        let c = |name: &str| metrics.counter(name);
        Self {
            messages_sent: c("wasm_epp.peer_messages_sent"),
            bytes_sent: c("wasm_epp.peer_bytes_sent"),
            events_sent: c("wasm_epp.peer_events_sent"),
            send_failed: c("wasm_epp.peer_send_failed"),
            send_skipped: c("wasm_epp.peer_send_skipped"),
            outbox_dropped: c("wasm_epp.peer_outbox_dropped"),
            messages_received: c("wasm_epp.peer_messages_received"),
            events_received: c("wasm_epp.peer_events_received"),
            events_stale: c("wasm_epp.peer_events_stale"),
            snapshot_events: c("wasm_epp.peer_snapshot_events"),
            rejected: c("wasm_epp.peer_messages_rejected"),
            out_of_time: c("wasm_epp.peer_messages_out_of_time"),
            replayed: c("wasm_epp.peer_messages_replayed"),
            lag_ms: metrics.gauge("wasm_epp.peer_lag_ms"),
            live_peers: metrics.gauge("wasm_epp.peers_live"),
            peer_waiting_workers: metrics.gauge("wasm_epp.peer_waiting_workers"),
            self_listed: metrics.gauge("wasm_epp.peer_self_listed"),
        }
    }
}

/// What one peer said last.
struct RemoteLoad {
    heard_ms: u64,
    /// The sequence number of the message it was read from.
    seq: u64,
    /// Its requests and uncached prompt tokens in flight per pod.
    load: Vec<(String, Load)>,
    /// Its workers with requests waiting in flow control (bounded on decoding).
    waiting_workers: u32,
    /// The highest band they wait at and how many wait at it (`None`: an older peer's
    /// message, its waiting workers of unknown band).
    waiting_top: Option<(i32, u32)>,
}

struct Call {
    token: u32,
    peer: usize,
    started_ms: u64,
}

/// A starting replica asks one peer after another for a snapshot of recent decisions.
enum Snapshot {
    Wanted { next_peer: usize, tries: usize },
    Asked { token: u32, peer: usize, started_ms: u64, tries: usize },
    Done,
}

impl Snapshot {
    /// `peer` did not give one on try `tries`: the next peer's turn.
    fn after(peer: usize, tries: usize) -> Self {
        Self::Wanted { next_peer: peer.saturating_add(1), tries: tries.saturating_add(1) }
    }
}

pub struct PeerExchange {
    config: PeersConfig,
    peers: Vec<PodAddress>,
    /// This replica's id for this run (a restart is a new replica to its peers).
    replica: u64,
    seq: u64,
    outbox: VecDeque<RoutingEvent>,
    last_send_ms: u64,
    calls: Vec<Call>,
    inbox: u32,
    ledger: PeerLedger,
    /// Warns (rate-limited) when a peer's clock is too far from ours to peer with it.
    clock_skew: ClockSkewWarning,
    /// What each peer last said it has in flight and waiting, by replica.
    remote_load: HashMap<u64, RemoteLoad>,
    snapshot: Snapshot,
    /// When the snapshot first waited for peer discovery's first list (see
    /// [`PeerExchange::awaiting_peer_list`]).
    peer_list_awaited_since_ms: Option<u64>,
    /// This replica's own address among the peers, once an answer named this replica: a
    /// label selector lists the replica's own pod, and sending there only costs CPU.
    own_address: Option<PodAddress>,
    /// Finds the peers in Kubernetes, when configured so.
    discovery: Option<Discovery>,
    stats: Stats,
}

impl DiscoveryTarget for PeerExchange {
    fn set_pool(&mut self, pool: Vec<PodAddress>, _now_ms: u64) {
        self.calls.clear(); // indices into the old list
        self.peers = pool;
    }
}

impl PeerExchange {
    pub fn start(host: &dyn Host, config: PeersConfig, metrics: &Metrics) -> Result<Self, String> {
        let peers = config.validate()?;
        let discovery =
            config.kubernetes.clone().map(|k| Discovery::new(k, metrics, "wasm_epp.peer_discovery")).transpose()?;
        let inbox = host.register_queue(PEER_INBOX).map_err(|e| format!("register {PEER_INBOX}: {e}"))?;
        // Differs per start and per Envoy (the clock's nanoseconds, mixed with the VM's id).
        let replica = host.random_seed() ^ picker::vm_id::unique_vm_id(host).unwrap_or(0).rotate_left(32) | 1;
        log::info!("wasm-epp pool service: sharing decisions with {} peers as replica {replica:016x}", peers.len());
        // The peer listener names this replica in its answers (see `note_answer`).
        if let Err(error) = host.set(REPLICA_ID, format!("{replica:016x}").as_bytes(), None) {
            log::warn!("wasm-epp pool service: replica id not published ({error:?}); it may send to itself");
        }
        Ok(Self {
            config,
            peers,
            replica,
            seq: 0,
            outbox: VecDeque::new(),
            last_send_ms: 0,
            calls: Vec::new(),
            inbox,
            ledger: PeerLedger::default(),
            clock_skew: ClockSkewWarning::default(),
            remote_load: HashMap::new(),
            snapshot: Snapshot::Wanted { next_peer: 0, tries: 0 },
            peer_list_awaited_since_ms: None,
            own_address: None,
            discovery,
            stats: Stats::define(metrics),
        })
    }

    pub fn inbox(&self) -> u32 {
        self.inbox
    }

    pub fn owns(&self, token: u32) -> bool {
        self.calls.iter().any(|c| c.token == token)
            || matches!(self.snapshot, Snapshot::Asked { token: asked, .. } if asked == token)
            || self.discovery.as_ref().is_some_and(|d| d.owns(token))
    }

    /// Queues this replica's own new decisions for the next send.
    pub fn queue_local(&mut self, metrics: &Metrics, events: &[RoutingEvent]) {
        for event in events {
            if self.outbox.len() >= MAX_OUTBOX_EVENTS {
                self.outbox.pop_front();
                metrics.increment(self.stats.outbox_dropped);
            }
            self.outbox.push_back(event.clone());
        }
    }

    /// On the tick: forget calls past their timeout, publish the peers' load for the
    /// workers, catch up once the pool is known (`pool_known`: this replica's first round
    /// of scrapes is done, so its epochs are settled), and send when due.
    pub fn tick<'a>(
        &mut self,
        host: &dyn Host,
        metrics: &Metrics,
        now: u64,
        pods: impl Iterator<Item = &'a PodState>,
        pool_known: bool,
    ) {
        if let Some(mut discovery) = self.discovery.take() {
            discovery.on_tick(&Env { host, metrics }, now, self);
            self.discovery = Some(discovery);
        }
        let expiry = self.config.timeout_ms.saturating_mul(2);
        self.calls.retain(|c| picker::clock::within_last(now, c.started_ms, expiry));
        self.publish_remote_load(host, metrics, now);
        if pool_known {
            self.ask_for_snapshot(host, now, expiry);
        }
        let interval = if self.outbox.is_empty() { self.config.heartbeat_ms } else { self.config.send_interval_ms };
        // A last send "after now" was before the wall clock stepped back: due now, or nothing
        // (load, decisions) would reach the peers until the clock caught up.
        let due = !picker::clock::within_last(now, self.last_send_ms, interval.saturating_sub(1));
        if !due || self.peers.is_empty() {
            return;
        }
        self.last_send_ms = now;
        self.seq = self.seq.saturating_add(1);
        let loads = envoy_loads(host, now);
        let pods = pods
            .map(|pod| {
                let Load { count: inflight, tokens } = loads.get(pod.address.as_str()).copied().unwrap_or_default();
                PeerPod { address: pod.address.clone(), epoch: pod.epoch, inflight, tokens }
            })
            .collect();
        // Read on the send (a heartbeat at most), not per request: the workers' own records.
        let waiting = waiting_view(host, None, now, SERVICE_STALE_AFTER_MS);
        let message = PeerMessage {
            replica: self.replica,
            seq: self.seq,
            sent_ms: now,
            pods,
            events: Vec::new(),
            waiting_workers: waiting.workers,
            // Its workers of unknown band (an older build's, during an upgrade) count at any
            // band, so at its highest too.
            waiting_top: waiting.top.map(|(band, at)| (band, at.saturating_add(waiting.unknown))),
        };
        // A message over MAX_MESSAGE_BYTES is refused whole by every peer (413): it carries the
        // oldest decisions that fit, and the rest wait in the (bounded) outbox for the next send.
        let take = count_within(&self.outbox, message.batch_budget());
        let events: Vec<RoutingEvent> = self.outbox.drain(..take).collect();
        let body = message.encode(&encode_batch(&events));
        for (index, peer) in self.peers.iter().enumerate() {
            if self.own_address.as_ref() == Some(peer) {
                continue;
            }
            if self.calls.iter().filter(|c| c.peer == index).count() >= MAX_OUTSTANDING_PER_PEER {
                metrics.increment(self.stats.send_skipped);
                continue;
            }
            let headers = [
                (":method", "POST"),
                (":path", self.config.path.as_str()),
                (":authority", peer.as_str()),
                ("x-gateway-destination-endpoint", peer.as_str()),
                (PEER_SECRET_HEADER, self.config.secret.as_str()),
                ("content-type", "application/octet-stream"),
            ];
            match host.dispatch_call(&self.config.cluster, &headers, &body, self.config.timeout_ms) {
                Ok(token) => {
                    self.calls.push(Call { token, peer: index, started_ms: now });
                    metrics.increment(self.stats.messages_sent);
                    metrics.add(self.stats.bytes_sent, body.len() as u64);
                    metrics.add(self.stats.events_sent, events.len() as u64);
                }
                Err(error) => {
                    metrics.increment(self.stats.send_failed);
                    log::debug!("wasm-epp pool service: send to peer {peer} refused: {error}");
                }
            }
        }
    }

    /// A peer answered (or the call failed). A snapshot's decisions come back, in this
    /// replica's epochs, for the ring.
    pub fn on_response<'a>(
        &mut self,
        host: &dyn Host,
        metrics: &Metrics,
        token: u32,
        body_size: usize,
        pods: impl Iterator<Item = &'a PodState>,
    ) -> Vec<RoutingEvent> {
        if let Some(mut discovery) = self.discovery.take() {
            if discovery.owns(token) {
                discovery.on_response(&Env { host, metrics }, token, body_size, host.now_ms(), self);
                self.discovery = Some(discovery);
                return Vec::new();
            }
            self.discovery = Some(discovery);
        }
        let ok = host.call_response_status().is_some_and(|s| (200..300).contains(&s));
        if let Snapshot::Asked { token: asked, peer, tries, .. } = self.snapshot {
            if asked == token {
                if ok && self.answered_by_self(host, metrics, peer) {
                    // Its own ring: nothing to catch up on there.
                    self.snapshot = Snapshot::after(peer, tries);
                    return Vec::new();
                }
                let body = if ok {
                    host.call_response_body(body_size, MAX_MESSAGE_BYTES).unwrap_or_default()
                } else {
                    Vec::new()
                };
                return match PeerMessage::decode(&body) {
                    Ok(message) => {
                        self.snapshot = Snapshot::Done;
                        let ours: HashMap<&str, u32> = pods.map(|p| (p.address.as_str(), p.epoch)).collect();
                        let (events, stale) = translate(message.events, &message.pods, &ours);
                        metrics.add(self.stats.snapshot_events, events.len() as u64);
                        metrics.add(self.stats.events_stale, stale);
                        log::info!(
                            "wasm-epp pool service: caught up from peer {} ({} decisions)",
                            self.peer_name(peer),
                            events.len()
                        );
                        events
                    }
                    Err(_) => {
                        metrics.increment(self.stats.send_failed);
                        self.snapshot = Snapshot::after(peer, tries);
                        Vec::new()
                    }
                };
            }
        }
        self.note_answer(host, metrics, token);
        self.calls.retain(|c| c.token != token);
        if !ok {
            metrics.increment(self.stats.send_failed);
        }
        Vec::new()
    }

    /// Notes whether the answer to a message came from this replica itself.
    fn note_answer(&mut self, host: &dyn Host, metrics: &Metrics, token: u32) {
        if let Some(peer) = self.calls.iter().find(|c| c.token == token).map(|c| c.peer) {
            self.answered_by_self(host, metrics, peer);
        }
    }

    /// Whether the answer from `peer` carries this replica's own id: that address is this
    /// Envoy, and it gets no more messages (nor snapshot requests).
    fn answered_by_self(&mut self, host: &dyn Host, metrics: &Metrics, peer: usize) -> bool {
        let Some(named) = host.call_response_header(PEER_REPLICA_HEADER) else { return false };
        if named != format!("{:016x}", self.replica).as_bytes() {
            return false;
        }
        if let Some(address) = self.peers.get(peer) {
            log::info!("wasm-epp pool service: peer {address} is this replica; not sending there");
            self.own_address = Some(address.clone());
            metrics.set(self.stats.self_listed, 1);
        }
        true
    }

    fn peer_name(&self, index: usize) -> &str {
        self.peers.get(index).map_or("?", PodAddress::as_str)
    }

    /// Asks the next peer for a snapshot, until one gives it or every peer was tried twice.
    fn ask_for_snapshot(&mut self, host: &dyn Host, now: u64, expiry: u64) {
        if let Snapshot::Asked { started_ms, peer, tries, .. } = self.snapshot {
            if now.saturating_sub(started_ms) > expiry {
                self.snapshot = Snapshot::after(peer, tries);
            }
        }
        let Snapshot::Wanted { next_peer, tries } = self.snapshot else { return };
        if self.peers.is_empty() && self.awaiting_peer_list(now) {
            return;
        }
        if self.peers.is_empty() || tries >= self.peers.len().saturating_mul(2) {
            self.snapshot = Snapshot::Done;
            return;
        }
        let peer = next_peer % self.peers.len();
        let Some(address) = self.peers.get(peer) else { return };
        if self.own_address.as_ref() == Some(address) {
            self.snapshot = Snapshot::after(peer, tries);
            return;
        }
        let path = format!("{}/snapshot", self.config.path);
        let headers = [
            (":method", "GET"),
            (":path", path.as_str()),
            (":authority", address.as_str()),
            ("x-gateway-destination-endpoint", address.as_str()),
            (PEER_SECRET_HEADER, self.config.secret.as_str()),
        ];
        self.snapshot = match host.dispatch_call(&self.config.cluster, &headers, &[], self.config.timeout_ms) {
            Ok(token) => Snapshot::Asked { token, peer, started_ms: now, tries },
            Err(_) => Snapshot::after(peer, tries),
        };
    }

    /// With peers found in Kubernetes, no peers yet may be a list not answered yet (the
    /// pool's first round of scrapes can end first): the snapshot waits for the first list,
    /// at most `relist_interval_ms + 2 × timeout_ms` of the peer discovery from when it first
    /// waited, time for a failed first list to be retried once, so a list that keeps failing
    /// does not hold it for good.
    fn awaiting_peer_list(&mut self, now: u64) -> bool {
        let (Some(discovery), Some(kubernetes)) = (&self.discovery, &self.config.kubernetes) else { return false };
        if discovery.has_listed() {
            return false;
        }
        let bound = kubernetes.relist_interval_ms.saturating_add(kubernetes.timeout_ms.saturating_mul(2));
        let since = *self.peer_list_awaited_since_ms.get_or_insert(now);
        let waiting = now.saturating_sub(since) < bound;
        if !waiting {
            log::warn!("wasm-epp pool service: no peer list after {bound} ms; starting without a snapshot");
        }
        waiting
    }

    /// Handles what peers sent: returns their decisions, in this replica's epochs, for the
    /// ring. `pods` is this replica's current view of the pool.
    pub fn receive<'a>(
        &mut self,
        host: &dyn Host,
        metrics: &Metrics,
        now: u64,
        pods: impl Iterator<Item = &'a PodState>,
    ) -> Vec<RoutingEvent> {
        let ours: HashMap<&str, u32> = pods.map(|p| (p.address.as_str(), p.epoch)).collect();
        let mut accepted = Vec::new();
        for _ in 0..MAX_INBOX_PER_WAKE {
            let Ok(Some(bytes)) = host.dequeue(self.inbox) else { break };
            let admitted = PeerMessage::decode(&bytes).and_then(|m| match self.ledger.admit(&m, self.replica, now) {
                Ok(()) => Ok(m),
                Err(Refused::OutOfTime) => {
                    self.clock_skew.refused(now, m.replica, m.sent_ms);
                    Err(Refused::OutOfTime)
                }
                Err(reason) => Err(reason),
            });
            let message = match admitted {
                Ok(message) => message,
                Err(Refused::Replayed) => {
                    metrics.increment(self.stats.replayed);
                    continue;
                }
                Err(Refused::FromSelf) => continue,
                Err(reason) => {
                    metrics.increment(self.stats.rejected);
                    if reason == Refused::OutOfTime {
                        metrics.increment(self.stats.out_of_time);
                    }
                    log::debug!("wasm-epp pool service: peer message refused: {reason:?}");
                    continue;
                }
            };
            metrics.increment(self.stats.messages_received);
            metrics.set(self.stats.lag_ms, now.saturating_sub(message.sent_ms));
            let load = (message.pods.iter())
                .map(|p| (p.address.as_str().to_string(), Load { count: p.inflight, tokens: p.tokens }))
                .collect();
            let remote = RemoteLoad {
                heard_ms: now,
                seq: message.seq,
                load,
                waiting_workers: message.waiting_workers,
                waiting_top: message.waiting_top,
            };
            // The ledger takes a message handed over after a newer one (two connections, either
            // order) for its decisions; its load is older than what the newer one said (tokens
            // released since would count again until the next message).
            match self.remote_load.get_mut(&message.replica) {
                Some(known) if known.seq > message.seq => known.heard_ms = now,
                _ => {
                    self.remote_load.insert(message.replica, remote);
                }
            }
            let (events, stale) = translate(message.events, &message.pods, &ours);
            metrics.add(self.stats.events_received, events.len() as u64);
            metrics.add(self.stats.events_stale, stale);
            accepted.extend(events);
        }
        accepted
    }

    /// Sums what live peers have in flight, and their waiting workers, and publishes both
    /// for the workers.
    fn publish_remote_load(&mut self, host: &dyn Host, metrics: &Metrics, now: u64) {
        self.remote_load.retain(|_, RemoteLoad { heard_ms: heard, .. }| {
            // The host's clock is the wall clock: stepped back, a peer heard "after now" would
            // count as just heard until the clock caught up, a departed replica's load kept on
            // the pods for the length of the step. Heard now instead: a live peer stays live,
            // a departed one expires SLOT_STALE_MS after the step.
            *heard = (*heard).min(now);
            now.saturating_sub(*heard) <= SLOT_STALE_MS
        });
        metrics.set(self.stats.live_peers, self.remote_load.len() as u64);
        let mut totals: HashMap<String, Load> = HashMap::new();
        let mut waiting = Waiting::default();
        for remote in self.remote_load.values() {
            for (address, load) in &remote.load {
                totals.entry_ref(address.as_str()).or_default().add(*load);
            }
            let mut peer = Waiting::default();
            match remote.waiting_top {
                Some((band, at)) => {
                    peer.add(Some(band), at);
                    // Its workers below its highest band wait too (the sum older builds read).
                    peer.workers = peer.workers.saturating_add(remote.waiting_workers.saturating_sub(at));
                }
                None => peer.add(None, remote.waiting_workers),
            }
            waiting.merge(peer);
        }
        if let Err(error) = publish_peer_counts(host, now, &totals) {
            log::debug!("wasm-epp pool service: peer load not published: {error:?}");
        }
        // Bounded there (MAX_PEERS peers' worth): more replica ids than that within the
        // expiry are one peer's forgeries, not more peers.
        metrics.set(self.stats.peer_waiting_workers, u64::from(waiting.workers));
        if let Err(error) = publish_peer_waiting(host, now, waiting) {
            log::debug!("wasm-epp pool service: peers' waiting workers not published: {error:?}");
        }
    }
}

/// A peer's decisions in this replica's epochs: an event under the peer's current epoch for
/// a pod this replica also knows is kept under this replica's epoch; the rest are stale
/// (the pod restarted since, or is not in this pool). Returns the kept events and how many
/// were stale.
fn translate(events: Vec<RoutingEvent>, theirs: &[PeerPod], ours: &HashMap<&str, u32>) -> (Vec<RoutingEvent>, u64) {
    // Looked up once per event: a scan of the peer's pods per event was O(events × pods) on
    // Envoy's main thread (4,096 × 1,024 for a full message). A pod named twice keeps its first.
    let mut peer_epochs: HashMap<&str, u32> = HashMap::with_capacity(theirs.len());
    for pod in theirs {
        peer_epochs.entry(pod.address.as_str()).or_insert(pod.epoch);
    }
    let mut kept = Vec::with_capacity(events.len());
    let mut stale = 0;
    for event in events {
        let peer_epoch = peer_epochs.get(event.pod.as_str()).copied();
        match (peer_epoch, ours.get(event.pod.as_str())) {
            // Not any of this Envoy's workers' own: every worker learns it.
            (Some(peer_epoch), Some(&epoch)) if peer_epoch == event.epoch => {
                kept.push(RoutingEvent { epoch, origin: NO_ORIGIN, ..event })
            }
            _ => stale += 1,
        }
    }
    (kept, stale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_message_is_translated_pod_by_pod() {
        let address = |n: u32| format!("10.0.{}.{}:8000", n / 256, n % 256);
        let theirs: Vec<PeerPod> = (0..1_024)
            .map(|n| PeerPod { address: PodAddress::parse(&address(n)).unwrap(), epoch: n, inflight: 0, tokens: 0 })
            .collect();
        let our_addresses: Vec<String> = (0..1_024).map(address).collect();
        let ours: HashMap<&str, u32> = our_addresses.iter().map(|a| (a.as_str(), 7)).collect();
        // Even pods under the peer's current epoch, odd ones under an older one.
        let events: Vec<RoutingEvent> = (0..4_096u32)
            .map(|n| {
                let pod = n % 1_024;
                let epoch = if n % 2 == 0 { pod } else { pod.wrapping_sub(1) };
                RoutingEvent { pod: address(pod), epoch, origin: 3, hashes: vec![u64::from(n)] }
            })
            .collect();
        let (kept, stale) = translate(events, &theirs, &ours);
        assert_eq!((kept.len(), stale), (2_048, 2_048));
        assert!(kept.iter().all(|e| e.epoch == 7 && e.origin == NO_ORIGIN && e.hashes[0] % 2 == 0));
        // A pod the peer names twice: its first epoch counts.
        let mut twice = theirs.clone();
        twice.push(PeerPod { address: PodAddress::parse(&address(0)).unwrap(), epoch: 99, inflight: 0, tokens: 0 });
        let event = RoutingEvent { pod: address(0), epoch: 0, origin: 3, hashes: vec![1] };
        assert_eq!(translate(vec![event], &twice, &ours).0.len(), 1);
    }
}
