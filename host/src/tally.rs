//! How many host calls code made, and how many bytes crossed the VM boundary each way: what
//! [`crate::MockHost`] counts so a benchmark can show the request path's host traffic (the
//! part of its cost inside Envoy that native timing cannot see).
//!
//! Calls are named after the Proxy-Wasm ABI function Envoy would serve
//! (`proxy_get_shared_data`, ...), so the counts line up with the per-call costs measured in
//! Envoy.

use std::cell::RefCell;
use std::collections::BTreeMap;

/// One ABI function's traffic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallCount {
    pub calls: u64,
    /// Bytes the host copied into the VM (values read).
    pub bytes_in: u64,
    /// Bytes the VM handed the host (keys, names, values written).
    pub bytes_out: u64,
}

/// Host traffic by ABI function, accumulated until [`HostCallTally::take`].
#[derive(Debug, Default)]
pub struct HostCallTally {
    counts: RefCell<BTreeMap<&'static str, CallCount>>,
}

impl HostCallTally {
    /// Counts one call of `function`, with the bytes it copied in and out.
    pub fn note(&self, function: &'static str, bytes_in: usize, bytes_out: usize) {
        let mut counts = self.counts.borrow_mut();
        let count = counts.entry(function).or_default();
        count.calls += 1;
        count.bytes_in += bytes_in as u64;
        count.bytes_out += bytes_out as u64;
    }

    /// Everything counted since the last take, and a fresh start.
    pub fn take(&self) -> BTreeMap<&'static str, CallCount> {
        std::mem::take(&mut *self.counts.borrow_mut())
    }
}

/// Bytes of a header list as the ABI serialises it (names, values, and their lengths).
pub fn pairs_bytes<N: AsRef<[u8]>, V: AsRef<[u8]>>(pairs: impl Iterator<Item = (N, V)>) -> usize {
    pairs.map(|(n, v)| n.as_ref().len() + v.as_ref().len() + 10).sum::<usize>() + 4
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_and_bytes_add_up_per_function_until_taken() {
        let tally = HostCallTally::default();
        tally.note("proxy_get_shared_data", 100, 8);
        tally.note("proxy_get_shared_data", 50, 8);
        tally.note("proxy_set_header_map_value", 0, 40);
        let counts = tally.take();
        assert_eq!(counts.get("proxy_get_shared_data"), Some(&CallCount { calls: 2, bytes_in: 150, bytes_out: 16 }));
        assert_eq!(counts.get("proxy_set_header_map_value").map(|c| c.calls), Some(1));
        assert!(tally.take().is_empty(), "a take starts afresh");
    }
}
