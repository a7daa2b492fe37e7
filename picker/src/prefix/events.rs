//! Routing events, "pod P now holds chain h1..hn", and their compact binary batch codec.
//!
//! Workers send their decisions to the singleton in batches over a shared queue, and the
//! singleton republishes them in the ring (see [`super::ring`]); every worker decodes every
//! batch, so the format is small and cheap: no JSON, no field names. Little-endian:
//!
//! ```text
//! batch = version:u8 event*
//! event = address_len:u8 address:utf8 epoch:u32 origin:u32 hash_count:u16 hash:u64 × hash_count
//! ```
//!
//! `origin` names the worker VM that made the decision, so it can skip its own events when
//! they come back through the ring (it recorded them when it picked). Version 2 added it;
//! a batch of version 1 (a gateway replica or pool service not yet upgraded) decodes empty.
//!
//! Events are self-delimiting, so a batch may be cut between any two events and the pieces
//! re-headed with the version byte ([`split_batch`]). Decoding trusts nothing: it stops at the
//! first truncated or oversized event, keeping the whole ones before it, and drops events whose
//! address is not a literal `ip:port`, so a bad byte can never make a destination.

use crate::address::PodAddress;

use super::hash::MAX_BLOCKS;

/// The layout version, first byte of every batch; a batch of another version decodes empty.
pub const BATCH_VERSION: u8 = 2;

/// Hashes per event at most: no request hashes more blocks than this.
pub const MAX_HASHES_PER_EVENT: usize = MAX_BLOCKS;

/// Events per decoded batch at most. A 64 KiB ring segment holds at most ~4,700 of the smallest
/// events (no hashes), so this rarely binds there; it caps the work a hostile batch can cause.
pub const MAX_EVENTS_PER_BATCH: usize = 4096;

/// The largest encoded event: a 255-byte address and a full chain.
pub const MAX_EVENT_BYTES: usize = ADDRESS_LEN_BYTES + u8::MAX as usize + FIELDS_BYTES + 8 * MAX_HASHES_PER_EVENT;

/// Bytes of an event before its address, and between its address and its hashes (epoch,
/// origin, hash count).
const ADDRESS_LEN_BYTES: usize = 1;
const FIELDS_BYTES: usize = 4 + 4 + 2;

/// The origin of an event no worker of this Envoy made (another replica's, relayed): never
/// skipped.
pub const NO_ORIGIN: u32 = 0;

/// One routing decision: `pod`, under `epoch`, was sent a prompt whose block chain is `hashes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoutingEvent {
    pub pod: String,
    pub epoch: u32,
    /// The worker VM that decided it ([`NO_ORIGIN`] when not one of this Envoy's).
    pub origin: u32,
    pub hashes: Vec<u64>,
}

/// Encodes the first [`MAX_EVENTS_PER_BATCH`] events, each with at most
/// [`MAX_HASHES_PER_EVENT`] hashes. An event whose address is empty or longer than 255 bytes is
/// left out (no pod has one). The result may be of any size: [`split_batch`] cuts it to fit.
pub fn encode_batch(events: &[RoutingEvent]) -> Vec<u8> {
    let events = events.get(..MAX_EVENTS_PER_BATCH).unwrap_or(events);
    let size: usize = events.iter().map(encoded_len).sum();
    let mut out = Vec::with_capacity(1 + size);
    out.push(BATCH_VERSION);
    for event in events {
        encode_event(event, &mut out);
    }
    out
}

/// The bytes `event` takes in a batch: 0 for one [`encode_batch`] leaves out (an address
/// empty or over 255 bytes), whose hashes count up to [`MAX_HASHES_PER_EVENT`].
pub fn encoded_len(event: &RoutingEvent) -> usize {
    if event.pod.is_empty() || event.pod.len() > usize::from(u8::MAX) {
        return 0;
    }
    let hashes = event.hashes.len().min(MAX_HASHES_PER_EVENT);
    ADDRESS_LEN_BYTES + event.pod.len() + FIELDS_BYTES + 8 * hashes
}

/// How many of `events`, in the order given, make a batch of at most `max_bytes` (its version
/// byte included) and [`MAX_EVENTS_PER_BATCH`] events: the count stops at the first event that
/// would not fit, so the events counted are a run the caller can encode as they are.
pub fn count_within<'a>(events: impl IntoIterator<Item = &'a RoutingEvent>, max_bytes: usize) -> usize {
    let mut used: usize = 1; // the version byte
    events
        .into_iter()
        .take(MAX_EVENTS_PER_BATCH)
        .take_while(|event| {
            used = used.saturating_add(encoded_len(event));
            used <= max_bytes
        })
        .count()
}

fn encode_event(event: &RoutingEvent, out: &mut Vec<u8>) {
    let address = event.pod.as_bytes();
    let Ok(address_len) = u8::try_from(address.len()) else { return };
    if address_len == 0 {
        return;
    }
    let hashes = event.hashes.get(..MAX_HASHES_PER_EVENT).unwrap_or(&event.hashes);
    let Ok(count) = u16::try_from(hashes.len()) else { return };
    out.push(address_len);
    out.extend_from_slice(address);
    out.extend_from_slice(&event.epoch.to_le_bytes());
    out.extend_from_slice(&event.origin.to_le_bytes());
    out.extend_from_slice(&count.to_le_bytes());
    for hash in hashes {
        out.extend_from_slice(&hash.to_le_bytes());
    }
}

/// Decodes a batch: the whole, valid events before any damage, at most
/// [`MAX_EVENTS_PER_BATCH`]. Events naming no literal `ip:port` are dropped; addresses come out
/// in canonical form.
pub fn decode_batch(bytes: &[u8]) -> Vec<RoutingEvent> {
    let mut events = Vec::new();
    let Some((&BATCH_VERSION, mut rest)) = bytes.split_first() else { return events };
    while events.len() < MAX_EVENTS_PER_BATCH {
        let Some((event, after)) = decode_event(rest) else { break };
        rest = after;
        if let Some(event) = event {
            events.push(event);
        }
    }
    events
}

/// The length of the batch at the start of `bytes`: its version byte and its whole events,
/// up to the first that is truncated or damaged, at most [`MAX_EVENTS_PER_BATCH`] of them
/// (where [`decode_batch`] stops too). 0 for a batch of another version. What follows may be
/// other fields (see [`crate::peer`]).
pub fn batch_len(bytes: &[u8]) -> usize {
    let Some((&BATCH_VERSION, mut rest)) = bytes.split_first() else { return 0 };
    let mut len = 1;
    for _ in 0..MAX_EVENTS_PER_BATCH {
        let Some(event) = event_len(rest) else { break };
        len += event;
        rest = rest.get(event..).unwrap_or_default();
    }
    len
}

/// One event: `None` if truncated or malformed (stop), `Some(None)` if whole but naming no pod
/// (skip it, go on).
fn decode_event(bytes: &[u8]) -> Option<(Option<RoutingEvent>, &[u8])> {
    let len = event_len(bytes)?;
    let (event, rest) = bytes.split_at_checked(len)?;
    let (&address_len, event) = event.split_first()?;
    let (address, event) = event.split_at_checked(usize::from(address_len))?;
    let (epoch, event) = event.split_at_checked(4)?;
    let (origin, event) = event.split_at_checked(4)?;
    let hashes = event.get(2..)?;
    let address = std::str::from_utf8(address).ok().and_then(|a| PodAddress::parse(a).ok());
    let Some(address) = address else { return Some((None, rest)) };
    let epoch = u32::from_le_bytes(epoch.try_into().ok()?);
    let origin = u32::from_le_bytes(origin.try_into().ok()?);
    let hashes = hashes.chunks_exact(8).filter_map(|h| h.try_into().ok().map(u64::from_le_bytes)).collect();
    Some((Some(RoutingEvent { pod: address.as_str().to_string(), epoch, origin, hashes }), rest))
}

/// The encoded length of the event at the start of `bytes`, if it is whole and within bounds.
fn event_len(bytes: &[u8]) -> Option<usize> {
    let address_len = usize::from(*bytes.first()?);
    let count_at = ADDRESS_LEN_BYTES + address_len + 4 + 4;
    let count = u16::from_le_bytes(bytes.get(count_at..count_at + 2)?.try_into().ok()?);
    let count = usize::from(count);
    if address_len == 0 || count > MAX_HASHES_PER_EVENT {
        return None;
    }
    let len = ADDRESS_LEN_BYTES + address_len + FIELDS_BYTES + 8 * count;
    (len <= bytes.len()).then_some(len)
}

/// Cuts an encoded batch into runs of whole events (without the version byte) of at most
/// `max_bytes - 1` bytes each, so each run re-headed with [`BATCH_VERSION`] fits `max_bytes`.
/// `max_bytes` is raised to fit the largest event. Stops at the first damaged event; a batch of
/// another version yields nothing.
pub fn split_batch(batch: &[u8], max_bytes: usize) -> BatchRuns<'_> {
    let events = match batch.split_first() {
        Some((&BATCH_VERSION, events)) => events,
        _ => &[],
    };
    BatchRuns { rest: events, max_run: max_bytes.max(MAX_EVENT_BYTES + 1) - 1 }
}

/// Appends the whole events of `batch` (up to any damage; nothing from a batch of another
/// version) to `joined`, a batch being built (start it with [`BATCH_VERSION`]). No event is
/// decoded: the relay joins the workers' batches this way, and the readers' [`decode_batch`]
/// still checks every field.
pub fn join_batch(joined: &mut Vec<u8>, batch: &[u8]) {
    for run in split_batch(batch, usize::MAX) {
        joined.extend_from_slice(run);
    }
}

/// The iterator of [`split_batch`].
#[derive(Debug, Clone)]
pub struct BatchRuns<'a> {
    rest: &'a [u8],
    max_run: usize,
}

impl<'a> Iterator for BatchRuns<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let mut run = 0;
        // Each turn takes one whole event; a run ends at the size bound or at damage.
        while let Some(len) = self.rest.get(run..).and_then(event_len) {
            if run + len > self.max_run {
                break;
            }
            run += len;
        }
        if run == 0 {
            self.rest = &[];
            return None;
        }
        let (taken, rest) = self.rest.split_at_checked(run)?;
        self.rest = rest;
        Some(taken)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_s_length_ends_where_decoding_ends() {
        let events: Vec<RoutingEvent> = (0..3)
            .map(|n| RoutingEvent {
                pod: format!("10.0.0.{n}:8000"),
                epoch: n,
                origin: 1,
                hashes: vec![u64::from(n); 3],
            })
            .collect();
        let batch = encode_batch(&events);
        assert_eq!(batch_len(&batch), batch.len());
        let followed = [&batch[..], &[0, 9, 9, 9, 9][..]].concat();
        assert_eq!(batch_len(&followed), batch.len(), "a 0 (an address of no byte) ends it");
        assert_eq!(decode_batch(&followed), events);
        assert_eq!(batch_len(&[1, 0, 0]), 0, "another version");
        assert_eq!(batch_len(&[]), 0);
        // No more events than a batch decodes: what follows them is not walked.
        let many = encode_batch(&vec![events[0].clone(); MAX_EVENTS_PER_BATCH]);
        let more = [&many[..], &many[1..]].concat();
        assert_eq!(batch_len(&more), many.len());
    }

    fn event(pod: &str, epoch: u32, hashes: &[u64]) -> RoutingEvent {
        RoutingEvent { pod: pod.to_string(), epoch, origin: 7, hashes: hashes.to_vec() }
    }

    #[test]
    fn joined_batches_decode_as_their_events_in_order_and_damage_stays_in_its_batch() {
        let (a, b) = (event("10.0.0.1:8000", 1, &[1, 2]), event("10.0.0.2:8000", 2, &[3]));
        let first = encode_batch(&[a.clone(), b.clone()]);
        let mut damaged = encode_batch(&[b.clone(), a.clone()]);
        damaged.truncate(damaged.len() - 3);
        let mut joined = vec![BATCH_VERSION];
        join_batch(&mut joined, &first);
        join_batch(&mut joined, &damaged);
        join_batch(&mut joined, &[1, 9, 9, 9]);
        join_batch(&mut joined, &encode_batch(std::slice::from_ref(&a)));
        assert_eq!(decode_batch(&joined), vec![a.clone(), b.clone(), b, a]);
    }

    #[test]
    fn counted_events_encode_within_the_bound() {
        let events: Vec<_> = (0..50).map(|n| event("10.0.0.1:8000", 1, &vec![n; 10 + n as usize])).collect();
        for max_bytes in [0, 1, 50, 500, 5_000, usize::MAX] {
            let count = count_within(&events, max_bytes);
            let encoded = encode_batch(&events[..count]);
            assert!(encoded.len() <= max_bytes.max(1), "{max_bytes}: {}", encoded.len());
            assert_eq!(encoded.len(), 1 + events[..count].iter().map(encoded_len).sum::<usize>());
            if count < events.len() {
                assert!(encoded.len() + encoded_len(&events[count]) > max_bytes, "as many as fit");
            }
        }
        assert_eq!(encoded_len(&event("", 1, &[1])), 0, "left out by the encoder");
    }

    #[test]
    fn round_trips() {
        let events = vec![event("10.0.0.1:8000", 3, &[1, u64::MAX, 42]), event("[::1]:80", 0, &[])];
        let bytes = encode_batch(&events);
        assert_eq!(bytes.len(), 1 + (1 + 13 + 10 + 24) + (1 + 8 + 10));
        assert_eq!(decode_batch(&bytes), events);
        assert!(decode_batch(&encode_batch(&[])).is_empty());
    }

    #[test]
    fn damage_keeps_the_whole_events_before_it() {
        let events = vec![event("10.0.0.1:8000", 1, &[1, 2]), event("10.0.0.2:8000", 2, &[3, 4, 5])];
        let bytes = encode_batch(&events);
        for cut in 0..bytes.len() {
            let decoded = decode_batch(&bytes[..cut]);
            assert!(events.starts_with(&decoded), "cut at {cut}");
        }
        assert_eq!(decode_batch(&bytes[..bytes.len() - 1]), events[..1]);
        let mut wrong_version = bytes.clone();
        wrong_version[0] = 1;
        assert!(decode_batch(&wrong_version).is_empty());
        let mut state = 7u64;
        for _ in 0..2000 {
            let garbage: Vec<u8> = (0..(state % 300))
                .map(|_| {
                    state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    (state >> 56) as u8
                })
                .collect();
            decode_batch(&garbage);
            assert!(split_batch(&garbage, 100).all(|run| run.len() < MAX_EVENT_BYTES + 1));
        }
    }

    #[test]
    fn drops_events_that_name_no_pod_and_canonicalises() {
        let events =
            vec![event("evil.example.com:80", 1, &[1]), event("10.0.0.1:0", 1, &[1]), event(" 10.0.0.9:8000", 1, &[9])];
        assert_eq!(decode_batch(&encode_batch(&events)), vec![event("10.0.0.9:8000", 1, &[9])]);
        let mut bytes = encode_batch(&[event("10.0.0.1:8000", 1, &[1])]);
        bytes[5] = 0xff; // Not UTF-8: skipped, not fatal.
        bytes.extend_from_slice(&encode_batch(&[event("10.0.0.2:8000", 1, &[2])])[1..]);
        assert_eq!(decode_batch(&bytes), vec![event("10.0.0.2:8000", 1, &[2])]);
    }

    #[test]
    fn bounds_events_and_hashes() {
        let long = event("10.0.0.1:8000", 1, &vec![5; MAX_HASHES_PER_EVENT + 10]);
        assert_eq!(decode_batch(&encode_batch(&[long]))[0].hashes.len(), MAX_HASHES_PER_EVENT);
        let many = vec![event("10.0.0.1:8000", 1, &[]); MAX_EVENTS_PER_BATCH + 5];
        assert_eq!(decode_batch(&encode_batch(&many)).len(), MAX_EVENTS_PER_BATCH);
        let unnamed = encode_batch(&[event("", 1, &[1]), event(&"x".repeat(300), 1, &[1])]);
        assert_eq!(unnamed, vec![BATCH_VERSION]);
    }

    #[test]
    fn splits_into_re_headable_runs() {
        let events: Vec<RoutingEvent> =
            (0..50).map(|i| event(&format!("10.0.0.{i}:80"), i, &[u64::from(i); 200])).collect();
        let bytes = encode_batch(&events);
        let runs: Vec<&[u8]> = split_batch(&bytes, 10_000).collect();
        assert!(runs.len() > 1 && runs.iter().all(|r| r.len() < 10_000));
        let mut decoded = Vec::new();
        for run in runs {
            decoded.extend(decode_batch(&[&[BATCH_VERSION][..], run].concat()));
        }
        assert_eq!(decoded, events);
        let tiny: Vec<RoutingEvent> =
            split_batch(&bytes, 1).flat_map(|run| decode_batch(&[&[BATCH_VERSION][..], run].concat())).collect();
        assert_eq!(tiny, events, "a bound below one event is raised to fit the largest");
    }
}
