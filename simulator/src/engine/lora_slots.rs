//! GPU slots for LoRA adapters: which adapters are resident, and what loading costs.
//!
//! vLLM keeps at most `max_loras` adapters on the GPU (its `LRUCacheLoRAModelManager`): a
//! request for an adapter that is not resident loads it into a free slot, or evicts the least
//! recently used adapter that no running request needs. The load takes time (charged to the
//! step that admits the request, see `LatencyParams::lora_load_ms`) and is counted, so a
//! benchmark can compare how often a router makes pods swap adapters.

/// Adapters resident on one pod's GPU, least recently used first.
#[derive(Debug, Clone, Default)]
pub struct LoraSlots {
    capacity: usize,
    /// Oldest use first; never longer than `capacity`.
    resident: Vec<String>,
    loads: u64,
    evictions: u64,
}

/// What making an adapter resident took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotUse {
    /// Already on the GPU.
    Resident,
    /// Loaded now, into a free slot or in place of an evicted adapter.
    Loaded,
}

impl LoraSlots {
    /// Empty slots; `capacity` is `max_loras` (at least 1).
    pub fn new(capacity: usize) -> Self {
        Self { capacity: capacity.max(1), ..Self::default() }
    }

    /// Makes `adapter` resident for a request being admitted; `None` when every slot holds an
    /// adapter that `in_use` says a running request still needs.
    pub fn acquire(&mut self, adapter: &str, in_use: &dyn Fn(&str) -> bool) -> Option<SlotUse> {
        if let Some(position) = self.resident.iter().position(|name| name == adapter) {
            let name = self.resident.remove(position);
            self.resident.push(name);
            return Some(SlotUse::Resident);
        }
        if self.resident.len() >= self.capacity {
            let victim = self.resident.iter().position(|name| !in_use(name))?;
            self.resident.remove(victim);
            self.evictions += 1;
        }
        self.resident.push(adapter.to_owned());
        self.loads += 1;
        Some(SlotUse::Loaded)
    }

    /// Drops an adapter that was unloaded from the server.
    pub fn forget(&mut self, adapter: &str) {
        self.resident.retain(|name| name != adapter);
    }

    /// Resident adapters, least recently used first.
    pub fn resident(&self) -> &[String] {
        &self.resident
    }

    /// Adapters loaded onto the GPU since start.
    pub fn loads(&self) -> u64 {
        self.loads
    }

    /// Adapters evicted to make room (swaps) since start.
    pub fn evictions(&self) -> u64 {
        self.evictions
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn least_recently_used_idle_adapter_is_evicted() {
        let mut slots = LoraSlots::new(2);
        let idle = |_: &str| false;
        assert_eq!(slots.acquire("a", &idle), Some(SlotUse::Loaded));
        assert_eq!(slots.acquire("b", &idle), Some(SlotUse::Loaded));
        assert_eq!(slots.acquire("a", &idle), Some(SlotUse::Resident));
        assert_eq!(slots.acquire("c", &idle), Some(SlotUse::Loaded), "b is the least recently used");
        assert_eq!(slots.resident(), ["a".to_owned(), "c".to_owned()]);
        assert_eq!((slots.loads(), slots.evictions()), (3, 1));
    }

    #[test]
    fn adapters_in_use_are_never_evicted() {
        let mut slots = LoraSlots::new(1);
        assert_eq!(slots.acquire("a", &|_| false), Some(SlotUse::Loaded));
        assert_eq!(slots.acquire("b", &|name| name == "a"), None);
        slots.forget("a");
        assert_eq!(slots.acquire("b", &|_| true), Some(SlotUse::Loaded), "a free slot needs no eviction");
        assert_eq!(slots.evictions(), 0);
    }
}
