//! What gateway replicas tell each other: their routing decisions, their requests in flight
//! per pod, the epoch they know each pod under, and how many of their workers hold requests
//! waiting (flow control's share of the pool across replicas, see [`crate::flow_share`]).
//!
//! One message per send, little-endian, no field names:
//!
//! ```text
//! message = magic:"WEPP" version:u8 replica:u64 seq:u64 sent_ms:u64
//!           pod_count:u16 (address_len:u8 address epoch:u32 inflight:u32) × pod_count
//!           batch (see crate::prefix::events)
//!           [end:u8 = 0 waiting_workers:u32 [top_band:i32 workers_at_top:u32
//!            [token_count:u16 tokens:u32 × token_count]]]
//! ```
//!
//! The waiting workers come after the batch, behind a 0 byte: where a batch's next event
//! would start, a 0 is an address of no byte, which ends the batch. So a receiver that
//! predates the field (it decodes everything after the pods as the batch) reads the same
//! decisions and ignores the rest, and mixed versions keep peering during a rolling upgrade;
//! a message without the field (from such a sender, or a snapshot) counts no worker waiting.
//! Then the highest band the sender's workers wait at and how many wait at it (those of
//! unknown band, an older build's, included; `workers_at_top` 0: no band known): a receiver
//! that predates them stops at `waiting_workers`, and a message without them (an older
//! sender's) counts its `waiting_workers` at any band (see [`crate::flow_share::Waiting`]).
//! Then each pod's uncached prompt tokens in flight (learning's and P/D's token load), in the
//! pods' order: a receiver that predates them stops at `workers_at_top`, and a message
//! without them (or whose count is not the pods') counts no token. Bytes after them are
//! ignored, for fields to come.
//!
//! Decoding trusts nothing (a peer may be broken or hostile): sizes are bounded, addresses
//! must be literal `ip:port`, a peer counts at most [`MAX_WAITING_PER_PEER`] waiting
//! workers, and [`PeerLedger`] refuses replays, messages from the receiver itself and
//! messages too old to describe the pool now.

use hashbrown::HashMap;

use crate::address::PodAddress;
use crate::config::MAX_PRIORITY;
use crate::flow_share::MAX_WAITING_PER_PEER;
use crate::pod_table::MAX_PODS;
use crate::prefix::events::{batch_len, decode_batch, RoutingEvent};
use crate::wire::Reader;

const MAGIC: &[u8; 4] = b"WEPP";
const VERSION: u8 = 1;
const HEADER_BYTES: usize = 4 + 1 + 8 + 8 + 8;

/// What ends the batch before the fields that follow it (an event's address of no byte).
const END_OF_BATCH: u8 = 0;
/// The fields after the batch: the end mark, the waiting workers, the top band and the
/// workers at it.
const TRAILER_BYTES: usize = 1 + 4 + 4 + 4;

/// Largest message accepted: a full batch of decisions and a full pod list fit well within.
pub const MAX_MESSAGE_BYTES: usize = 1 << 20;

/// Peers remembered at most (older ones are forgotten first): gateways run a few replicas.
pub const MAX_PEERS: usize = 64;

/// A message whose send time is further than this from ours is refused: a replay, or a
/// peer whose clock is so wrong that its view of the pool cannot be placed in time.
pub const MAX_MESSAGE_AGE_MS: u64 = 10_000;

/// One pod as the sending replica sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerPod {
    pub address: PodAddress,
    /// The sender's epoch for the pod: events under an older one are stale.
    pub epoch: u32,
    /// Requests the sender has in flight to the pod.
    pub inflight: u32,
    /// Uncached prompt tokens the sender has in flight to the pod, not yet answered.
    pub tokens: u32,
}

/// A decoded message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerMessage {
    pub replica: u64,
    pub seq: u64,
    pub sent_ms: u64,
    pub pods: Vec<PeerPod>,
    pub events: Vec<RoutingEvent>,
    /// The sender's workers with requests waiting in flow control (0 from a sender that
    /// predates the field; at most [`MAX_WAITING_PER_PEER`] once decoded).
    pub waiting_workers: u32,
    /// The highest band the sender's workers wait at and how many of them wait at it (`None`
    /// from a sender that predates the field, or when none of known band waits; once
    /// decoded the band is clamped to the queue's bands and the workers to
    /// `waiting_workers`).
    pub waiting_top: Option<(i32, u32)>,
}

/// Why a message was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    Malformed,
    TooLarge,
    /// Sent by this replica (a peer list that includes ourselves).
    FromSelf,
    /// A sequence number already seen from that replica.
    Replayed,
    /// Sent more than [`MAX_MESSAGE_AGE_MS`] from now.
    OutOfTime,
}

impl PeerMessage {
    pub fn encode(&self, batch: &[u8]) -> Vec<u8> {
        let pods = self.pods.get(..MAX_PODS).unwrap_or(&self.pods);
        let mut out = Vec::with_capacity(HEADER_BYTES + 2 + pods.len() * 32 + batch.len());
        out.extend_from_slice(MAGIC);
        out.push(VERSION);
        out.extend_from_slice(&self.replica.to_le_bytes());
        out.extend_from_slice(&self.seq.to_le_bytes());
        out.extend_from_slice(&self.sent_ms.to_le_bytes());
        out.extend_from_slice(&u16::try_from(pods.len()).unwrap_or(u16::MAX).to_le_bytes());
        for pod in pods {
            let address = pod.address.as_str().as_bytes();
            out.push(u8::try_from(address.len()).unwrap_or(0));
            out.extend_from_slice(address);
            out.extend_from_slice(&pod.epoch.to_le_bytes());
            out.extend_from_slice(&pod.inflight.to_le_bytes());
        }
        out.extend_from_slice(batch);
        out.push(END_OF_BATCH);
        out.extend_from_slice(&self.waiting_workers.to_le_bytes());
        let (top, at) = self.waiting_top.unwrap_or((0, 0));
        out.extend_from_slice(&top.to_le_bytes());
        out.extend_from_slice(&at.to_le_bytes());
        out.extend_from_slice(&u16::try_from(pods.len()).unwrap_or(u16::MAX).to_le_bytes());
        for pod in pods {
            out.extend_from_slice(&pod.tokens.to_le_bytes());
        }
        out
    }

    /// Bytes left for the batch of decisions once this message's header and pods are encoded,
    /// so that the whole stays within [`MAX_MESSAGE_BYTES`] (a receiver refuses more).
    pub fn batch_budget(&self) -> usize {
        let pods = self.pods.get(..MAX_PODS).unwrap_or(&self.pods);
        // Per pod: its address's length byte, the address, epoch and in-flight count, and its
        // tokens after the trailer.
        let pods_bytes = pods
            .iter()
            .fold(0usize, |sum, pod| sum.saturating_add(pod.address.as_str().len()).saturating_add(1 + 8 + 4));
        MAX_MESSAGE_BYTES.saturating_sub(HEADER_BYTES + 2 + TRAILER_BYTES + 2).saturating_sub(pods_bytes)
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, Refused> {
        if bytes.len() > MAX_MESSAGE_BYTES {
            return Err(Refused::TooLarge);
        }
        const MALFORMED: Refused = Refused::Malformed;
        let mut reader = Reader::new(bytes);
        if reader.take(4).ok_or(MALFORMED)? != MAGIC || reader.u8() != Some(VERSION) {
            return Err(MALFORMED);
        }
        let replica = reader.u64().ok_or(MALFORMED)?;
        let seq = reader.u64().ok_or(MALFORMED)?;
        let sent_ms = reader.u64().ok_or(MALFORMED)?;
        let count = usize::from(reader.u16().ok_or(MALFORMED)?);
        if count > MAX_PODS {
            return Err(Refused::Malformed);
        }
        let mut pods = Vec::with_capacity(count);
        for _ in 0..count {
            let len = usize::from(reader.u8().ok_or(MALFORMED)?);
            let text = std::str::from_utf8(reader.take(len).ok_or(MALFORMED)?).map_err(|_| MALFORMED)?;
            let address = PodAddress::parse(text).map_err(|_| Refused::Malformed)?;
            let epoch = reader.u32().ok_or(MALFORMED)?;
            let inflight = reader.u32().ok_or(MALFORMED)?;
            pods.push(PeerPod { address, epoch, inflight, tokens: 0 });
        }
        let rest = reader.rest();
        let (batch, trailer) = rest.split_at(batch_len(rest).min(rest.len()));
        let events = decode_batch(batch);
        let (waiting_workers, waiting_top) = waiting(trailer);
        read_tokens(trailer.get(TRAILER_BYTES..).unwrap_or_default(), &mut pods);
        Ok(Self { replica, seq, sent_ms, pods, events, waiting_workers, waiting_top })
    }
}

/// The waiting workers after the batch and the band of the highest, bounded; none if the
/// message has none (an older sender's).
fn waiting(trailer: &[u8]) -> (u32, Option<(i32, u32)>) {
    let Some((&END_OF_BATCH, rest)) = trailer.split_first() else { return (0, None) };
    let field = |at: usize| rest.get(at..at + 4).and_then(|b| <[u8; 4]>::try_from(b).ok());
    let workers = field(0).map_or(0, u32::from_le_bytes).min(MAX_WAITING_PER_PEER);
    let top = match (field(4).map(i32::from_le_bytes), field(8).map(u32::from_le_bytes)) {
        (Some(band), Some(at)) if at > 0 && workers > 0 => {
            Some((band.clamp(-MAX_PRIORITY, MAX_PRIORITY), at.min(workers)))
        }
        _ => None,
    };
    (workers, top)
}

/// Reads the pods' tokens after the trailer into `pods`; none unless the field is whole and
/// names as many pods as the message does.
fn read_tokens(field: &[u8], pods: &mut [PeerPod]) {
    let mut reader = Reader::new(field);
    if reader.u16().map(usize::from) != Some(pods.len()) {
        return;
    }
    let Some(tokens) = reader.take(pods.len() * 4) else { return };
    for (pod, bytes) in pods.iter_mut().zip(tokens.chunks_exact(4)) {
        pod.tokens = <[u8; 4]>::try_from(bytes).map_or(0, u32::from_le_bytes);
    }
}

/// Sequence numbers below a peer's highest that are still told apart: a peer keeps two
/// messages outstanding, and two connections may hand them to this Envoy's workers in either
/// order, so the older one can come second.
const REORDER_WINDOW: u64 = 64;

/// What was seen from one peer: its highest sequence number, which of the
/// [`REORDER_WINDOW`] below it came too (bit `n`: `highest - 1 - n`), and when it was heard.
#[derive(Debug, Clone, Copy)]
struct Seen {
    highest: u64,
    below: u64,
    heard_ms: u64,
}

impl Seen {
    /// Takes `seq` if it is new (above the highest, or in the window and not seen yet).
    fn take(&mut self, seq: u64) -> bool {
        if seq > self.highest {
            let shift = seq - self.highest;
            // The old highest becomes bit `shift - 1`; what falls out of the window is gone.
            self.below = match u32::try_from(shift) {
                Ok(shift) if u64::from(shift) <= REORDER_WINDOW => {
                    self.below.checked_shl(shift).unwrap_or(0) | (1 << (shift - 1))
                }
                _ => 0,
            };
            self.highest = seq;
            return true;
        }
        let back = self.highest - seq;
        if back == 0 || back > REORDER_WINDOW {
            return false;
        }
        let bit = 1u64 << (back - 1);
        let new = self.below & bit == 0;
        self.below |= bit;
        new
    }
}

/// The sequence numbers seen from each peer, to refuse replays.
#[derive(Debug, Default)]
pub struct PeerLedger {
    peers: HashMap<u64, Seen>,
}

impl PeerLedger {
    /// Accepts `message` from a peer (and remembers its sequence number) or says why not.
    pub fn admit(&mut self, message: &PeerMessage, own_replica: u64, now_ms: u64) -> Result<(), Refused> {
        if message.replica == own_replica {
            return Err(Refused::FromSelf);
        }
        if now_ms.abs_diff(message.sent_ms) > MAX_MESSAGE_AGE_MS {
            return Err(Refused::OutOfTime);
        }
        if let Some(seen) = self.peers.get_mut(&message.replica) {
            if !seen.take(message.seq) {
                return Err(Refused::Replayed);
            }
            seen.heard_ms = now_ms;
            return Ok(());
        }
        if self.peers.len() >= MAX_PEERS {
            let oldest = self.peers.iter().min_by_key(|(_, seen)| seen.heard_ms).map(|(id, _)| *id);
            if let Some(oldest) = oldest {
                self.peers.remove(&oldest);
            }
        }
        self.peers.insert(message.replica, Seen { highest: message.seq, below: 0, heard_ms: now_ms });
        Ok(())
    }

    /// Peers heard from within `window_ms`.
    pub fn live_peers(&self, now_ms: u64, window_ms: u64) -> usize {
        self.peers.values().filter(|seen| now_ms.saturating_sub(seen.heard_ms) <= window_ms).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prefix::events::{decode_batch, encode_batch};

    #[test]
    fn a_peer_s_messages_may_arrive_out_of_order_but_not_twice() {
        let mut seen = Seen { highest: 10, below: 0, heard_ms: 0 };
        assert!(seen.take(12), "a newer one");
        assert!(seen.take(11), "the one before it, handed over second");
        assert!(!seen.take(11) && !seen.take(12) && !seen.take(10), "each once");
        assert!(seen.take(12 + REORDER_WINDOW), "a jump of the whole window");
        assert!(!seen.take(12), "seen, at the window's edge");
        assert!(seen.take(13), "in the window, not seen yet");
        assert!(seen.take(u64::MAX) && !seen.take(u64::MAX), "no overflow at the end");
    }

    fn message(replica: u64, seq: u64, sent_ms: u64) -> PeerMessage {
        PeerMessage {
            replica,
            seq,
            sent_ms,
            pods: vec![PeerPod {
                address: PodAddress::parse("10.0.0.1:8000").unwrap(),
                epoch: 3,
                inflight: 7,
                tokens: 6_000,
            }],
            events: vec![RoutingEvent { pod: "10.0.0.1:8000".into(), epoch: 3, origin: 0, hashes: vec![1, 2, 3] }],
            waiting_workers: 2,
            waiting_top: Some((1, 1)),
        }
    }

    #[test]
    fn round_trips() {
        let sent = message(5, 9, 1_000);
        let bytes = sent.encode(&encode_batch(&sent.events));
        assert_eq!(PeerMessage::decode(&bytes), Ok(sent));
    }

    /// The pods' tokens after the trailer: their count and one `u32` per pod.
    const TOKENS_BYTES: usize = 2 + 4;

    /// What a sender before the pods' tokens wrote.
    fn without_tokens(message: &PeerMessage) -> PeerMessage {
        let mut older = message.clone();
        older.pods.iter_mut().for_each(|pod| pod.tokens = 0);
        older
    }

    #[test]
    fn the_pods_tokens_follow_the_band_and_a_message_without_them_counts_none() {
        let sent = message(5, 9, 1_000);
        let bytes = sent.encode(&encode_batch(&sent.events));
        let older = PeerMessage::decode(&bytes[..bytes.len() - TOKENS_BYTES]).unwrap();
        assert_eq!(older, without_tokens(&sent), "a sender before them: the rest as sent");
        assert_eq!(PeerMessage::decode(&bytes[..bytes.len() - 1]).unwrap(), without_tokens(&sent), "cut");
        // A count that is not the pods': no token counted, nothing else refused.
        let mut wrong = bytes.clone();
        let at = bytes.len() - TOKENS_BYTES;
        wrong[at..at + 2].copy_from_slice(&2u16.to_le_bytes());
        assert_eq!(PeerMessage::decode(&wrong).unwrap(), without_tokens(&sent));
        let longer = [&bytes[..], b"more"].concat();
        assert_eq!(PeerMessage::decode(&longer), Ok(sent), "fields to come are ignored");
    }

    #[test]
    fn the_waiting_workers_follow_the_batch_and_a_receiver_that_predates_them_ignores_them() {
        let sent = message(5, 9, 1_000);
        let batch = encode_batch(&sent.events);
        let bytes = sent.encode(&batch);
        // What a sender before the pods' tokens wrote, which this test is about.
        let bytes = &bytes[..bytes.len() - TOKENS_BYTES];
        let sent = without_tokens(&sent);
        // An older receiver decodes everything after the pods as the batch: the same decisions.
        let pods_end = bytes.len() - batch.len() - TRAILER_BYTES;
        assert_eq!(decode_batch(&bytes[pods_end..]), sent.events);
        // An older sender's message (no field after the batch): no worker counted as waiting.
        let old = PeerMessage::decode(&bytes[..bytes.len() - TRAILER_BYTES]).unwrap();
        assert_eq!(old, PeerMessage { waiting_workers: 0, waiting_top: None, ..sent.clone() });
        // The sender of the last version (waiting workers, no band): counted at any band.
        let no_band = PeerMessage::decode(&bytes[..bytes.len() - 8]).unwrap();
        assert_eq!(no_band, PeerMessage { waiting_top: None, ..sent.clone() });
        // Neither older receiver reads the band: the last one stops after `waiting_workers`
        // (it ignores what follows), the one before stops at the batch's end.
        assert_eq!(u32::from_le_bytes(bytes[pods_end + batch.len() + 1..][..4].try_into().unwrap()), 2);
        // No decision in the message: the field right after the batch's version byte.
        let idle = PeerMessage { events: Vec::new(), ..sent.clone() };
        assert_eq!(PeerMessage::decode(&idle.encode(&encode_batch(&[]))), Ok(idle.clone()));
        // An older receiver reads no decision there either (a 0 is no event).
        assert!(decode_batch(&idle.encode(&encode_batch(&[]))[pods_end..]).is_empty());
        // Fields to come after it are ignored; a cut field counts nothing.
        let longer = [bytes, b"more"].concat();
        assert_eq!(PeerMessage::decode(&longer), Ok(sent.clone()));
        assert_eq!(PeerMessage::decode(&bytes[..bytes.len() - 9]).unwrap().waiting_workers, 0);
        assert_eq!(PeerMessage::decode(&bytes[..bytes.len() - 1]).unwrap().waiting_top, None);
    }

    #[test]
    fn a_peer_claiming_a_billion_waiting_workers_counts_as_many_as_an_envoy_has() {
        let sent = PeerMessage { waiting_workers: 1_000_000_000, ..message(5, 9, 1_000) };
        let decoded = PeerMessage::decode(&sent.encode(&encode_batch(&sent.events))).unwrap();
        assert_eq!(decoded.waiting_workers, MAX_WAITING_PER_PEER);
        assert_eq!(decoded.events, sent.events);
        // A band out of range, more workers at it than wait: clamped.
        let sent = PeerMessage { waiting_top: Some((i32::MAX, u32::MAX)), ..message(5, 9, 1_000) };
        let decoded = PeerMessage::decode(&sent.encode(&encode_batch(&sent.events))).unwrap();
        assert_eq!(decoded.waiting_top, Some((MAX_PRIORITY, 2)));
        // Workers at a band while none waits: nothing.
        let sent = PeerMessage { waiting_workers: 0, waiting_top: Some((3, 4)), ..message(5, 9, 1_000) };
        assert_eq!(PeerMessage::decode(&sent.encode(&encode_batch(&sent.events))).unwrap().waiting_top, None);
    }

    #[test]
    fn the_batch_budget_is_what_the_pods_leave_of_the_limit() {
        let sent = message(5, 9, 1_000);
        let header = sent.encode(&[]).len();
        assert_eq!(sent.batch_budget(), MAX_MESSAGE_BYTES - header);
    }

    #[test]
    fn garbage_and_truncation_are_refused_not_panicked_on() {
        let sent = message(5, 9, 1_000);
        let bytes = sent.encode(&encode_batch(&sent.events));
        for cut in 0..HEADER_BYTES + 2 + 19 {
            assert!(PeerMessage::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        assert_eq!(PeerMessage::decode(b"GET / HTTP/1.1"), Err(Refused::Malformed));
        assert_eq!(PeerMessage::decode(&vec![0; MAX_MESSAGE_BYTES + 1]), Err(Refused::TooLarge));
    }

    #[test]
    fn the_ledger_refuses_replays_self_and_old_messages() {
        let mut ledger = PeerLedger::default();
        assert_eq!(ledger.admit(&message(5, 1, 1_000), 9, 1_000), Ok(()));
        assert_eq!(ledger.admit(&message(5, 1, 1_000), 9, 1_001), Err(Refused::Replayed));
        assert_eq!(ledger.admit(&message(5, 2, 1_000), 9, 1_001), Ok(()));
        assert_eq!(ledger.admit(&message(9, 1, 1_000), 9, 1_001), Err(Refused::FromSelf));
        assert_eq!(ledger.admit(&message(6, 1, 1_000), 9, 1_000 + MAX_MESSAGE_AGE_MS + 1), Err(Refused::OutOfTime));
        for replica in 100..100 + MAX_PEERS as u64 * 2 {
            let _ = ledger.admit(&message(replica, 1, 1_000), 9, 1_000);
        }
        assert!(ledger.peers.len() <= MAX_PEERS);
    }
}
