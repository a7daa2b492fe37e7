//! The prefix index (`prefix::index::PrefixIndex`) under arbitrary records, lookups, flushes
//! and pod churn, checked through its public API after every step:
//! - never more than `max_entries` entries, and the per-pod counts add up to the total;
//! - right after a record, the pod holds the head of the chain it was given (as much as its
//!   capacity allows) and no more than its capacity;
//! - another epoch matches nothing; a flushed pod holds nothing;
//! - `matched_blocks_each` agrees with `matched_blocks`, and no match is longer than the query;
//! - memory stays near what the module doc promises.

#![no_main]

use std::collections::BTreeSet;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use picker::pod_table::MAX_PODS;
use picker::prefix::index::PrefixIndex;

/// Pod names: a few real ones, the empty name (refused), and a long one.
const PODS: [&str; 6] = ["10.0.0.1:8000", "10.0.0.2:8000", "[fd00::7]:8000", "10.0.0.3:8000", "", "10.0.0.4:65535"];

#[derive(Arbitrary, Debug)]
enum Op {
    Record {
        pod: u8,
        epoch: u8,
        hashes: Vec<u8>,
        capacity: u16,
    },
    Match {
        pod: u8,
        epoch: u8,
        hashes: Vec<u8>,
    },
    MatchEach {
        pods: Vec<(u8, u8)>,
        hashes: Vec<u8>,
    },
    Flush {
        pod: u8,
    },
    Retain {
        keep: u8,
    },
    /// Records for more distinct pods than there are pod ids, so ids are reclaimed.
    Churn {
        first: u16,
        count: u16,
    },
}

#[derive(Arbitrary, Debug)]
struct Input {
    max_entries: u16,
    ops: Vec<Op>,
}

/// Block hashes from a small alphabet, so chains of different pods and records overlap.
fn hashes(bytes: &[u8]) -> Vec<u64> {
    bytes.iter().take(300).map(|&b| u64::from(b % 32).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5555).collect()
}

fn name(pod: u8) -> &'static str {
    PODS[usize::from(pod) % PODS.len()]
}

fuzz_target!(|input: Input| {
    let max_entries = match input.max_entries {
        0 => usize::MAX, // clamped by the index
        n => usize::from(n % 2048),
    };
    let mut index = PrefixIndex::new(max_entries);
    let bound = index.max_entries();
    assert!(bound >= 1 && bound <= max_entries.max(1));
    let mut known: BTreeSet<String> = BTreeSet::new();
    let mut churned = false;
    for op in input.ops.into_iter().take(100) {
        match op {
            Op::Record { pod, epoch, hashes: bytes, capacity } => {
                let (pod, epoch, chain) = (name(pod), u32::from(epoch % 4), hashes(&bytes));
                let capacity = usize::from(capacity % 512);
                let recorded = index.record(pod, epoch, &chain, capacity);
                assert_eq!(recorded, !pod.is_empty(), "record({pod:?}) returned {recorded}");
                if recorded {
                    known.insert(pod.to_string());
                    let kept = chain.len().min(capacity.clamp(1, bound));
                    let matched = index.matched_blocks(&chain, pod, epoch);
                    assert!(matched >= kept, "recorded {kept} blocks of the chain, {matched} match");
                    assert!(index.pod_len(pod) <= capacity.clamp(1, bound), "over the pod's capacity");
                    assert_eq!(index.matched_blocks(&chain, pod, epoch.wrapping_add(1)), 0, "another epoch matched");
                }
            }
            Op::Match { pod, epoch, hashes: bytes } => {
                let chain = hashes(&bytes);
                assert!(index.matched_blocks(&chain, name(pod), u32::from(epoch % 4)) <= chain.len());
            }
            Op::MatchEach { pods, hashes: bytes } => {
                let chain = hashes(&bytes);
                let pods: Vec<(&str, u32)> = pods.iter().take(16).map(|&(p, e)| (name(p), u32::from(e % 4))).collect();
                let mut out = vec![7; 3];
                index.matched_blocks_each(&chain, &pods, &mut out);
                let one_by_one: Vec<usize> = pods.iter().map(|&(p, e)| index.matched_blocks(&chain, p, e)).collect();
                assert_eq!(out, one_by_one);
            }
            Op::Flush { pod } => {
                let pod = name(pod);
                let held = index.pod_len(pod);
                assert_eq!(index.flush_pod(pod), held);
                assert_eq!(index.pod_len(pod), 0);
                known.remove(pod);
            }
            Op::Retain { keep } => {
                let keep_set: Vec<&str> = (0..8).filter(|bit| keep & (1 << bit) != 0).map(|bit| name(bit)).collect();
                index.retain_pods(|pod| keep_set.contains(&pod));
                known.retain(|pod| keep_set.contains(&pod.as_str()));
                assert!(known.iter().all(|pod| keep_set.contains(&pod.as_str())));
            }
            Op::Churn { first, count } if !churned => {
                churned = true;
                let chain = hashes(&[1, 2, 3]);
                for i in 0..usize::from(count) % (MAX_PODS + 200) {
                    let pod = format!(
                        "10.2.{}.{}:8000",
                        (usize::from(first) + i) / 256 % 256,
                        (usize::from(first) + i) % 256
                    );
                    assert!(index.record(&pod, 0, &chain, 4));
                    known.insert(pod);
                }
            }
            Op::Churn { .. } => {}
        }
        check(&index, &known, bound);
    }
});

fn check(index: &PrefixIndex, known: &BTreeSet<String>, bound: usize) {
    assert!(index.len() <= bound, "{} entries, bound {bound}", index.len());
    assert!(index.pod_count() <= MAX_PODS);
    // Pods not in `known` were flushed or reclaimed: they must hold nothing.
    let held: usize = known.iter().map(|pod| index.pod_len(pod)).sum();
    assert_eq!(held, index.len(), "per-pod counts do not add up");
    #[allow(clippy::len_zero)] // the point is that the two agree
    let empty_by_len = index.len() == 0;
    assert_eq!(index.is_empty(), empty_by_len);
    // Module doc: at most ~56 bytes per entry plus ~100 per pod; generous slack for small
    // indexes (hashbrown's minimum sizes) and for the pod-id vector.
    let limit = 64 * bound.min(1 << 20) + 128 * MAX_PODS + 16 * 1024;
    if bound <= 1 << 20 {
        assert!(index.approx_bytes() <= limit, "{} bytes for {} entries", index.approx_bytes(), index.len());
    }
}
