//! A routing decision from a pod table decoded from arbitrary bytes, twice: `route::choose`
//! alone under several policies, with in-flight counts and a prefix index that knows some of
//! its pods; then the shipped decision (`wasm_epp_router::decision::decide`) of a worker
//! configured with a pool, the same bytes published into a `MockHost`'s shared data as the
//! pool service publishes them. Never panics; whenever there is any pod (in the table or the
//! configured pool) a pod is chosen; the chosen pod and every fallback (every entry of the
//! destination header) are pods of the table or the pool, never anything else; usable data
//! means no fail-open, and none means fail-open.

#![no_main]

use libfuzzer_sys::fuzz_target;
use picker::address::PodAddress;
use picker::config::ScorerWeights;
use picker::inflight::WorkerInflight;
use picker::keys;
use picker::pod_table::{encode_version, PodState, PodTable};
use picker::prefix::PrefixIndex;
use picker::random::TieBreaker;
use picker::route::{choose, PrefixQuery, RoutingView};
use picker::scheduler::Policy;
use picker::store::SharedStore;
use wasm_epp_host::MockHost;
use wasm_epp_router::configure;
use wasm_epp_router::decision::{decide, Outcome, Prompt};

const STALE_AFTER_MS: u64 = 5_000;
/// The request's prompt blocks; pod `i` of the table is recorded holding the first `i % 6`.
const HASHES: [u64; 5] = [11, 22, 33, 44, 55];
/// The shipped worker's configuration: the pool `choose` is given above, eight fallbacks.
const SHIPPED_CONFIG: &str = r#"{"pool": ["10.0.0.9:80"], "fallback_destinations": 8, "stale_after_ms": 5000}"#;

/// The table's bytes through a configured worker's decision, as one request would take it.
fn shipped_decisions(data: &[u8], table: &PodTable, newest: u64) {
    let host = MockHost::new();
    *host.configuration.borrow_mut() = SHIPPED_CONFIG.as_bytes().to_vec();
    let worker = configure(&host, SHIPPED_CONFIG.len(), 7).expect("the configuration is valid");
    host.set(keys::POD_TABLE, data, None).expect("memory store set");
    host.set(keys::POD_TABLE_VERSION, &encode_version(1), None).expect("memory store set");
    for (i, pod) in table.pods.iter().enumerate().take(16) {
        let hashes = HASHES.get(..i % 6).unwrap_or(&HASHES);
        worker.prefix.borrow_mut().record_pick(pod.address.as_str(), pod.epoch, hashes, None, 64);
    }
    let members: Vec<&str> = table
        .pods
        .iter()
        .map(|p| p.address.as_str())
        .chain(worker.fallback_pool.iter().map(PodAddress::as_str))
        .collect();
    for now_ms in [0, newest.saturating_add(1), u64::MAX] {
        host.clock_ms.set(now_ms);
        let fail_open_before = worker.stats.metrics.pending("wasm_epp.fail_open");
        let prompt = Prompt {
            request: None,
            endpoint: picker::request::Endpoint::Completions,
            session: None,
            session_pinned: false,
            sheddable: false,
            model: None,
            subset: None,
            slo_ttft_ms: None,
            weight: 1,
            band: None,
        };
        let Outcome::Routed { address, destination, .. } = decide(&worker, &host, &prompt) else {
            panic!("the shipped decision routed nowhere with a pool of {}", worker.fallback_pool.len())
        };
        assert!(members.contains(&address.as_str()), "shipped decision chose {address}, no pod of the table or pool");
        let entries: Vec<&str> = destination.split(',').collect();
        assert_eq!(entries.first(), Some(&address.as_str()), "destination {destination} does not start with the pick");
        assert!(entries.len() <= 9, "destination {destination} has more than eight fallbacks");
        for entry in entries {
            assert!(members.contains(&entry), "destination entry {entry} is no pod of the table or pool");
        }
        let usable = table.pods.iter().any(|p| p.healthy && now_ms.saturating_sub(p.last_success_ms) <= STALE_AFTER_MS);
        let failed_open = worker.stats.metrics.pending("wasm_epp.fail_open") > fail_open_before;
        assert_eq!(failed_open, !usable, "shipped decision: fail_open with usable pods, or the reverse");
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(table) = PodTable::decode(data) else { return };
    let fallback_pool: Vec<PodAddress> = PodAddress::parse("10.0.0.9:80").into_iter().collect();
    let mut inflight = WorkerInflight::new();
    let mut index = PrefixIndex::new(4096);
    for (i, pod) in table.pods.iter().enumerate().take(16) {
        for _ in 0..i % 4 {
            inflight.started(pod.address.as_str(), 1, 0);
        }
        index.record(pod.address.as_str(), pod.epoch, HASHES.get(..i % 6).unwrap_or(&HASHES), 64);
    }
    let members: Vec<PodAddress> =
        table.pods.iter().map(|p| p.address.clone()).chain(fallback_pool.iter().cloned()).collect();
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
    // Every other table pod out of rotation for failing requests (outlier detection).
    let every_other: Vec<PodAddress> = table.pods.iter().step_by(2).map(|p| p.address.clone()).collect();
    for (now_ms, ejected) in [0, newest.saturating_add(1), u64::MAX]
        .into_iter()
        .flat_map(|now| [(now, &[][..]), (now, every_other.as_slice())])
    {
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
                    // A stored response's session, which no full queue releases.
                    session_pinned: seed % 2 == 0,
                    last_picked: &last_picked,
                    reuse: (seed % 3) as f64 / 2.0,
                });
                let view = RoutingView {
                    table: Some(&table),
                    fallback_pool: &fallback_pool,
                    inflight: &|pod: &str| inflight.count(pod),
                    prefix,
                    now_ms,
                    stale_after_ms: STALE_AFTER_MS,
                    ejected,
                    models: picker::route::ModelQuery::default(),
                    learning: None,
                };
                let Ok(route) = choose(&view, policy, &mut TieBreaker::new(seed)) else {
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
                let usable_at = |p: &&PodState| p.healthy && now_ms.saturating_sub(p.last_success_ms) <= STALE_AFTER_MS;
                let usable = table.pods.iter().any(|p| usable_at(&p));
                if ejected.is_empty() {
                    assert_eq!(route.fail_open, !usable, "fail_open with usable pods, or the reverse");
                } else if !(with_prefix && seed % 2 == 0)
                    && table.pods.iter().any(|p| usable_at(&p) && !ejected.contains(&p.address))
                {
                    // No pinned session: an ejected pod is neither pick nor fallback while
                    // another has usable data.
                    assert!(!route.fail_open);
                    assert!(!ejected.contains(&route.address), "chose {}, which is ejected", route.address);
                    assert!(route.fallbacks.iter().all(|f| !ejected.contains(f)), "an ejected fallback");
                }
            }
        }
    }
    shipped_decisions(data, &table, newest);
});
