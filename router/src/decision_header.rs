//! The opt-in decision header (`debug_decision_header`): one routing decision, readable.
//!
//! `x-wasm-epp-decision: pod=10.0.0.1:8000; reason=affinity; prefix=0.750;
//! candidates=10.0.0.1:8000=0.912,10.0.0.2:8000=0.400` on the response of each routed
//! request. The value is built in the decision and written on the response headers; a client's
//! own `x-wasm-epp-decision` request header is removed whatever the setting, so nothing
//! downstream can take a client's word for a decision.

use picker::address::PodAddress;
use picker::route::explain::Explained;

use crate::decision_stats::PickReason;

/// The header's name, on responses (and removed from requests).
pub const DECISION_HEADER: &str = "x-wasm-epp-decision";

/// The header's value: chosen pod, why, its share of the prompt's prefix, each candidate's
/// score, best first (already bounded by `picker::route::explain`), with learning on each
/// candidate's predicted TTFT in the same order, then the requests in flight to each, and
/// which worker (its in-flight slot) decided when (the host clock in µs): two decisions of
/// two workers in the same millisecond can then be put in order, to tell whether one saw the
/// other's pick.
pub fn describe(
    pod: &PodAddress,
    reason: PickReason,
    prefix_match: f64,
    candidates: &[Explained],
    worker: &str,
    decided_us: u64,
) -> String {
    let listed: Vec<String> = candidates.iter().map(|c| format!("{}={:.3}", c.address, c.score)).collect();
    let mut value = format!(
        "pod={}; reason={}; prefix={prefix_match:.3}; candidates={}",
        pod.as_str(),
        reason.label(),
        listed.join(",")
    );
    if candidates.iter().any(|c| c.predicted_ttft_ms.is_some()) {
        let predicted: Vec<String> =
            candidates.iter().filter_map(|c| Some(format!("{}={:.0}", c.address, c.predicted_ttft_ms?))).collect();
        value.push_str("; predicted_ttft_ms=");
        value.push_str(&predicted.join(","));
    }
    let inflight: Vec<String> = candidates.iter().map(|c| format!("{}={}", c.address, c.inflight)).collect();
    value.push_str("; inflight=");
    value.push_str(&inflight.join(","));
    value.push_str(&format!("; worker={worker}; decided_us={decided_us}"));
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_pod_the_reason_and_every_candidate() {
        let pod = PodAddress::parse("10.0.0.1:8000").unwrap();
        let explained = |address: &str, score: f64, predicted_ttft_ms: Option<f64>| Explained {
            address: address.to_string(),
            score,
            predicted_ttft_ms,
            inflight: if score > 0.5 { 1 } else { 3 },
        };
        let candidates = vec![explained("10.0.0.1:8000", 0.9123, None), explained("10.0.0.2:8000", 0.4, None)];
        assert_eq!(
            describe(&pod, PickReason::Affinity, 0.75, &candidates, "vm-1", 1_700_000_000_123_456),
            "pod=10.0.0.1:8000; reason=affinity; prefix=0.750; candidates=10.0.0.1:8000=0.912,10.0.0.2:8000=0.400; \
             inflight=10.0.0.1:8000=1,10.0.0.2:8000=3; worker=vm-1; decided_us=1700000000123456"
        );
        let learned = vec![explained("10.0.0.1:8000", 0.9, Some(212.4)), explained("10.0.0.2:8000", 0.4, Some(640.0))];
        assert_eq!(
            describe(&pod, PickReason::Load, 0.0, &learned, "vm-2", 7),
            "pod=10.0.0.1:8000; reason=load; prefix=0.000; candidates=10.0.0.1:8000=0.900,10.0.0.2:8000=0.400; \
             predicted_ttft_ms=10.0.0.1:8000=212,10.0.0.2:8000=640; inflight=10.0.0.1:8000=1,10.0.0.2:8000=3; \
             worker=vm-2; decided_us=7"
        );
    }
}
