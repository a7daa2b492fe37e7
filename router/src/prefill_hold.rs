//! A split request's hold on its prefill pod: one request and the prompt's uncached tokens
//! counted in flight there from the pick until the prefill is done.
//!
//! Done is the earlier of two moments: the decode pod's answer headers (its sidecar answers
//! only after the prefill) and the prefill's estimated end, taken at the pick
//! (`picker::disaggregation::prefill_duration_ms`). A streamed answer's headers come at its
//! first token, just after the prefill; a whole (non-streamed) answer's come after its whole
//! decode, seconds after the prefill pod was done: counted until then, the pod looked busy to
//! every prefill pick meanwhile (with `max_prefill_tokens_ahead`, prompts were prefilled on
//! their decode pods as backed up while both prefill pods idled).
//!
//! The estimate's end comes with no event of the request, so the worker keeps the timed holds
//! ([`PrefillTimers`]) and its tick ends those due ([`release_due`]); the stream keeps only
//! the hold's id. Whoever takes the hold out of the timers ends it: exactly once, whichever
//! path comes first (the tick, the headers, the stream's end, a refused header).

use std::collections::BTreeMap;

use picker::address::PodAddress;
use picker::inflight::WorkerInflight;
use wasm_epp_host::Host;

use crate::worker::Worker;

/// A request's prefill pod, as the decision picked it.
#[derive(Debug, Clone, PartialEq)]
pub struct Prefill {
    pub address: PodAddress,
    /// Uncached prompt tokens counted in flight on the prefill pod: the prefill pod computes
    /// them, the decode pod only imports their KV.
    pub uncached_tokens: u32,
    /// When the prefill is estimated to be done (host clock, ms).
    pub ends_by_ms: u64,
}

/// What a stream (or a request released from flow control's queue) holds of its prefill pod.
#[derive(Debug, PartialEq)]
pub enum PrefillHold {
    /// In the worker's [`PrefillTimers`] under this id: ended by the tick at its estimated end,
    /// or by the stream first.
    Timed(u64),
    /// The timers were full: ended by the stream alone (at the answer's headers or its end).
    Untimed(Prefill),
}

/// Most holds one worker times at once: each is a split request of this worker between its
/// pick and the earlier of its prefill's estimated end and its answer's headers, so this is
/// far above any worker's such requests (a prefill takes well under a second; at 1,000 split
/// requests a second a worker holds a few hundred). Past it a hold waits for its headers.
pub const MAX_TIMED_HOLDS: usize = 16_384;

/// The worker's timed holds, by id (ids only grow: one taken is never found again).
#[derive(Debug, Default)]
pub struct PrefillTimers {
    next_id: u64,
    timed: BTreeMap<u64, Prefill>,
}

impl PrefillTimers {
    /// Times `prefill` until its `ends_by_ms`; when full, gives it back untimed.
    pub fn time(&mut self, prefill: Prefill) -> PrefillHold {
        if self.timed.len() >= MAX_TIMED_HOLDS {
            return PrefillHold::Untimed(prefill);
        }
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        self.timed.insert(id, prefill);
        PrefillHold::Timed(id)
    }

    /// The hold `id`, unless it was taken already (ended by the tick).
    pub fn take(&mut self, id: u64) -> Option<Prefill> {
        self.timed.remove(&id)
    }

    /// The holds whose prefill is estimated done at `now_ms`, taken out.
    pub fn take_due(&mut self, now_ms: u64) -> Vec<Prefill> {
        let due: Vec<u64> = self.timed.iter().filter(|(_, p)| p.ends_by_ms <= now_ms).map(|(&id, _)| id).collect();
        due.iter().filter_map(|id| self.timed.remove(id)).collect()
    }

    /// Holds timed now.
    pub fn len(&self) -> usize {
        self.timed.len()
    }

    pub fn is_empty(&self) -> bool {
        self.timed.is_empty()
    }
}

/// Times `prefill` in the worker's timers (untimed if they are busy or full, counted).
pub fn hold(worker: &Worker, prefill: Prefill) -> PrefillHold {
    let hold = match worker.prefill_timers.try_borrow_mut() {
        Ok(mut timers) => timers.time(prefill),
        Err(_) => PrefillHold::Untimed(prefill),
    };
    if matches!(hold, PrefillHold::Untimed(_)) {
        worker.stats.increment(worker.stats.pd_prefill_holds_untimed);
    }
    hold
}

/// Ends the prefill pod's in-flight count and token load, once: nothing if the tick ended a
/// timed hold already. (If the timers are busy, which one thread cannot make happen, a timed
/// hold is left for the tick to end at its estimate.)
pub fn release_prefill(worker: &Worker, host: &dyn Host, hold: &mut Option<PrefillHold>) {
    let prefill = match hold.take() {
        None => return,
        Some(PrefillHold::Untimed(prefill)) => prefill,
        Some(PrefillHold::Timed(id)) => match worker.prefill_timers.try_borrow_mut().map(|mut t| t.take(id)) {
            Ok(Some(prefill)) => prefill,
            Ok(None) | Err(_) => return,
        },
    };
    worker.stats.increment(worker.stats.pd_prefill_holds_ended_by_request);
    match worker.inflight.try_borrow_mut() {
        Ok(mut inflight) => {
            let now = host.now_ms();
            end(&mut inflight, &prefill, now);
            inflight.publish_now(host, now);
        }
        Err(_) => worker.stats.increment(worker.stats.inflight_update_failed),
    }
}

/// On the tick, before the counts are published: ends the holds whose prefill is estimated
/// done at `now_ms`, though their answers' headers have not come (a whole answer's come after
/// its decode). Returns how many.
pub fn release_due(worker: &Worker, inflight: &mut WorkerInflight, now_ms: u64) -> usize {
    let Ok(mut timers) = worker.prefill_timers.try_borrow_mut() else { return 0 };
    if timers.is_empty() {
        return 0;
    }
    let due = timers.take_due(now_ms);
    drop(timers);
    for prefill in &due {
        end(inflight, prefill, now_ms);
    }
    worker.stats.add(worker.stats.pd_prefill_holds_ended_by_estimate, due.len() as u64);
    due.len()
}

fn end(inflight: &mut WorkerInflight, prefill: &Prefill, now_ms: u64) {
    inflight.release_tokens(prefill.address.as_str(), prefill.uncached_tokens);
    // Counted as one place (see `decision::decide`).
    inflight.finished(prefill.address.as_str(), 1, now_ms);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefill(ends_by_ms: u64) -> Prefill {
        Prefill { address: PodAddress::parse("10.0.0.1:8000").unwrap(), uncached_tokens: 2000, ends_by_ms }
    }

    #[test]
    fn a_timed_hold_is_taken_once_by_the_tick_or_by_its_stream() {
        let mut timers = PrefillTimers::default();
        let (PrefillHold::Timed(early), PrefillHold::Timed(late)) =
            (timers.time(prefill(100)), timers.time(prefill(300)))
        else {
            panic!("room for both")
        };
        assert!(timers.take_due(99).is_empty());
        assert_eq!(timers.take_due(100), [prefill(100)], "due at its estimate");
        assert_eq!(timers.take(early), None, "the tick took it: its stream ends nothing");
        assert_eq!(timers.take(late), Some(prefill(300)), "its stream came first");
        assert!(timers.take_due(1_000).is_empty(), "and the tick ends nothing");
    }

    #[test]
    fn past_its_bound_a_hold_is_untimed() {
        let mut timers = PrefillTimers::default();
        for _ in 0..MAX_TIMED_HOLDS {
            assert!(matches!(timers.time(prefill(100)), PrefillHold::Timed(_)));
        }
        assert_eq!(timers.time(prefill(100)), PrefillHold::Untimed(prefill(100)));
        assert_eq!(timers.take_due(100).len(), MAX_TIMED_HOLDS);
    }
}
