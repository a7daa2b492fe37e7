//! The opt-in decision header: off by default, on when configured, and a client's copy is
//! never passed on.

mod common;

use common::{completion, Bench, COMPLETIONS};

const POOL: [(&str, f64); 3] = [("10.0.0.1:8000", 0.0), ("10.0.0.2:8000", 4.0), ("10.0.0.3:8000", 9.0)];

fn with_client_copy() -> Vec<(&'static str, &'static str)> {
    let mut headers = COMPLETIONS.to_vec();
    headers.push(("x-wasm-epp-decision", "pod=6.6.6.6:6666; reason=forged"));
    headers
}

#[test]
fn off_by_default_and_a_client_copy_is_removed() {
    let bench = Bench::new("{}");
    bench.publish(1, &POOL);
    let (mut stream, answer) = bench.request(&with_client_copy(), &completion("hello"));
    assert!(answer.destination.is_some());
    assert_eq!(bench.host.header("x-wasm-epp-decision"), None, "the client's copy reached the pod");
    bench.host.set_response(&[(":status", "200")], b"");
    stream.on_response_headers(&bench.host, false);
    assert_eq!(bench.host.response_header("x-wasm-epp-decision"), None, "on without being asked");
}

#[test]
fn when_on_the_response_names_the_pod_the_reason_and_every_candidate() {
    let bench = Bench::new(r#"{"debug_decision_header": true}"#);
    bench.publish(1, &POOL);
    let (mut stream, answer) = bench.request(&with_client_copy(), &completion("hello"));
    assert_eq!(bench.host.header("x-wasm-epp-decision"), None, "the client's copy reached the pod");
    bench.host.set_response(&[(":status", "200")], b"");
    stream.on_response_headers(&bench.host, false);
    let value = bench.host.response_header("x-wasm-epp-decision").unwrap();
    let chosen = answer.destination.unwrap().split(',').next().unwrap().to_string();
    assert!(value.starts_with(&format!("pod={chosen}; reason=load; prefix=0.000; candidates=")), "{value}");
    for (pod, _) in POOL {
        assert!(value.contains(&format!("{pod}=")), "{pod} missing from {value}");
    }
    assert!(!value.contains("6.6.6.6"), "{value}");
    // What the decision saw: nothing in flight anywhere yet (the request itself counts after).
    let (_, inflight) = value.split_once("; inflight=").unwrap_or_else(|| panic!("no in-flight counts: {value}"));
    let (inflight, decider) = inflight.split_once("; ").unwrap_or((inflight, ""));
    // Which worker decided, and when (to order two workers' decisions of one millisecond).
    assert!(decider.starts_with("worker=") && decider.contains("; decided_us="), "{value}");
    for (pod, _) in POOL {
        assert!(inflight.split(',').any(|p| p == format!("{pod}=0")), "{pod} in {value}");
    }
}

#[test]
fn with_learning_on_the_header_gives_each_candidates_predicted_ttft() {
    let bench = Bench::new(r#"{"debug_decision_header": true, "learning": {"enabled": true}}"#);
    bench.publish(1, &POOL);
    let (mut stream, _) = bench.request(&COMPLETIONS, &completion("hello"));
    bench.host.set_response(&[(":status", "200")], b"");
    stream.on_response_headers(&bench.host, false);
    let value = bench.host.response_header("x-wasm-epp-decision").unwrap();
    let (_, predicted) = value.split_once("; predicted_ttft_ms=").unwrap_or_else(|| panic!("no predictions: {value}"));
    let predicted = predicted.split("; ").next().unwrap_or_default();
    for (pod, _) in POOL {
        let ms = predicted.split(',').find_map(|p| p.strip_prefix(&format!("{pod}=")));
        assert!(ms.and_then(|ms| ms.parse::<f64>().ok()).is_some_and(|ms| ms > 0.0), "{pod} in {value}");
    }
}
