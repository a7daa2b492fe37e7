//! The opt-in decision header (`debug_decision_header`): one routing decision, readable.
//!
//! `x-wasm-epp-decision: pod=10.0.0.1:8000; reason=affinity; prefix=0.750;
//! candidates=10.0.0.1:8000=0.912,10.0.0.2:8000=0.400` on the response of each routed
//! request. The value is built in the decision and written on the response headers; a client's
//! own `x-wasm-epp-decision` request header is removed whatever the setting, so nothing
//! downstream can take a client's word for a decision.

use picker::address::PodAddress;

use crate::decision_stats::PickReason;

/// The header's name, on responses (and removed from requests).
pub const DECISION_HEADER: &str = "x-wasm-epp-decision";

/// The header's value: chosen pod, why, its share of the prompt's prefix, and each
/// candidate's score, best first (already bounded by `picker::route::explain`).
pub fn describe(pod: &PodAddress, reason: PickReason, prefix_match: f64, candidates: &[(String, f64)]) -> String {
    let listed: Vec<String> = candidates.iter().map(|(address, score)| format!("{address}={score:.3}")).collect();
    format!(
        "pod={}; reason={}; prefix={prefix_match:.3}; candidates={}",
        pod.as_str(),
        reason.label(),
        listed.join(",")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_pod_the_reason_and_every_candidate() {
        let pod = PodAddress::parse("10.0.0.1:8000").unwrap();
        let candidates = vec![("10.0.0.1:8000".to_string(), 0.9123), ("10.0.0.2:8000".to_string(), 0.4)];
        assert_eq!(
            describe(&pod, PickReason::Affinity, 0.75, &candidates),
            "pod=10.0.0.1:8000; reason=affinity; prefix=0.750; candidates=10.0.0.1:8000=0.912,10.0.0.2:8000=0.400"
        );
    }
}
