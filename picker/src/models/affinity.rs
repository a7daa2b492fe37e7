//! LoRA affinity: which pods an adapter request should prefer, without making every pod load
//! every adapter.
//!
//! Loading an adapter onto a GPU costs time and may evict another one that a later request then
//! has to load again (a swap). So pods are ranked in tiers, best first:
//! 0. the adapter is already there: running, waiting, or resident on the GPU;
//! 1. the pod has a free adapter slot (fewer adapters on its GPU than `max_loras`): loading
//!    evicts nothing;
//! 2. the rest (a load that evicts another adapter).
//!
//! The scheduler keeps the best tier among pods whose queue is not full, so a hot adapter
//! spreads to a pod with a free slot only once the pods holding it are saturated, and a cold
//! adapter lands where it evicts nothing.

use crate::pod_table::PodState;

/// The adapter is on the pod already.
pub const TIER_RESIDENT: u8 = 0;
/// The pod can load it without evicting another.
pub const TIER_FREE_SLOT: u8 = 1;
/// Loading it would evict another adapter.
pub const TIER_SWAP: u8 = 2;

/// Adapter slots free on `pod`: `max_loras` less the adapters resident (or, where residency is
/// not reported, running); `u32::MAX` when the pod reports no `max_loras` (no penalty then).
pub fn free_slots(pod: &PodState) -> u32 {
    if pod.max_loras == 0 {
        return u32::MAX;
    }
    let occupied = pod.resident_loras.len().max(pod.running_loras.len());
    pod.max_loras.saturating_sub(u32::try_from(occupied).unwrap_or(u32::MAX))
}

/// The tier of a pod for an adapter: whether the adapter is on it, and its free slots.
pub fn tier(on_pod: bool, free_slots: u32) -> u8 {
    match (on_pod, free_slots) {
        (true, _) => TIER_RESIDENT,
        (false, 0) => TIER_SWAP,
        (false, _) => TIER_FREE_SLOT,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::address::PodAddress;

    fn pod(max_loras: u32, resident: &[&str], running: &[&str]) -> PodState {
        let mut pod = PodState::unknown(&PodAddress::parse("10.0.0.1:80").unwrap());
        pod.max_loras = max_loras;
        pod.resident_loras = resident.iter().map(|m| m.to_string()).collect();
        pod.running_loras = running.iter().map(|m| m.to_string()).collect();
        pod
    }

    #[test]
    fn resident_beats_free_slot_beats_swap() {
        assert_eq!(tier(true, 0), TIER_RESIDENT);
        assert_eq!(tier(false, free_slots(&pod(2, &["b"], &[]))), TIER_FREE_SLOT);
        assert_eq!(tier(false, free_slots(&pod(2, &["b", "c"], &[]))), TIER_SWAP);
        assert_eq!(tier(false, free_slots(&pod(1, &[], &["b"]))), TIER_SWAP, "running adapters hold slots too");
        assert_eq!(free_slots(&pod(0, &[], &[])), u32::MAX, "no slot count reported: no penalty");
    }
}
