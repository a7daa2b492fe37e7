//! In a pool of several models, a model whose pods are all failing (down in the pool
//! service's eyes, or out of rotation for failing requests) is routed to them anyway, as the
//! decision does when no other pod of its model is left: flow control counts them as its
//! room, as it does for a pool of one model, rather than hold its requests until their TTL.

// A failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use common::{model_completion, publish_models, Bench, COMPLETIONS};
use picker::address::PodAddress;
use picker::keys;
use picker::pod_table::{encode_version, PodState, PodTable};
use wasm_epp_host::{Host, SharedStore};
use wasm_epp_router::{RequestStream, Step};

const QWEN: &str = "10.0.0.1:8000";
const LLAMA: &str = "10.0.0.2:8000";
const SERVED: &str = "x-gateway-destination-endpoint-served";

fn config(extra: &str) -> String {
    format!(
        r#"{{"fallback_destinations": 0, "flow_control": {{"enabled": true, "max_inflight_per_pod": 1, "ttl_ms": 1000}}
            {extra}}}"#
    )
}

fn send(bench: &Bench, id: u32, model: &str) -> (RequestStream, Step) {
    bench.send_as(&bench.worker, id, &COMPLETIONS, &model_completion(model, id, 1))
}

/// Ends `stream` answered `status` by `pod`; the requests its end released.
fn end(bench: &Bench, stream: &mut RequestStream, pod: &str, status: &str) -> Vec<u32> {
    bench.host.set_response(&[(":status", status), (SERVED, pod)], b"");
    stream.on_response_headers(&bench.host, false);
    stream.on_log(&bench.host);
    bench.resumed()
}

#[test]
fn a_model_whose_only_pod_is_down_is_routed_to_it_within_its_bound_while_another_models_pod_is_up() {
    let bench = Bench::new(&config(""));
    let now = bench.host.now_ms();
    let mut table = PodTable { version: 1, published_at_ms: now, poll_interval_ms: 100, ..PodTable::default() };
    for (address, model, healthy) in [(QWEN, "qwen", false), (LLAMA, "llama", true)] {
        let mut pod = PodState::unknown(&PodAddress::parse(address).unwrap());
        pod.healthy = healthy;
        pod.last_success_ms = now;
        pod.models = vec![model.to_owned()];
        table.pods.push(pod);
    }
    bench.host.set(keys::POD_TABLE, &table.encode(), None).unwrap();
    bench.host.set(keys::POD_TABLE_VERSION, &encode_version(1), None).unwrap();
    bench.heartbeat();

    // The decision fails open to qwen's pod, its only one (as in a pool of qwen alone).
    let (mut first, step) = send(&bench, 1, "qwen");
    assert_eq!((step, bench.destination().as_deref()), (Step::Continue, Some(QWEN)), "routed, not held to its TTL");
    // Its in-flight bound still holds.
    let (_second, step) = send(&bench, 2, "qwen");
    assert_eq!(step, Step::Pause);
    assert_eq!(end(&bench, &mut first, QWEN, "200"), [2], "its place frees: the next goes");
    assert_eq!(bench.destination().as_deref(), Some(QWEN));
}

#[test]
fn a_model_whose_only_pod_is_out_of_rotation_is_routed_to_it_within_its_bound() {
    let bench = Bench::new(&config(r#", "outlier_detection": {"consecutive_failures": 3, "base_ejection_ms": 60000}"#));
    publish_models(&bench, &[(QWEN, "qwen", &[], 0.0), (LLAMA, "llama", &[], 0.0)]);
    for id in 1..=3 {
        let (mut failing, step) = send(&bench, id, "qwen");
        assert_eq!((step, bench.destination().as_deref()), (Step::Continue, Some(QWEN)));
        end(&bench, &mut failing, QWEN, "500");
    }
    assert_eq!(bench.stat(&format!("wasm_epp.pod_ejections.pod.{QWEN}")), 1);

    // Out of rotation, but the only pod of its model: the decision sends it there anyway.
    let (mut next, step) = send(&bench, 10, "qwen");
    assert_eq!((step, bench.destination().as_deref()), (Step::Continue, Some(QWEN)), "routed, not held to its TTL");
    let (_after, step) = send(&bench, 11, "qwen");
    assert_eq!(step, Step::Pause, "within its bound");
    assert_eq!(end(&bench, &mut next, QWEN, "200"), [11]);
    assert_eq!(bench.destination().as_deref(), Some(QWEN));
}
