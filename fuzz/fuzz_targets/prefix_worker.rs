//! Two workers' prefix state (`prefix::WorkerPrefix`) sharing decisions through the ring, as
//! the filter and the singleton drive them, under arbitrary picks, pool changes and corrupt
//! shared data. Never panics; a pick is in the picking worker's index at once; and while
//! nothing was corrupted, lost or dropped, both workers agree on every session's pod after a
//! relay and a sync (last writer wins, in ring order).

#![no_main]

use std::collections::BTreeSet;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use picker::prefix::{RingWriter, WorkerPrefix, RING_HEAD_KEY, RING_SEGMENTS, RING_SEGMENT_KEYS};
use picker::store::{MemoryStore, SharedStore};
use picker_fuzz::ADDRESSES;

#[derive(Arbitrary, Debug)]
enum Op {
    Pick {
        worker: bool,
        pod: u8,
        epoch: u8,
        hashes: Vec<u8>,
        session: Option<u8>,
        capacity: u16,
    },
    /// The singleton relays both workers' batches into the ring.
    Relay,
    Sync {
        worker: bool,
    },
    Retain {
        worker: bool,
        keep: u16,
    },
    CorruptSegment {
        slot: u8,
        value: Vec<u8>,
    },
    CorruptHead(Vec<u8>),
}

fn capacity_of(pod: &str) -> usize {
    64 + pod.len()
}

fuzz_target!(|ops: Vec<Op>| {
    let store = MemoryStore::new();
    let mut writer = RingWriter::resume(&store).expect("memory store");
    let mut workers = [WorkerPrefix::with_seed(512, 1), WorkerPrefix::with_seed(512, 2)];
    let mut sessions: BTreeSet<u64> = BTreeSet::new();
    // Convergence holds only while every decision reached the ring and the ring every worker.
    let mut exact = true;
    for op in ops.into_iter().take(128) {
        match op {
            Op::Pick { worker, pod, epoch, hashes, session, capacity } => {
                let worker = &mut workers[usize::from(worker)];
                let pod = ADDRESSES[usize::from(pod) % ADDRESSES.len()];
                let chain: Vec<u64> = hashes.iter().take(64).map(|&h| u64::from(h % 16) + 1).collect();
                let session = session.map(|s| u64::from(s % 8) + 1000);
                let capacity = usize::from(capacity % 256);
                worker.record_pick(pod, u32::from(epoch % 3), &chain, session, capacity);
                if !pod.is_empty() && !chain.is_empty() {
                    let kept = chain.len().min(capacity.max(1));
                    assert!(worker.index().matched_blocks(&chain, pod, u32::from(epoch % 3)) >= kept);
                }
                if let Some(key) = session {
                    assert_eq!(worker.session_pod(key), Some((pod, u32::from(epoch % 3))), "own session pick");
                    sessions.insert(key);
                }
                // The ring drops events of addresses that are not canonical pod addresses:
                // the other worker never learns those picks.
                if picker::address::PodAddress::parse(pod).map_or(true, |a| a.as_str() != pod) {
                    exact = false;
                }
            }
            Op::Relay => {
                for worker in &mut workers {
                    if let Some(batch) = worker.take_batch() {
                        let appended = writer.append(&store, &batch).expect("memory store");
                        exact &= appended.dropped_bytes == 0;
                    }
                }
                for worker in &mut workers {
                    let report = worker.sync_from_ring(&store, &capacity_of).expect("memory store");
                    exact &= report.lost_segments == 0;
                }
                exact &= workers.iter().all(|w| w.dropped_events() == 0);
                if exact {
                    for &key in &sessions {
                        assert_eq!(workers[0].session_pod(key), workers[1].session_pod(key), "session {key}");
                    }
                }
            }
            Op::Sync { worker } => {
                let report = workers[usize::from(worker)].sync_from_ring(&store, &capacity_of).expect("memory store");
                exact &= report.lost_segments == 0;
            }
            Op::Retain { worker, keep } => {
                let keep: Vec<&str> =
                    ADDRESSES.iter().enumerate().filter(|(i, _)| keep & (1 << i) != 0).map(|(_, a)| *a).collect();
                workers[usize::from(worker)].retain_pods(|pod| keep.contains(&pod));
                exact = false;
            }
            Op::CorruptSegment { slot, value } => {
                store.set(RING_SEGMENT_KEYS[usize::from(slot) % RING_SEGMENTS], &value, None).expect("memory store");
                exact = false;
            }
            Op::CorruptHead(value) => {
                store.set(RING_HEAD_KEY, &value, None).expect("memory store");
                exact = false;
            }
        }
    }
});
