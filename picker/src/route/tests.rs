use super::*;
use crate::pod_table::PodState;

fn healthy(address: &str, waiting: f64, seen_ms: u64) -> PodState {
    let mut pod = PodState::unknown(&PodAddress::parse(address).unwrap());
    pod.healthy = true;
    pod.waiting = waiting;
    pod.last_success_ms = seen_ms;
    pod
}

fn view<'a>(
    table: Option<&'a PodTable>,
    pool: &'a [PodAddress],
    inflight: &'a dyn Fn(&str) -> u32,
    now_ms: u64,
) -> RoutingView<'a> {
    RoutingView {
        table,
        fallback_pool: pool,
        inflight,
        prefix: None,
        now_ms,
        stale_after_ms: 1_000,
        ejected: &[],
        models: ModelQuery::default(),
        learning: None,
    }
}

fn choose_with(view: &RoutingView<'_>, seed: u64) -> Route {
    choose(view, &Policy { fallbacks: 1, ..Policy::default() }, &mut TieBreaker::new(seed)).unwrap()
}

#[test]
fn routes_by_table_and_fails_open_when_stale() {
    let table =
        PodTable { pods: vec![healthy("10.0.0.1:80", 20.0, 0), healthy("10.0.0.2:80", 0.0, 0)], ..PodTable::default() };
    let counts = |_: &str| 0;
    let fresh = choose_with(&view(Some(&table), &[], &counts, 500), 1);
    assert_eq!((fresh.address.as_str(), fresh.fail_open), ("10.0.0.2:80", false));
    assert!(choose_with(&view(Some(&table), &[], &counts, 5_000), 1).fail_open, "data 5 s old is not trusted");
}

#[test]
fn reports_a_saturated_pool() {
    let table =
        PodTable { pods: vec![healthy("10.0.0.1:80", 20.0, 0), healthy("10.0.0.2:80", 6.0, 0)], ..PodTable::default() };
    let counts = |_: &str| 0;
    assert!(choose_with(&view(Some(&table), &[], &counts, 0), 1).pool_saturated);
    assert!(!choose_with(&view(Some(&table), &[], &counts, 9_000), 1).pool_saturated, "no usable data: never shed");
}

#[test]
fn falls_back_to_the_configured_pool_and_never_invents_pods() {
    let pool = [PodAddress::parse("10.0.0.9:80").unwrap()];
    let counts = |_: &str| 0;
    let route = choose_with(&view(None, &pool, &counts, 0), 3);
    assert_eq!((route.address.as_str(), route.fail_open), ("10.0.0.9:80", true));
    assert_eq!(
        choose(&view(None, &[], &counts, 0), &Policy::default(), &mut TieBreaker::new(3)),
        Err(NoRoute::EmptyPool)
    );
}

#[test]
fn the_pod_holding_the_prefix_wins_and_a_session_sticks() {
    let table = PodTable {
        pods: vec![healthy("10.0.0.1:80", 0.0, 0), healthy("10.0.0.2:80", 1.0, 0), healthy("10.0.0.3:80", 0.0, 0)],
        ..PodTable::default()
    };
    let counts = |_: &str| 0;
    let mut index = PrefixIndex::new(4096);
    let hashes = [11, 12, 13, 14];
    index.record("10.0.0.2:80", 0, &hashes, 1000);

    let never = |_: &str| 0;
    let mut v = view(Some(&table), &[], &counts, 0);
    v.prefix = Some(PrefixQuery {
        index: &index,
        hashes: &hashes,
        session_pod: None,
        session_pinned: false,
        last_picked: &never,
        reuse: 1.0,
    });
    for seed in 0..20 {
        let route = choose_with(&v, seed);
        assert_eq!((route.address.as_str(), route.prefix_match, route.affinity), ("10.0.0.2:80", 1.0, true));
    }
    v.prefix = Some(PrefixQuery {
        index: &index,
        hashes: &hashes,
        session_pod: Some(("10.0.0.3:80", 0)),
        session_pinned: false,
        last_picked: &never,
        reuse: 1.0,
    });
    assert_eq!(choose_with(&v, 1).address.as_str(), "10.0.0.3:80", "the session's pod first");
}

#[test]
fn a_restarted_pod_has_no_prefix() {
    let mut table =
        PodTable { pods: vec![healthy("10.0.0.1:80", 0.0, 0), healthy("10.0.0.2:80", 0.0, 0)], ..PodTable::default() };
    let counts = |_: &str| 0;
    let mut index = PrefixIndex::new(4096);
    index.record("10.0.0.2:80", 0, &[1, 2], 1000);
    table.pods[1].epoch = 1; // its counters went backwards: the cache is empty
    let never = |_: &str| 0;
    let mut v = view(Some(&table), &[], &counts, 0);
    v.prefix = Some(PrefixQuery {
        index: &index,
        hashes: &[1, 2],
        session_pod: None,
        session_pinned: false,
        last_picked: &never,
        reuse: 1.0,
    });
    assert!(!choose_with(&v, 1).affinity);
}

#[test]
fn an_ejected_pod_is_passed_over_even_holding_the_prefix_and_is_no_fallback() {
    let table = PodTable {
        pods: vec![healthy("10.0.0.1:80", 0.0, 0), healthy("10.0.0.2:80", 3.0, 0), healthy("10.0.0.3:80", 4.0, 0)],
        ..PodTable::default()
    };
    let counts = |_: &str| 0;
    let mut index = PrefixIndex::new(4096);
    let hashes = [21, 22, 23];
    index.record("10.0.0.1:80", 0, &hashes, 1000);
    let never = |_: &str| 0;
    let ejected = [PodAddress::parse("10.0.0.1:80").unwrap()];
    let mut v = view(Some(&table), &[], &counts, 0);
    v.prefix = Some(PrefixQuery {
        index: &index,
        hashes: &hashes,
        session_pod: Some(("10.0.0.1:80", 0)),
        session_pinned: false,
        last_picked: &never,
        reuse: 1.0,
    });
    assert_eq!(choose_with(&v, 1).address.as_str(), "10.0.0.1:80", "idle, and holds the prefix and session");
    v.ejected = &ejected;
    for seed in 0..20 {
        let route = choose_with(&v, seed);
        assert_eq!(route.address.as_str(), "10.0.0.2:80", "the next best by load");
        assert_eq!(route.fallbacks, [PodAddress::parse("10.0.0.3:80").unwrap()], "never retried on it either");
        assert!(!route.fail_open);
    }
}

#[test]
fn ejecting_every_usable_pod_is_ejecting_none() {
    let mut down = healthy("10.0.0.3:80", 2.0, 0);
    down.healthy = false;
    let table = PodTable {
        pods: vec![healthy("10.0.0.1:80", 0.0, 0), healthy("10.0.0.2:80", 5.0, 0), down],
        ..PodTable::default()
    };
    let counts = |_: &str| 0;
    let ejected = [PodAddress::parse("10.0.0.1:80").unwrap(), PodAddress::parse("10.0.0.2:80").unwrap()];
    let mut v = view(Some(&table), &[], &counts, 500);
    v.ejected = &ejected;
    // 10.0.0.3 is not ejected but is down: the two ejected pods are all there is.
    let route = choose_with(&v, 4);
    assert_eq!((route.address.as_str(), route.fail_open), ("10.0.0.1:80", false), "chosen as if none were ejected");
}

#[test]
fn failing_open_leaves_ejected_pods_out_while_another_remains() {
    let table =
        PodTable { pods: vec![healthy("10.0.0.1:80", 0.0, 0), healthy("10.0.0.2:80", 0.0, 0)], ..PodTable::default() };
    let counts = |pod: &str| u32::from(pod == "10.0.0.2:80") * 5;
    let ejected = [PodAddress::parse("10.0.0.1:80").unwrap()];
    // Data 9 s old: no pod is usable, the pick fails open on in-flight counts.
    let mut v = view(Some(&table), &[], &counts, 9_000);
    assert_eq!(choose_with(&v, 1).address.as_str(), "10.0.0.1:80", "fewest in flight");
    v.ejected = &ejected;
    let route = choose_with(&v, 1);
    assert_eq!((route.address.as_str(), route.fail_open), ("10.0.0.2:80", true));
    let pool = [PodAddress::parse("10.0.0.1:80").unwrap(), PodAddress::parse("10.0.0.2:80").unwrap()];
    let mut no_table = view(None, &pool, &counts, 0);
    no_table.ejected = &ejected;
    assert_eq!(choose_with(&no_table, 1).address.as_str(), "10.0.0.2:80", "the static pool too");
}

#[test]
fn a_pinned_session_keeps_its_ejected_pod() {
    let table =
        PodTable { pods: vec![healthy("10.0.0.1:80", 9.0, 0), healthy("10.0.0.2:80", 0.0, 0)], ..PodTable::default() };
    let counts = |_: &str| 0;
    let index = PrefixIndex::new(64);
    let never = |_: &str| 0;
    let ejected = [PodAddress::parse("10.0.0.1:80").unwrap()];
    let mut v = view(Some(&table), &[], &counts, 0);
    v.ejected = &ejected;
    v.prefix = Some(PrefixQuery {
        index: &index,
        hashes: &[],
        session_pod: Some(("10.0.0.1:80", 0)),
        session_pinned: true,
        last_picked: &never,
        reuse: 0.0,
    });
    assert_eq!(choose_with(&v, 1).address.as_str(), "10.0.0.1:80", "only it holds the stored response");
}

#[test]
fn a_pinned_session_waits_on_its_pod_through_stale_data_but_not_once_the_pod_is_down() {
    // Both pods last scraped at 0 and it is now 10 s later: every pod's data is stale.
    let mut table =
        PodTable { pods: vec![healthy("10.0.0.1:80", 0.0, 0), healthy("10.0.0.2:80", 0.0, 0)], ..PodTable::default() };
    let counts = |pod: &str| u32::from(pod == "10.0.0.2:80");
    let index = PrefixIndex::new(64);
    let never = |_: &str| 0;
    let pinned_to_second = || PrefixQuery {
        index: &index,
        hashes: &[],
        session_pod: Some(("10.0.0.2:80", 0)),
        session_pinned: true,
        last_picked: &never,
        reuse: 0.0,
    };
    let mut v = view(Some(&table), &[], &counts, 10_000);
    v.prefix = Some(pinned_to_second());
    let route = choose(&v, &Policy { fallbacks: 1, ..Policy::default() }, &mut TieBreaker::new(1)).unwrap();
    assert_eq!(route.address.as_str(), "10.0.0.2:80", "only it holds the stored response");
    assert!(route.fallbacks.is_empty(), "another pod would answer 404: {:?}", route.fallbacks);
    if let Some(pod) = table.pods.get_mut(1) {
        pod.healthy = false;
    }
    let mut v = view(Some(&table), &[], &counts, 10_000);
    v.prefix = Some(pinned_to_second());
    assert_eq!(choose_with(&v, 1).address.as_str(), "10.0.0.1:80", "its pod is down: routed as usual");
}

#[test]
fn a_subset_hint_answers_alike_sorted_or_not() {
    let listed: Vec<PodAddress> =
        (0..300).map(|i| PodAddress::parse(&format!("10.0.{}.{}:8000", i / 7, i % 250)).unwrap()).collect();
    let mut sorted = listed.clone();
    sorted.sort_unstable();
    let (walked, searched) = (SubsetHint::new(&listed), SubsetHint::new(&sorted));
    assert!(!walked.sorted && searched.sorted);
    let asked = listed.iter().cloned().chain((0..50).map(|i| PodAddress::parse(&format!("10.9.9.{i}:80")).unwrap()));
    for address in asked {
        assert_eq!(walked.holds(&address), searched.holds(&address), "{address:?}");
        assert_eq!(searched.holds(&address), listed.contains(&address));
    }
}
