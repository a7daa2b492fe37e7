//! In-flight counts (`inflight::WorkerInflight`, several workers over one `MemoryStore`):
//! arbitrary starts, ends (of arbitrary weights), ticks, clock jumps and slot corruptions.
//! Never panics; a worker's own count of a pod is exactly its starts' weights minus its ends'
//! (never negative) until it
//! expires; after every worker has ticked three times with no change in between, each sees every
//! live worker's counts; at most `MAX_SLOTS` workers hold a slot, never two the same one.

#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use picker::inflight::{WorkerInflight, MAX_SLOTS};
use picker::keys::INFLIGHT_SLOT_KEYS;
use picker::store::{MemoryStore, SharedStore};
use picker_fuzz::ADDRESSES;

/// Workers in one run: enough to see sharing, few enough to stay fast.
const WORKERS: usize = 4;
/// No count expires in a run (expiry has its own unit test).
const EXPIRY_MS: u64 = u64::MAX;

#[derive(Arbitrary, Debug)]
enum Op {
    /// A request of `weight` sequences (its `n`; 0 counts as 1).
    Start {
        worker: u8,
        address: u8,
        weight: u8,
    },
    End {
        worker: u8,
        address: u8,
        weight: u8,
    },
    Tick {
        worker: u8,
    },
    /// Another writer (or a bug) puts these bytes in a slot.
    Corrupt {
        slot: u8,
        bytes: Vec<u8>,
    },
    Advance(u16),
}

fuzz_target!(|ops: Vec<Op>| {
    let store = MemoryStore::new();
    let mut workers: Vec<WorkerInflight> = (0..WORKERS).map(|_| WorkerInflight::new()).collect();
    let mut expected = [[0u32; 8]; WORKERS];
    let mut now = 1_000_000u64;
    let mut corrupted = false;
    for op in ops.into_iter().take(512) {
        match op {
            Op::Start { worker, address, weight } => {
                let (w, a) = (usize::from(worker) % WORKERS, usize::from(address) % ADDRESSES.len().min(8));
                workers[w].started(ADDRESSES[a], u32::from(weight), now);
                expected[w][a] += u32::from(weight.max(1));
            }
            Op::End { worker, address, weight } => {
                let (w, a) = (usize::from(worker) % WORKERS, usize::from(address) % ADDRESSES.len().min(8));
                workers[w].finished(ADDRESSES[a], u32::from(weight), now);
                expected[w][a] = expected[w][a].saturating_sub(u32::from(weight.max(1)));
            }
            Op::Tick { worker } => {
                workers[usize::from(worker) % WORKERS].sync(&store, now, EXPIRY_MS);
            }
            Op::Corrupt { slot, bytes } => {
                let key = INFLIGHT_SLOT_KEYS[usize::from(slot) % MAX_SLOTS];
                store.set(key, &bytes, None).expect("memory store set");
                corrupted = true;
            }
            Op::Advance(ms) => now += u64::from(ms),
        }
        for (w, worker) in workers.iter().enumerate() {
            for (a, address) in ADDRESSES.iter().take(8).enumerate() {
                assert_eq!(worker.local_count(address), expected[w][a], "own count of {address}");
            }
        }
    }
    if corrupted {
        return; // A corrupted slot may hide its owner's counts until the owner ticks again.
    }
    // Three rounds of ticks at one instant: a worker whose stale slot was taken notices and
    // claims another, every worker publishes, then every worker reads everyone.
    for _ in 0..3 {
        for worker in &mut workers {
            worker.sync(&store, now, EXPIRY_MS);
        }
    }
    for (a, address) in ADDRESSES.iter().take(8).enumerate() {
        let total: u32 = expected.iter().map(|w| w[a]).sum();
        for worker in &workers {
            assert_eq!(worker.count(address), total, "every worker sees every count of {address}");
        }
    }
});
