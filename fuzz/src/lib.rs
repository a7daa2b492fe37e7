//! Helpers shared by the fuzz targets in `fuzz_targets/`: the checks every target repeats.
//!
//! Targets assert properties, not just "no panic": a broken property panics, and libFuzzer
//! saves the input under `artifacts/<target>/`.

use picker::address::PodAddress;
use picker::pod_table::{PodState, PodTable, MAX_PODS};

/// Pod addresses the structured targets draw from: canonical ones, ones that parse but are
/// not canonical, and ones that must never become a destination.
pub const ADDRESSES: [&str; 12] = [
    "10.0.0.1:8000",
    "10.0.0.2:8000",
    "10.0.0.3:8001",
    "[fd00::7]:8000",
    "[::1]:80",
    " 10.0.0.4:8000",
    "10.0.0.5:8000\n",
    "[::ffff:10.0.0.6]:8000",
    "pod-1:8000",
    "10.0.0.7:0",
    "",
    "10.0.0.8:8000,10.0.0.9:8000",
];

/// Addresses that are canonical pod addresses (what the poller and discovery produce).
pub const CANONICAL_ADDRESSES: [&str; 5] =
    ["10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8001", "[fd00::7]:8000", "[::1]:80"];

/// Panics unless `text` is a literal `ip:port` already in canonical form.
pub fn assert_canonical_address(text: &str) {
    match PodAddress::parse(text) {
        Ok(address) => assert_eq!(address.as_str(), text, "address not in canonical form"),
        Err(reason) => panic!("not a pod address: {reason}"),
    }
}

/// Panics unless every pod of a decoded table names a literal `ip:port` and the table is
/// within its bound: what `PodTable::decode` promises whatever the bytes.
pub fn assert_decoded_table_is_safe(table: &PodTable) {
    assert!(table.pods.len() <= MAX_PODS, "{} pods decoded, bound is {MAX_PODS}", table.pods.len());
    for pod in &table.pods {
        // The type guarantees a parse happened; check it is canonical too.
        assert_canonical_address(pod.address.as_str());
    }
}

/// Floats equal to within a few units in the last place, or both tiny. serde_json's default
/// float parser (without `float_roundtrip`) may be off by an ULP for normal numbers and by more
/// for subnormal ones (a `running` of 5.40163012612188e-310 came back as 5.4016301261219e-310);
/// no routing decision can notice either.
pub fn close(a: f64, b: f64) -> bool {
    let difference = (a - b).abs();
    a == b
        || difference <= 4.0 * f64::EPSILON * a.abs().max(b.abs())
        || difference <= f64::MIN_POSITIVE
        || (a.is_nan() && b.is_nan())
}

fn close_option(a: Option<f64>, b: Option<f64>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => close(a, b),
        (a, b) => a.is_none() && b.is_none(),
    }
}

/// Two pods are the same up to float parsing precision.
pub fn same_pod(a: &PodState, b: &PodState) -> bool {
    a.address == b.address
        && a.healthy == b.healthy
        && close(a.waiting, b.waiting)
        && close(a.running, b.running)
        && close_option(a.kv_usage, b.kv_usage)
        && a.block_size == b.block_size
        && a.num_gpu_blocks == b.num_gpu_blocks
        && a.last_success_ms == b.last_success_ms
        && a.consecutive_failures == b.consecutive_failures
        && a.epoch == b.epoch
        && a.max_loras == b.max_loras
        && a.running_loras == b.running_loras
        && a.waiting_loras == b.waiting_loras
        && a.models == b.models
        && a.adapters == b.adapters
        && a.resident_loras == b.resident_loras
        && a.names_cut == b.names_cut
}

/// Panics unless `decoded` is `expected` up to float parsing precision.
pub fn assert_same_table(decoded: &PodTable, expected: &PodTable) {
    let same = decoded.version == expected.version
        && decoded.published_at_ms == expected.published_at_ms
        && decoded.poll_interval_ms == expected.poll_interval_ms
        && decoded.pods.len() == expected.pods.len()
        && decoded.pods.iter().zip(&expected.pods).all(|(a, b)| same_pod(a, b));
    assert!(same, "pod table changed on its way through the codec:\n  got      {decoded:?}\n  expected {expected:?}");
}

/// Splits a seed into the pieces a multi-step target feeds one by one: pieces are separated
/// by a line holding only `---`, so seeds stay readable text (several scrapes, several API
/// answers).
pub fn split_steps(data: &[u8]) -> impl Iterator<Item = &[u8]> {
    const SEPARATOR: &[u8] = b"\n---\n";
    let mut rest = Some(data);
    std::iter::from_fn(move || {
        let text = rest?;
        match text.windows(SEPARATOR.len()).position(|w| w == SEPARATOR) {
            Some(at) => {
                rest = text.get(at + SEPARATOR.len()..);
                text.get(..at)
            }
            None => {
                rest = None;
                Some(text)
            }
        }
    })
}
