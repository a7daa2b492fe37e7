//! Workers sharing one [`MemoryStore`], which keeps the host's semantics.

use super::*;
use crate::store::MemoryStore;

const NOW: u64 = 1_000_000;
const EXPIRY: u64 = 60_000;
const POD: &str = "10.0.0.1:8000";

/// Two workers of one Envoy that have each claimed a slot and read the other's (a synced
/// again after b claimed its own).
fn two_workers_knowing_each_others_slots(store: &MemoryStore) -> (WorkerInflight, WorkerInflight) {
    let (mut a, mut b) = (WorkerInflight::new(), WorkerInflight::new());
    a.sync(store, NOW, EXPIRY);
    b.sync(store, NOW, EXPIRY);
    a.sync(store, NOW, EXPIRY);
    (a, b)
}

#[test]
fn own_picks_count_at_once_and_others_after_their_tick() {
    let store = MemoryStore::new();
    let (mut a, mut b) = (WorkerInflight::new(), WorkerInflight::new());
    a.started(POD, 1, NOW);
    a.started(POD, 1, NOW);
    assert_eq!(a.count(POD), 2, "a worker's own burst is seen at once");
    b.sync(&store, NOW, EXPIRY);
    assert_eq!(b.count(POD), 0, "not before a publishes");
    assert!(a.sync(&store, NOW, EXPIRY).published);
    let report = b.sync(&store, NOW, EXPIRY);
    assert_eq!((report.peers, b.count(POD)), (1, 2));
    b.started(POD, 1, NOW);
    assert_eq!(b.count(POD), 3);
    a.finished(POD, 1, NOW);
    a.sync(&store, NOW + 20, EXPIRY);
    b.sync(&store, NOW + 20, EXPIRY);
    assert_eq!(b.count(POD), 2);
    a.sync(&store, NOW + 40, EXPIRY);
    assert_eq!(a.count(POD), 1 + 1, "a sees b's one and its own one");
}

#[test]
fn a_gone_workers_counts_stop_counting_and_its_slot_is_reused() {
    let store = MemoryStore::new();
    let mut gone = WorkerInflight::new();
    gone.started(POD, 1, NOW);
    gone.sync(&store, NOW, EXPIRY);
    let mut alive = WorkerInflight::new();
    alive.sync(&store, NOW + 10, EXPIRY);
    assert_eq!(alive.count(POD), 1);
    alive.sync(&store, NOW + SLOT_STALE_MS + 100, EXPIRY);
    assert_eq!(alive.count(POD), 0, "a slot not refreshed is ignored");
    let mut newcomer = WorkerInflight::new();
    newcomer.sync(&store, NOW + SLOT_STALE_MS + 200, EXPIRY);
    assert_eq!(newcomer.slot, Some(0), "the stale slot is taken again");
    assert_eq!(alive.slot, Some(1));
}

#[test]
fn a_gone_workers_counts_stop_counting_after_the_clock_steps_back() {
    let store = MemoryStore::new();
    let mut gone = WorkerInflight::new();
    gone.started(POD, 1, NOW + 3_600_000);
    gone.sync(&store, NOW + 3_600_000, EXPIRY); // its last refresh, an hour ahead of the clock now
    let mut alive = WorkerInflight::new();
    alive.sync(&store, NOW, EXPIRY);
    assert_eq!(alive.count(POD), 0, "a refresh further ahead than SLOT_STALE_MS is no sign of life");
    assert_eq!(envoy_loads(&store, NOW).get(POD).map(|load| load.count), None);
    assert_eq!(alive.slot, Some(0), "and its slot is free again");
    // A few ms ahead is another worker that wrote after this one read the clock: live.
    let mut busy = WorkerInflight::new();
    busy.started(POD, 1, NOW + 5);
    busy.sync(&store, NOW + 5, EXPIRY);
    alive.sync(&store, NOW, EXPIRY);
    assert_eq!(alive.count(POD), 1);
}

#[test]
fn leaked_counts_expire_and_never_go_negative() {
    let store = MemoryStore::new();
    let mut worker = WorkerInflight::new();
    worker.finished(POD, 1, NOW);
    assert_eq!(worker.count(POD), 0);
    worker.started(POD, 1, NOW);
    worker.sync(&store, NOW + EXPIRY + 1, EXPIRY);
    assert_eq!(worker.count(POD), 0, "a count whose end was never seen is dropped");
}

#[test]
fn corrupt_slots_are_skipped_and_can_be_claimed() {
    let store = MemoryStore::new();
    store.set(INFLIGHT_SLOT_KEYS[0], b"\x01\x02", None).unwrap();
    let mut worker = WorkerInflight::new();
    worker.started(POD, 1, NOW);
    worker.sync(&store, NOW, EXPIRY);
    assert_eq!(worker.slot, Some(0));
    let mut other = WorkerInflight::new();
    let mut bytes = encode(99, NOW, std::iter::empty());
    bytes.extend_from_slice(&[200, b'x']); // truncated entry
    store.set(INFLIGHT_SLOT_KEYS[1], &bytes, None).unwrap();
    other.sync(&store, NOW, EXPIRY);
    assert_eq!(other.count(POD), 1, "whole entries of other slots still count");
}

#[test]
fn every_worker_gets_its_own_slot() {
    let store = MemoryStore::new();
    let mut workers: Vec<WorkerInflight> = (0..MAX_SLOTS + 2).map(|_| WorkerInflight::new()).collect();
    let reports: Vec<SyncReport> = workers.iter_mut().map(|worker| worker.sync(&store, NOW, EXPIRY)).collect();
    let mut slots: Vec<usize> = workers.iter().filter_map(|w| w.slot).collect();
    assert_eq!(slots.len(), MAX_SLOTS, "workers past the bound count only their own");
    slots.sort_unstable();
    slots.dedup();
    assert_eq!(slots.len(), MAX_SLOTS);
    // The two past the bound say so, once each (the tick turns it into one warning).
    let full: Vec<bool> = reports.iter().map(|r| r.slots_full).collect();
    assert_eq!(full.iter().filter(|&&f| f).count(), 2);
    assert!(full.iter().skip(MAX_SLOTS).all(|&f| f));
    let again: Vec<bool> = workers.iter_mut().map(|worker| worker.sync(&store, NOW, EXPIRY).slots_full).collect();
    assert!(again.iter().all(|&f| !f), "said once per worker");
}

#[test]
fn totals_and_peer_counts_reach_every_worker() {
    let store = MemoryStore::new();
    let (mut a, mut b) = (WorkerInflight::new(), WorkerInflight::new());
    a.started(POD, 1, NOW);
    b.started(POD, 1, NOW);
    a.sync(&store, NOW, EXPIRY);
    b.sync(&store, NOW, EXPIRY);
    assert_eq!(envoy_loads(&store, NOW).get(POD).map(|load| load.count), Some(2));
    a.add_tokens(POD, 100);
    let mut peers = HashMap::new();
    peers.insert(POD.to_string(), Load { count: 5, tokens: 6_000 });
    publish_peer_counts(&store, NOW, &peers).unwrap();
    a.sync(&store, NOW + 10, EXPIRY);
    assert_eq!(a.count(POD), 1 + 1 + 5, "own, the other worker's, other replicas'");
    assert_eq!(a.tokens(POD), 100 + 6_000, "a long prompt another replica sent counts here");
    a.sync(&store, NOW + SLOT_STALE_MS + 100, EXPIRY);
    assert_eq!(a.local_count(POD), 1);
    assert!(a.count(POD) < 7, "peer counts nobody refreshes stop counting");
}

#[test]
fn prompt_tokens_in_flight_reach_the_other_workers_and_are_released_at_first_byte() {
    let store = MemoryStore::new();
    let (mut a, mut b) = (WorkerInflight::new(), WorkerInflight::new());
    a.started(POD, 1, NOW);
    a.add_tokens(POD, 8_000);
    a.started(POD, 1, NOW);
    a.add_tokens(POD, 100);
    a.sync(&store, NOW, EXPIRY);
    b.sync(&store, NOW, EXPIRY);
    assert_eq!((b.count(POD), b.tokens(POD)), (2, 8_100), "the long prompt is seen before any scrape");
    a.release_tokens(POD, 8_000); // its first byte arrived
    a.publish_now(&store, NOW);
    b.refresh_others(&store, NOW);
    assert_eq!((b.count(POD), b.tokens(POD)), (2, 100), "still in flight, no longer ahead in the queue");
    a.release_tokens(POD, 1_000_000);
    assert_eq!(a.tokens(POD), 0, "never below zero");
}

#[test]
fn a_pick_published_at_once_is_read_by_the_other_workers_next_decision() {
    let store = MemoryStore::new();
    let (mut a, mut b) = (WorkerInflight::new(), WorkerInflight::new());
    a.sync(&store, NOW, EXPIRY);
    b.sync(&store, NOW, EXPIRY);
    a.started(POD, 1, NOW + 1);
    a.publish_now(&store, NOW + 1);
    b.refresh_others(&store, NOW + 2);
    assert_eq!(b.count(POD), 1, "no tick between a's pick and b's decision");
    a.finished(POD, 1, NOW + 3);
    a.publish_now(&store, NOW + 3);
    b.refresh_others(&store, NOW + 4);
    assert_eq!(b.count(POD), 0, "and its end");
    // A third worker that claims a slot after b's last tick: early on, b's next decision
    // finds it (a_worker_that_claims_its_slot_after_another_is_seen_by_its_next_decision_early_on).
    let mut c = WorkerInflight::new();
    c.sync(&store, NOW + 5, EXPIRY);
    c.started(POD, 1, NOW + 5);
    c.publish_now(&store, NOW + 5);
    b.refresh_others(&store, NOW + 6);
    assert_eq!(b.count(POD), 1);
    b.sync(&store, NOW + 20, EXPIRY);
    assert_eq!(b.count(POD), 1);
}

/// A table of `addresses` in that order, published at `version`.
fn table_of(version: u64, addresses: &[&str]) -> PodTable {
    let pods = addresses
        .iter()
        .map(|a| crate::pod_table::PodState::unknown(&crate::address::PodAddress::parse(a).unwrap()))
        .collect();
    PodTable { version, published_at_ms: version, poll_interval_ms: 100, pods }
}

#[test]
fn counts_kept_by_table_position_equal_counts_by_address() {
    let store = MemoryStore::new();
    let pods = ["10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000", "10.0.0.4:8000"];
    let (mut a, mut b) = (WorkerInflight::new(), WorkerInflight::new());
    a.sync(&store, NOW, EXPIRY);
    b.sync(&store, NOW, EXPIRY);
    for (i, pod) in pods.iter().enumerate() {
        for _ in 0..=i {
            a.started(pod, 1, NOW);
        }
    }
    a.started("10.0.0.9:8000", 1, NOW); // not in b's table
    a.add_tokens(pods[2], 700);
    a.publish_now(&store, NOW);
    b.started(pods[1], 1, NOW);
    let check = |b: &WorkerInflight, table: &PodTable| {
        for (i, pod) in table.pods.iter().enumerate() {
            let address = pod.address.as_str();
            assert_eq!(b.count_at(i, address), b.count(address), "{address}");
        }
    };
    let table = table_of(1, &pods);
    b.refresh_others_in_order(&store, NOW + 1, &table);
    check(&b, &table);
    assert_eq!((b.count(pods[3]), b.count(pods[1]), b.count("10.0.0.9:8000")), (4, 3, 1));
    assert_eq!(b.tokens(pods[2]), 700);
    // Another table, in another order and with a pod fewer: positions follow it.
    let reordered = table_of(2, &[pods[3], pods[0], pods[2]]);
    b.refresh_others_in_order(&store, NOW + 2, &reordered);
    check(&b, &reordered);
    assert_eq!((b.count_at(0, pods[3]), b.count(pods[1]), b.tokens(pods[2])), (4, 3, 700));
    // The tick's read and a plain refresh keep the positions' counts right.
    a.finished(pods[3], 1, NOW + 3);
    a.sync(&store, NOW + 3, EXPIRY);
    b.sync(&store, NOW + 3, EXPIRY);
    check(&b, &reordered);
    b.refresh_others(&store, NOW + 4);
    check(&b, &reordered);
    assert_eq!(b.count_at(0, pods[3]), 3);
    // A table naming a pod twice turns positions off: every count is by address.
    let doubled = table_of(3, &[pods[0], pods[0], pods[1]]);
    b.refresh_others_in_order(&store, NOW + 5, &doubled);
    check(&b, &doubled);
    assert_eq!(b.count_at(1, pods[0]), 1);
}

/// `b`'s counts of `pods` after a refresh equal those of a refresh that sums every slot anew.
fn assert_same_as_summed_anew(b: &mut WorkerInflight, store: &MemoryStore, now: u64, table: &PodTable) {
    b.refresh_others_in_order(store, now, table);
    let kept: Vec<(u32, u32)> =
        table.pods.iter().map(|p| (b.count(p.address.as_str()), b.tokens(p.address.as_str()))).collect();
    b.sums_current = false;
    b.refresh_others_in_order(store, now, table);
    let anew: Vec<(u32, u32)> =
        table.pods.iter().map(|p| (b.count(p.address.as_str()), b.tokens(p.address.as_str()))).collect();
    assert_eq!(kept, anew);
}

#[test]
fn an_unchanged_slot_keeps_its_sums_and_any_change_or_staleness_is_seen() {
    let store = MemoryStore::new();
    let pods = ["10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"];
    let table = table_of(1, &pods);
    let (mut a, mut b, mut c) = (WorkerInflight::new(), WorkerInflight::new(), WorkerInflight::new());
    for worker in [&mut a, &mut c, &mut b] {
        worker.sync(&store, NOW, EXPIRY);
    }
    a.started(pods[0], 1, NOW);
    a.add_tokens(pods[0], 50);
    c.started(pods[2], 1, NOW);
    a.publish_now(&store, NOW);
    c.publish_now(&store, NOW);
    b.refresh_others_in_order(&store, NOW + 1, &table);
    assert_eq!((b.count_at(0, pods[0]), b.tokens(pods[0]), b.count_at(2, pods[2])), (1, 50, 1));
    // Nothing written since: the sums are kept, and they are what summing anew gives.
    assert_same_as_summed_anew(&mut b, &store, NOW + 2, &table);
    assert_eq!(b.count_at(0, pods[0]), 1);
    // One worker's change (the other's slot unchanged) is seen at the next decision.
    c.started(pods[2], 1, NOW + 3);
    c.publish_now(&store, NOW + 3);
    b.refresh_others_in_order(&store, NOW + 4, &table);
    assert_eq!((b.count_at(0, pods[0]), b.count_at(2, pods[2])), (1, 2));
    assert_same_as_summed_anew(&mut b, &store, NOW + 4, &table);
    // Unchanged bytes that went stale stop counting: liveness is judged at every read.
    c.publish_now(&store, NOW + SLOT_STALE_MS);
    b.refresh_others_in_order(&store, NOW + SLOT_STALE_MS + 1, &table);
    assert_eq!((b.count_at(0, pods[0]), b.count_at(2, pods[2])), (0, 2), "a's slot is stale, c's is not");
    assert_same_as_summed_anew(&mut b, &store, NOW + SLOT_STALE_MS + 1, &table);
    // A new table, a tick and a plain refresh all leave the same counts as summing anew.
    let reordered = table_of(2, &[pods[2], pods[0]]);
    b.refresh_others_in_order(&store, NOW + SLOT_STALE_MS + 2, &reordered);
    assert_eq!(b.count_at(0, pods[2]), 2);
    assert_same_as_summed_anew(&mut b, &store, NOW + SLOT_STALE_MS + 2, &reordered);
    b.sync(&store, NOW + SLOT_STALE_MS + 3, EXPIRY);
    b.refresh_others(&store, NOW + SLOT_STALE_MS + 4);
    assert_eq!((b.count_at(0, pods[2]), b.count(pods[0])), (2, 0));
    assert_same_as_summed_anew(&mut b, &store, NOW + SLOT_STALE_MS + 4, &reordered);
}

#[test]
fn a_worker_that_claims_its_slot_after_another_is_seen_by_its_next_decision_early_on() {
    let store = MemoryStore::new();
    let (mut a, mut b) = (WorkerInflight::new(), WorkerInflight::new());
    // a serves first: it claims slot 0 and, at that tick, no other slot exists.
    a.sync(&store, NOW, EXPIRY);
    // b's first request, a millisecond later: b claims slot 1 and picks POD.
    b.sync(&store, NOW + 1, EXPIRY);
    b.started(POD, 1, NOW + 1);
    b.publish_now(&store, NOW + 1);
    // a decides before its next tick: it looks one slot past those it knew of.
    a.refresh_others(&store, NOW + 2);
    assert_eq!(a.count(POD), 1, "a sees b's pick without waiting for its tick");

    // Past the discovery time, a worker that starts serving later is read from the next tick.
    let mut c = WorkerInflight::new();
    c.sync(&store, NOW + SLOT_DISCOVERY_MS + 10, EXPIRY);
    c.started(POD, 1, NOW + SLOT_DISCOVERY_MS + 10);
    c.publish_now(&store, NOW + SLOT_DISCOVERY_MS + 10);
    b.publish_now(&store, NOW + SLOT_DISCOVERY_MS + 10);
    a.refresh_others(&store, NOW + SLOT_DISCOVERY_MS + 11);
    assert_eq!(a.count(POD), 1, "no probe past the claimed slots any more: c's pick not yet seen");
    a.sync(&store, NOW + SLOT_DISCOVERY_MS + 20, EXPIRY);
    assert_eq!(a.count(POD), 2, "seen from a's next tick");
}

/// One decision of `worker` for `pod`, cut at its steps: the counter's version and the read
/// (`begin`), then the pick's count and publish, then the confirmation (`end`).
struct Deciding {
    seen: u32,
}

fn begin(worker: &mut WorkerInflight, store: &MemoryStore, pod: &str, now_ms: u64) -> Deciding {
    worker.begin_decision(store, now_ms);
    worker.refresh_others(store, now_ms);
    Deciding { seen: worker.others_count(pod) }
}

fn end(worker: &mut WorkerInflight, store: &MemoryStore, pod: &str, now_ms: u64, deciding: Deciding) -> bool {
    worker.started(pod, 1, now_ms);
    worker.publish_now(store, now_ms);
    worker.confirm_decision(store, now_ms, pod, deciding.seen)
}

#[test]
fn of_two_crossing_decisions_for_one_pod_exactly_the_later_gives_way_early_on() {
    let store = MemoryStore::new();
    let (mut a, mut b) = two_workers_knowing_each_others_slots(&store);
    // Both read before either publishes: each is blind to the other's pick.
    let (deciding_a, deciding_b) = (begin(&mut a, &store, POD, NOW + 1), begin(&mut b, &store, POD, NOW + 1));
    assert!(a.linearized() && b.linearized());
    assert!(end(&mut a, &store, POD, NOW + 1, deciding_a), "the first to confirm keeps its pick");
    assert!(!end(&mut b, &store, POD, NOW + 1, deciding_b), "the later finds the counter moved and a's pick");
    assert_eq!(b.others_count(POD), 1, "b read a's pick again");

    // The other order of publishing: the same, with the roles swapped.
    let (deciding_a, deciding_b) = (begin(&mut a, &store, POD, NOW + 2), begin(&mut b, &store, POD, NOW + 2));
    assert!(end(&mut b, &store, POD, NOW + 2, deciding_b));
    assert!(!end(&mut a, &store, POD, NOW + 2, deciding_a));

    // Crossing on different pods: the counter moved, but the later pick's pod gained nothing.
    let other = "10.0.0.2:8000";
    let (deciding_a, deciding_b) = (begin(&mut a, &store, POD, NOW + 3), begin(&mut b, &store, other, NOW + 3));
    assert!(end(&mut a, &store, POD, NOW + 3, deciding_a));
    assert!(end(&mut b, &store, other, NOW + 3, deciding_b), "b's pod was not taken: its pick stands");

    // One after the other (b reads after a published): b sees a's pick when choosing.
    let deciding_a = begin(&mut a, &store, POD, NOW + 4);
    assert!(end(&mut a, &store, POD, NOW + 4, deciding_a));
    let deciding_b = begin(&mut b, &store, POD, NOW + 4);
    assert!(end(&mut b, &store, POD, NOW + 4, deciding_b), "nothing crossed: b chose knowing a's pick");
}

#[test]
fn past_a_workers_first_seconds_decisions_are_linearized_only_after_a_pick_took_a_last_slot() {
    let store = MemoryStore::new();
    let (mut a, mut b) = two_workers_knowing_each_others_slots(&store);
    let later = NOW + SLOT_DISCOVERY_MS;
    let (deciding_a, deciding_b) = (begin(&mut a, &store, POD, later), begin(&mut b, &store, POD, later));
    assert!(!a.linearized() && !b.linearized(), "no shared-data read or write beyond the slots");
    assert!(end(&mut a, &store, POD, later, deciding_a) && end(&mut b, &store, POD, later, deciding_b));
    assert_eq!(store.get(crate::keys::INFLIGHT_DECISIONS).unwrap().0, None, "the counter was never written");

    // A pick that took a pod's last free batch slot linearizes the worker's next decisions.
    a.note_last_slot_taken(later);
    let (deciding_a, deciding_b) = (begin(&mut a, &store, POD, later + 1), begin(&mut b, &store, POD, later + 1));
    assert!(a.linearized() && !b.linearized(), "a's own pick, not b's, made its decisions linearized");
    assert!(end(&mut b, &store, POD, later + 1, deciding_b));
    assert!(end(&mut a, &store, POD, later + 1, deciding_a), "b did not bump the counter: a cannot tell");

    // Alone, a worker is never linearized: nothing can cross its decisions.
    let lone_store = MemoryStore::new();
    let mut lone = WorkerInflight::new();
    lone.sync(&lone_store, NOW, EXPIRY);
    begin(&mut lone, &lone_store, POD, NOW + 1);
    assert!(!lone.linearized());
    begin(&mut a, &store, POD, later + 1 + CONTENDED_MS);
    assert!(!a.linearized(), "for a while only");
}

#[test]
fn after_the_wall_clock_stepped_back_decisions_are_linearized_for_their_while_only() {
    let store = MemoryStore::new();
    let (mut a, mut b) = two_workers_knowing_each_others_slots(&store);
    let later = NOW + SLOT_DISCOVERY_MS;
    a.note_last_slot_taken(later);
    // The clock steps back 500 s: the first seconds of serving and the contended second lay
    // ahead of it for as long, every decision paying a shared-data read and a CAS.
    let back = later - 500_000;
    a.sync(&store, back, EXPIRY);
    b.sync(&store, back, EXPIRY);
    let deciding = begin(&mut a, &store, POD, back + 1);
    assert!(!a.linearized(), "neither a first second of serving nor a contended one");
    assert!(end(&mut a, &store, POD, back + 1, deciding));
}

#[test]
fn a_request_of_n_choices_counts_n_everywhere_and_its_end_releases_all_of_them() {
    let store = MemoryStore::new();
    let (mut a, mut b) = two_workers_knowing_each_others_slots(&store);
    a.started(POD, 8, NOW);
    a.add_tokens(POD, 500);
    a.started(POD, 1, NOW);
    assert_eq!(a.count(POD), 9, "8 sequences and 1");
    assert_eq!(a.tokens(POD), 500, "the prompt is computed once for its 8 choices");
    a.publish_now(&store, NOW);
    b.refresh_others(&store, NOW);
    assert_eq!((b.count(POD), b.others_count(POD)), (9, 9), "the other workers see the 8");
    assert_eq!(envoy_loads(&store, NOW).get(POD).map(|load| load.count), Some(9), "and so do the other replicas");
    a.finished(POD, 8, NOW + 1);
    assert_eq!(a.count(POD), 1);
    a.finished(POD, 1, NOW + 1);
    assert_eq!(a.local_count(POD), 0);
    assert!(a.local.is_empty(), "nothing left to expire");
    a.publish_now(&store, NOW + 1);
    b.refresh_others(&store, NOW + 1);
    assert_eq!(b.count(POD), 0);
    a.started(POD, 0, NOW + 2);
    assert_eq!(a.count(POD), 1, "a weight of 0 counts as 1");
    a.finished(POD, 0, NOW + 2);
    assert_eq!(a.count(POD), 0);
}
