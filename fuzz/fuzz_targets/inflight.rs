//! In-flight counts (`inflight::InflightCounts` over `store::MemoryStore`): arbitrary stored
//! bytes, then arbitrary reads, updates and corruptions. Never panics; an update always lands
//! (one writer here, so a CAS miss is only a corruption in between, fixed by the re-read); the
//! stored value never holds more than `MAX_PODS` entries; what is written reads back as the
//! same counts; a pod that was just sent a request counts at least one.

#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use picker::inflight::InflightCounts;
use picker::keys;
use picker::pod_table::MAX_PODS;
use picker::store::{MemoryStore, SharedStore};
use picker_fuzz::ADDRESSES;

#[derive(Arbitrary, Debug)]
enum Op {
    /// Another writer (or a bug) puts these bytes in the key.
    Corrupt(Vec<u8>),
    EnsureKey,
    Read,
    Update {
        address: u8,
        delta: i8,
        expiry_ms: u32,
    },
    /// Another writer stored counts for this many distinct pods (past `MAX_PODS` too): the
    /// next update must bring the stored value back within the bound.
    Fill {
        first_port: u16,
        count: u16,
    },
    Advance(u32),
    /// The host clock jumps (backwards too).
    SetClock(u64),
}

#[derive(Arbitrary, Debug)]
struct Input {
    ops: Vec<Op>,
    initial: Vec<u8>,
}

fuzz_target!(|input: Input| {
    let store = MemoryStore::new();
    if !input.initial.is_empty() {
        store.set(keys::INFLIGHT, &input.initial, None).expect("memory store set");
    }
    let mut counts = InflightCounts::read(&store).expect("memory store read");
    let mut now: u64 = 1_000_000;
    for op in input.ops.into_iter().take(64) {
        match op {
            Op::Corrupt(bytes) => store.set(keys::INFLIGHT, &bytes, None).expect("memory store set"),
            Op::EnsureKey => InflightCounts::ensure_key(&store).expect("memory store"),
            Op::Read => counts = InflightCounts::read(&store).expect("memory store read"),
            Op::Update { address, delta, expiry_ms } => {
                let address = ADDRESSES[usize::from(address) % ADDRESSES.len()];
                let expiry = u64::from(expiry_ms);
                counts = counts
                    .update(&store, address, i32::from(delta), now, expiry)
                    .expect("a single writer's update always lands");
                if delta > 0 && !address.is_empty() {
                    assert!(counts.count(address, now, expiry) >= 1, "{address} was just sent a request");
                }
                check_stored(&store, &counts, now, expiry);
            }
            Op::Fill { first_port, count } => {
                let mut value = Vec::new();
                for port in (0..count % 1500).map(|i| first_port.wrapping_add(i)) {
                    let address = format!("10.1.0.1:{port}");
                    value.push(address.len() as u8);
                    value.extend_from_slice(address.as_bytes());
                    value.extend_from_slice(&1u32.to_le_bytes());
                    value.extend_from_slice(&now.to_le_bytes());
                }
                store.set(keys::INFLIGHT, &value, None).expect("memory store set");
            }
            Op::Advance(ms) => now = now.saturating_add(u64::from(ms)),
            Op::SetClock(ms) => now = ms,
        }
    }
});

/// The stored value is within its bound and reads back as the counts just written.
fn check_stored(store: &MemoryStore, counts: &InflightCounts, now: u64, expiry: u64) {
    let (bytes, _) = store.get(keys::INFLIGHT).expect("memory store read");
    let entries = count_entries(bytes.as_deref().unwrap_or_default());
    assert!(entries <= MAX_PODS, "{entries} entries stored, bound is {MAX_PODS}");
    let read_back = InflightCounts::read(store).expect("memory store read");
    for address in ADDRESSES {
        assert_eq!(read_back.count(address, now, expiry), counts.count(address, now, expiry), "{address}");
    }
}

/// Whole entries in the documented layout: `[len u8][address][count u32][updated_ms u64]`.
fn count_entries(mut bytes: &[u8]) -> usize {
    let mut entries = 0;
    while let Some((&len, rest)) = bytes.split_first() {
        let Some(after) = rest.get(usize::from(len) + 12..) else { break };
        entries += 1;
        bytes = after;
    }
    entries
}
