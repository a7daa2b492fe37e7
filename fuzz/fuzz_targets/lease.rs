//! The poller election (`lease::Lease`) among contenders sharing one `MemoryStore`, under
//! arbitrary interleavings, clock steps, releases and corrupt values in the lease key.
//! Never panics; a contender told `Leader` has just written a lease naming itself; and while
//! nobody corrupted the key, two contenders are never `Leader` within one lease period.

#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use picker::lease::{Lease, LeaseRecord, Role, LEASE_KEY};
use picker::store::{MemoryStore, SharedStore};

const TTL_MS: u64 = 1_000;

#[derive(Arbitrary, Debug)]
enum Op {
    Tick { contender: u8 },
    Advance(u16),
    Release { contender: u8 },
    Corrupt(Vec<u8>),
}

fuzz_target!(|ops: Vec<Op>| {
    let store = MemoryStore::new();
    let contenders = [Lease::new(1, TTL_MS), Lease::new(2, TTL_MS), Lease::new(u64::MAX, TTL_MS)];
    let ids = [1, 2, u64::MAX];
    let mut now: u64 = 1_700_000_000_000;
    // The last Leader answer: who, and until when its lease runs.
    let mut leader: Option<(usize, u64)> = None;
    let mut clean = true;
    for op in ops.into_iter().take(256) {
        match op {
            Op::Tick { contender } => {
                let i = usize::from(contender) % contenders.len();
                let role = contenders[i].tick(&store, now);
                if role == Role::Leader {
                    let (bytes, _) = store.get(LEASE_KEY).expect("memory store");
                    let record = LeaseRecord::decode(bytes.as_deref().unwrap_or_default());
                    assert_eq!(record, LeaseRecord { holder: ids[i], expires_ms: now + TTL_MS }, "leader's record");
                    if let Some((other, until)) = leader {
                        assert!(!clean || other == i || until <= now, "contenders {other} and {i} both lead at {now}");
                    }
                    leader = Some((i, now + TTL_MS));
                }
            }
            Op::Advance(ms) => now += u64::from(ms),
            Op::Release { contender } => {
                let i = usize::from(contender) % contenders.len();
                contenders[i].release(&store);
                if leader.is_some_and(|(holder, _)| holder == i) {
                    leader = None;
                }
            }
            Op::Corrupt(bytes) => {
                store.set(LEASE_KEY, &bytes, None).expect("memory store");
                clean = false;
            }
        }
    }
});
