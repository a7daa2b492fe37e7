use super::*;

fn same(_: &str) -> Option<u32> {
    Some(0)
}

fn pod(text: &str) -> PodAddress {
    PodAddress::parse(text).unwrap()
}

/// Three failures in a row at 0, 1 and 2 ms (the test configuration's count): `pod` is
/// ejected for 1 s, from 2 ms.
fn eject(outliers: &mut Outliers, pod: &PodAddress, epoch: u32) {
    for t in 0..3 {
        outliers.failed(pod, epoch, t);
    }
}

fn outliers() -> Outliers {
    Outliers::new(OutlierConfig {
        enabled: true,
        consecutive_failures: 3,
        base_ejection_ms: 1_000,
        max_ejection_ms: 3_000,
    })
}

#[test]
fn consecutive_failures_eject_and_a_success_in_between_resets_the_count() {
    let mut outliers = outliers();
    let a = pod("10.0.0.1:8000");
    assert_eq!(outliers.failed(&a, 0, 0), None);
    assert_eq!(outliers.failed(&a, 0, 1), None);
    outliers.succeeded(a.as_str(), 2);
    assert_eq!(outliers.failed(&a, 0, 3), None);
    assert_eq!(outliers.failed(&a, 0, 4), None);
    assert!(outliers.ejected(5, &same).is_empty());
    assert_eq!(outliers.failed(&a, 0, 5), Some(1_000), "the third in a row");
    assert_eq!(outliers.ejected(6, &same), std::slice::from_ref(&a));
    assert!(outliers.ejected(1_005, &same).is_empty(), "back when its time is up");
}

#[test]
fn a_pod_back_on_probation_is_ejected_again_at_its_first_failure_for_twice_as_long() {
    let mut outliers = outliers();
    let a = pod("10.0.0.1:8000");
    eject(&mut outliers, &a, 0);
    assert_eq!(outliers.failed(&a, 0, 500), None, "a late answer to a request sent before");
    assert!(outliers.ejected(1_002, &same).is_empty());
    assert_eq!(outliers.failed(&a, 0, 1_010), Some(2_000));
    assert_eq!(outliers.ejected(3_009, &same), std::slice::from_ref(&a));
    assert!(outliers.ejected(3_010, &same).is_empty());
    assert_eq!(outliers.failed(&a, 0, 3_020), Some(3_000), "capped at max_ejection_ms");
    assert!(outliers.ejected(6_020, &same).is_empty());
    outliers.succeeded(a.as_str(), 6_030);
    assert_eq!(outliers.failed(&a, 0, 6_040), None, "a success clears the record: three again");
}

#[test]
fn a_success_while_ejected_does_not_bring_it_back() {
    let mut outliers = outliers();
    let (a, b) = (pod("10.0.0.1:8000"), pod("10.0.0.2:8000"));
    eject(&mut outliers, &a, 0);
    eject(&mut outliers, &b, 0);
    outliers.succeeded(a.as_str(), 10);
    assert_eq!(outliers.ejected(11, &same), [a.clone(), b.clone()]);
    assert!(outliers.ejected(1_003, &same).is_empty());
    outliers.succeeded(a.as_str(), 1_004);
    assert_eq!(outliers.failed(&a, 0, 1_005), None, "cleared: not on probation any more");
    assert_eq!(outliers.failed(&b, 0, 1_005), Some(2_000), "still on probation");
}

#[test]
fn ejected_pods_are_ignored_only_when_nothing_else_is_up() {
    assert_eq!(pass_over(true, true, true), PassOver::Unusable);
    assert_eq!(pass_over(false, true, false), PassOver::Ignored, "the rest are down");
    assert_eq!(pass_over(false, true, true), PassOver::LeftOut, "old data beats a failing pod");
    assert_eq!(pass_over(false, false, true), PassOver::LeftOut, "failing open");
    assert_eq!(pass_over(false, false, false), PassOver::LeftOut, "left out while another remains");
}

#[test]
fn a_restarted_pod_comes_back_at_once_with_a_clean_record() {
    let mut outliers = outliers();
    let a = pod("10.0.0.1:8000");
    eject(&mut outliers, &a, 4);
    assert_eq!(outliers.ejected(10, &|_| Some(4)).len(), 1, "the same engine");
    assert_eq!(outliers.ejected(10, &|_| None).len(), 1, "out of the table for now");
    assert!(outliers.ejected(20, &|_| Some(5)).is_empty(), "a new epoch: restarted");
    assert_eq!(outliers.failed(&a, 5, 30), None, "not on probation: three again");
}

#[test]
fn a_pod_that_failed_since_its_last_success_is_a_suspect_until_ejected_or_cleared() {
    let mut outliers = outliers();
    let a = pod("10.0.0.1:8000");
    assert_eq!((outliers.suspects(), outliers.is_suspect(a.as_str())), (0, false));
    outliers.failed(&a, 0, 0);
    assert_eq!((outliers.suspects(), outliers.is_suspect(a.as_str())), (1, true));
    outliers.failed(&a, 0, 1);
    outliers.failed(&a, 0, 2);
    outliers.ejected(3, &same);
    assert!(!outliers.is_suspect(a.as_str()), "ejected: passed over, not a suspect");
    outliers.ejected(1_003, &same);
    assert!(outliers.is_suspect(a.as_str()), "back on probation");
    outliers.succeeded(a.as_str(), 1_004);
    assert_eq!(outliers.suspects(), 0);
}

#[test]
fn off_records_nothing() {
    let mut off = Outliers::new(OutlierConfig { enabled: false, ..OutlierConfig::default() });
    let a = pod("10.0.0.1:8000");
    for t in 0..10 {
        assert_eq!(off.failed(&a, 0, t), None);
    }
    assert!(off.ejected(10, &same).is_empty());
}

#[test]
fn a_failure_after_the_ejection_ends_is_on_probation_even_before_a_decision_looks() {
    let mut outliers = outliers();
    let a = pod("10.0.0.1:8000");
    eject(&mut outliers, &a, 0);
    assert_eq!(outliers.failed(&a, 0, 1_100), Some(2_000), "no call to ejected() in between");
}

#[test]
fn records_are_bounded_and_a_full_map_still_ejects() {
    let mut outliers = outliers();
    let ejected = pod("10.255.0.1:8000");
    eject(&mut outliers, &ejected, 0);
    for i in 0..MAX_RECORDS + 10 {
        let address = pod(&format!("10.{}.{}.{}:8000", i / 65_536, (i / 256) % 256, i % 256));
        outliers.failed(&address, 0, 10);
        assert!(outliers.records.len() <= MAX_RECORDS);
    }
    assert_eq!(outliers.ejected(20, &same), [ejected], "the ejected pod's record is kept");
    let late = pod("10.254.0.1:8000");
    let ejections: Vec<Option<u64>> = (0..3).map(|t| outliers.failed(&late, 0, 30 + t)).collect();
    assert_eq!(ejections, [None, None, Some(1_000)]);
}

#[test]
fn an_ejection_adopted_from_another_worker_is_passed_over_then_on_probation_here() {
    let (mut maker, mut other) = (outliers(), outliers());
    let a = pod("10.0.0.1:8000");
    eject(&mut maker, &a, 0);
    let published = maker.ejections(10);
    assert_eq!(published.len(), 1);
    assert_eq!(other.adopt(&published, 10, &same), 1);
    assert_eq!(other.ejected(11, &same), std::slice::from_ref(&a), "passed over without a failure seen here");
    assert_eq!(other.failed(&a, 0, 500), None, "a late answer: already counted in");
    assert!(other.ejected(1_002, &same).is_empty(), "back when the maker's time is up");
    assert_eq!(other.failed(&a, 0, 1_010), Some(2_000), "on probation here too, with the maker's strikes");
}

#[test]
fn reading_back_an_ejection_changes_nothing_so_workers_do_not_echo() {
    let (mut maker, mut other) = (outliers(), outliers());
    let a = pod("10.0.0.1:8000");
    eject(&mut maker, &a, 0);
    other.adopt(&maker.ejections(10), 10, &same);
    assert_eq!(maker.adopt(&other.ejections(20), 20, &same), 0, "its own ejection, read back");
    assert_eq!(other.adopt(&maker.ejections(20), 20, &same), 0, "already held");
    // Back on probation, the maker ejects it again, for longer: the others follow.
    maker.ejected(1_005, &same);
    assert_eq!(maker.failed(&a, 0, 1_010), Some(2_000));
    assert_eq!(other.adopt(&maker.ejections(1_020), 1_020, &same), 1);
    assert_eq!(other.ejections(1_020)[0].until_ms, 3_010);
}

#[test]
fn only_live_ejections_of_the_same_engine_are_adopted_and_never_for_longer_than_the_maximum() {
    let mut other = outliers();
    let a = pod("10.0.0.1:8000");
    let ejection =
        |epoch, until_ms| shared::Ejection { pod: a.clone(), epoch, strikes: 1, ejected_at_ms: 50, until_ms };
    assert_eq!(other.adopt(&[ejection(0, 100)], 100, &same), 0, "over");
    assert_eq!(other.adopt(&[ejection(7, 900)], 100, &same), 0, "another engine: restarted since");
    assert_eq!(other.adopt(&[ejection(0, 900)], 100, &|_| None), 0, "not in this worker's table (yet)");
    assert!(other.ejected(100, &same).is_empty());
    assert_eq!(other.adopt(&[ejection(0, u64::MAX)], 100, &same), 1);
    assert_eq!(other.ejections(100)[0].until_ms, 3_100, "capped at max_ejection_ms from now");
    let mut off = Outliers::new(OutlierConfig { enabled: false, ..OutlierConfig::default() });
    assert_eq!(off.adopt(&[ejection(0, 900)], 100, &same), 0);
    assert!(off.ejected(100, &same).is_empty());
}

#[test]
fn an_ejection_older_than_a_success_seen_here_is_not_adopted_and_a_newer_one_is() {
    let (mut maker, mut other) = (outliers(), outliers());
    let a = pod("10.0.0.1:8000");
    eject(&mut maker, &a, 0);
    eject(&mut other, &a, 0);
    // Both on probation after their own ejections; the other's probe succeeds at 1_020, after
    // the maker's probe failed at 1_010.
    maker.ejected(1_005, &same);
    other.ejected(1_005, &same);
    assert_eq!(maker.failed(&a, 0, 1_010), Some(2_000));
    other.succeeded(a.as_str(), 1_020);
    assert_eq!(other.adopt(&maker.ejections(1_030), 1_030, &same), 0, "it saw the pod succeed since");
    assert!(other.ejected(1_030, &same).is_empty());
    // A later ejection is news again.
    maker.ejected(3_015, &same);
    assert_eq!(maker.failed(&a, 0, 3_020), Some(3_000));
    assert_eq!(other.adopt(&maker.ejections(3_030), 3_030, &same), 1);
    assert_eq!(other.ejections(3_030)[0].strikes, 3, "the maker's strikes");
}

#[test]
fn a_capped_ejection_is_adopted_once_not_stretched_at_every_read() {
    let mut other = outliers();
    let a = pod("10.0.0.1:8000");
    let long = shared::Ejection { pod: a.clone(), epoch: 0, strikes: 1, ejected_at_ms: 50, until_ms: 1_000_000 };
    assert_eq!(other.adopt(std::slice::from_ref(&long), 100, &same), 1);
    assert_eq!(other.adopt(std::slice::from_ref(&long), 200, &same), 0, "the same ejection, read again");
    assert_eq!(other.ejections(200)[0].until_ms, 3_100);
}

#[test]
fn a_restarted_engine_starts_with_no_strikes_even_from_probation() {
    let mut outliers = outliers();
    let a = pod("10.0.0.1:8000");
    eject(&mut outliers, &a, 4);
    assert!(outliers.ejected(1_005, &|_| Some(4)).is_empty(), "back on probation");
    assert_eq!(outliers.failed(&a, 5, 1_010), None, "another engine since: counting from one");
    let peer = shared::Ejection { pod: a.clone(), epoch: 5, strikes: 1, ejected_at_ms: 1_020, until_ms: 2_020 };
    let mut other = self::outliers();
    eject(&mut other, &a, 4);
    other.ejected(1_005, &|_| Some(4));
    assert_eq!(other.failed(&a, 4, 1_006), Some(2_000), "two strikes under the old engine");
    assert_eq!(other.adopt(&[peer], 1_030, &|_| Some(5)), 1);
    assert_eq!(other.ejections(1_030)[0].strikes, 1, "the old engine's strikes are not carried over");
}

#[test]
fn an_ejection_lasts_its_length_across_a_wall_clock_stepped_back() {
    let mut outliers = outliers();
    let a = pod("10.0.0.1:8000");
    let made = 3_600_000 + 10_000;
    for t in 0..3 {
        outliers.failed(&a, 0, made + t);
    }
    // Ejected for 1 s from `made + 2`; the wall clock then steps back an hour (NTP, a VM
    // restored). It stayed out until the clock caught up: an hour without the pod.
    let back = made - 3_600_000;
    assert_eq!(outliers.ejected(back, &same), std::slice::from_ref(&a), "still ejected at the step");
    assert_eq!(outliers.ejected(back + 500, &same), std::slice::from_ref(&a));
    assert!(outliers.ejected(back + 1_001, &same).is_empty(), "back on probation after its own second");
    assert!(outliers.is_suspect(a.as_str()));
}

#[test]
fn an_ejection_made_before_the_wall_clock_stepped_back_is_not_taken_over_again_and_again() {
    let mut maker = outliers();
    let mut other = outliers();
    let a = pod("10.0.0.1:8000");
    let made = 3_600_000 + 10_000;
    for t in 0..3 {
        maker.failed(&a, 0, made + t);
    }
    // Published, then the clock steps back an hour; the maker decides nothing since (idle, or
    // gone), so its record still says it was made an hour "ahead". Read every 100 ms, it was
    // news each time to a worker that had counted its own copy from the present.
    let published = maker.ejections(made + 2);
    let back = made - 3_600_000;
    let mut out_at = Vec::new();
    for step in 0..30 {
        let now = back + step * 100;
        other.adopt(&published, now, &same);
        if !other.ejected(now, &same).is_empty() {
            out_at.push(now);
        }
    }
    assert!(out_at.iter().all(|&t| t < back + 1_000), "out for at most its length: {out_at:?}");
}

#[test]
fn an_ejection_another_worker_made_a_few_ms_ahead_is_adopted_once() {
    let mut maker = outliers();
    let mut other = outliers();
    let a = pod("10.0.0.1:8000");
    let made = 50_000;
    for t in 0..3 {
        maker.failed(&a, 0, made + t);
    }
    // The maker read its clock 5 ms after this worker's tick did: not a step back.
    let published = maker.ejections(made + 2);
    let now = made - 3;
    assert_eq!(other.adopt(&published, now, &same), 1);
    assert_eq!(other.ejected(now, &same), std::slice::from_ref(&a));
    assert_eq!(other.adopt(&published, now + 100, &same), 0, "the same ejection is not news again");
}
