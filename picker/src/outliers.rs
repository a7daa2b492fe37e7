//! Pods that fail the requests sent to them, taken out of rotation for a while.
//!
//! A pod whose engine is broken but whose `/metrics` still answers (an engine that errors on
//! every request, a bad GPU, a wrong model mounted) reports an empty queue and holds nothing
//! in flight, since it fails at once: by load it is the best pod, and it gets the next request,
//! and the next. Envoy's retries save each request at the price of a failed attempt, and when
//! every choice in a request's list is such a pod, the client gets the 5xx though a healthy pod
//! was free. Envoy's own outlier detection cannot help: its `override_host` policy follows the
//! filter's list whatever a host's health (its `findHost`), so the picker has to know.
//!
//! Each worker keeps its own record, from the answers it sees: a pod that fails
//! `consecutive_failures` attempts in a row (a 5xx answer, or an attempt Envoy retried on
//! another pod) is ejected for `base_ejection_ms`. When that time is up it is back on
//! probation: one more failure before any success ejects it again, for twice as long (up to
//! `max_ejection_ms`); a success clears its record. An ejected pod is only passed over while
//! another pod can take the request ([`crate::route`]): ejecting every pod is the same as
//! ejecting none, so a fault in the requests themselves cannot empty the pool.

use hashbrown::HashMap;

use crate::address::PodAddress;
use crate::config::OutlierConfig;

/// Pods with a record at most: far above any pool (a worker only records pods it routed to),
/// so the map stays bounded even if answers named addresses outside the pool.
const MAX_RECORDS: usize = 4_096;

#[derive(Debug, Default, Clone, Copy)]
struct Record {
    /// Failed attempts since the last success or ejection.
    consecutive: u32,
    /// Ejections since the last success: the next lasts `base << strikes`.
    strikes: u32,
    /// Ejected until then (ms).
    ejected_until: Option<u64>,
    /// Back from an ejection with no success since: one failure ejects it again.
    probation: bool,
    /// The pod's epoch in the table when it was last ejected: a new one is a restarted engine.
    epoch: u32,
}

impl Record {
    /// Failed since its last success and not ejected: counting up, or back on probation.
    fn is_suspect(&self) -> bool {
        self.ejected_until.is_none() && (self.consecutive > 0 || self.probation)
    }
}

/// One worker's record of failing pods. Costs nothing while no pod fails: a success on a pod
/// without a record is one lookup in an empty map.
#[derive(Debug, Default)]
pub struct Outliers {
    config: OutlierConfig,
    records: HashMap<PodAddress, Record>,
    /// The pods ejected now, for the decision to pass over (expired ones leave at
    /// [`Outliers::ejected`]).
    ejected: Vec<PodAddress>,
}

impl Outliers {
    pub fn new(config: OutlierConfig) -> Self {
        Self { config, records: HashMap::new(), ejected: Vec::new() }
    }

    /// An attempt on `pod` (of table epoch `epoch`) failed at `now_ms`. Returns how long it
    /// is ejected for, if this failure ejected it.
    pub fn failed(&mut self, pod: &PodAddress, epoch: u32, now_ms: u64) -> Option<u64> {
        if !self.config.enabled {
            return None;
        }
        if self.records.len() >= MAX_RECORDS && !self.records.contains_key(pod.as_str()) {
            // Pods that left the pool keep their partial counts: forget every record but the
            // ejected pods' (a pod failing now starts its count again).
            self.records.retain(|_, record| record.ejected_until.is_some());
        }
        let record = self.records.entry(pod.clone()).or_default();
        match record.ejected_until {
            // Sent before it was ejected: already counted in.
            Some(until) if until > now_ms => return None,
            // Its time is up: back on probation (whether or not a decision has looked since).
            Some(_) => *record = Record { ejected_until: None, probation: true, ..*record },
            None => {}
        }
        record.consecutive = record.consecutive.saturating_add(1);
        if !record.probation && record.consecutive < self.config.consecutive_failures {
            return None;
        }
        let doubled = self.config.base_ejection_ms.checked_shl(record.strikes.min(32)).unwrap_or(u64::MAX);
        let duration = doubled.min(self.config.max_ejection_ms);
        *record = Record {
            consecutive: 0,
            strikes: record.strikes.saturating_add(1),
            ejected_until: Some(now_ms.saturating_add(duration)),
            probation: false,
            epoch,
        };
        if !self.ejected.contains(pod) {
            self.ejected.push(pod.clone());
        }
        Some(duration)
    }

    /// An attempt on `pod` succeeded: its record is cleared (unless it is ejected now: an
    /// answer to a request sent before the ejection does not bring it back early).
    pub fn succeeded(&mut self, pod: &str, now_ms: u64) {
        if self.records.is_empty() {
            return;
        }
        if self.records.get(pod).is_some_and(|r| r.ejected_until.is_none_or(|until| until <= now_ms)) {
            self.records.remove(pod);
            self.ejected.retain(|p| p.as_str() != pod);
        }
    }

    /// No pod has a record: a success needs no bookkeeping.
    pub fn is_clear(&self) -> bool {
        self.records.is_empty()
    }

    /// The pods ejected as of the last [`Outliers::ejected`] call.
    pub fn ejected_now(&self) -> &[PodAddress] {
        &self.ejected
    }

    /// Pods that failed since their last success and are not ejected (counting up, or back
    /// on probation): tried as a pick, but no retry target, so a request whose pick fails is
    /// retried on pods not known to fail. How many there are (0 while no pod fails).
    pub fn suspects(&self) -> usize {
        self.records.values().filter(|r| r.is_suspect()).count()
    }

    pub fn is_suspect(&self, pod: &str) -> bool {
        self.records.get(pod).is_some_and(Record::is_suspect)
    }

    /// The pods ejected at `now_ms`. Those whose time is up return on probation; those whose
    /// table epoch (`epoch_of`, `None` if not in the table) changed since their ejection were
    /// restarted, and return with a clean record (a new engine is not the one that failed).
    pub fn ejected(&mut self, now_ms: u64, epoch_of: &dyn Fn(&str) -> Option<u32>) -> &[PodAddress] {
        if !self.ejected.is_empty() {
            let records = &mut self.records;
            self.ejected.retain(|pod| {
                let Some(record) = records.get_mut(pod.as_str()) else { return false };
                if epoch_of(pod.as_str()).is_some_and(|epoch| epoch != record.epoch) {
                    records.remove(pod.as_str());
                    return false;
                }
                match record.ejected_until {
                    Some(until) if until > now_ms => true,
                    _ => {
                        record.ejected_until = None;
                        record.probation = true;
                        false
                    }
                }
            });
        }
        &self.ejected
    }
}

/// How a decision treats the pods a worker ejected, given what the others offer. One rule
/// for routing ([`crate::route`]) and for flow control's count of room, so the room is where
/// the requests it releases will go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PassOver {
    /// A pod that is not ejected has usable data: ejected pods are not chosen (nor fallbacks).
    Unusable,
    /// The usable pods are all ejected and every other pod is down: ejecting them would
    /// leave nothing, so ejection is ignored (a fault in the requests themselves, failing on
    /// every pod, cannot take the pool away).
    Ignored,
    /// No pod has usable data (failing open on in-flight counts) or those that do are
    /// ejected while a pod that is not is up with old data: ejected pods are left out while
    /// another remains.
    LeftOut,
}

/// The rule, from three facts about the pods a request may use: whether one that is not
/// ejected has usable data, whether any has, and whether one that is not ejected is up.
pub fn pass_over(usable_not_ejected: bool, any_usable: bool, up_not_ejected: bool) -> PassOver {
    match (usable_not_ejected, any_usable, up_not_ejected) {
        (true, _, _) => PassOver::Unusable,
        (false, true, false) => PassOver::Ignored,
        _ => PassOver::LeftOut,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn same(_: &str) -> Option<u32> {
        Some(0)
    }

    fn pod(text: &str) -> PodAddress {
        PodAddress::parse(text).unwrap()
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
        for t in 0..3 {
            outliers.failed(&a, 0, t);
        }
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
        for t in 0..3 {
            outliers.failed(&a, 0, t);
            outliers.failed(&b, 0, t);
        }
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
        for t in 0..3 {
            outliers.failed(&a, 4, t);
        }
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
        for t in 0..3 {
            outliers.failed(&a, 0, t);
        }
        assert_eq!(outliers.failed(&a, 0, 1_100), Some(2_000), "no call to ejected() in between");
    }

    #[test]
    fn records_are_bounded_and_a_full_map_still_ejects() {
        let mut outliers = outliers();
        let ejected = pod("10.255.0.1:8000");
        for t in 0..3 {
            outliers.failed(&ejected, 0, t);
        }
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
}
