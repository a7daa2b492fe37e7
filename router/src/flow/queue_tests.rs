use super::*;

const ROOMY: QueueLimits = QueueLimits {
    band_requests: 100,
    band_bytes: 1 << 20,
    total_requests: 100,
    total_bytes: 1 << 20,
    flows_per_band: 8,
};

fn entry(id: u32, flow: u64, at: u64) -> Entry<()> {
    Entry { id, flow, bytes: 10, enqueued_ms: at, deadline_ms: at + 1_000, own_deadline: false, payload: () }
}

fn drain(queue: &mut WaitQueue<()>) -> Vec<u32> {
    std::iter::from_fn(|| queue.pop_next().map(|left| left.entry.id)).collect()
}

#[test]
fn higher_bands_leave_first_then_fcfs() {
    let mut queue = WaitQueue::new(ROOMY);
    for (id, priority) in [(1, 0), (2, -1), (3, 2), (4, 0), (5, 2)] {
        assert!(matches!(queue.push(priority, entry(id, 7, u64::from(id))), Admission::Queued));
    }
    assert_eq!(drain(&mut queue), [3, 5, 1, 4, 2]);
    assert!(queue.is_empty());
    assert_eq!(queue.bytes(), 0);
}

#[test]
fn flows_take_turns_inside_a_band() {
    // Tenant A queues four times as many as tenant B; while both wait they alternate.
    let mut queue = WaitQueue::new(ROOMY);
    let mut id = 0;
    for round in 0..5 {
        for _ in 0..4 {
            id += 1;
            queue.push(0, entry(id, 1, round));
        }
        id += 1;
        queue.push(0, entry(id + 1000, 2, round));
    }
    let order = drain(&mut queue);
    let tenant_b: Vec<usize> = order.iter().enumerate().filter(|(_, id)| **id > 1000).map(|(i, _)| i).collect();
    assert_eq!(tenant_b, [1, 3, 5, 7, 9], "B gets every other turn while it waits: {order:?}");
}

#[test]
fn caps_refuse_and_sheddable_work_is_evicted_for_higher_priority() {
    let limits = QueueLimits { total_requests: 3, ..ROOMY };
    let mut queue = WaitQueue::new(limits);
    queue.push(-1, entry(1, 1, 1));
    queue.push(-1, entry(2, 1, 2));
    queue.push(0, entry(3, 1, 3));
    assert!(matches!(queue.push(-1, entry(4, 1, 4)), Admission::Full(_)), "sheddable cannot evict its own band");
    match queue.push(2, entry(5, 1, 5)) {
        Admission::QueuedEvicting(left) => assert_eq!(left.iter().map(|l| l.entry.id).collect::<Vec<_>>(), [2]),
        other => panic!("expected an eviction, got {other:?}"),
    }
    queue.push(1, entry(6, 1, 6));
    assert!(matches!(queue.push(0, entry(7, 1, 7)), Admission::Full(_)), "no sheddable left to evict");
    assert_eq!(drain(&mut queue), [5, 6, 3]);

    let band_full = QueueLimits { band_requests: 1, ..ROOMY };
    let mut queue = WaitQueue::new(band_full);
    queue.push(0, entry(1, 1, 1));
    assert!(matches!(queue.push(0, entry(2, 1, 2)), Admission::Full(_)));
    assert!(matches!(queue.push(1, entry(3, 1, 3)), Admission::Queued), "other bands have their own cap");
}

#[test]
fn byte_caps_hold() {
    let limits = QueueLimits { total_bytes: 25, ..ROOMY };
    let mut queue = WaitQueue::new(limits);
    queue.push(0, entry(1, 1, 1));
    queue.push(0, entry(2, 1, 2));
    assert!(matches!(queue.push(0, entry(3, 1, 3)), Admission::Full(_)));
    assert_eq!(queue.bytes(), 20);
}

#[test]
fn removal_and_expiry_keep_counts_and_turns_right() {
    let mut queue = WaitQueue::new(ROOMY);
    queue.push(0, entry(1, 1, 0));
    queue.push(0, entry(2, 2, 500));
    queue.push(0, entry(3, 3, 0));
    queue.push(-1, entry(4, 1, 0));
    assert_eq!(queue.remove(2).map(|l| l.entry.id), Some(2));
    assert!(queue.remove(2).is_none(), "removing twice is harmless");
    let mut expired = Vec::new();
    queue.expire(1_000, &mut expired);
    let mut ids: Vec<u32> = expired.iter().map(|l| l.entry.id).collect();
    ids.sort_unstable();
    assert_eq!(ids, [1, 3, 4]);
    assert!(queue.is_empty());
    assert_eq!(queue.bands().count(), 0);
}

#[test]
fn sheddable_requests_leave_before_a_standard_one_is_dropped() {
    let mut queue = WaitQueue::new(ROOMY);
    queue.push(2, entry(1, 1, 0));
    queue.push(0, entry(2, 1, 0));
    queue.push(-1, entry(3, 1, 0));
    queue.push(-2, entry(4, 2, 0));
    queue.push(-2, entry(5, 3, 0));
    let mut shed = Vec::new();
    queue.shed_sheddable(&mut shed);
    let mut ids: Vec<u32> = shed.iter().map(|l| l.entry.id).collect();
    ids.sort_unstable();
    assert_eq!(ids, [3, 4, 5]);
    assert!(shed.iter().all(|l| l.priority < 0));
    assert_eq!(queue.len(), 2, "critical and standard stay");
    assert_eq!(queue.bands().map(|(p, _, _)| p).collect::<Vec<_>>(), [2, 0]);
}

#[test]
fn a_short_deadline_behind_longer_ones_in_its_flow_expires_on_time() {
    // A request's own TTL header can end its wait before those queued ahead of it end theirs.
    let mut queue = WaitQueue::new(ROOMY);
    queue.push(0, Entry { deadline_ms: 30_000, ..entry(1, 7, 0) });
    queue.push(0, Entry { deadline_ms: 300, ..entry(2, 7, 10) });
    queue.push(0, Entry { deadline_ms: 30_000, ..entry(3, 7, 20) });
    let mut expired = Vec::new();
    queue.expire(299, &mut expired);
    assert!(expired.is_empty());
    queue.expire(300, &mut expired);
    assert_eq!(expired.iter().map(|l| l.entry.id).collect::<Vec<_>>(), [2]);
    assert_eq!((queue.len(), queue.bytes()), (2, 20));
    assert_eq!(drain(&mut queue), [1, 3], "the others keep their order");
}

#[test]
fn flows_beyond_the_cap_share_one_flow() {
    let limits = QueueLimits { flows_per_band: 2, ..ROOMY };
    let mut queue = WaitQueue::new(limits);
    for tenant in 0..5u64 {
        queue.push(0, entry(tenant as u32 + 1, tenant, tenant));
    }
    // Flows 0 and 1 are their own; 2, 3 and 4 share the overflow flow (FCFS inside it).
    assert_eq!(drain(&mut queue), [1, 2, 3, 4, 5]);
}

#[test]
fn against_a_simple_oracle_counts_never_drift() {
    // Random pushes, pops, removals and expiries, with deadlines in no order within a flow
    // (requests' own TTLs): the totals always equal the sum of what is inside, nothing is
    // lost or duplicated, and an expiry takes exactly the requests past their deadline.
    let mut queue = WaitQueue::new(QueueLimits { total_requests: 40, band_requests: 15, ..ROOMY });
    let mut inside = std::collections::BTreeMap::new();
    let mut seed = 0x2545_f491_u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for step in 0..20_000u32 {
        let choice = next() % 10;
        if choice < 5 {
            let priority = (next() % 5) as i32 - 2;
            let deadline_ms = u64::from(step) + 1 + next() % 100;
            let e = Entry {
                id: step,
                flow: next() % 4,
                bytes: 10,
                enqueued_ms: u64::from(step),
                deadline_ms,
                own_deadline: false,
                payload: (),
            };
            match queue.push(priority, e) {
                Admission::Queued => {
                    inside.insert(step, deadline_ms);
                }
                Admission::QueuedEvicting(left) => {
                    inside.insert(step, deadline_ms);
                    for l in left {
                        assert!(inside.remove(&l.entry.id).is_some());
                    }
                }
                Admission::Full(_) => {}
            }
        } else if choice < 7 {
            if let Some(left) = queue.pop_next() {
                assert!(inside.remove(&left.entry.id).is_some());
            }
        } else if choice < 9 {
            let id = step.saturating_sub((next() % 30) as u32);
            assert_eq!(queue.remove(id).is_some(), inside.remove(&id).is_some());
        } else {
            let now = u64::from(step);
            let mut out = Vec::new();
            queue.expire(now, &mut out);
            let mut expired: Vec<u32> = out.iter().map(|left| left.entry.id).collect();
            expired.sort_unstable();
            let due: Vec<u32> = inside.iter().filter(|(_, &deadline)| deadline <= now).map(|(&id, _)| id).collect();
            assert_eq!(expired, due, "exactly the requests past their deadline, wherever they wait");
            for id in expired {
                inside.remove(&id);
            }
        }
        assert_eq!(queue.len(), inside.len());
        assert_eq!(queue.bytes(), 10 * inside.len() as u64);
        assert_eq!(queue.bands().map(|(_, n, _)| n as usize).sum::<usize>(), inside.len());
        assert!(queue.len() <= 40);
    }
}

#[test]
fn a_wait_lasts_its_ttl_across_a_wall_clock_stepped_back() {
    let mut queue = WaitQueue::new(ROOMY);
    let at = 3_600_000 + 10;
    queue.push(0, entry(1, 7, at));
    // The wall clock steps back an hour (NTP, a VM restored): the request waited until the
    // clock caught up with its deadline, an hour past its TTL, in a pool with no room.
    let back = at - 3_600_000;
    let mut out = Vec::new();
    queue.expire(back, &mut out);
    queue.expire(back + 999, &mut out);
    assert!(out.is_empty(), "its TTL (1 s) is not over");
    queue.expire(back + 1_000, &mut out);
    assert_eq!(out.iter().map(|left| left.entry.id).collect::<Vec<_>>(), [1], "expired after its own TTL");
    // A request queued after the step is newer than one queued before it: the newest is
    // the one a higher band's request evicts.
    let mut queue = WaitQueue::new(QueueLimits { total_requests: 2, ..ROOMY });
    queue.push(-1, entry(1, 7, at));
    queue.expire(back, &mut out);
    queue.push(-1, entry(2, 8, back + 5));
    match queue.push(0, entry(3, 9, back + 6)) {
        Admission::QueuedEvicting(evicted) => {
            assert_eq!(evicted.iter().map(|left| left.entry.id).collect::<Vec<_>>(), [2], "the newest");
        }
        other => panic!("{other:?}"),
    }
}

/// The ids in the order `find_in_order` visits them.
fn visit_order(queue: &WaitQueue<()>) -> Vec<u32> {
    let mut order = Vec::new();
    queue.find_in_order(|_, entry| {
        order.push(entry.id);
        ControlFlow::<()>::Continue(())
    });
    order
}

#[test]
fn the_visit_order_is_the_release_order_and_taking_the_first_is_popping_it() {
    let mut seed = 0x9e37_79b9_u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for round in 0..200 {
        let mut queue = WaitQueue::new(ROOMY);
        let mut twin = WaitQueue::new(ROOMY);
        for id in 0..(next() % 30) as u32 {
            let (priority, flow) = ((next() % 3) as i32 - 1, next() % 4);
            queue.push(priority, entry(id, flow, u64::from(id)));
            twin.push(priority, entry(id, flow, u64::from(id)));
        }
        // A few releases first, so turns do not start at the first flow.
        for _ in 0..next() % 4 {
            let popped = queue.pop_next().map(|l| l.entry.id);
            assert_eq!(popped, twin.pop_next().map(|l| l.entry.id));
        }
        let visited = visit_order(&queue);
        assert_eq!(visited, drain(&mut twin), "round {round}: visiting follows the release order");
        // Taking what is visited first, again and again, releases in the same order.
        let mut taken = Vec::new();
        while let Some(first) = queue.find_in_order(|_, entry| ControlFlow::Break(entry.id)) {
            taken.push(queue.take(first).map(|l| l.entry.id).unwrap());
        }
        assert_eq!(taken, visited, "round {round}");
        assert!(queue.is_empty() && queue.bytes() == 0);
    }
}

#[test]
fn a_request_taken_past_others_sends_its_flow_last_and_keeps_the_counts() {
    // Flows 1, 2, 3 in turn, two requests each.
    let mut queue = WaitQueue::new(ROOMY);
    for (id, flow) in [(1, 1), (2, 2), (3, 3), (4, 1), (5, 2), (6, 3)] {
        queue.push(0, entry(id, flow, u64::from(id)));
    }
    assert_eq!(visit_order(&queue), [1, 2, 3, 4, 5, 6]);
    // Flow 1's request cannot go (its pods are full): flow 2's goes past it.
    assert_eq!(queue.take(2).map(|l| (l.priority, l.entry.id)), Some((0, 2)));
    assert_eq!(visit_order(&queue), [1, 3, 5, 4, 6], "flow 1 keeps its turn; flow 2 goes last");
    assert_eq!((queue.len(), queue.bytes()), (5, 50));
    assert!(queue.take(42).is_none());
    assert_eq!(queue.take(6).map(|l| l.entry.id), Some(6), "a flow's second request");
    assert_eq!(visit_order(&queue), [1, 5, 3, 4], "flow 3 goes last");
    assert_eq!(drain(&mut queue), [1, 5, 3, 4]);
}

#[test]
fn flows_waiting_for_one_models_places_take_turns_while_another_models_go_past_them() {
    // Tenants 1 and 2 wait for model A's pods, tenant 3 for model B's (ids 300 up). A's places
    // free one at a time, each after one of B's: A's tenants alternate, as they would alone.
    let mut queue = WaitQueue::new(ROOMY);
    for k in 0..4 {
        queue.push(0, entry(100 + k, 1, u64::from(k)));
        queue.push(0, entry(200 + k, 2, u64::from(k)));
        queue.push(0, entry(300 + k, 3, u64::from(k)));
    }
    let first_of = |queue: &WaitQueue<()>, model_b: bool| {
        queue.find_in_order(|_, entry| match (entry.id >= 300) == model_b {
            true => ControlFlow::Break(entry.id),
            false => ControlFlow::Continue(()),
        })
    };
    let mut model_a = Vec::new();
    for _ in 0..4 {
        let a = first_of(&queue, false).unwrap();
        model_a.push(queue.take(a).unwrap().entry.id);
        let b = first_of(&queue, true).unwrap();
        queue.take(b).unwrap();
    }
    assert_eq!(model_a, [100, 200, 101, 201], "B's releases do not give tenant 1 tenant 2's turns");
}
