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
//!
//! The workers of one Envoy share their ejections ([`shared`]): a pod one worker ejected is
//! passed over by the others within a tick or so, each adopting the ejection as its own.

pub mod shared;

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
    /// When the ejection it is serving (or last served) was made, here or by the worker it was
    /// adopted from: what tells one ejection from another between workers.
    ejected_at_ms: u64,
    /// The worker's failure count ([`Outliers::failures_so_far`]) at its last failure.
    last_failure: u64,
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
    /// When a success last cleared a pod's record here: another worker's ejection made before
    /// it is older news than this success, and is not adopted.
    cleared_ms: HashMap<PodAddress, u64>,
    /// Failures noted so far, any pod: orders a success judged late against failures.
    failures: u64,
}

impl Outliers {
    pub fn new(config: OutlierConfig) -> Self {
        Self { config, records: HashMap::new(), ejected: Vec::new(), cleared_ms: HashMap::new(), failures: 0 }
    }

    /// Failures noted so far: taken when an answer's headers come, so its success, judged at
    /// its end, clears no failure noted since ([`Outliers::succeeded_unless_failed_since`]).
    pub fn failures_so_far(&self) -> u64 {
        self.failures
    }

    /// An attempt on `pod` (of table epoch `epoch`) failed at `now_ms`. Returns how long it
    /// is ejected for, if this failure ejected it.
    pub fn failed(&mut self, pod: &PodAddress, epoch: u32, now_ms: u64) -> Option<u64> {
        if !self.config.enabled {
            return None;
        }
        self.make_room_for(pod);
        let record = self.records.entry(pod.clone()).or_default();
        if record.strikes > 0 && record.epoch != epoch {
            // Ejected before under another epoch: that engine restarted, and this is a new one.
            *record = Record::default();
        }
        match record.ejected_until {
            // Sent before it was ejected: already counted in.
            Some(until) if until > now_ms => return None,
            // Its time is up: back on probation (whether or not a decision has looked since).
            Some(_) => *record = Record { ejected_until: None, probation: true, ..*record },
            None => {}
        }
        self.failures = self.failures.saturating_add(1);
        record.last_failure = self.failures;
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
            ejected_at_ms: now_ms,
            last_failure: self.failures,
        };
        if !self.ejected.contains(pod) {
            self.ejected.push(pod.clone());
        }
        Some(duration)
    }

    /// Before a record of `pod` is added: when the map is full, pods that left the pool keep
    /// their partial counts, so every record but the ejected pods' is forgotten (a pod failing
    /// now starts its count again).
    fn make_room_for(&mut self, pod: &PodAddress) {
        if self.records.len() >= MAX_RECORDS && !self.records.contains_key(pod.as_str()) {
            self.records.retain(|_, record| record.ejected_until.is_some());
        }
    }

    /// The pods this worker holds ejected at `now_ms` (its own ejections and those it
    /// adopted), for the other workers ([`shared`]).
    pub fn ejections(&self, now_ms: u64) -> Vec<shared::Ejection> {
        let live = |record: &Record| record.ejected_until.filter(|&until| until > now_ms);
        self.records
            .iter()
            .filter_map(|(pod, record)| {
                Some(shared::Ejection {
                    pod: pod.clone(),
                    epoch: record.epoch,
                    strikes: record.strikes,
                    ejected_at_ms: record.ejected_at_ms,
                    until_ms: live(record)?,
                })
            })
            .collect()
    }

    /// Another worker's `ejections`, adopted as this worker's own where they are news: a pod
    /// still ejected at `now_ms`, under the same table epoch here (`epoch_of`: a restarted
    /// engine, or one this worker's table does not have yet, is left alone), by an ejection
    /// made after the one this worker holds (an ejection is told by when it was made, so
    /// reading back one's own, or one already adopted, changes nothing: no echo) and after
    /// this worker last saw the pod succeed (the newer news wins). It is ejected here until
    /// the same time (at most `max_ejection_ms` from now), with the maker's strikes if they
    /// are more: when the time is up it is on probation here too. Returns how many were
    /// adopted.
    pub fn adopt(
        &mut self,
        ejections: &[shared::Ejection],
        now_ms: u64,
        epoch_of: &dyn Fn(&str) -> Option<u32>,
    ) -> u64 {
        if !self.config.enabled {
            return 0;
        }
        let mut adopted = 0;
        for ejection in ejections {
            let pod = ejection.pod.as_str();
            if ejection.until_ms <= now_ms || epoch_of(pod) != Some(ejection.epoch) {
                continue;
            }
            // Made further ahead of now than another thread's clock read can be: before the
            // wall clock stepped back, by a worker that has not decided since (idle or gone;
            // a deciding maker publishes it counted from the present, [`Outliers::ejected`]).
            // Taken, it would be news again at every read, the pod out until the clock caught up.
            if ejection.ejected_at_ms > now_ms.saturating_add(crate::inflight::SLOT_STALE_MS) {
                continue;
            }
            let held = self.records.get(pod).filter(|r| r.epoch == ejection.epoch && r.strikes > 0);
            let known = held.map_or(0, |r| r.ejected_at_ms).max(self.cleared_ms.get(pod).copied().unwrap_or(0));
            if ejection.ejected_at_ms <= known {
                continue;
            }
            let strikes = held.map_or(ejection.strikes, |r| r.strikes.max(ejection.strikes));
            self.make_room_for(&ejection.pod);
            self.records.insert(
                ejection.pod.clone(),
                Record {
                    consecutive: 0,
                    strikes,
                    ejected_until: Some(ejection.until_ms.min(now_ms.saturating_add(self.config.max_ejection_ms))),
                    probation: false,
                    epoch: ejection.epoch,
                    ejected_at_ms: ejection.ejected_at_ms,
                    // News of failures: streams that began before it clear nothing.
                    last_failure: self.failures,
                },
            );
            if !self.ejected.contains(&ejection.pod) {
                self.ejected.push(ejection.pod.clone());
            }
            adopted += 1;
        }
        adopted
    }

    /// An attempt on `pod` succeeded: its record is cleared (unless it is ejected now: an
    /// answer to a request sent before the ejection does not bring it back early).
    /// A success of `pod` whose answer began when `failures_then` failures had been noted
    /// (a stream judged at its end): it clears the pod's record unless the pod failed since.
    /// A pod that starts failing new requests while its older streams still run would
    /// otherwise have its count wiped by each of them as it ends.
    pub fn succeeded_unless_failed_since(&mut self, pod: &str, failures_then: u64, now_ms: u64) {
        if self.records.get(pod).is_some_and(|record| record.last_failure > failures_then) {
            return;
        }
        self.succeeded(pod, now_ms);
    }

    pub fn succeeded(&mut self, pod: &str, now_ms: u64) {
        if self.records.is_empty() {
            return;
        }
        // Ejected now (or no record): nothing to clear.
        if self.records.get(pod).is_none_or(|r| r.ejected_until.is_some_and(|until| until > now_ms)) {
            return;
        }
        if let Some((pod, _)) = self.records.remove_entry(pod) {
            self.ejected.retain(|p| *p != pod);
            self.note_cleared(pod, now_ms);
        }
    }

    /// A success cleared `pod`'s record at `now_ms`. Only ejections made in the last
    /// `max_ejection_ms` can still be live, so older notes are dropped when the map is full.
    fn note_cleared(&mut self, pod: PodAddress, now_ms: u64) {
        if self.cleared_ms.len() >= MAX_RECORDS && !self.cleared_ms.contains_key(pod.as_str()) {
            let oldest_live = now_ms.saturating_sub(self.config.max_ejection_ms);
            self.cleared_ms.retain(|_, cleared| *cleared >= oldest_live);
            if self.cleared_ms.len() >= MAX_RECORDS {
                self.cleared_ms.clear();
            }
        }
        self.cleared_ms.insert(pod, now_ms);
    }

    /// No pod has a record: a success needs no bookkeeping.
    pub fn is_clear(&self) -> bool {
        self.records.is_empty()
    }

    /// Forgets the pods `keep` says left the pool: a pod replaced (the usual end of a broken
    /// one) would stay a suspect for good, and every decision would ask for more runners-up.
    pub fn retain_pods(&mut self, keep: impl Fn(&PodAddress) -> bool) {
        self.records.retain(|pod, _| keep(pod));
        self.ejected.retain(|pod| keep(pod));
        self.cleared_ms.retain(|pod, _| keep(pod));
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
                    Some(until) if until > now_ms => {
                        if record.ejected_at_ms > now_ms.saturating_add(crate::inflight::SLOT_STALE_MS) {
                            // The wall clock stepped back past the ejection: it lasts its own
                            // length from now, not until the clock catches up (an hour
                            // without the pod for an hour's step). A few ms ahead is only
                            // another worker's clock read later: rebased, its record would
                            // be news again at the next read (adopted, counted, twice).
                            let length = until.saturating_sub(record.ejected_at_ms);
                            record.ejected_until = Some(now_ms.saturating_add(length));
                            record.ejected_at_ms = now_ms;
                        }
                        true
                    }
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
mod tests;
