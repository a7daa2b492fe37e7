//! Flow control's saturation gauges follow the pool back to idle: set while requests wait,
//! and then on each tick until they read 0, not left at the last busy moment (found by the
//! e2e chaos test: `wasm_epp_flow_pod_saturated` and `_pool_saturated` read 1 on an idle
//! pool, with nothing in flight, for as long as nothing waited again).

mod common;

use common::{completion, Bench, COMPLETIONS};
use wasm_epp_router::{RequestStream, Step};

const ONE_POD: [(&str, f64); 1] = [("10.0.0.1:8000", 0.0)];
const CONFIG: &str =
    r#"{"fallback_destinations": 0, "flow_control": {"enabled": true, "max_inflight_per_pod": 1, "ttl_ms": 1000}}"#;
const POOL_SATURATED: &str = "wasm_epp.flow.pool_saturated";
const POD_SATURATED: &str = "wasm_epp.flow.pod_saturated.pod.10_0_0_1_8000";

fn send(bench: &Bench, id: u32, prompt: &str) -> (RequestStream, Step) {
    let body = completion(prompt);
    bench.host.set_request(&COMPLETIONS, body.as_bytes());
    let mut stream = RequestStream::for_context(bench.worker.clone(), id);
    assert_eq!(stream.on_request_headers(&bench.host, false), Step::Pause);
    let step = stream.on_request_body(&bench.host, body.len(), true);
    (stream, step)
}

/// A gauge's value as this worker last set it.
fn gauge(bench: &Bench, name: &str) -> u64 {
    bench.worker.stats.metrics.pending(name)
}

#[test]
fn the_saturation_gauges_read_0_again_once_the_pool_is_idle() {
    let bench = Bench::new(CONFIG);
    bench.publish(1, &ONE_POD);
    let (mut first, step) = send(&bench, 1, "first");
    assert_eq!(step, Step::Continue);
    let (mut second, step) = send(&bench, 2, "second");
    assert_eq!(step, Step::Pause, "the pod's one place is taken: held");
    bench.tick();
    assert_eq!((gauge(&bench, POOL_SATURATED), gauge(&bench, POD_SATURATED)), (1, 1), "a request waits, no room");

    first.on_log(&bench.host);
    assert_eq!(std::mem::take(&mut *bench.host.resumed.borrow_mut()), [2], "released into the freed place");
    // The queue is empty; the released request holds the pod's place: still no room.
    bench.later(5);
    bench.tick();
    assert_eq!(gauge(&bench, POOL_SATURATED), 1);

    second.on_log(&bench.host);
    for _ in 0..3 {
        bench.later(20);
        bench.tick();
    }
    assert_eq!(bench.worker.inflight.borrow().count("10.0.0.1:8000"), 0, "nothing in flight");
    assert_eq!(
        (gauge(&bench, POOL_SATURATED), gauge(&bench, POD_SATURATED)),
        (0, 0),
        "an idle pool shows room again, though nothing waited since"
    );
}

/// A request's pick, and whether the request was held.
fn pick(bench: &Bench, stream_step: Step) -> Option<String> {
    (stream_step == Step::Continue).then(|| bench.host.header("x-gateway-destination-endpoint").unwrap_or_default())
}

/// Ends `stream` as answered by `pod` with `status`.
fn answer(bench: &Bench, stream: &mut RequestStream, pod: &str, status: &str) {
    bench.host.set_response(&[(":status", status), ("x-gateway-destination-endpoint-served", pod)], b"");
    stream.on_response_headers(&bench.host, false);
    stream.on_log(&bench.host);
}

#[test]
fn a_pod_left_out_for_failing_reads_saturated_until_it_is_back_then_0() {
    let config = r#"{"fallback_destinations": 0,
        "outlier_detection": {"consecutive_failures": 1, "base_ejection_ms": 1000},
        "flow_control": {"enabled": true, "max_inflight_per_pod": 1, "ttl_ms": 5000}}"#;
    let pods = [("10.0.0.1:8000", 0.0), ("10.0.0.2:8000", 0.0)];
    let bench = Bench::new(config);
    bench.publish(1, &pods);
    let (mut first, step) = send(&bench, 1, "first");
    let first_pod = pick(&bench, step).unwrap();
    let (mut second, step) = send(&bench, 2, "second");
    let second_pod = pick(&bench, step).unwrap();
    assert_ne!(first_pod, second_pod, "one place each");
    let (mut third, step) = send(&bench, 3, "third");
    assert_eq!(step, Step::Pause);
    bench.tick();
    let failing = format!("wasm_epp.flow.pod_saturated.pod.{}", second_pod.replace(['.', ':'], "_"));
    assert_eq!(gauge(&bench, &failing), 1, "at its bound");

    // The second pod fails its request: out of rotation, its freed place is no room.
    answer(&bench, &mut second, &second_pod, "500");
    assert_eq!(bench.stat(&format!("wasm_epp.pod_ejections.pod.{second_pod}")), 1);
    bench.tick();
    assert_eq!(gauge(&bench, &failing), 1, "ejected: nothing is released to it");
    answer(&bench, &mut first, &first_pod, "200");
    bench.host.resumed.borrow_mut().clear();
    answer(&bench, &mut third, &first_pod, "200");
    bench.later(5);
    bench.tick();
    assert_eq!(gauge(&bench, &failing), 1, "still ejected");

    // Its ejection ends: the pool is idle, and both pods read room.
    bench.host.advance(1_001);
    bench.publish(2, &pods);
    for _ in 0..3 {
        bench.later(20);
        bench.tick();
    }
    let other = format!("wasm_epp.flow.pod_saturated.pod.{}", first_pod.replace(['.', ':'], "_"));
    assert_eq!((gauge(&bench, &failing), gauge(&bench, &other), gauge(&bench, POOL_SATURATED)), (0, 0, 0));
}
