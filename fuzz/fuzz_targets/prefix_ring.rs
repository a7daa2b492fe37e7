//! The routing-event ring in shared data (`prefix::ring`): one writer, readers, and shared
//! data that may hold anything (a restarted writer, a stale lap, corrupt values).
//!
//! Safety on every poll, whatever the store holds: no panic, no more segments read than
//! asked, events that name canonical pod addresses. Exactness while nothing was corrupted:
//! a reader that polls after every append gets exactly the events appended, none lost.

#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use picker::prefix::events::{decode_batch, encode_batch, RoutingEvent, MAX_EVENTS_PER_BATCH};
use picker::prefix::{RingReader, RingWriter, StartAt, RING_HEAD_KEY, RING_SEGMENTS, RING_SEGMENT_KEYS};
use picker::store::{MemoryStore, SharedStore};
use picker_fuzz::{assert_canonical_address, ADDRESSES};

#[derive(Arbitrary, Debug)]
enum Op {
    Append(Vec<(u8, u8, Vec<u8>)>),
    AppendRaw(Vec<u8>),
    /// Many small appends in a row: laps the ring so readers fall behind.
    AppendMany(u8),
    Poll {
        reader: u8,
        max_segments: u8,
    },
    NewReader {
        reader: u8,
        oldest: bool,
    },
    /// A restarted singleton: resumes after the head in shared data.
    ResumeWriter,
    /// A writer that forgot to resume: starts over at 0.
    FreshWriter,
    SetHead(u64),
    SetHeadRaw(Vec<u8>),
    CorruptSegment {
        slot: u8,
        value: Vec<u8>,
    },
}

fn events(spec: &[(u8, u8, Vec<u8>)]) -> Vec<RoutingEvent> {
    spec.iter()
        .take(64)
        .map(|(pod, epoch, hashes)| RoutingEvent {
            pod: ADDRESSES[usize::from(*pod) % ADDRESSES.len()].to_string(),
            epoch: u32::from(*epoch),
            origin: u32::from(*epoch) % 3,
            hashes: hashes.iter().map(|&h| u64::from(h)).collect(),
        })
        .collect()
}

fuzz_target!(|ops: Vec<Op>| {
    let store = MemoryStore::new();
    let mut writer = RingWriter::resume(&store).expect("memory store");
    let mut readers =
        [RingReader::new(StartAt::Head), RingReader::new(StartAt::Oldest), RingReader::new(StartAt::Head)];
    // Reader 0 polls after every append while nothing is corrupt, and must see it all.
    let mut diligent = RingReader::new(StartAt::Head);
    // A head reader starts where the head is at its first poll.
    diligent.poll(&store, RING_SEGMENTS).expect("memory store");
    let mut clean = true;
    for op in ops.into_iter().take(128) {
        let mut appended = None;
        match op {
            Op::Append(spec) => {
                let batch = encode_batch(&events(&spec));
                appended = Some((writer.append(&store, &batch).expect("memory store"), batch));
            }
            Op::AppendRaw(batch) => appended = Some((writer.append(&store, &batch).expect("memory store"), batch)),
            Op::AppendMany(count) => {
                for i in 0..count {
                    let batch = encode_batch(&events(&[(i, i, vec![i])]));
                    let done = writer.append(&store, &batch).expect("memory store");
                    check_diligent(&mut diligent, &store, clean, &batch, done.dropped_bytes);
                }
            }
            Op::Poll { reader, max_segments } => {
                let reader = &mut readers[usize::from(reader) % 3];
                let max_segments = usize::from(max_segments);
                let result = reader.poll(&store, max_segments).expect("memory store");
                assert!(result.segments <= max_segments.min(RING_SEGMENTS), "read {} segments", result.segments);
                for event in &result.events {
                    assert_canonical_address(&event.pod);
                }
            }
            Op::NewReader { reader, oldest } => {
                readers[usize::from(reader) % 3] =
                    RingReader::new(if oldest { StartAt::Oldest } else { StartAt::Head });
            }
            Op::ResumeWriter => writer = RingWriter::resume(&store).expect("memory store"),
            Op::FreshWriter => {
                writer = RingWriter::resume(&MemoryStore::new()).expect("memory store");
                clean = false;
            }
            Op::SetHead(head) => {
                store.set(RING_HEAD_KEY, &head.to_le_bytes(), None).expect("memory store");
                clean = false;
            }
            Op::SetHeadRaw(value) => {
                store.set(RING_HEAD_KEY, &value, None).expect("memory store");
                clean = false;
            }
            Op::CorruptSegment { slot, value } => {
                store.set(RING_SEGMENT_KEYS[usize::from(slot) % RING_SEGMENTS], &value, None).expect("memory store");
                clean = false;
            }
        }
        if let Some((done, batch)) = appended {
            check_diligent(&mut diligent, &store, clean, &batch, done.dropped_bytes);
        }
    }
});

/// While nothing was corrupted, a reader polling after each append gets exactly its events.
fn check_diligent(reader: &mut RingReader, store: &MemoryStore, clean: bool, batch: &[u8], dropped: usize) {
    let result = reader.poll(store, RING_SEGMENTS).expect("memory store");
    for event in &result.events {
        assert_canonical_address(&event.pod);
    }
    let expected = decode_batch(batch);
    if !clean || dropped > 0 || expected.len() >= MAX_EVENTS_PER_BATCH {
        return;
    }
    assert_eq!(result.events, expected, "a reader one append behind did not get that append");
    assert_eq!((result.lost, result.behind, result.writer_restarted), (0, 0, false), "{result:?}");
}
