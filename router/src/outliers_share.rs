//! On the tick: the pods this worker holds ejected, published for the other workers of its
//! Envoy, and theirs adopted (`picker::outliers::shared` says why and how).

use std::cell::{Cell, RefCell};

use picker::outliers::shared::{decode, encode, EMPTY};
use picker::pod_table::PodTable;
use wasm_epp_host::Host;

use crate::worker::Worker;

/// How often the other workers' ejections are read: a pod one worker ejected is passed over by
/// the others within this (plus a tick), at one shared-data read per other worker.
pub const READ_EVERY_MS: u64 = 100;

/// What this worker last published under which slot (a worker that lost its slot and claimed
/// another publishes again), and when it next reads the others'.
#[derive(Debug, Default)]
pub struct EjectionShare {
    published: RefCell<Option<(usize, Vec<u8>)>>,
    next_read_ms: Cell<u64>,
}

fn key(slot: usize) -> String {
    picker::keys::per_slot(picker::keys::EJECTED_PREFIX, slot)
}

/// At `now_ms`, outlier detection on and an in-flight slot claimed (`slot`, of `slots` claimed): publishes the ejections this worker
/// holds (its own and those it adopted) when they changed (checked at every tick, so an
/// ejection is out within a tick), and every [`READ_EVERY_MS`] adopts those of every other
/// claimed slot that are news here ([`picker::outliers::Outliers::adopt`]). So another worker
/// passes a pod over within `READ_EVERY_MS` plus two ticks of its ejection. A worker with no
/// slot (more workers than slots) keeps to its own answers.
pub fn share(
    worker: &Worker,
    host: &dyn Host,
    table: Option<&PodTable>,
    slot: Option<usize>,
    slots: usize,
    now_ms: u64,
) {
    let (Some(slot), true) = (slot, worker.config.outlier_detection.enabled) else { return };
    let Ok(mut outliers) = worker.outliers.try_borrow_mut() else { return };
    let share = &worker.ejection_share;
    let is_out = |bytes: &[u8]| {
        share.published.try_borrow().is_ok_and(|out| out.as_ref().is_some_and(|(s, out)| *s == slot && out == bytes))
    };
    // Nothing to publish while no pod has a record and the empty record is out.
    if !(outliers.is_clear() && is_out(&EMPTY)) {
        let own = encode(&outliers.ejections(now_ms));
        if !is_out(&own) && host.set(&key(slot), &own, None).is_ok() {
            if let Ok(mut published) = share.published.try_borrow_mut() {
                *published = Some((slot, own));
            }
        }
    }
    // A next read further off than READ_EVERY_MS was set before the wall clock stepped back:
    // waited for, no other worker's ejection would be read until the clock caught up.
    if picker::clock::not_due_yet(now_ms, share.next_read_ms.get(), READ_EVERY_MS) {
        return;
    }
    share.next_read_ms.set(now_ms.saturating_add(READ_EVERY_MS));
    let epoch_of = |pod: &str| table.and_then(|t| t.epoch_of(pod));
    let mut adopted = 0;
    for other in picker::inflight::other_slots(slot, slots) {
        if let Ok((Some(bytes), _)) = host.get(&key(other)) {
            if let Some(ejections) = decode(&bytes) {
                adopted += outliers.adopt(&ejections, now_ms, &epoch_of);
            }
        }
    }
    if adopted > 0 {
        worker.stats.add(worker.stats.pod_ejections_adopted, adopted);
        // The maker logged the ejection (a warning); each other worker would only repeat it.
        log::debug!("wasm-epp: {adopted} pod ejection(s) taken over from the other workers");
    }
}
