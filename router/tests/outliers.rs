//! Outlier detection through the whole request path of one worker on a `MockHost`: a pod
//! whose metrics say idle but which fails every request is passed over once it has failed
//! enough in a row, comes back on probation, and a pool that fails everything still routes;
//! the other workers of the Envoy take over its ejection.

// Helpers outside #[test] functions read replies: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use std::rc::Rc;

use common::{completion, Bench, COMPLETIONS};
use wasm_epp_router::worker::Worker;

const THREE_PODS: [(&str, f64); 3] = [("10.0.0.1:8000", 0.0), ("10.0.0.2:8000", 2.0), ("10.0.0.3:8000", 2.0)];
const BROKEN: &str = "10.0.0.1:8000";
const SERVED: &str = "x-gateway-destination-endpoint-served";

const QUICK: &str = r#"{"outlier_detection": {"consecutive_failures": 3, "base_ejection_ms": 1000}}"#;

/// One request, answered as Envoy would after its retries: `broken` answers 500 and the
/// next choice in the header's list answers 200 (or 500 too when every choice is broken).
/// Returns the pick and the pod that answered.
fn request(bench: &Bench, prompt: &str, broken: &[&str]) -> (String, String) {
    request_on(bench, &bench.worker, prompt, broken)
}

/// [`request`] on `worker`.
fn request_on(bench: &Bench, worker: &Rc<Worker>, prompt: &str, broken: &[&str]) -> (String, String) {
    let (mut stream, answer) = bench.request_on(worker, &COMPLETIONS, &completion(prompt));
    let choices: Vec<String> = answer.destination.unwrap().split(',').map(str::to_owned).collect();
    let served = choices.iter().find(|c| !broken.contains(&c.as_str())).unwrap_or(choices.last().unwrap()).clone();
    let status = if broken.contains(&served.as_str()) { "500" } else { "200" };
    bench.host.set_response(&[(":status", status), (SERVED, &served)], b"");
    stream.on_response_headers(&bench.host, false);
    stream.on_log(&bench.host);
    (choices[0].clone(), served)
}

#[test]
fn an_idle_looking_pod_that_fails_every_request_is_passed_over_then_tried_again() {
    let bench = Bench::new(QUICK);
    bench.publish(1, &THREE_PODS);
    // It reports the emptiest queue: by load it is every request's first choice.
    let picks: Vec<String> = (0..3).map(|i| request(&bench, &format!("p{i}"), &[BROKEN]).0).collect();
    assert_eq!(picks, [BROKEN; 3], "each of them saved by Envoy's retry on the next choice");
    assert_eq!(bench.stat("wasm_epp.pod_attempts_failed"), 3);
    assert_eq!(bench.stat(&format!("wasm_epp.pod_ejections.pod.{BROKEN}")), 1);
    for i in 0..20 {
        let (pick, _) = request(&bench, &format!("q{i}"), &[BROKEN]);
        assert_ne!(pick, BROKEN, "request {i}: out of rotation");
        // Its list is one short, but any pod may serve it: a last try past the list is
        // Envoy's balancer's, as before.
        assert_eq!(bench.host.header("x-envoy-max-retries"), None, "request {i}: the route's retries");
    }
    // Its time is up: one try; it still fails, so it is out again, for twice as long.
    bench.host.advance(1_001);
    bench.publish(2, &THREE_PODS);
    assert_eq!(request(&bench, "probe", &[BROKEN]).0, BROKEN);
    assert_eq!(bench.stat(&format!("wasm_epp.pod_ejections.pod.{BROKEN}")), 2);
    bench.host.advance(1_500);
    bench.publish(3, &THREE_PODS);
    assert_ne!(request(&bench, "still out", &[BROKEN]).0, BROKEN, "2 s this time");
    // Mended: back after its time, and a success clears its record.
    bench.host.advance(600);
    bench.publish(4, &THREE_PODS);
    assert_eq!(request(&bench, "mended", &[]), (BROKEN.to_owned(), BROKEN.to_owned()));
    assert_eq!(request(&bench, "mended again", &[]).0, BROKEN);
    assert_eq!(bench.stat("wasm_epp.pod_attempts_failed"), 4);
}

#[test]
fn a_pool_failing_everything_still_routes_every_request() {
    let bench = Bench::new(QUICK);
    bench.publish(1, &THREE_PODS);
    let all: Vec<&str> = THREE_PODS.iter().map(|(a, _)| *a).collect();
    for i in 0..30 {
        let (mut stream, answer) = bench.request(&COMPLETIONS, &completion(&format!("r{i}")));
        assert!(answer.destination.is_some(), "request {i} routed");
        assert_eq!(answer.reply, None, "never answered by the gateway");
        bench.host.set_response(&[(":status", "503"), (SERVED, all[i % 3])], b"");
        stream.on_response_headers(&bench.host, false);
        stream.on_log(&bench.host);
    }
    assert!(bench.stat("wasm_epp.pod_attempts_failed") >= 30);
}

#[test]
fn a_retried_success_counts_against_the_pick_only() {
    let bench = Bench::new(QUICK);
    bench.publish(1, &THREE_PODS);
    // The pick's attempt failed (a reset, a connection refused: no status of its own), the
    // retry on the next choice answered 200.
    for i in 0..3 {
        let (mut stream, answer) = bench.request(&COMPLETIONS, &completion(&format!("r{i}")));
        let choices: Vec<String> = answer.destination.unwrap().split(',').map(str::to_owned).collect();
        assert_eq!(choices[0], BROKEN);
        bench.host.set_response(&[(":status", "200"), (SERVED, &choices[1])], b"");
        stream.on_response_headers(&bench.host, false);
        stream.on_log(&bench.host);
    }
    assert_eq!(bench.stat(&format!("wasm_epp.pod_ejections.pod.{BROKEN}")), 1);
    assert_eq!(bench.stat("wasm_epp.pod_attempts_failed"), 3);
}

#[test]
fn off_it_never_passes_a_pod_over() {
    let bench = Bench::new(r#"{"outlier_detection": {"enabled": false}}"#);
    bench.publish(1, &THREE_PODS);
    for i in 0..10 {
        assert_eq!(request(&bench, &format!("p{i}"), &[BROKEN]).0, BROKEN);
    }
    assert_eq!(bench.stat("wasm_epp.pod_attempts_failed"), 0);
}

#[test]
fn a_local_reply_with_a_5xx_counts_against_the_pick() {
    let bench = Bench::new(QUICK);
    bench.publish(1, &THREE_PODS);
    for i in 0..3 {
        let (mut stream, _) = bench.request(&COMPLETIONS, &completion(&format!("r{i}")));
        // Every attempt failed to connect: Envoy's own 503, no pod named.
        bench.host.set_response(&[(":status", "503")], b"");
        stream.on_response_headers(&bench.host, false);
        stream.on_log(&bench.host);
    }
    assert_eq!(bench.stat(&format!("wasm_epp.pod_ejections.pod.{BROKEN}")), 1);
}

#[test]
fn the_decision_header_names_the_pods_passed_over() {
    let bench = Bench::new(
        r#"{"debug_decision_header": true, "outlier_detection": {"consecutive_failures": 2, "base_ejection_ms": 1000}}"#,
    );
    bench.publish(1, &THREE_PODS);
    request(&bench, "a", &[BROKEN]);
    let before = bench.host.response_header("x-wasm-epp-decision").unwrap();
    assert!(!before.contains("ejected="), "{before}");
    request(&bench, "b", &[BROKEN]);
    request(&bench, "c", &[BROKEN]);
    let after = bench.host.response_header("x-wasm-epp-decision").unwrap();
    assert!(after.ends_with(&format!("; ejected={BROKEN}")), "{after}");
}

#[test]
fn a_request_released_by_flow_control_is_judged_by_its_own_list() {
    let bench = Bench::new(
        r#"{"flow_control": {"enabled": true, "max_inflight_per_pod": 1, "ttl_ms": 1000},
            "outlier_detection": {"consecutive_failures": 1, "base_ejection_ms": 1000}}"#,
    );
    bench.publish(1, &[("10.0.0.1:8000", 0.0), ("10.0.0.2:8000", 0.0)]);
    let open = |id: u32, prompt: &str| {
        let body = completion(prompt);
        bench.host.set_request(&COMPLETIONS, body.as_bytes());
        let mut stream = wasm_epp_router::RequestStream::for_context(bench.worker.clone(), id);
        stream.on_request_headers(&bench.host, false);
        let step = stream.on_request_body(&bench.host, body.len(), true);
        (stream, step)
    };
    let (_first, _) = open(1, "one");
    let (mut second, _) = open(2, "two");
    let (mut held, step) = open(3, "three");
    assert_eq!(step, wasm_epp_router::Step::Pause, "both pods full: held");
    second.on_log(&bench.host);
    let list = bench.host.header("x-gateway-destination-endpoint").unwrap();
    let pick = list.split(',').next().unwrap().to_owned();
    assert_eq!(bench.stat("wasm_epp.pod_attempts_failed"), 0);
    bench.host.set_response(&[(":status", "502"), (SERVED, &pick)], b"");
    held.on_response_headers(&bench.host, false);
    assert_eq!(bench.stat("wasm_epp.pod_attempts_failed"), 1, "judged by the list written at its release");
    assert_eq!(bench.stat(&format!("wasm_epp.pod_ejections.pod.{pick}")), 1);
    held.on_log(&bench.host);
}

#[test]
fn a_pod_that_failed_is_no_retry_target_so_three_broken_pods_fail_one_request_not_many() {
    let bench = Bench::new(QUICK);
    let broken = ["10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"];
    // The broken pods look idle, the healthy one busy: by load the broken lead every list.
    bench.publish(1, &[(broken[0], 0.0), (broken[1], 0.0), (broken[2], 0.0), ("10.0.0.4:8000", 3.0)]);
    let mut failed = 0;
    for i in 0..20 {
        let (_, served) = request(&bench, &format!("r{i}"), &broken);
        failed += usize::from(broken.contains(&served.as_str()));
    }
    // The first request meets three untried pods; after it, a pod that has failed is tried
    // as a pick at most, and its retry goes to a pod not known to fail.
    assert_eq!(failed, 1, "requests answered by a broken pod");
    for pod in broken {
        assert_eq!(bench.stat(&format!("wasm_epp.pod_ejections.pod.{pod}")), 1, "{pod} ejected");
    }
}

#[test]
fn a_pod_one_worker_ejected_is_passed_over_by_the_other_after_a_tick() {
    let bench = Bench::new(QUICK);
    bench.publish(1, &THREE_PODS);
    let other = bench.another_worker(8);
    let tick_both = || bench.tick_with(&other);
    tick_both();
    for i in 0..3 {
        request(&bench, &format!("p{i}"), &[BROKEN]);
    }
    assert_eq!(bench.stat(&format!("wasm_epp.pod_ejections.pod.{BROKEN}")), 1);
    assert_eq!(request_on(&bench, &other, "before", &[BROKEN]).0, BROKEN, "not heard of it yet");
    tick_both();
    bench.host.advance(wasm_epp_router::outliers_share::READ_EVERY_MS);
    tick_both();
    for i in 0..10 {
        assert_ne!(request_on(&bench, &other, &format!("q{i}"), &[BROKEN]).0, BROKEN, "request {i}");
    }
    // Both workers' counts (the host's metric holds what each flushed).
    let adopted =
        || bench.stat("wasm_epp.pod_ejections_adopted") + other.stats.metrics.pending("wasm_epp.pod_ejections_adopted");
    assert_eq!(adopted(), 1, "the other worker took it over; its maker, reading it back, did not");
    // Its time is up on both: the other worker's one try on probation fails and ejects it
    // again there, for twice as long, and the first worker takes that over.
    bench.host.advance(1_001);
    bench.publish(2, &THREE_PODS);
    tick_both();
    assert_eq!(request_on(&bench, &other, "probe", &[BROKEN]).0, BROKEN);
    bench.host.advance(wasm_epp_router::outliers_share::READ_EVERY_MS);
    tick_both();
    bench.host.advance(1_500);
    bench.publish(3, &THREE_PODS);
    tick_both();
    assert_ne!(request(&bench, "still out", &[BROKEN]).0, BROKEN, "2 s this time, on both");
    assert_eq!(adopted(), 2);
    assert_eq!(bench.stat(&format!("wasm_epp.pod_ejections.pod.{BROKEN}")), 2, "one ejection by each worker");
}

#[test]
fn when_every_other_pod_has_failed_too_they_are_still_the_retries() {
    // A pool failing now and then: each pod failed once (suspects, none ejected). Past the
    // filter's list Envoy would retry on a balancer that knows no models: the list keeps its
    // length, suspects last, and a pod not known to fail ahead of them.
    let bench = Bench::new(QUICK);
    bench.publish(1, &THREE_PODS);
    let all: Vec<&str> = THREE_PODS.iter().map(|(pod, _)| *pod).collect();
    let broken_once = |prompt: &str| request(&bench, prompt, &all);
    broken_once("a");
    let (mut stream, answer) = bench.request(&COMPLETIONS, &completion("b"));
    let list = answer.destination.unwrap();
    assert_eq!(list.split(',').count(), 3, "every pod failed its attempt once, all still named: {list}");
    bench.host.set_response(&[(":status", "200"), (SERVED, list.split(',').next().unwrap())], b"");
    stream.on_response_headers(&bench.host, false);
    stream.on_log(&bench.host);
}

#[test]
fn a_failing_pod_that_leaves_the_pool_leaves_no_record() {
    let bench = Bench::new(QUICK);
    bench.publish(1, &THREE_PODS);
    bench.tick();
    request(&bench, "fails", &[BROKEN]);
    assert_eq!(bench.worker.outliers.borrow().suspects(), 1, "{BROKEN} failed once");
    // Replaced, as a broken pod usually is: it would stay a suspect for good, and every
    // decision would ask for one more runner-up. Kept for a return within the grace (a pod
    // NotReady for a moment is the same engine), forgotten once it has been gone longer.
    bench.publish(2, &THREE_PODS[1..]);
    bench.tick();
    assert_eq!(bench.worker.outliers.borrow().suspects(), 1, "kept while it may come back");
    bench.host.advance(picker::departed::GRACE_MS + 1);
    bench.tick();
    assert_eq!(bench.worker.outliers.borrow().suspects(), 0);
    assert!(bench.worker.outliers.borrow().is_clear(), "nothing left of it");
}

#[test]
fn a_request_retried_on_a_fallback_counts_in_flight_there_until_its_end() {
    let bench = Bench::new(QUICK);
    bench.publish(1, &THREE_PODS);
    let (mut stream, answer) = bench.request(&COMPLETIONS, &completion("retried"));
    let choices: Vec<String> = answer.destination.unwrap().split(',').map(str::to_owned).collect();
    let (pick, fallback) = (&choices[0], &choices[1]);
    let count = |pod: &str| bench.worker.inflight.borrow().count(pod);
    assert_eq!((count(pick), count(fallback)), (1, 0));
    // The pick failed; Envoy's retry on the next address answers, and streams for a while.
    bench.host.set_response(&[(":status", "200"), (SERVED, fallback)], b"");
    stream.on_response_headers(&bench.host, false);
    assert_eq!((count(pick), count(fallback)), (0, 1), "the pod serving it is busy, the failed pick is not");
    stream.on_log(&bench.host);
    assert_eq!((count(pick), count(fallback)), (0, 0), "released where it was counted");
    // An answer from the pick itself leaves the count where it was.
    let (mut stream, answer) = bench.request(&COMPLETIONS, &completion("not retried"));
    let pick = answer.destination.unwrap().split(',').next().unwrap().to_owned();
    bench.host.set_response(&[(":status", "200"), (SERVED, &pick)], b"");
    stream.on_response_headers(&bench.host, false);
    assert_eq!(count(&pick), 1);
    stream.on_log(&bench.host);
    assert_eq!(count(&pick), 0);
}

/// Envoy's `response.flags` as the host serializes it (a 64-bit integer, little-endian).
fn set_response_flags(bench: &Bench, flags: u64) {
    bench.host.properties.borrow_mut().insert("response\0flags".to_owned(), flags.to_le_bytes().to_vec());
}

/// A request the pick answers 200, whose stream then ends with `flags` before its last byte.
fn cut_answer(bench: &Bench, prompt: &str, flags: u64) -> String {
    cut_answer_after(bench, prompt, flags, 20)
}

/// [`cut_answer`] once `passed` bytes of the answer went to the client.
fn cut_answer_after(bench: &Bench, prompt: &str, flags: u64, passed: usize) -> String {
    let (mut stream, answer) = bench.request(&COMPLETIONS, &completion(prompt));
    let pick = answer.destination.unwrap().split(',').next().unwrap().to_owned();
    bench.host.set_response(&[(":status", "200"), (SERVED, &pick)], b"");
    stream.on_response_headers(&bench.host, false);
    bench.host.set_response(&[(":status", "200")], b"data: {\"choices\":[]}\n\n");
    stream.on_response_body(&bench.host, passed, false);
    set_response_flags(bench, flags);
    stream.on_log(&bench.host);
    bench.host.properties.borrow_mut().remove("response\0flags");
    pick
}

#[test]
fn a_pod_that_answers_its_headers_then_cuts_every_stream_is_passed_over() {
    const UPSTREAM_RESET: u64 = 0x10;
    const CLIENT_GONE: u64 = 0x4000;
    let bench = Bench::new(QUICK);
    bench.publish(1, &THREE_PODS);
    // A client that leaves mid-stream says nothing of the pod (Envoy resets the upstream too).
    for i in 0..5 {
        assert_eq!(cut_answer(&bench, &format!("gone{i}"), CLIENT_GONE | UPSTREAM_RESET), BROKEN);
    }
    assert_eq!(bench.stat("wasm_epp.answers_cut"), 0);
    // The idle-looking pod sends 200 and its first chunk, then resets: three in a row eject it.
    for i in 0..3 {
        assert_eq!(cut_answer(&bench, &format!("cut{i}"), UPSTREAM_RESET), BROKEN, "request {i}");
    }
    assert_eq!(bench.stat("wasm_epp.answers_cut"), 3);
    assert_eq!(bench.stat(&format!("wasm_epp.pod_ejections.pod.{BROKEN}")), 1);
    assert_ne!(cut_answer(&bench, "after", 0), BROKEN, "out of rotation");
}

#[test]
fn a_pod_whose_answers_stall_until_the_stream_idle_timeout_is_passed_over() {
    // A hung engine: 200 and a first chunk, then silence until Envoy's stream idle timeout
    // ends the stream (flags SI) and resets the pod's connection. Judged a success, each such
    // answer cleared the pod's record.
    const STREAM_IDLE_TIMEOUT: u64 = 0x1_0000;
    const CLIENT_GONE: u64 = 0x4000;
    let bench = Bench::new(QUICK);
    bench.publish(1, &THREE_PODS);
    // A client that left while the answer was idle says nothing of the pod.
    for i in 0..5 {
        assert_eq!(cut_answer(&bench, &format!("gone{i}"), CLIENT_GONE | STREAM_IDLE_TIMEOUT), BROKEN);
    }
    assert_eq!(bench.stat("wasm_epp.answers_cut"), 0);
    for i in 0..3 {
        assert_eq!(cut_answer(&bench, &format!("stalled{i}"), STREAM_IDLE_TIMEOUT), BROKEN, "request {i}");
    }
    assert_eq!(bench.stat("wasm_epp.answers_cut"), 3);
    assert_eq!(bench.stat(&format!("wasm_epp.pod_ejections.pod.{BROKEN}")), 1);
    assert_ne!(cut_answer(&bench, "after", 0), BROKEN, "out of rotation");
}

#[test]
fn an_idle_timeout_after_a_long_answer_is_no_verdict_on_the_pod() {
    // Past a mebibyte of answer, Envoy may have stopped reading from the pod because its
    // client stopped reading: the idle timeout is then the client's doing as much as the pod's.
    // Neither a failure (a client could get healthy pods ejected so) nor a success (it would
    // clear a hung pod's record).
    const STREAM_IDLE_TIMEOUT: u64 = 0x1_0000;
    const UPSTREAM_RESET: u64 = 0x10;
    let bench = Bench::new(QUICK);
    bench.publish(1, &THREE_PODS);
    for i in 0..5 {
        assert_eq!(cut_answer_after(&bench, &format!("long{i}"), STREAM_IDLE_TIMEOUT, 2 << 20), BROKEN);
    }
    assert_eq!(bench.stat("wasm_epp.answers_cut"), 0, "no failure");
    // Two cuts, an unclear end between them, a third cut: the record was not cleared.
    assert_eq!(cut_answer(&bench, "cut0", UPSTREAM_RESET), BROKEN);
    assert_eq!(cut_answer(&bench, "cut1", UPSTREAM_RESET), BROKEN);
    assert_eq!(cut_answer_after(&bench, "long", STREAM_IDLE_TIMEOUT, 2 << 20), BROKEN);
    assert_eq!(cut_answer(&bench, "cut2", UPSTREAM_RESET), BROKEN);
    assert_eq!(bench.stat(&format!("wasm_epp.pod_ejections.pod.{BROKEN}")), 1, "no success either");
}

/// A request the pick answers 200, then a chunk of `chunk_bytes` after each of `gaps_ms`
/// (the worker ticking meanwhile, as Envoy's does), then nothing for `silent_ms`, until the
/// route's `timeout` ends it (flags UT). The pool's table is republished fresh after it.
fn timed_out_answer(bench: &Bench, prompt: &str, gaps_ms: &[u64], chunk_bytes: usize, silent_ms: u64) -> String {
    const UPSTREAM_TIMEOUT: u64 = 0x4;
    let (mut stream, answer) = bench.request(&COMPLETIONS, &completion(prompt));
    let pick = answer.destination.unwrap().split(',').next().unwrap().to_owned();
    bench.host.set_response(&[(":status", "200"), (SERVED, &pick)], b"");
    stream.on_response_headers(&bench.host, false);
    bench.host.set_response(&[(":status", "200")], b"data: {\"choices\":[]}\n\n");
    for gap in gaps_ms {
        bench.later(*gap);
        bench.tick();
        stream.on_response_body(&bench.host, chunk_bytes, false);
    }
    bench.later(silent_ms);
    bench.tick();
    set_response_flags(bench, UPSTREAM_TIMEOUT);
    stream.on_log(&bench.host);
    bench.host.properties.borrow_mut().remove("response\0flags");
    // (Its metrics as fresh as the clock: picks go by load, as before.)
    bench.publish(bench.host.clock_ms.get(), &THREE_PODS);
    bench.tick();
    pick
}

#[test]
fn a_pod_silent_until_the_routes_timeout_is_passed_over_but_a_long_answer_is_not() {
    // As shipped, the route's 600 s `timeout` (UT) ends a hung pod's stream before its idle
    // timeout (SI) would. UT also ends answers too long for the route: a stream that kept
    // moving until then is no failure, even with pauses of half a minute.
    let bench = Bench::new(QUICK);
    bench.publish(1, &THREE_PODS);
    for i in 0..5 {
        assert_eq!(timed_out_answer(&bench, &format!("long{i}"), &[30_000; 20], 2_000, 10), BROKEN);
    }
    assert_eq!(bench.stat("wasm_epp.answers_cut"), 0, "a long answer is no failure");
    assert_eq!(bench.stat("wasm_epp.pod_attempts_failed"), 0);
    // Silent past a mebibyte of answer: a client that stopped reading may have stalled it.
    for i in 0..5 {
        assert_eq!(timed_out_answer(&bench, &format!("stalled{i}"), &[100], 2 << 20, 590_000), BROKEN);
    }
    assert_eq!(bench.stat("wasm_epp.answers_cut"), 0, "no verdict");
    // A hung engine: its first chunk, then silence until the route's timeout.
    for i in 0..3 {
        assert_eq!(timed_out_answer(&bench, &format!("hung{i}"), &[100], 20, 599_000), BROKEN, "request {i}");
    }
    assert_eq!(bench.stat("wasm_epp.answers_cut"), 3);
    assert_eq!(bench.stat("wasm_epp.pod_attempts_failed"), 3);
    assert_eq!(bench.stat(&format!("wasm_epp.pod_ejections.pod.{BROKEN}")), 1);
    assert_ne!(cut_answer(&bench, "after", 0), BROKEN, "out of rotation");
}

/// A streamed request (`headers`, `body`) the pick answers 200 with `chunks`, then ends
/// whole (`[DONE]` where the endpoint sends it). Returns the pick.
fn stream_answered(bench: &Bench, headers: &[(&str, &str)], body: &str, chunks: &[&[u8]]) -> String {
    let (mut stream, answer) = bench.request(headers, body);
    let pick = answer.destination.unwrap().split(',').next().unwrap().to_owned();
    bench.host.set_response(&[(":status", "200"), (SERVED, &pick)], b"");
    stream.on_response_headers(&bench.host, false);
    for chunk in chunks {
        bench.host.set_response(&[(":status", "200")], chunk);
        stream.on_response_body(&bench.host, chunk.len(), false);
    }
    stream.on_response_body(&bench.host, 0, true);
    stream.on_log(&bench.host);
    pick
}

/// A streamed completions request the pick answers 200 with `first_chunk`, then `[DONE]`.
fn streamed_answer(bench: &Bench, prompt: &str, first_chunk: &[u8]) -> String {
    let body = format!(r#"{{"model":"m","prompt":"{prompt}","stream":true}}"#);
    stream_answered(bench, &COMPLETIONS, &body, &[first_chunk, b"data: [DONE]\n\n"])
}

/// [`QUICK`]'s outlier detection, with `learning` (JSON fields after it) or without.
fn quick_with(learning: &str) -> Bench {
    let config =
        format!(r#"{{"outlier_detection": {{"consecutive_failures": 3, "base_ejection_ms": 1000}}{learning}}}"#);
    Bench::new(&config)
}

const SERVER_ERROR_EVENT: &[u8] = b"data: {\"error\": {\"message\": \"Internal server error\", \"type\": \"InternalServerError\", \"param\": null, \"code\": 500}}\n\n";
const CLIENT_ERROR_EVENT: &[u8] =
    b"data: {\"error\": {\"message\": \"bad\", \"type\": \"BadRequestError\", \"param\": null, \"code\": 400}}\n\n";
const FIRST_TOKEN: &[u8] =
    b"data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\" a\"}]}\n\n";

#[test]
fn a_pod_whose_streams_open_with_a_server_error_is_passed_over() {
    for learning in ["", r#", "learning": {"enabled": true}"#] {
        let bench = quick_with(learning);
        bench.publish(1, &THREE_PODS);
        // Streams that open with a token, or with the client's own error, are the pod's successes.
        for i in 0..4 {
            assert_eq!(streamed_answer(&bench, &format!("ok{i}"), FIRST_TOKEN), BROKEN);
            assert_eq!(streamed_answer(&bench, &format!("bad{i}"), CLIENT_ERROR_EVENT), BROKEN);
        }
        assert_eq!(bench.stat("wasm_epp.streams_failed"), 0, "{learning}");
        // The idle-looking pod answers 200, then its generation fails: three in a row eject it.
        for i in 0..3 {
            assert_eq!(streamed_answer(&bench, &format!("err{i}"), SERVER_ERROR_EVENT), BROKEN, "{learning} {i}");
        }
        assert_eq!(bench.stat("wasm_epp.streams_failed"), 3, "{learning}");
        assert_eq!(bench.stat("wasm_epp.pod_attempts_failed"), 3, "{learning}");
        assert_eq!(bench.stat(&format!("wasm_epp.pod_ejections.pod.{BROKEN}")), 1, "{learning}");
        assert_ne!(streamed_answer(&bench, "after", FIRST_TOKEN), BROKEN, "{learning}: out of rotation");
    }
}

/// vLLM reads `stream` as pydantic reads a flag (`"true"`, `1`, `"yes"` stream): so is such
/// a stream read for its opening error.
#[test]
fn a_stream_asked_for_in_pydantic_lax_form_is_read_for_its_error_event() {
    let bench = quick_with("");
    bench.publish(1, &THREE_PODS);
    for (i, flag) in [r#""true""#, "1", r#""yes""#].iter().enumerate() {
        let body = format!(r#"{{"model":"m","prompt":"lax{i}","stream":{flag}}}"#);
        let pick = stream_answered(&bench, &COMPLETIONS, &body, &[SERVER_ERROR_EVENT, b"data: [DONE]\n\n"]);
        assert_eq!(pick, BROKEN, "{flag}");
    }
    assert_eq!(bench.stat("wasm_epp.streams_failed"), 3);
    assert_eq!(bench.stat("wasm_epp.body_routed_by_model"), 0, "read whole, not for its model alone");
    assert_eq!(bench.stat(&format!("wasm_epp.pod_ejections.pod.{BROKEN}")), 1);
}

const CHAT: [(&str, &str); 3] =
    [(":method", "POST"), (":path", "/v1/chat/completions"), ("content-type", "application/json")];

/// vLLM's first chunk of a chat stream: the assistant's role, sent with the engine's first
/// output, before that output is read (and found to be an error).
const ROLE_CHUNK: &[u8] = b"data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n";

/// A streamed chat request of `n` choices the pick answers 200 with `chunks`, then `[DONE]`.
fn streamed_chat(bench: &Bench, prompt: &str, n: u32, chunks: &[&[u8]]) -> String {
    let body = format!(r#"{{"model":"m","messages":[{{"role":"user","content":"{prompt}"}}],"n":{n},"stream":true}}"#);
    let chunks: Vec<&[u8]> = chunks.iter().copied().chain([&b"data: [DONE]\n\n"[..]]).collect();
    stream_answered(bench, &CHAT, &body, &chunks)
}

#[test]
fn a_chat_stream_whose_error_follows_its_role_chunk_fails_the_pod() {
    let chat_token: &[u8] = b"data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" a\"}}]}\n\n";
    let roles_and_error = [ROLE_CHUNK, ROLE_CHUNK, SERVER_ERROR_EVENT].concat();
    for learning in ["", r#", "learning": {"enabled": true}"#] {
        let bench = quick_with(learning);
        bench.publish(1, &THREE_PODS);
        // Successes, and the client's own error, whether in the role's chunk or the next.
        for i in 0..4 {
            assert_eq!(streamed_chat(&bench, &format!("ok{i}"), 1, &[ROLE_CHUNK, chat_token]), BROKEN);
            let together = [ROLE_CHUNK, chat_token].concat();
            assert_eq!(streamed_chat(&bench, &format!("one{i}"), 1, &[&together]), BROKEN);
            assert_eq!(streamed_chat(&bench, &format!("bad{i}"), 1, &[ROLE_CHUNK, CLIENT_ERROR_EVENT]), BROKEN);
        }
        assert_eq!(bench.stat("wasm_epp.streams_failed"), 0, "{learning}");
        // vLLM sends the role's chunk, then the generation's error: in the next chunk, in
        // the same one, or after one role chunk per choice.
        assert_eq!(streamed_chat(&bench, "err0", 1, &[ROLE_CHUNK, SERVER_ERROR_EVENT]), BROKEN, "{learning}");
        let together = [ROLE_CHUNK, SERVER_ERROR_EVENT].concat();
        assert_eq!(streamed_chat(&bench, "err1", 1, &[&together]), BROKEN, "{learning}");
        assert_eq!(streamed_chat(&bench, "err2", 2, &[&roles_and_error]), BROKEN, "{learning}");
        assert_eq!(bench.stat("wasm_epp.streams_failed"), 3, "{learning}");
        assert_eq!(bench.stat(&format!("wasm_epp.pod_ejections.pod.{BROKEN}")), 1, "{learning}");
        assert_ne!(streamed_chat(&bench, "after", 1, &[ROLE_CHUNK, chat_token]), BROKEN, "{learning}");
    }
}

#[test]
fn a_messages_stream_whose_error_follows_its_message_start_fails_the_pod() {
    // vLLM makes its Messages stream of its chat stream: the role chunk becomes
    // `message_start`, and the generation's error, which follows it, an `error` event.
    let start: &[u8] = b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"chatcmpl-1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"m\"}}\n\n";
    let error: &[u8] = b"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"internal_error\",\"message\":\"Internal server error\"}}\n\n";
    let text: &[u8] = b"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n";
    let messages = [(":method", "POST"), (":path", "/v1/messages"), ("content-type", "application/json")];
    let bench = Bench::new(QUICK);
    bench.publish(1, &THREE_PODS);
    let stream = |prompt: &str, chunks: &[&[u8]]| {
        let body = format!(
            r#"{{"model":"m","max_tokens":4,"messages":[{{"role":"user","content":"{prompt}"}}],"stream":true}}"#
        );
        stream_answered(&bench, &messages, &body, chunks)
    };
    for i in 0..4 {
        assert_eq!(stream(&format!("ok{i}"), &[start, text]), BROKEN);
    }
    assert_eq!(bench.stat("wasm_epp.streams_failed"), 0);
    for i in 0..3 {
        assert_eq!(stream(&format!("err{i}"), &[start, error]), BROKEN, "{i}");
    }
    assert_eq!(bench.stat("wasm_epp.streams_failed"), 3);
    assert_ne!(stream("after", &[start, text]), BROKEN, "out of rotation");
}

#[test]
fn an_error_event_split_across_body_chunks_fails_the_pod() {
    // Envoy passes an answer on in the chunks it reads: vLLM's error event may come in two.
    let chat_token: &[u8] = b"data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" a\"}}]}\n\n";
    let error = SERVER_ERROR_EVENT;
    for learning in ["", r#", "learning": {"enabled": true}"#] {
        for cut in [2, 8, 20, 60, error.len() - 1] {
            let bench = quick_with(learning);
            bench.publish(1, &THREE_PODS);
            let body = format!(r#"{{"model":"m","prompt":"split{cut}","stream":true}}"#);
            let (head, tail) = error.split_at(cut);
            stream_answered(&bench, &COMPLETIONS, &body, &[head, tail, b"data: [DONE]\n\n"]);
            // A chat stream: the error after its role chunk, or the role chunk itself cut.
            let role_and_head = [ROLE_CHUNK, head].concat();
            streamed_chat(&bench, &format!("chat{cut}"), 1, &[&role_and_head, tail]);
            let (role_head, role_tail) = ROLE_CHUNK.split_at(cut);
            let role_tail_and_error = [role_tail, error].concat();
            streamed_chat(&bench, &format!("role{cut}"), 1, &[role_head, &role_tail_and_error]);
            assert_eq!(bench.stat("wasm_epp.streams_failed"), 3, "{learning} cut at {cut}");
            assert_eq!(bench.stat(&format!("wasm_epp.pod_ejections.pod.{BROKEN}")), 1, "{learning} {cut}");
        }
        // Successes and a client's error cut so are none of the pod's failures.
        let bench = quick_with(learning);
        bench.publish(1, &THREE_PODS);
        for cut in [2, 8, 20, 60] {
            let (head, tail) = CLIENT_ERROR_EVENT.split_at(cut);
            assert_eq!(streamed_chat(&bench, &format!("bad{cut}"), 1, &[ROLE_CHUNK, head, tail]), BROKEN);
            let (head, tail) = chat_token.split_at(cut);
            assert_eq!(streamed_chat(&bench, &format!("ok{cut}"), 1, &[ROLE_CHUNK, head, tail]), BROKEN);
            let (head, tail) = FIRST_TOKEN.split_at(cut);
            assert_eq!(stream_answered(&bench, &COMPLETIONS, &completion_stream(cut), &[head, tail]), BROKEN);
        }
        assert_eq!(bench.stat("wasm_epp.streams_failed"), 0, "{learning}");
        assert_eq!(bench.stat("wasm_epp.pod_attempts_failed"), 0, "{learning}");
    }
}

#[test]
fn a_chat_stream_opening_reads_alike_however_its_chunks_cut_it() {
    // The router's read of an opening (its first 64 bytes, then up to 4 KiB, the event a chunk
    // ends in kept for the next) at every cut of two role chunks and what follows, and byte by
    // byte: the fuzz target `usage_scan` checks `stream_error::read_opening` alone, unbounded.
    let token: &[u8] = b"data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" a\"}}]}\n\n";
    for learning in ["", r#", "learning": {"enabled": true}"#] {
        for (last, failed) in [(SERVER_ERROR_EVENT, 1), (CLIENT_ERROR_EVENT, 0), (token, 0)] {
            let whole = [ROLE_CHUNK, ROLE_CHUNK, last].concat();
            let byte_by_byte: Vec<&[u8]> = whole.chunks(1).collect();
            let cuts = (1..whole.len()).map(|cut| vec![&whole[..cut], &whole[cut..]]);
            for (i, chunks) in cuts.chain([byte_by_byte]).enumerate() {
                let bench = quick_with(learning);
                bench.publish(1, &THREE_PODS);
                streamed_chat(&bench, &format!("cut{i}"), 2, &chunks);
                let cut = chunks.first().map_or(0, |c| c.len());
                assert_eq!(bench.stat("wasm_epp.streams_failed"), failed, "{learning} cut at {cut}");
            }
        }
    }
}

/// A streamed completions request's body.
fn completion_stream(i: usize) -> String {
    format!(r#"{{"model":"m","prompt":"stream{i}","stream":true}}"#)
}

#[test]
fn an_opening_event_longer_than_the_bound_is_not_read_past_it() {
    // What is kept of an event cut between chunks is bounded: a first event of more than
    // ERROR_EVENT_BYTES (4 KiB) is not read to its end, so an error after it goes unseen.
    let bench = quick_with("");
    bench.publish(1, &THREE_PODS);
    let long_role = format!(
        "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"role\":\"assistant\",\"content\":\"{}\"}}}}]}}\n\n",
        "x".repeat(5000)
    );
    for i in 0..4 {
        let (head, tail) = long_role.as_bytes().split_at(3000);
        let tail_and_error = [tail, SERVER_ERROR_EVENT].concat();
        assert_eq!(streamed_chat(&bench, &format!("long{i}"), 1, &[head, &tail_and_error]), BROKEN);
        // An error event whose message runs past the bound is not judged the server's either.
        let long_error = format!(
            "data: {{\"error\": {{\"message\": \"{}\", \"type\": \"InternalServerError\", \"code\": 500}}}}\n\n",
            "x".repeat(5000)
        );
        let (head, tail) = long_error.as_bytes().split_at(3000);
        let body = format!(r#"{{"model":"m","prompt":"long error {i}","stream":true}}"#);
        assert_eq!(stream_answered(&bench, &COMPLETIONS, &body, &[head, tail]), BROKEN);
    }
    assert_eq!(bench.stat("wasm_epp.streams_failed"), 0);
}

/// A request on `headers` the pick answers 200 as `content_type` (none: no such header), whole.
/// Returns the pick.
fn answered_as(bench: &Bench, headers: &[(&str, &str)], body: &str, content_type: Option<&str>) -> String {
    let (mut stream, answer) = bench.request(headers, body);
    let pick = answer.destination.unwrap().split(',').next().unwrap().to_owned();
    let mut response = vec![(":status", "200"), (SERVED, pick.as_str())];
    response.extend(content_type.map(|value| ("content-type", value)));
    bench.host.set_response(&response, b"");
    stream.on_response_headers(&bench.host, false);
    bench.host.set_response(&response, b"{}");
    stream.on_response_body(&bench.host, 2, true);
    stream.on_log(&bench.host);
    pick
}

#[test]
fn a_pod_answering_200_with_a_page_no_openai_client_reads_is_passed_over() {
    // A pod, or a broken proxy before it, answering an HTML page with a 200 fails fast and
    // looks idle: counted a success, it drew the pool's requests.
    let bench = Bench::new(QUICK);
    bench.publish(1, &THREE_PODS);
    let answer = |prompt: &str, content_type| answered_as(&bench, &COMPLETIONS, &completion(prompt), content_type);
    for i in 0..4 {
        assert_eq!(answer(&format!("json{i}"), Some("application/json")), BROKEN);
        assert_eq!(answer(&format!("sse{i}"), Some("text/event-stream; charset=utf-8")), BROKEN);
        assert_eq!(answer(&format!("none{i}"), None), BROKEN, "no header: no evidence");
        // Other endpoints are not judged: a transcription's text formats answer text/plain.
        let transcription =
            [(":method", "POST"), (":path", "/v1/audio/transcriptions"), ("content-type", "application/json")];
        answered_as(&bench, &transcription, r#"{"model":"m"}"#, Some("text/plain; charset=utf-8"));
    }
    assert_eq!((bench.stat("wasm_epp.answers_foreign"), bench.stat("wasm_epp.pod_attempts_failed")), (0, 0));
    for i in 0..3 {
        assert_eq!(answer(&format!("html{i}"), Some("text/html; charset=utf-8")), BROKEN, "{i}");
    }
    assert_eq!(bench.stat("wasm_epp.answers_foreign"), 3);
    assert_eq!(bench.stat("wasm_epp.pod_attempts_failed"), 3);
    assert_eq!(bench.stat(&format!("wasm_epp.pod_ejections.pod.{BROKEN}")), 1);
    assert_ne!(answer("after", Some("application/json")), BROKEN, "out of rotation");
}

#[test]
fn a_cors_preflight_answered_as_text_is_no_failure_of_the_pod() {
    // vLLM's CORS middleware (Starlette's) answers a browser's preflight itself, on any path:
    // `200`, `text/plain`, "OK". The content type says nothing of an inference answer there:
    // counted failures, a browser client's preflights ejected the pods it reached.
    let bench = Bench::new(QUICK);
    bench.publish(1, &THREE_PODS);
    let preflight = [
        (":method", "OPTIONS"),
        (":path", "/v1/chat/completions"),
        ("origin", "https://chat.example"),
        ("access-control-request-method", "POST"),
    ];
    for _ in 0..6 {
        answered_as(&bench, &preflight, "", Some("text/plain; charset=utf-8"));
    }
    assert_eq!((bench.stat("wasm_epp.answers_foreign"), bench.stat("wasm_epp.pod_attempts_failed")), (0, 0));
    assert_eq!(bench.stat(&format!("wasm_epp.pod_ejections.pod.{BROKEN}")), 0);
}

#[test]
fn a_whole_answer_is_not_read_for_an_error_event() {
    let bench = Bench::new(QUICK);
    bench.publish(1, &THREE_PODS);
    for i in 0..4 {
        let (mut stream, answer) = bench.request(&COMPLETIONS, &completion(&format!("whole{i}")));
        let pick = answer.destination.unwrap().split(',').next().unwrap().to_owned();
        bench.host.set_response(&[(":status", "200"), (SERVED, &pick)], b"");
        stream.on_response_headers(&bench.host, false);
        // Not a stream: vLLM gives a whole answer's errors a status, so its body is not read.
        bench.host.set_response(&[(":status", "200")], SERVER_ERROR_EVENT);
        stream.on_response_body(&bench.host, SERVER_ERROR_EVENT.len(), true);
        stream.on_log(&bench.host);
    }
    assert_eq!(bench.stat("wasm_epp.streams_failed"), 0);
    assert_eq!(bench.stat("wasm_epp.pod_attempts_failed"), 0);
}

#[test]
fn a_long_stream_that_ends_well_does_not_clear_failures_noted_since_it_began() {
    let bench = Bench::new(QUICK);
    // The others much busier: the broken pod stays every request's pick with a stream on it.
    bench.publish(1, &[(BROKEN, 0.0), ("10.0.0.2:8000", 20.0), ("10.0.0.3:8000", 20.0)]);
    // A long stream on the idle-looking pod, begun before it broke.
    let (mut long, answer) = bench.request(&COMPLETIONS, &completion("long"));
    assert!(answer.destination.unwrap().starts_with(BROKEN));
    bench.host.set_response(&[(":status", "200"), (SERVED, BROKEN)], b"");
    long.on_response_headers(&bench.host, false);
    // Now it fails every new request: two of the three that eject it.
    for i in 0..2 {
        assert_eq!(request(&bench, &format!("new{i}"), &[BROKEN]).0, BROKEN);
    }
    // The old stream ends whole: a success, but older than those failures.
    bench.host.set_response(&[(":status", "200")], b"data: [DONE]\n\n");
    long.on_response_body(&bench.host, 14, true);
    long.on_log(&bench.host);
    assert_eq!(request(&bench, "third", &[BROKEN]).0, BROKEN);
    assert_eq!(bench.stat(&format!("wasm_epp.pod_ejections.pod.{BROKEN}")), 1, "three failures in a row eject it");
}

#[test]
fn after_the_wall_clock_stepped_back_the_other_worker_still_takes_an_ejection_over() {
    let bench = Bench::new(QUICK);
    bench.publish(1, &THREE_PODS);
    let other = bench.another_worker(8);
    let tick_both = || bench.tick_with(&other);
    tick_both();
    // The host's wall clock steps back an hour (NTP at boot, a VM restored). Each worker had
    // set its next read of the others' ejections 100 ms ahead of the old time: it read none
    // until the clock caught up, an hour later.
    bench.host.clock_ms.set(common::NOW - 3_600_000);
    bench.publish(2, &THREE_PODS);
    tick_both();
    for i in 0..3 {
        request(&bench, &format!("p{i}"), &[BROKEN]);
    }
    assert_eq!(bench.stat(&format!("wasm_epp.pod_ejections.pod.{BROKEN}")), 1);
    tick_both();
    bench.host.advance(wasm_epp_router::outliers_share::READ_EVERY_MS);
    tick_both();
    for i in 0..10 {
        assert_ne!(request_on(&bench, &other, &format!("q{i}"), &[BROKEN]).0, BROKEN, "request {i}");
    }
}

#[test]
fn with_the_plugin_naming_the_served_pod_a_pods_own_served_header_is_not_believed() {
    // `models.served_endpoint_header` is for Envoy configurations that cannot write the header
    // on the route: then nothing overwrites a header of that name the pod itself sends. A pod
    // failing every request and naming a healthy neighbour in it had its failures (and, as the
    // "retry" that answered, a failed pick besides) put on that neighbour, which was ejected.
    let config = r#"{"models": {"served_endpoint_header": "x-gateway-destination-endpoint-served"},
        "outlier_detection": {"consecutive_failures": 3, "base_ejection_ms": 1000}}"#;
    let bench = Bench::new(config);
    bench.publish(1, &THREE_PODS);
    let neighbour = THREE_PODS[1].0;
    bench.host.properties.borrow_mut().insert("upstream\0address".into(), BROKEN.as_bytes().to_vec());
    for i in 0..3 {
        let (mut stream, answer) = bench.request(&COMPLETIONS, &completion(&format!("r{i}")));
        assert!(answer.destination.unwrap().starts_with(BROKEN), "the idle-looking pod is the pick");
        bench.host.set_response(&[(":status", "500"), (SERVED, neighbour)], b"");
        stream.on_response_headers(&bench.host, false);
        stream.on_log(&bench.host);
        assert_eq!(bench.host.response_header(SERVED).as_deref(), Some(BROKEN), "the client is told the truth");
    }
    assert_eq!(bench.stat(&format!("wasm_epp.pod_ejections.pod.{neighbour}")), 0, "the neighbour never failed");
    assert_eq!(bench.stat(&format!("wasm_epp.pod_ejections.pod.{BROKEN}")), 1);
}
