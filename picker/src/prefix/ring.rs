//! The replicated event log in shared data: one writer (the singleton), every worker a reader.
//!
//! Shared data has no delete, so the log is a ring over a fixed key set: a head key holding
//! the sequence number of the newest segment, and [`RING_SEGMENTS`] segment keys, segment `s`
//! living at key `s % RING_SEGMENTS` and starting with `s` itself. The writer writes a segment,
//! then the head, so a reader that sees head `h` finds segment `h` (or a newer lap). A reader
//! that falls more than a ring behind finds newer sequence numbers in the slots it wanted: it
//! counts those segments lost and moves on, because routing on a slightly incomplete index only
//! costs a few cache hits, while waiting for completeness would cost latency.
//!
//! A segment value is `seq:u64 le` then one batch of [`super::events`], at most
//! [`MAX_SEGMENT_BYTES`] in all: a read copies the whole value (about 5 µs for 64 KiB, measured),
//! and a worker reads segments on its tick, between requests, so each read stays short.

use crate::store::{SharedStore, StoreError};

use super::events::{decode_batch, split_batch, RoutingEvent, BATCH_VERSION};
use super::{RING_HEAD_KEY, RING_SEGMENTS, RING_SEGMENT_KEYS};

/// Bytes per segment value at most, sequence number included. 64 KiB is the largest value whose
/// read cost was measured (~5 µs), and holds ~80 events of 100 blocks, more than one tick's worth.
pub const MAX_SEGMENT_BYTES: usize = 64 * 1024;

/// Segments one append may write. A bigger batch would overwrite the ring's own tail before any
/// reader saw it; past this the rest of the batch is dropped and reported.
pub const MAX_SEGMENTS_PER_APPEND: usize = RING_SEGMENTS / 4;

const SEQ_BYTES: usize = 8;

/// What an append wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// The head after the append: the sequence number of the last segment written.
    pub head: u64,
    pub segments: usize,
    /// Batch bytes not written: past [`MAX_SEGMENTS_PER_APPEND`], damaged, or of another version.
    pub dropped_bytes: usize,
}

/// The ring's only writer. There must be one per ring: two would reuse sequence numbers.
#[derive(Debug, Clone)]
pub struct RingWriter {
    head: u64,
}

impl RingWriter {
    /// Continues after the head already in shared data (a restarted singleton), or from 0.
    pub fn resume(store: &dyn SharedStore) -> Result<Self, StoreError> {
        Ok(Self { head: read_head(store)?.unwrap_or(0) })
    }

    /// Sequence number of the last segment written; 0 before the first.
    pub fn head(&self) -> u64 {
        self.head
    }

    /// Appends an encoded batch, cut at event boundaries into segments of at most
    /// [`MAX_SEGMENT_BYTES`]. A batch with no events writes nothing. On a store error the head is
    /// not moved: the segments written are invisible to readers and overwritten by the next append.
    pub fn append(&mut self, store: &dyn SharedStore, batch: &[u8]) -> Result<Appended, StoreError> {
        let mut seq = self.head;
        let (mut segments, mut written) = (0, 0);
        let mut value = Vec::new();
        for run in split_batch(batch, MAX_SEGMENT_BYTES - SEQ_BYTES).take(MAX_SEGMENTS_PER_APPEND) {
            seq = seq.checked_add(1).ok_or_else(|| StoreError::Host("ring sequence exhausted".into()))?;
            value.clear();
            value.extend_from_slice(&seq.to_le_bytes());
            value.push(BATCH_VERSION);
            value.extend_from_slice(run);
            let key = segment_key(seq).ok_or_else(|| StoreError::Host(format!("no ring key for segment {seq}")))?;
            store.set(key, &value, None)?;
            segments += 1;
            written += run.len();
        }
        if segments > 0 {
            store.set(RING_HEAD_KEY, &seq.to_le_bytes(), None)?;
            self.head = seq;
        }
        let dropped_bytes = batch.len().saturating_sub(written + 1);
        Ok(Appended { head: self.head, segments, dropped_bytes })
    }
}

/// Where a reader with no history starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartAt {
    /// At the current head: only what is appended from now on.
    Head,
    /// At the oldest segment still in the ring: replays up to [`RING_SEGMENTS`] recent
    /// segments, so a worker that just started (or restarted) routes on a warm index at once.
    /// The filter's choice; replayed events of a pod that restarted since are voided by epoch.
    Oldest,
}

/// What one poll read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PollResult {
    /// The events of every segment read, in append order.
    pub events: Vec<RoutingEvent>,
    /// Segments read and decoded.
    pub segments: usize,
    /// Segments this reader will never see: overwritten by a newer lap before it read them, or
    /// unreadable. Their events are missing from the index: count them, do not fail.
    pub lost: u64,
    /// Segments still unread because of `max_segments`: poll again soon.
    pub behind: u64,
    /// The head went backwards: a new writer started over without [`RingWriter::resume`]. The
    /// reader jumped to the new head.
    pub writer_restarted: bool,
}

/// One reader of the ring, in one worker.
#[derive(Debug, Clone)]
pub struct RingReader {
    start: StartAt,
    last_seen: Option<u64>,
}

impl RingReader {
    pub fn new(start: StartAt) -> Self {
        Self { start, last_seen: None }
    }

    /// Reads the segments appended since the last poll, at most `max_segments` (clamped to
    /// [`RING_SEGMENTS`]) of them, oldest first. On a store error nothing is consumed: the same
    /// segments are read again next time. A head that is not a sequence number reads as no news.
    pub fn poll(&mut self, store: &dyn SharedStore, max_segments: usize) -> Result<PollResult, StoreError> {
        let mut result = PollResult::default();
        let Some(head) = read_head(store)? else {
            return Ok(result);
        };
        let ring = RING_SEGMENTS as u64;
        let mut last = match self.last_seen {
            None if self.start == StartAt::Oldest => head.saturating_sub(ring),
            None => head,
            Some(last) if last > head => {
                result.writer_restarted = true;
                head
            }
            Some(last) => last,
        };
        let oldest_kept = head.saturating_sub(ring);
        if last < oldest_kept {
            result.lost += oldest_kept - last;
            last = oldest_kept;
        }
        let until = head.min(last.saturating_add(max_segments.min(RING_SEGMENTS) as u64));
        for seq in last.saturating_add(1)..=until {
            let value = match segment_key(seq) {
                Some(key) => store.get(key)?.0,
                None => None,
            };
            match value.as_deref().and_then(split_segment) {
                Some((stored, batch)) if stored == seq => {
                    result.events.extend(decode_batch(batch));
                    result.segments += 1;
                }
                // A newer lap overwrote it, or it is not a segment at all.
                _ => result.lost += 1,
            }
        }
        self.last_seen = Some(until);
        result.behind = head - until;
        Ok(result)
    }
}

/// The key of segment `seq`; always `Some`, as `seq % RING_SEGMENTS` indexes the key list.
fn segment_key(seq: u64) -> Option<&'static str> {
    let slot = usize::try_from(seq % RING_SEGMENTS as u64).ok()?;
    RING_SEGMENT_KEYS.get(slot).copied()
}

/// The head's sequence number, 0 if never written; `None` if the value is not one (then the
/// reader trusts nothing in the ring, and a resuming writer starts over).
/// Heads above this are not sequence numbers (a writer appending a segment a microsecond
/// would need 500,000 years to reach it); refusing them keeps every `seq + 1` from overflowing.
const MAX_HEAD: u64 = u64::MAX / 2;

fn read_head(store: &dyn SharedStore) -> Result<Option<u64>, StoreError> {
    Ok(match store.get(RING_HEAD_KEY)?.0 {
        None => Some(0),
        Some(value) => {
            <[u8; SEQ_BYTES]>::try_from(value.as_slice()).ok().map(u64::from_le_bytes).filter(|&head| head <= MAX_HEAD)
        }
    })
}

/// A segment's sequence number and batch.
fn split_segment(value: &[u8]) -> Option<(u64, &[u8])> {
    let (seq, batch) = value.split_at_checked(SEQ_BYTES)?;
    Some((u64::from_le_bytes(seq.try_into().ok()?), batch))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prefix::events::encode_batch;
    use crate::store::MemoryStore;

    fn batch(first: u32, count: u32) -> Vec<u8> {
        let events: Vec<RoutingEvent> = (first..first + count)
            .map(|i| RoutingEvent {
                pod: format!("10.0.0.1:{}", 1000 + i),
                epoch: i,
                origin: 0,
                hashes: vec![u64::from(i)],
            })
            .collect();
        encode_batch(&events)
    }

    fn epochs(result: &PollResult) -> Vec<u32> {
        result.events.iter().map(|e| e.epoch).collect()
    }

    #[test]
    fn readers_see_every_batch_in_order_once() {
        let store = MemoryStore::new();
        let mut writer = RingWriter::resume(&store).unwrap();
        let mut reader = RingReader::new(StartAt::Head);
        assert_eq!(reader.poll(&store, 64).unwrap(), PollResult::default(), "an empty ring is no news");
        for i in 0..5 {
            assert_eq!(writer.append(&store, &batch(i * 2, 2)).unwrap().head, u64::from(i) + 1);
        }
        let result = reader.poll(&store, 64).unwrap();
        assert_eq!(epochs(&result), (0..10).collect::<Vec<_>>());
        assert_eq!((result.segments, result.lost, result.behind), (5, 0, 0));
        assert!(reader.poll(&store, 64).unwrap().events.is_empty());
        writer.append(&store, &batch(10, 1)).unwrap();
        assert_eq!(epochs(&reader.poll(&store, 64).unwrap()), vec![10]);
    }

    #[test]
    fn a_fresh_reader_starts_at_the_head_or_replays_the_ring() {
        let store = MemoryStore::new();
        let mut writer = RingWriter::resume(&store).unwrap();
        for i in 0..(RING_SEGMENTS as u32 + 6) {
            writer.append(&store, &batch(i, 1)).unwrap();
        }
        assert!(RingReader::new(StartAt::Head).poll(&store, 64).unwrap().events.is_empty());
        let replay = RingReader::new(StartAt::Oldest).poll(&store, RING_SEGMENTS).unwrap();
        assert_eq!(epochs(&replay), (6..RING_SEGMENTS as u32 + 6).collect::<Vec<_>>());
        assert_eq!(replay.lost, 0, "history from before a reader started is not a loss");
    }

    #[test]
    fn a_lapped_reader_counts_its_loss_and_skips_ahead() {
        let store = MemoryStore::new();
        let mut writer = RingWriter::resume(&store).unwrap();
        let mut reader = RingReader::new(StartAt::Head);
        reader.poll(&store, 64).unwrap();
        for i in 0..(RING_SEGMENTS as u32 + 10) {
            writer.append(&store, &batch(i, 1)).unwrap();
        }
        let result = reader.poll(&store, RING_SEGMENTS).unwrap();
        assert_eq!(result.lost, 10);
        assert_eq!(result.events.first().map(|e| e.epoch), Some(10));
        // A slot overwritten while the reader was on its way reads as lost too.
        writer.append(&store, &batch(500, 1)).unwrap();
        writer.append(&store, &batch(501, 1)).unwrap();
        let stale_head = writer.head();
        let mut lapping = RingWriter { head: stale_head + RING_SEGMENTS as u64 - 1 };
        lapping.append(&store, &batch(900, 1)).unwrap(); // Lands in the slot of segment stale_head.
        store.set(RING_HEAD_KEY, &stale_head.to_le_bytes(), None).unwrap();
        let result = reader.poll(&store, 64).unwrap();
        assert_eq!((epochs(&result), result.lost), (vec![500], 1));
    }

    #[test]
    fn max_segments_bounds_a_poll_and_the_rest_follows() {
        let store = MemoryStore::new();
        let mut writer = RingWriter::resume(&store).unwrap();
        let mut reader = RingReader::new(StartAt::Head);
        reader.poll(&store, 1).unwrap();
        for i in 0..10 {
            writer.append(&store, &batch(i, 1)).unwrap();
        }
        let first = reader.poll(&store, 4).unwrap();
        assert_eq!((epochs(&first), first.behind), (vec![0, 1, 2, 3], 6));
        let rest = reader.poll(&store, 100).unwrap();
        assert_eq!((rest.segments, rest.behind, rest.lost), (6, 0, 0));
    }

    #[test]
    fn the_key_set_stays_fixed() {
        let store = MemoryStore::new();
        let mut writer = RingWriter::resume(&store).unwrap();
        for i in 0..1000 {
            writer.append(&store, &batch(i, 3)).unwrap();
        }
        assert_eq!(store.key_count(), RING_SEGMENTS + 1);
        assert!(RING_SEGMENT_KEYS.iter().all(|k| store.get(k).unwrap().0.is_some()));
    }

    #[test]
    fn large_batches_split_and_oversized_ones_are_bounded() {
        let store = MemoryStore::new();
        let mut writer = RingWriter::resume(&store).unwrap();
        let mut reader = RingReader::new(StartAt::Head);
        reader.poll(&store, 1).unwrap();
        let event = |i: u32| RoutingEvent { pod: "10.0.0.1:80".into(), epoch: i, origin: 0, hashes: vec![7; 1000] };
        let events: Vec<RoutingEvent> = (0..40).map(event).collect();
        let appended = writer.append(&store, &encode_batch(&events)).unwrap();
        assert!(appended.segments > 1 && appended.dropped_bytes == 0, "{appended:?}");
        for key in RING_SEGMENT_KEYS {
            assert!(store.get(key).unwrap().0.map_or(0, |v| v.len()) <= MAX_SEGMENT_BYTES);
        }
        assert_eq!(reader.poll(&store, 64).unwrap().events, events);
        let huge: Vec<RoutingEvent> = (0..2000).map(event).collect();
        let appended = writer.append(&store, &encode_batch(&huge)).unwrap();
        assert_eq!(appended.segments, MAX_SEGMENTS_PER_APPEND);
        assert!(appended.dropped_bytes > 0);
        let result = reader.poll(&store, 64).unwrap();
        assert_eq!(result.lost, 0);
        assert_eq!(result.events[..], huge[..result.events.len()]);
        assert_eq!(writer.append(&store, &encode_batch(&[])).unwrap().segments, 0);
    }

    #[test]
    fn garbage_in_shared_data_is_survived() {
        let store = MemoryStore::new();
        let mut writer = RingWriter::resume(&store).unwrap();
        let mut reader = RingReader::new(StartAt::Head);
        reader.poll(&store, 1).unwrap();
        for i in 0..3 {
            writer.append(&store, &batch(i, 1)).unwrap();
        }
        store.set(segment_key(2).unwrap(), b"xyz", None).unwrap();
        let mut bad_payload = 3u64.to_le_bytes().to_vec();
        bad_payload.extend_from_slice(&[BATCH_VERSION, 200, 1, 2]);
        store.set(segment_key(3).unwrap(), &bad_payload, None).unwrap();
        let result = reader.poll(&store, 64).unwrap();
        assert_eq!((epochs(&result), result.lost, result.segments), (vec![0], 1, 2));
        store.set(RING_HEAD_KEY, b"not a seq", None).unwrap();
        assert_eq!(reader.poll(&store, 64).unwrap(), PollResult::default());
        store.set(RING_HEAD_KEY, b"bad", None).unwrap();
        assert_eq!(reader.poll(&store, 64).unwrap(), PollResult::default());
        assert_eq!(RingWriter::resume(&store).unwrap().head(), 0);
    }

    #[test]
    fn writers_resume_and_readers_notice_a_restart() {
        let store = MemoryStore::new();
        let mut writer = RingWriter::resume(&store).unwrap();
        let mut reader = RingReader::new(StartAt::Head);
        reader.poll(&store, 1).unwrap();
        for i in 0..5 {
            writer.append(&store, &batch(i, 1)).unwrap();
        }
        assert_eq!(RingWriter::resume(&store).unwrap().head(), 5);
        reader.poll(&store, 64).unwrap();
        let mut careless = RingWriter { head: 0 };
        careless.append(&store, &batch(50, 1)).unwrap();
        let result = reader.poll(&store, 64).unwrap();
        assert!(result.writer_restarted && result.events.is_empty());
        writer = RingWriter::resume(&store).unwrap();
        writer.append(&store, &batch(51, 1)).unwrap();
        assert_eq!(epochs(&reader.poll(&store, 64).unwrap()), vec![51]);
    }

    #[test]
    fn a_head_near_the_end_of_u64_is_not_a_sequence_number() {
        let store = MemoryStore::new();
        store.set(RING_HEAD_KEY, &u64::MAX.to_le_bytes(), None).unwrap();
        let mut reader = RingReader::new(StartAt::Oldest);
        for _ in 0..2 {
            assert!(reader.poll(&store, RING_SEGMENTS).unwrap().events.is_empty());
        }
    }
}
