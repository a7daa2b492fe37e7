//! A routing decision (`route::choose`) from a pod table decoded from arbitrary bytes, as a
//! worker reads it from shared data, with in-flight counts and a prefix index that knows some
//! of its pods. Never panics; whenever there is any pod (in the table or the configured
//! pool) a pod is chosen; the chosen pod and every fallback are pods of the table or the
//! pool, never anything else; usable data means no fail-open, and none means fail-open.

#![no_main]

use libfuzzer_sys::fuzz_target;
use picker::address::PodAddress;
use picker::config::ScorerWeights;
use picker::inflight::WorkerInflight;
use picker::pod_table::PodTable;
use picker::prefix::PrefixIndex;
use picker::random::TieBreaker;
use picker::route::{choose, PrefixQuery, RoutingView};
use picker::scheduler::Policy;

const STALE_AFTER_MS: u64 = 5_000;
/// The request's prompt blocks; pod `i` of the table is recorded holding the first `i % 6`.
const HASHES: [u64; 5] = [11, 22, 33, 44, 55];

fuzz_target!(|data: &[u8]| {
    let Ok(table) = PodTable::decode(data) else { return };
    let fallback_pool: Vec<PodAddress> = PodAddress::parse("10.0.0.9:80").into_iter().collect();
    let mut inflight = WorkerInflight::new();
    let mut index = PrefixIndex::new(4096);
    for (i, pod) in table.pods.iter().enumerate().take(16) {
        for _ in 0..i % 4 {
            inflight.started(&pod.address, 0);
        }
        index.record(&pod.address, pod.epoch, HASHES.get(..i % 6).unwrap_or(&HASHES), 64);
    }
    let members: Vec<PodAddress> = table
        .pods
        .iter()
        .filter_map(|p| PodAddress::parse(&p.address).ok())
        .chain(fallback_pool.iter().cloned())
        .collect();
    let newest = table.pods.iter().map(|p| p.last_success_ms).max().unwrap_or(0);
    let policies = [
        Policy { fallbacks: 8, ..Policy::default() },
        Policy {
            weights: ScorerWeights { queue: 100.0, kv_cache: 0.0, inflight: 0.0, ..ScorerWeights::default() },
            affinity_threshold: 0.0,
            ..Policy::default()
        },
        Policy {
            weights: ScorerWeights { queue: 0.0, kv_cache: 0.0, inflight: 0.0, prefix: 0.0 },
            affinity_threshold: 1.0,
            fallbacks: 2,
            ..Policy::default()
        },
    ];
    let last_picked = |address: &str| address.len() as u64 % 3;
    for now_ms in [0, newest.saturating_add(1), u64::MAX] {
        for (seed, policy) in (0u64..).zip(&policies) {
            for with_prefix in [false, true] {
                let prefix = with_prefix.then(|| PrefixQuery {
                    index: &index,
                    hashes: &HASHES,
                    // The session's pod: one of the table (maybe unusable, maybe a stale
                    // epoch), or a pod that is in no table at all.
                    session_pod: match seed {
                        0 => table.pods.get(3).map(|p| (p.address.as_str(), p.epoch)),
                        1 => table.pods.first().map(|p| (p.address.as_str(), p.epoch.wrapping_add(1))),
                        _ => Some(("10.9.9.9:80", 0)),
                    },
                    last_picked: &last_picked,
                });
                let view = RoutingView {
                    table: Some(&table),
                    fallback_pool: &fallback_pool,
                    inflight: &|pod: &str| inflight.count(pod),
                    prefix,
                    now_ms,
                    stale_after_ms: STALE_AFTER_MS,
                };
                let Some(route) = choose(&view, policy, &mut TieBreaker::new(seed)) else {
                    panic!("no pod chosen from {} table pods and a pool of {}", table.pods.len(), fallback_pool.len())
                };
                assert!(
                    members.contains(&route.address),
                    "chose {} which is no pod of the table or pool",
                    route.address
                );
                assert!(route.fallbacks.len() <= policy.fallbacks);
                for fallback in &route.fallbacks {
                    assert!(members.contains(fallback), "fallback {fallback} is no pod of the table or pool");
                }
                let usable =
                    table.pods.iter().any(|p| p.healthy && now_ms.saturating_sub(p.last_success_ms) <= STALE_AFTER_MS);
                assert_eq!(route.fail_open, !usable, "fail_open with usable pods, or the reverse");
            }
        }
    }
});
