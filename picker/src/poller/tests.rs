use super::*;

use crate::role::PodRole;

fn addr(text: &str) -> PodAddress {
    PodAddress::parse(text).unwrap()
}

fn poller() -> PoolPoller {
    let config = PollerConfig { unhealthy_after_failures: 2, ..PollerConfig::default() };
    PoolPoller::new(config, vec![addr("10.0.0.1:80"), addr("10.0.0.2:80")])
}

#[test]
fn scrapes_in_flight_follow_their_pod_through_a_new_pool_and_a_retry() {
    let mut p = poller();
    let (a, b) = (addr("10.0.0.1:80"), addr("10.0.0.2:80"));
    p.scrape_started(&a, 1, 0);
    p.scrape_started(&b, 2, 0);
    assert!(!p.round_complete());
    // The pool changes order and grows: the answers still find their pods.
    p.set_pool(vec![addr("10.0.0.3:80"), b.clone(), a.clone()], 5);
    assert_eq!(p.on_scrape(2, ScrapeResult::Answered { status: 200, body: SCRAPE }, 10), ScrapeOutcome::Success);
    // A scrape given up and sent again: the first token is no longer waited for.
    p.scrape_started(&a, 3, 500);
    assert!(!p.owns_scrape(1) && p.owns_scrape(3));
    assert_eq!(p.on_scrape(1, ScrapeResult::NoAnswer, 510), ScrapeOutcome::Unknown);
    assert_eq!(p.on_scrape(3, ScrapeResult::Answered { status: 200, body: SCRAPE }, 520), ScrapeOutcome::Success);
    assert!(p.round_complete());
    let table = p.take_table(600).unwrap();
    let healthy: Vec<&str> = table.pods.iter().filter(|p| p.healthy).map(|p| p.address.as_str()).collect();
    assert_eq!(healthy, ["10.0.0.2:80", "10.0.0.1:80"]);
}

const SCRAPE: &[u8] =
    b"vllm:num_requests_waiting 4\nvllm:num_requests_running 2\nvllm:prefix_cache_queries_total 100\n";

#[test]
fn an_engine_restarted_on_its_address_forgets_the_old_engines_model_list() {
    let mut p = poller();
    let a = addr("10.0.0.1:80");
    let names = |p: &mut PoolPoller, now| p.take_table(now).unwrap().pods[0].models.clone();
    p.scrape_started(&a, 1, 1);
    p.on_scrape(1, ScrapeResult::Answered { status: 200, body: SCRAPE }, 1);
    p.set_catalog(
        &a,
        crate::models::catalog::Catalog { base: vec!["old-model".into()], adapters: Vec::new(), cut: false },
    );
    assert_eq!(names(&mut p, 2), ["old-model"]);
    // Its prefix counter went back: another engine, whose `/v1/models` has not answered yet.
    let restarted = b"vllm:num_requests_waiting 0\nvllm:num_requests_running 0\nvllm:prefix_cache_queries_total 3\n";
    p.scrape_started(&a, 2, 100);
    p.on_scrape(2, ScrapeResult::Answered { status: 200, body: restarted }, 100);
    assert!(names(&mut p, 101).is_empty(), "the old engine's models are not this one's");
}

#[test]
fn a_discovered_pool_resumed_after_a_handover_keeps_its_pods_epochs_from_the_first_list() {
    let (a, b, c) = (addr("10.0.0.1:80"), addr("10.0.0.2:80"), addr("10.0.0.3:80"));
    let mut before = poller();
    let published = before.take_table(5).unwrap();
    let epoch_of = |table: &PodTable, pod: &PodAddress| table.pods.iter().find(|p| p.address == *pod).map(|p| p.epoch);
    // The next leader's pool comes from Kubernetes.
    let mut after = discovered_poller();
    after.resume_from(&published);
    after.set_pool(vec![b.clone(), a.clone(), c.clone()], 10);
    let first = after.take_table(10).unwrap();
    assert_eq!(epoch_of(&first, &a), epoch_of(&published, &a), "the same engine: what workers learned holds");
    assert_eq!(epoch_of(&first, &b), epoch_of(&published, &b));
    let highest = published.pods.iter().map(|p| p.epoch).max().unwrap();
    assert!(epoch_of(&first, &c).unwrap() > highest, "a pod the old table did not know is new");
    // Only the first list: a pod that leaves and comes back past the grace may be another
    // engine (within it, its own record's first scrape decides).
    after.set_pool(vec![b.clone(), c.clone()], 20);
    let back = 21 + crate::departed::GRACE_MS;
    after.set_pool(vec![b.clone(), c.clone(), a.clone()], back);
    let later = after.take_table(back).unwrap();
    assert!(epoch_of(&later, &a).unwrap() > highest, "back after leaving: a new epoch");
}

fn discovered_poller() -> PoolPoller {
    let kubernetes = crate::config::parse_json(br#"{"namespace": "llm", "label_selector": "app=vllm"}"#).unwrap();
    PoolPoller::new(PollerConfig { kubernetes: Some(kubernetes), ..PollerConfig::default() }, Vec::new())
}

#[test]
fn a_discovered_pool_resumed_is_scraped_until_its_first_list() {
    let (a, b) = (addr("10.0.0.1:80"), addr("10.0.0.2:80"));
    let mut before = poller();
    before.set_discovered_roles(crate::role::RoleMap::new(vec![(b.clone(), PodRole::Decode)]));
    let published = before.take_table(5).unwrap();
    // A new leader whose API server refuses to list: the last known pool is the table's.
    let mut after = discovered_poller();
    after.resume_from(&published);
    assert_eq!(after.due(10), [a.clone(), b.clone()], "scraped as the old leader did");
    let roles: Vec<PodRole> = after.pods().map(|pod| pod.role).collect();
    assert_eq!(roles, [PodRole::Both, PodRole::Decode], "the roles its labels gave");
    after.scrape_started(&a, 1, 10);
    after.on_scrape(1, ScrapeResult::Answered { status: 200, body: SCRAPE }, 20);
    let table = after.take_table(20).unwrap();
    assert!(table.version > published.version && table.pods.len() == 2);
    assert_eq!(table.pods[0].last_success_ms, 20, "published with fresh data");
    // The first list finds no pod: the lister's pool had none, so it is no change to it.
    after.end_resume(30);
    assert!(after.take_table(30).unwrap().pods.is_empty(), "every resumed pod left");
    after.end_resume(40);
    assert!(after.take_table(40).is_none(), "only the first list ends the resume");
}

#[test]
fn scrape_success_makes_pod_healthy_with_its_numbers() {
    let mut p = poller();
    assert_eq!(p.due(0).len(), 2);
    p.scrape_started(&addr("10.0.0.1:80"), 7, 0);
    assert_eq!(p.due(1), vec![addr("10.0.0.2:80")]);
    assert_eq!(p.on_scrape(7, ScrapeResult::Answered { status: 200, body: SCRAPE }, 10), ScrapeOutcome::Success);
    let table = p.take_table(10).unwrap();
    let pod = &table.pods[0];
    assert!(pod.healthy && pod.waiting == 4.0 && pod.last_success_ms == 10);
    assert!(!table.pods[1].healthy, "never scraped is not healthy");
    assert!(p.take_table(11).is_none(), "nothing new to publish");
}

#[test]
fn health_flips_after_threshold_and_back_on_success() {
    let mut p = poller();
    let a = addr("10.0.0.1:80");
    // The host's clock: 0 would read as "never answered" (`last_success_ms`).
    p.scrape_started(&a, 1, 1);
    p.on_scrape(1, ScrapeResult::Answered { status: 200, body: SCRAPE }, 1);
    assert!(p.take_events().is_empty(), "a pod's first answer is no news");
    p.scrape_started(&a, 2, 100);
    assert!(matches!(p.on_scrape(2, ScrapeResult::NoAnswer, 100), ScrapeOutcome::Failure(_)));
    assert!(p.take_table(100).unwrap().pods[0].healthy, "one failure is not enough");
    p.scrape_started(&a, 3, 200);
    p.on_scrape(3, ScrapeResult::Answered { status: 503, body: b"" }, 200);
    let table = p.take_table(200).unwrap();
    assert!(!table.pods[0].healthy);
    let epoch = table.pods[0].epoch;
    assert_eq!(p.take_events(), [PodEvent::Unhealthy { address: a.clone(), failures: 2 }], "for the service's log");
    p.scrape_started(&a, 4, 300);
    p.on_scrape(4, ScrapeResult::Answered { status: 200, body: SCRAPE }, 300);
    assert!(p.take_events().is_empty(), "its counters carried on: the same engine");
    let pod = p.take_table(300).unwrap().pods[0].clone();
    assert!(pod.healthy && pod.epoch == epoch, "a pod whose /metrics was slow keeps what it cached");
}

/// Fails `a`'s scrapes until it is unhealthy, starting at `from_ms`.
fn fail_until_unhealthy(p: &mut PoolPoller, a: &PodAddress, token: u32, from_ms: u64) {
    for (n, token) in (token..token + 2).enumerate() {
        p.scrape_started(a, token, from_ms + n as u64);
        p.on_scrape(token, ScrapeResult::NoAnswer, from_ms + n as u64);
    }
    assert_eq!(p.take_events(), [PodEvent::Unhealthy { address: a.clone(), failures: 2 }]);
}

#[test]
fn a_pod_back_without_proof_of_continuity_gets_a_new_epoch() {
    let mut p = poller();
    let a = addr("10.0.0.1:80");
    let no_counter: &[u8] = b"vllm:num_requests_waiting 0\nvllm:num_requests_running 0\n";
    let answer = |p: &mut PoolPoller, token: u32, body: &[u8], at: u64| {
        p.scrape_started(&a, token, at);
        p.on_scrape(token, ScrapeResult::Answered { status: 200, body }, at);
        p.take_table(at).unwrap().pods[0].epoch
    };
    // No counter to compare: back from failing is taken for a restart.
    let first = answer(&mut p, 1, no_counter, 1);
    fail_until_unhealthy(&mut p, &a, 2, 100);
    assert!(answer(&mut p, 4, no_counter, 200) > first);
    assert_eq!(p.take_events(), [PodEvent::CacheDropped { address: a.clone(), restarted: false }]);
    // Counters that carried on, but after an absence past the bound: a new epoch too.
    let before = answer(&mut p, 5, SCRAPE, 300);
    fail_until_unhealthy(&mut p, &a, 6, 400);
    let back = 300 + TRUST_COUNTERS_FOR_MS + 1;
    assert!(answer(&mut p, 8, SCRAPE, back) > before);
    assert_eq!(p.take_events(), [PodEvent::CacheDropped { address: a.clone(), restarted: false }]);
}

#[test]
fn prefix_counters_past_a_billion_are_the_same_engine() {
    let mut p = poller();
    let (a, b) = (addr("10.0.0.1:80"), addr("10.0.0.2:80"));
    let answer = |p: &mut PoolPoller, pod: &PodAddress, token: u32, body: &str, at: u64| {
        p.scrape_started(pod, token, at);
        p.on_scrape(token, ScrapeResult::Answered { status: 200, body: body.as_bytes() }, at);
        p.take_table(at).unwrap().pods.into_iter().find(|state| state.address == *pod).unwrap().epoch
    };
    // Data parallelism: one engine's counter passes a billion, the other's does not yet.
    let engines = |first: u64, second: u64| {
        format!(
            "vllm:num_requests_waiting 0\n\
             vllm:prefix_cache_queries_total{{engine=\"0\"}} {first}\n\
             vllm:prefix_cache_queries_total{{engine=\"1\"}} {second}\n"
        )
    };
    let epoch = answer(&mut p, &a, 1, &engines(999_000_000, 900_000_000), 1);
    assert_eq!(answer(&mut p, &a, 2, &engines(1_001_000_000, 901_000_000), 100), epoch);
    assert!(p.take_events().is_empty(), "no restart: its counters carried on");
    // One engine past a billion, back after two timed-out scrapes: its counter carried on.
    let one = |queries: u64| format!("vllm:num_requests_waiting 0\nvllm:prefix_cache_queries_total {queries}\n");
    let epoch = answer(&mut p, &b, 3, &one(999_000_000), 1);
    assert_eq!(answer(&mut p, &b, 4, &one(1_001_000_000), 100), epoch);
    fail_until_unhealthy(&mut p, &b, 5, 200);
    assert_eq!(answer(&mut p, &b, 7, &one(1_002_000_000), 300), epoch, "what was learned of its cache holds");
    assert!(p.take_events().is_empty());
}

#[test]
fn roles_come_from_labels_then_configuration_then_both() {
    let config: PollerConfig = crate::config::parse_json(
        br#"{"pool": ["10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"],
             "roles": {"10.0.0.1:80": "prefill", "10.0.0.2:80": "prefill"}}"#,
    )
    .unwrap();
    let pool = config.validate().unwrap();
    let mut p = PoolPoller::new(config, pool);
    let roles = |p: &mut PoolPoller| -> Vec<PodRole> { p.pods().map(|pod| pod.role).collect() };
    assert_eq!(roles(&mut p), [PodRole::Prefill, PodRole::Prefill, PodRole::Both]);
    p.set_discovered_roles(crate::role::RoleMap::new(vec![(addr("10.0.0.2:80"), PodRole::Decode)]));
    assert_eq!(roles(&mut p), [PodRole::Prefill, PodRole::Decode, PodRole::Both], "the label wins");
    assert_eq!(p.take_table(0).unwrap().pods[1].role, PodRole::Decode, "and is published");
}

#[test]
fn counters_going_backwards_mean_a_restart() {
    let mut p = poller();
    let a = addr("10.0.0.1:80");
    // The host's clock: 0 would read as "never answered" (`last_success_ms`).
    p.scrape_started(&a, 1, 1);
    p.on_scrape(1, ScrapeResult::Answered { status: 200, body: SCRAPE }, 1);
    let epoch = p.take_table(0).unwrap().pods[0].epoch;
    p.scrape_started(&a, 2, 100);
    let restarted = b"vllm:num_requests_waiting 0\nvllm:prefix_cache_queries_total 3\n";
    p.on_scrape(2, ScrapeResult::Answered { status: 200, body: restarted }, 100);
    assert!(p.take_table(100).unwrap().pods[0].epoch > epoch);
    assert_eq!(p.take_events(), [PodEvent::CacheDropped { address: a, restarted: true }]);
}

#[test]
fn pool_changes_keep_known_pods_and_ignore_late_answers() {
    let mut p = poller();
    p.scrape_started(&addr("10.0.0.2:80"), 9, 0);
    p.set_pool(vec![addr("10.0.0.1:80"), addr("10.0.0.3:80")], 5);
    assert_eq!(p.on_scrape(9, ScrapeResult::NoAnswer, 5), ScrapeOutcome::Unknown);
    let table = p.take_table(5).unwrap();
    let addresses: Vec<_> = table.pods.iter().map(|pod| pod.address.as_str()).collect();
    assert_eq!(addresses, ["10.0.0.1:80", "10.0.0.3:80"]);
    // 10.0.0.2 left; if it (or a new pod on its address) comes back past the grace, its
    // epoch is new.
    let epochs: Vec<u32> = table.pods.iter().map(|pod| pod.epoch).collect();
    let back = 6 + crate::departed::GRACE_MS;
    p.set_pool(vec![addr("10.0.0.1:80"), addr("10.0.0.2:80")], back);
    let again = p.take_table(back).unwrap();
    assert!(again.pods[1].epoch > epochs[1], "a returning address never reuses an old epoch");
}

/// Scrapes `pod` at `at_ms`, answered with a page whose prefix counter reads `queries`, and
/// returns its table state.
fn answer_with(p: &mut PoolPoller, pod: &PodAddress, token: u32, queries: u64, at_ms: u64) -> PodState {
    let page = format!("vllm:num_requests_waiting 0\nvllm:prefix_cache_queries_total {queries}\n");
    p.scrape_started(pod, token, at_ms);
    p.on_scrape(token, ScrapeResult::Answered { status: 200, body: page.as_bytes() }, at_ms);
    state_of(p, pod, at_ms).unwrap()
}

fn state_of(p: &mut PoolPoller, pod: &PodAddress, at_ms: u64) -> Option<PodState> {
    p.touch();
    p.take_table(at_ms).unwrap().pods.into_iter().find(|state| state.address == *pod)
}

#[test]
fn a_pod_listed_again_within_the_grace_keeps_its_epoch_when_its_counters_carried_on() {
    let mut p = poller();
    let (a, b) = (addr("10.0.0.1:80"), addr("10.0.0.2:80"));
    let epoch = answer_with(&mut p, &a, 1, 1_000, 1).epoch;
    // Its readiness probe timed out under load: NotReady, out of the listed pool.
    p.scrape_started(&a, 2, 100);
    p.set_pool(vec![b.clone()], 150);
    assert!(state_of(&mut p, &a, 150).is_none(), "out of the table while away");
    assert_eq!(p.on_scrape(2, ScrapeResult::NoAnswer, 160), ScrapeOutcome::Unknown);
    // Ready again 20 s later: its record is back, out of rotation until a scrape says.
    p.set_pool(vec![a.clone(), b.clone()], 20_000);
    let back = state_of(&mut p, &a, 20_000).unwrap();
    assert!(!back.healthy && back.epoch == epoch, "{back:?}");
    assert_eq!(p.due(20_000), [a.clone(), b.clone()], "scraped at once (its old scrape forgotten)");
    let scraped = answer_with(&mut p, &a, 3, 1_500, 20_100);
    assert!(scraped.healthy && scraped.epoch == epoch, "its counters carried on: the same engine, cache warm");
    assert!(p.take_events().is_empty());
    // Back again, but its scrapes fail: told as for a pod that joins.
    p.set_pool(vec![b.clone()], 30_000);
    p.set_pool(vec![a.clone(), b.clone()], 31_000);
    for token in 4..7 {
        p.scrape_started(&a, token, 31_000);
        p.on_scrape(token, ScrapeResult::NoAnswer, 31_000);
    }
    let reason = "no answer".to_string();
    assert_eq!(p.take_events(), [PodEvent::NeverHealthy { address: a.clone(), failures: 2, reason }]);
}

#[test]
fn a_pod_listed_again_with_its_counters_reset_or_after_the_grace_gets_a_new_epoch() {
    let mut p = poller();
    let (a, b) = (addr("10.0.0.1:80"), addr("10.0.0.2:80"));
    // Back within the grace, counters gone back: the engine restarted, or another pod took
    // the address meanwhile.
    let epoch = answer_with(&mut p, &a, 1, 1_000, 1).epoch;
    p.set_pool(vec![b.clone()], 100);
    p.set_pool(vec![a.clone(), b.clone()], 10_000);
    let restarted = answer_with(&mut p, &a, 2, 10, 10_100);
    assert!(restarted.healthy && restarted.epoch > epoch);
    assert_eq!(p.take_events(), [PodEvent::CacheDropped { address: a.clone(), restarted: true }]);
    // Listed again within the grace, but first answering past the counters' trust.
    let epoch = restarted.epoch;
    p.set_pool(vec![b.clone()], 20_000);
    p.set_pool(vec![a.clone(), b.clone()], 20_000 + crate::departed::GRACE_MS);
    let late = answer_with(&mut p, &a, 3, 20, 20_000 + crate::departed::GRACE_MS);
    assert!(late.epoch > epoch, "away too long to trust its counters");
    assert_eq!(p.take_events(), [PodEvent::CacheDropped { address: a.clone(), restarted: false }]);
    // Listed again past the grace: a new pod from the start.
    let epoch = late.epoch;
    p.set_pool(vec![b.clone()], 100_000);
    p.set_pool(vec![a.clone(), b.clone()], 100_001 + crate::departed::GRACE_MS);
    assert!(state_of(&mut p, &a, 200_000).unwrap().epoch > epoch);
    let fresh = answer_with(&mut p, &a, 4, 30, 200_000);
    assert!(fresh.healthy && fresh.epoch > epoch);
    assert!(p.take_events().is_empty(), "a pod's first answer is no news");
}

#[test]
fn departed_records_expire_and_stay_within_the_pool_cap() {
    let pool = |from: usize| -> Vec<PodAddress> {
        (from..from + MAX_PODS).map(|i| addr(&format!("10.{}.{}.1:80", i / 256, i % 256))).collect()
    };
    use crate::pod_table::MAX_PODS;
    let mut p = PoolPoller::new(PollerConfig::default(), pool(0));
    // Three whole pools replaced at once: only the pool cap of records is kept.
    p.set_pool(pool(MAX_PODS), 10);
    p.set_pool(pool(2 * MAX_PODS), 20);
    assert_eq!(p.departed.len(), MAX_PODS);
    assert!(p.departed.contains(pool(MAX_PODS)[0].as_str()), "the latest departures are kept");
    // Past the grace, the next change forgets them.
    p.set_pool(pool(2 * MAX_PODS)[1..].to_vec(), 21 + crate::departed::GRACE_MS);
    assert_eq!(p.departed.len(), 1, "only the pod that just left");
}

#[test]
fn garbage_and_oversized_scrapes_are_failures() {
    let mut p =
        PoolPoller::new(PollerConfig { max_metrics_bytes: 1024, ..PollerConfig::default() }, vec![addr("10.0.0.1:80")]);
    let a = addr("10.0.0.1:80");
    p.scrape_started(&a, 1, 0);
    assert!(matches!(
        p.on_scrape(1, ScrapeResult::Answered { status: 200, body: b"\xff\xfe" }, 0),
        ScrapeOutcome::Failure(_)
    ));
    p.scrape_started(&a, 2, 0);
    let huge = vec![b'#'; 2048];
    assert!(matches!(
        p.on_scrape(2, ScrapeResult::Answered { status: 200, body: &huge }, 0),
        ScrapeOutcome::Failure(_)
    ));
}
