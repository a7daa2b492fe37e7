//! LoRA affinity: which pods an adapter request should prefer, without making every pod load
//! every adapter.
//!
//! Loading an adapter onto a GPU costs time and may evict another one that a later request then
//! has to load again (a swap). So pods are ranked in tiers, best first:
//! 0. the adapter is already there: running or resident on the GPU, or waiting on a pod with
//!    a slot free for it (its *home*);
//! 1. it is there too, but the pool is *tight* (below): a copy, used only when the home's
//!    queue is full, so the copy ages out of its pod's LRU and frees the slot;
//! 2. the pod with a free adapter slot that every worker and replica would pick (most free
//!    slots, then a rendezvous hash of adapter and pod): loading evicts nothing, and two
//!    workers placing the same cold adapter at once do not place it twice;
//! 3. other pods with a free slot, and a pod where the adapter waits for a slot every other
//!    adapter holds (it waits there already: one more request adds no eviction, but a pod
//!    with a slot free serves it sooner);
//! 4. the rest: a load that evicts another adapter. In a tight pool a free slot counts here
//!    too when the adapter has a home already: the slot is needed by an adapter without one.
//!
//! The pool is tight when its free slots do not exceed the adapters in demand (requested
//! lately, see [`super::demand`]) that sit on no pod: every free slot is then wanted, and a
//! second copy of one adapter means another one swaps in and out. With slack, every holder is
//! home (load decides among them) and a hot adapter spreads to a free slot once its holders'
//! queues are full. The scheduler keeps the best tier among pods whose queue is not full, and
//! queues on the holders rather than make a pod evict.

use crate::pod_table::PodState;

/// The adapter is on the pod already (its home, or one of its homes with slack).
pub const TIER_RESIDENT: u8 = 0;
/// The adapter is on the pod too, in a tight pool: used when the home is full.
pub const TIER_RESIDENT_COPY: u8 = 1;
/// The free slot the adapter is placed in.
pub const TIER_FREE_SLOT: u8 = 2;
/// Another free slot.
pub const TIER_FREE_SLOT_OTHER: u8 = 3;
/// Loading it would evict another adapter, now or (tight pool) later.
pub const TIER_SWAP: u8 = 4;

/// Adapter slots free on `pod`: `max_loras` less the adapters resident (or, where residency is
/// not reported, running); `u32::MAX` when the pod reports no `max_loras` (no penalty then).
pub fn free_slots(pod: &PodState) -> u32 {
    if pod.max_loras == 0 {
        return u32::MAX;
    }
    let occupied = pod.resident_loras.len().max(pod.running_loras.len());
    pod.max_loras.saturating_sub(u32::try_from(occupied).unwrap_or(u32::MAX))
}

/// One pod serving an adapter, as the tiers are decided from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Server {
    /// The adapter is on the pod (resident, running, or waiting with a slot free for it).
    pub on_pod: bool,
    /// It waits on the pod for a slot other adapters hold (not `on_pod`).
    pub waiting_for_slot: bool,
    /// The pod's free adapter slots.
    pub free_slots: u32,
    /// Rendezvous weight of (adapter, pod): the same on every worker and replica.
    pub weight: u64,
}

/// The tier of each of an adapter's pods (same order); `tight`: see the module docs.
pub fn tiers(servers: &[Server], tight: bool) -> Vec<u8> {
    let holders = servers.iter().filter(|s| s.on_pod).count();
    let home = best(servers, |s| s.on_pod.then_some((0, s.weight)));
    let takes_slot = |s: &Server| !s.on_pod && s.free_slots > 0 && !(tight && holders > 0);
    let placed = best(servers, |s| takes_slot(s).then_some((s.free_slots, s.weight)));
    let tier = |(i, server): (usize, &Server)| match () {
        _ if server.on_pod && (!tight || Some(i) == home) => TIER_RESIDENT,
        _ if server.on_pod => TIER_RESIDENT_COPY,
        _ if Some(i) == placed => TIER_FREE_SLOT,
        _ if takes_slot(server) || server.waiting_for_slot => TIER_FREE_SLOT_OTHER,
        _ => TIER_SWAP,
    };
    servers.iter().enumerate().map(tier).collect()
}

/// The index of the server with the highest key, among those that have one.
fn best<K: Ord>(servers: &[Server], key: impl Fn(&Server) -> Option<K>) -> Option<usize> {
    servers.iter().enumerate().filter_map(|(i, s)| key(s).map(|k| (i, k))).max_by(|a, b| a.1.cmp(&b.1)).map(|(i, _)| i)
}

/// Rendezvous weight of a pod (its address hashed: `pod_key`) for an adapter (`model_key`).
pub fn weight(model_key: u64, pod_key: u64) -> u64 {
    // splitmix64's finalizer: every bit of both keys moves every bit of the weight.
    let mut z = model_key ^ pod_key.rotate_left(29);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
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

    fn server(on_pod: bool, free_slots: u32, weight: u64) -> Server {
        Server { on_pod, waiting_for_slot: false, free_slots, weight }
    }

    #[test]
    fn free_slots_count_resident_or_running_adapters() {
        assert_eq!(free_slots(&pod(2, &["b"], &[])), 1);
        assert_eq!(free_slots(&pod(2, &["b", "c"], &[])), 0);
        assert_eq!(free_slots(&pod(1, &[], &["b"])), 0, "running adapters hold slots too");
        assert_eq!(free_slots(&pod(0, &[], &[])), u32::MAX, "no slot count reported: no penalty");
    }

    #[test]
    fn with_slack_every_holder_is_home_and_free_slots_rank_by_room_then_weight() {
        let servers = [server(true, 0, 1), server(true, 1, 2), server(false, 1, 9), server(false, 2, 3)];
        assert_eq!(tiers(&servers, false), [TIER_RESIDENT, TIER_RESIDENT, TIER_FREE_SLOT_OTHER, TIER_FREE_SLOT]);
        let cold = [server(false, 1, 5), server(false, 1, 7), server(false, 0, 9)];
        assert_eq!(tiers(&cold, false), [TIER_FREE_SLOT_OTHER, TIER_FREE_SLOT, TIER_SWAP], "equal room: weight");
        assert_eq!(tiers(&cold, true), tiers(&cold, false), "an adapter without a home may take a slot anyway");
    }

    #[test]
    fn a_tight_pool_keeps_one_home_and_leaves_free_slots_to_adapters_without_one() {
        let servers = [server(true, 0, 1), server(true, 0, 8), server(false, 1, 9)];
        assert_eq!(tiers(&servers, true), [TIER_RESIDENT_COPY, TIER_RESIDENT, TIER_SWAP]);
    }

    #[test]
    fn weights_are_stable_and_spread() {
        assert_eq!(weight(1, 2), weight(1, 2));
        assert_ne!(weight(1, 2), weight(1, 3));
        assert_ne!(weight(1, 2), weight(2, 1));
    }
}
