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

/// The tier of `pod` for a request naming `adapter` (see the module docs).
pub fn lora_tier(pod: &PodState, adapter: &str) -> u8 {
    let named = |list: &[String]| list.iter().any(|name| name == adapter);
    if named(&pod.running_loras) || named(&pod.waiting_loras) || named(&pod.resident_loras) {
        return TIER_RESIDENT;
    }
    // Adapters occupying slots: resident ones, and running ones where residency is not reported.
    let occupied = pod.resident_loras.len().max(pod.running_loras.len());
    if pod.max_loras == 0 || occupied < pod.max_loras as usize {
        TIER_FREE_SLOT
    } else {
        TIER_SWAP
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
        assert_eq!(lora_tier(&pod(2, &["a"], &[]), "a"), TIER_RESIDENT);
        assert_eq!(lora_tier(&pod(2, &[], &["a"]), "a"), TIER_RESIDENT);
        assert_eq!(lora_tier(&pod(2, &["b"], &[]), "a"), TIER_FREE_SLOT);
        assert_eq!(lora_tier(&pod(2, &["b", "c"], &[]), "a"), TIER_SWAP);
        assert_eq!(lora_tier(&pod(1, &[], &["b"]), "a"), TIER_SWAP, "running adapters hold slots too");
        assert_eq!(lora_tier(&pod(0, &[], &[]), "a"), TIER_FREE_SLOT, "no slot count reported: no penalty");
    }
}
