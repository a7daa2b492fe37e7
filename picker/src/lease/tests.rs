//! Contenders racing over one [`MemoryStore`], which keeps the host's semantics: CAS on
//! existing keys, a plain write for a missing one, no delete.

use std::cell::RefCell;

use super::*;
use crate::store::{MemoryStore, Versioned};

const TTL: u64 = 500;
const TICK: u64 = 100;

fn holder(store: &MemoryStore) -> u64 {
    store.get(LEASE_KEY).unwrap().0.map_or(0, |bytes| LeaseRecord::decode(&bytes).holder)
}

/// Runs a hook (another contender's whole tick) between a contender's read and its write:
/// the interleaving a second worker thread can produce.
struct RacingStore<'a> {
    inner: &'a MemoryStore,
    before_set: RefCell<Option<Box<dyn FnOnce() + 'a>>>,
}

impl SharedStore for RacingStore<'_> {
    fn get(&self, key: &str) -> Result<Versioned, StoreError> {
        self.inner.get(key)
    }

    fn set(&self, key: &str, value: &[u8], cas: Option<u32>) -> Result<(), StoreError> {
        let hook = self.before_set.borrow_mut().take();
        if let Some(hook) = hook {
            hook();
        }
        self.inner.set(key, value, cas)
    }
}

#[test]
fn exactly_one_leader_and_a_takeover_when_it_stops() {
    let store = MemoryStore::new();
    let contenders: Vec<Lease> = (1..=4).map(|id| Lease::new(id, TTL)).collect();
    let mut leader = None;
    for round in 0..10u64 {
        let now = round * TICK;
        // Rotate who ticks first, as worker threads would.
        let order = (0..contenders.len()).map(|i| (i + round as usize) % contenders.len());
        let leaders: Vec<usize> = order.filter(|&i| contenders[i].tick(&store, now) == Role::Leader).collect();
        assert!(leaders.len() <= 1, "round {round}: two leaders {leaders:?}");
        if let Some(&i) = leaders.first() {
            assert_eq!(holder(&store), contenders[i].me, "a leader is named by the record");
            leader = Some(i);
        }
    }
    let first = leader.expect("someone leads within ten ticks");

    // The leader's VM dies: it stops ticking. Someone else leads once the lease expires.
    let mut takeover_at = None;
    for round in 10..30u64 {
        let now = round * TICK;
        let leaders: Vec<usize> =
            (0..contenders.len()).filter(|&i| i != first && contenders[i].tick(&store, now) == Role::Leader).collect();
        assert!(leaders.len() <= 1);
        if !leaders.is_empty() && takeover_at.is_none() {
            takeover_at = Some(now);
        }
    }
    let takeover_at = takeover_at.expect("a new leader");
    assert!(takeover_at <= 9 * TICK + TTL + 2 * TICK, "took over at {takeover_at} ms");
}

#[test]
fn two_claims_on_one_free_lease_only_one_wins() {
    let inner = MemoryStore::new();
    inner.set(LEASE_KEY, &LeaseRecord::FREE.encode(), None).unwrap();
    let a = Lease::new(1, TTL);
    let b = Lease::new(2, TTL);
    let b_role = RefCell::new(None);
    let racing = RacingStore { inner: &inner, before_set: RefCell::new(None) };
    // A reads the free lease; before A writes, B reads it too and claims it.
    *racing.before_set.borrow_mut() = Some(Box::new(|| *b_role.borrow_mut() = Some(b.tick(&inner, 0))));
    assert_eq!(a.tick(&racing, 0), Role::Follower, "A's CAS lost");
    assert_eq!(*b_role.borrow(), Some(Role::Claimed));
    assert_eq!(b.tick(&inner, TICK), Role::Leader);
    assert_eq!(a.tick(&inner, TICK), Role::Follower);
}

#[test]
fn the_key_creation_race_never_makes_two_leaders() {
    let inner = MemoryStore::new();
    let a = Lease::new(1, TTL);
    let b = Lease::new(2, TTL);
    let b_roles = RefCell::new(Vec::new());
    let racing = RacingStore { inner: &inner, before_set: RefCell::new(None) };
    // A finds no key; before its plain "create" write lands, B creates the key and claims it.
    *racing.before_set.borrow_mut() = Some(Box::new(|| {
        b_roles.borrow_mut().push(b.tick(&inner, 0));
        b_roles.borrow_mut().push(b.tick(&inner, 1));
    }));
    assert_eq!(a.tick(&racing, 0), Role::Follower);
    assert_eq!(*b_roles.borrow(), [Role::Follower, Role::Claimed]);
    assert_eq!(holder(&inner), 0, "A's create overwrote B's claim");
    // B only held a claim, never leadership; its renewal finds the lease free and re-claims.
    let mut leaders = Vec::new();
    for round in 1..6u64 {
        for (name, lease) in [("a", &a), ("b", &b)] {
            if lease.tick(&inner, round * TICK) == Role::Leader {
                assert_eq!(holder(&inner), lease.me);
                leaders.push((round, name));
            }
        }
    }
    let names: std::collections::BTreeSet<&str> = leaders.iter().map(|(_, name)| *name).collect();
    assert_eq!(names.len(), 1, "one leader throughout: {leaders:?}");
}

#[test]
fn a_late_leader_must_claim_again() {
    let store = MemoryStore::new();
    let a = Lease::new(1, TTL);
    let b = Lease::new(2, TTL);
    a.tick(&store, 0);
    a.tick(&store, TICK);
    assert_eq!(a.tick(&store, 2 * TICK), Role::Leader);
    // A stalls past its lease; B claims and leads.
    let late = 2 * TICK + TTL + 1;
    assert_eq!(b.tick(&store, late), Role::Claimed);
    assert_eq!(a.tick(&store, late + 1), Role::Follower, "A's lease is gone");
    assert_eq!(b.tick(&store, late + TICK), Role::Leader);
}

#[test]
fn garbage_is_a_free_lease_and_release_hands_over() {
    let store = MemoryStore::new();
    store.set(LEASE_KEY, b"not a lease", None).unwrap();
    let a = Lease::new(1, TTL);
    let b = Lease::new(2, TTL);
    assert_eq!(a.tick(&store, 0), Role::Claimed);
    assert_eq!(a.tick(&store, TICK), Role::Leader);
    assert_eq!(b.tick(&store, TICK), Role::Follower);
    a.release(&store);
    assert_eq!(b.tick(&store, TICK + 1), Role::Claimed, "no wait for expiry after a release");
    b.release(&store);
    a.release(&store); // Not the holder: nothing happens.
    assert_eq!(LeaseRecord::decode(&LeaseRecord { holder: 7, expires_ms: 9 }.encode()).holder, 7);
    assert_eq!(store.key_count(), 1, "one key, ever");
}
