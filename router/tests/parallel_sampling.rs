//! Requests of `n` > 1 choices (best-of-n, RL rollouts): vLLM runs one child request per
//! choice, each holding a seat of its batch, so such a request weighs `n` in the in-flight
//! counts, in flow control's room, and at every move of its count (retry, end, reset).

// Test support: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use common::{Bench, COMPLETIONS};
use wasm_epp_host::SharedStore;
use wasm_epp_router::{RequestStream, Step};

const SERVED: &str = "x-gateway-destination-endpoint-served";

fn chat(prompt: &str, n: &str) -> String {
    format!(r#"{{"model":"m","messages":[{{"role":"user","content":"{prompt}"}}],"n":{n},"max_tokens":4}}"#)
}

fn completions(prompt: &str, n: u32) -> String {
    format!(r#"{{"model":"m","prompt":"{prompt}","n":{n},"max_tokens":4}}"#)
}

const CHAT: [(&str, &str); 3] =
    [(":method", "POST"), (":path", "/v1/chat/completions"), ("content-type", "application/json")];

fn count(bench: &Bench, pod: &str) -> u32 {
    bench.worker.inflight.borrow().count(pod)
}

fn pick(destination: Option<String>) -> String {
    destination.unwrap().split(',').next().unwrap().to_owned()
}

#[test]
fn a_burst_between_scrapes_counts_each_request_as_its_n_and_leaves_nothing_at_its_end() {
    let bench = Bench::new("{}");
    let pods = ["10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"];
    bench.publish(1, &pods.map(|pod| (pod, 0.0)));
    // Two rollouts of 8 samples each, then six single requests, all before the next scrape.
    let (first, answer) = bench.request(&CHAT, &chat("rollout one", "8"));
    let first_pod = pick(answer.destination);
    let (second, answer) = bench.request(&COMPLETIONS, &completions("rollout two", 8));
    let second_pod = pick(answer.destination);
    assert_ne!(first_pod, second_pod, "the pod running 8 samples is busier than an idle one");
    assert_eq!((count(&bench, &first_pod), count(&bench, &second_pod)), (8, 8));
    let idle = pods.iter().find(|pod| **pod != first_pod && **pod != second_pod).unwrap();
    let mut singles = Vec::new();
    for i in 0..6 {
        let (stream, answer) = bench.request(&CHAT, &chat(&format!("single {i}"), "1"));
        assert_eq!(pick(answer.destination), *idle, "single {i}: 8 samples run on each of the others");
        singles.push(stream);
    }
    assert_eq!(count(&bench, idle), 6);
    for mut stream in [first, second].into_iter().chain(singles) {
        stream.on_log(&bench.host);
    }
    for pod in pods {
        assert_eq!(count(&bench, pod), 0, "{pod}: every request released what it counted");
    }
    assert!(bench.worker.inflight.borrow().local_count(&first_pod) == 0);
}

#[test]
fn n_that_vllm_would_refuse_or_that_is_not_a_count_weighs_one() {
    let bench = Bench::new("{}");
    bench.publish(1, &[("10.0.0.1:8000", 0.0)]);
    for n in ["0", "-3", "2.5", "\"8.5\"", "\"eight\"", "null", "99999"] {
        let (mut stream, _) = bench.request(&CHAT, &chat("odd", n));
        assert_eq!(count(&bench, "10.0.0.1:8000"), 1, "n = {n}");
        stream.on_log(&bench.host);
    }
    // vLLM reads `n` as pydantic's lax mode reads an integer: 8.0 and "8" run 8 child
    // requests there (a Python client's float, a shell script's quoted number).
    for n in ["8.0", "\"8\"", "\" 8 \""] {
        let (mut stream, _) = bench.request(&CHAT, &chat("lax", n));
        assert_eq!(count(&bench, "10.0.0.1:8000"), 8, "n = {n}");
        stream.on_log(&bench.host);
        assert_eq!(count(&bench, "10.0.0.1:8000"), 0, "n = {n}");
    }
    let (mut stream, _) = bench.request(&CHAT, &chat("many", "1000"));
    assert_eq!(count(&bench, "10.0.0.1:8000"), picker::request::MAX_SEQUENCES, "a whole batch at most");
    stream.on_log(&bench.host);
    assert_eq!(count(&bench, "10.0.0.1:8000"), 0);
    // The Responses API has no `n`.
    let responses = [(":method", "POST"), (":path", "/v1/responses"), ("content-type", "application/json")];
    let (mut stream, _) = bench.request(&responses, r#"{"model":"m","input":"hi","n":8}"#);
    assert_eq!(count(&bench, "10.0.0.1:8000"), 1);
    stream.on_log(&bench.host);
}

#[test]
fn a_batch_of_prompts_counts_each_prompts_samples() {
    let bench = Bench::new("{}");
    bench.publish(1, &[("10.0.0.1:8000", 0.0), ("10.0.0.2:8000", 0.0)]);
    // lm-eval's batched completions: vLLM runs each prompt of the list as its own request.
    let (mut batch, answer) = bench.request(&COMPLETIONS, r#"{"model":"m","prompt":["a","b","c"],"n":2}"#);
    let busy = pick(answer.destination);
    assert_eq!(count(&bench, &busy), 6, "3 prompts of 2 choices");
    let (mut single, answer) = bench.request(&COMPLETIONS, &completions("single", 1));
    assert_ne!(pick(answer.destination), busy);
    batch.on_log(&bench.host);
    single.on_log(&bench.host);
    assert_eq!(count(&bench, &busy), 0);
}

#[test]
fn a_retried_request_moves_all_of_its_samples_to_the_pod_that_answered() {
    let bench = Bench::new("{}");
    bench.publish(1, &[("10.0.0.1:8000", 0.0), ("10.0.0.2:8000", 1.0), ("10.0.0.3:8000", 1.0)]);
    let (mut stream, answer) = bench.request(&CHAT, &chat("retried", "4"));
    let choices: Vec<String> = answer.destination.unwrap().split(',').map(str::to_owned).collect();
    let (first, fallback) = (choices[0].as_str(), choices[1].as_str());
    assert_eq!((count(&bench, first), count(&bench, fallback)), (4, 0));
    // The pick failed; Envoy's retry on the next address answers.
    bench.host.set_response(&[(":status", "200"), (SERVED, fallback)], b"");
    stream.on_response_headers(&bench.host, false);
    assert_eq!((count(&bench, first), count(&bench, fallback)), (0, 4), "its 4 samples run on the fallback");
    stream.on_log(&bench.host);
    assert_eq!((count(&bench, first), count(&bench, fallback)), (0, 0), "released where they were counted");
}

#[test]
fn a_reset_stream_releases_its_weight_and_so_does_a_refused_destination() {
    let bench = Bench::new("{}");
    bench.publish(1, &[("10.0.0.1:8000", 0.0)]);
    let (mut stream, _) = bench.request(&CHAT, &chat("reset", "16"));
    assert_eq!(count(&bench, "10.0.0.1:8000"), 16);
    // A pod reset mid-answer: Envoy ends the stream; on_log is all the plugin sees.
    bench.host.set_response(&[(":status", "200")], b"");
    stream.on_response_headers(&bench.host, false);
    stream.on_response_body(&bench.host, 10, false);
    stream.on_log(&bench.host);
    assert_eq!(count(&bench, "10.0.0.1:8000"), 0);
    bench.host.refuse_header_writes.set(true);
    let (_stream, answer) = bench.request(&CHAT, &chat("refused", "16"));
    assert_eq!(answer.reply, Some(503));
    assert_eq!(count(&bench, "10.0.0.1:8000"), 0, "released at once");
}

// Flow control: `max_inflight_per_pod` counts sequences, as vLLM's `--max-num-seqs` does.

fn flow(max_inflight_per_pod: u32) -> String {
    format!(
        r#"{{"fallback_destinations": 0, "flow_control": {{"enabled": true,
            "max_inflight_per_pod": {max_inflight_per_pod}, "ttl_ms": 1000}}}}"#
    )
}

fn send(bench: &Bench, id: u32, body: &str) -> (RequestStream, Step) {
    send_to(bench, id, &CHAT, body)
}

fn send_to(bench: &Bench, id: u32, headers: &[(&str, &str)], body: &str) -> (RequestStream, Step) {
    bench.host.set_request(headers, body.as_bytes());
    let mut stream = RequestStream::for_context(bench.worker.clone(), id);
    assert_eq!(stream.on_request_headers(&bench.host, false), Step::Pause);
    let step = stream.on_request_body(&bench.host, body.len(), true);
    (stream, step)
}

fn resumed(bench: &Bench) -> Vec<u32> {
    std::mem::take(&mut *bench.host.resumed.borrow_mut())
}

#[test]
fn flow_control_counts_a_requests_samples_against_the_pods_places() {
    const POD: &str = "10.0.0.1:8000";
    let bench = Bench::new(&flow(8));
    bench.publish(1, &[(POD, 0.0)]);
    let (mut four, step) = send(&bench, 1, &chat("four", "4"));
    assert_eq!(step, Step::Continue, "4 of 8 places");
    let (mut eight, step) = send(&bench, 2, &chat("eight", "8"));
    assert_eq!(step, Step::Pause, "8 samples do not fit in the 4 places left");
    let (mut one, step) = send(&bench, 3, &chat("one", "1"));
    assert_eq!(step, Step::Pause, "it waits behind the 8 (its turn is kept), though one place is free");
    bench.tick();
    assert!(resumed(&bench).is_empty(), "still 4 places");
    four.on_log(&bench.host);
    assert_eq!(resumed(&bench), [2], "8 places free: the 8 samples go");
    assert_eq!(count(&bench, POD), 8);
    bench.tick();
    assert!(resumed(&bench).is_empty(), "the pod is full");
    eight.on_log(&bench.host);
    assert_eq!(resumed(&bench), [3]);
    one.on_log(&bench.host);
    assert_eq!(count(&bench, POD), 0, "no place leaked");
    assert_eq!(bench.worker.flow.waiting(), 0);
}

#[test]
fn a_request_of_more_samples_than_a_pod_has_places_goes_when_a_pod_is_free_not_never() {
    const POD: &str = "10.0.0.1:8000";
    let bench = Bench::new(&flow(8));
    bench.publish(1, &[(POD, 0.0)]);
    let (mut busy, step) = send(&bench, 1, &chat("busy", "1"));
    assert_eq!(step, Step::Continue);
    let (mut big, step) = send(&bench, 2, &chat("big", "20"));
    assert_eq!(step, Step::Pause, "20 samples: it waits for a whole pod");
    busy.on_log(&bench.host);
    assert_eq!(resumed(&bench), [2], "the pod is free: all of its 8 places are the 20's");
    assert_eq!(count(&bench, POD), 20, "counted as what it runs");
    let (mut after, step) = send(&bench, 3, &chat("after", "1"));
    assert_eq!(step, Step::Pause, "nothing else fits meanwhile");
    big.on_log(&bench.host);
    assert_eq!(resumed(&bench), [3]);
    after.on_log(&bench.host);
    assert_eq!(count(&bench, POD), 0);
    // On an idle pool it goes at once.
    let (mut big, step) = send(&bench, 4, &chat("big again", "20"));
    assert_eq!(step, Step::Continue);
    big.on_log(&bench.host);
    assert_eq!(count(&bench, POD), 0);
}

#[test]
fn flow_control_sends_samples_to_the_pod_with_places_for_them() {
    let pods = [("10.0.0.1:8000", 0.0), ("10.0.0.2:8000", 0.0)];
    let bench = Bench::new(&flow(8));
    bench.publish(1, &pods);
    let (mut six, step) = send(&bench, 1, &chat("six", "6"));
    assert_eq!(step, Step::Continue);
    let six_pod = bench.host.header("x-gateway-destination-endpoint").unwrap();
    // One single request on the other pod: 2 and 7 places left.
    let (mut single, step) = send(&bench, 2, &chat("single", "1"));
    assert_eq!(step, Step::Continue);
    let other = bench.host.header("x-gateway-destination-endpoint").unwrap();
    assert_ne!(six_pod, other);
    let (mut four, step) = send(&bench, 3, &chat("four", "4"));
    assert_eq!(step, Step::Continue, "9 places in the pool");
    assert_eq!(bench.host.header("x-gateway-destination-endpoint").unwrap(), other, "the pod with 7 places");
    assert_eq!((count(&bench, &six_pod), count(&bench, &other)), (6, 5));
    for stream in [&mut six, &mut single, &mut four] {
        stream.on_log(&bench.host);
    }
    assert_eq!((count(&bench, &six_pod), count(&bench, &other)), (0, 0));
}

#[test]
fn a_released_request_that_cannot_be_routed_releases_its_weight() {
    const POD: &str = "10.0.0.1:8000";
    let bench = Bench::new(&flow(8));
    bench.publish(1, &[(POD, 0.0)]);
    let (mut busy, _) = send(&bench, 1, &chat("busy", "8"));
    let (_held, step) = send(&bench, 2, &chat("held", "8"));
    assert_eq!(step, Step::Pause);
    bench.host.refuse_header_writes.set(true);
    busy.on_log(&bench.host);
    assert_eq!(bench.host.replies.borrow().last().map(|r| r.status), Some(503));
    assert_eq!(count(&bench, POD), 0, "the release's pick is released with its 8");
}

#[test]
fn samples_that_would_take_their_warm_pod_past_its_bound_go_to_a_pod_with_places_for_them() {
    // Prefix affinity weighs far more than load: only the bound keeps a request off its warm pod.
    let bench = Bench::new(
        r#"{"fallback_destinations": 0, "weights": {"queue": 0, "kv_cache": 0, "inflight": 1, "prefix": 10},
            "flow_control": {"enabled": true, "max_inflight_per_pod": 8, "ttl_ms": 1000}}"#,
    );
    // Both pods run a batch (their scrape is older than the requests below), none waiting.
    let mut table = picker::pod_table::PodTable {
        version: 1,
        published_at_ms: bench.host.clock_ms.get(),
        poll_interval_ms: 100,
        ..Default::default()
    };
    for address in ["10.0.0.1:8000", "10.0.0.2:8000"] {
        let mut pod = picker::pod_table::PodState::unknown(&picker::address::PodAddress::parse(address).unwrap());
        (pod.healthy, pod.running, pod.waiting, pod.kv_usage) = (true, 8.0, 0.0, Some(0.1));
        pod.last_success_ms = bench.host.clock_ms.get();
        table.pods.push(pod);
    }
    bench.host.store.set(picker::keys::POD_TABLE, &table.encode(), None).unwrap();
    bench.host.store.set(picker::keys::POD_TABLE_VERSION, &picker::pod_table::encode_version(1), None).unwrap();
    bench.heartbeat();
    let prompt: String = (0..2048).map(|i| format!("w{:03}", i * 7 % 1000)).collect();
    let (mut warm, step) = send_to(&bench, 1, &COMPLETIONS, &completions(&prompt, 5));
    assert_eq!(step, Step::Continue);
    let warm_pod = bench.host.header("x-gateway-destination-endpoint").unwrap();
    let (mut other, step) = send(&bench, 2, &chat("another prompt", "4"));
    assert_eq!(step, Step::Continue);
    let other_pod = bench.host.header("x-gateway-destination-endpoint").unwrap();
    assert_ne!(warm_pod, other_pod);
    // The prompt's prefix is on the warm pod, which has 3 free places; the other has 4.
    let (mut again, step) = send_to(&bench, 3, &COMPLETIONS, &completions(&prompt, 4));
    assert_eq!(step, Step::Continue);
    assert_eq!(
        bench.host.header("x-gateway-destination-endpoint").unwrap(),
        other_pod,
        "4 samples on the warm pod's 3 free places would queue one in its engine: the pod with 4 takes them"
    );
    assert_eq!((count(&bench, &warm_pod), count(&bench, &other_pod)), (5, 8));
    for stream in [&mut warm, &mut other, &mut again] {
        stream.on_log(&bench.host);
    }
    assert_eq!((count(&bench, &warm_pod), count(&bench, &other_pod)), (0, 0));
}

#[test]
fn with_places_reserved_a_standard_request_of_more_samples_than_the_open_places_goes_on_a_free_pod() {
    const POD: &str = "10.0.0.1:8000";
    let bench = Bench::new(
        r#"{"fallback_destinations": 0, "flow_control": {"enabled": true, "max_inflight_per_pod": 8,
            "reserved_per_pod": 2, "reserved_min_priority": 1, "ttl_ms": 1000}}"#,
    );
    bench.publish(1, &[(POD, 0.0)]);
    let (mut busy, step) = send(&bench, 1, &chat("busy", "1"));
    assert_eq!(step, Step::Continue);
    let (mut eight, step) = send(&bench, 2, &chat("eight", "8"));
    assert_eq!(step, Step::Pause, "5 open places of the 6 not reserved");
    busy.on_log(&bench.host);
    assert_eq!(resumed(&bench), [2], "a free pod: its 6 open places are the 8's (the reserve stays)");
    assert_eq!(count(&bench, POD), 8);
    eight.on_log(&bench.host);
    assert_eq!(count(&bench, POD), 0);
}

/// Sends `count` single requests from context `first` on: each goes on at once. The streams,
/// by the pod each went to.
fn fill(bench: &Bench, first: u32, count: u32) -> std::collections::HashMap<String, Vec<RequestStream>> {
    let mut by_pod: std::collections::HashMap<String, Vec<RequestStream>> = Default::default();
    for id in first..first + count {
        let (stream, step) = send(bench, id, &chat(&format!("single {id}"), "1"));
        assert_eq!(step, Step::Continue, "single {id}");
        by_pod.entry(bench.host.header("x-gateway-destination-endpoint").unwrap()).or_default().push(stream);
    }
    by_pod
}

fn counts(bench: &Bench, pods: &[&str]) -> Vec<u32> {
    pods.iter().map(|pod| count(bench, pod)).collect()
}

#[test]
fn samples_wait_for_one_pod_with_places_for_all_of_them_not_for_as_many_across_the_pool() {
    const PODS: [&str; 2] = ["10.0.0.1:8000", "10.0.0.2:8000"];
    let bench = Bench::new(&flow(8));
    bench.publish(1, &PODS.map(|pod| (pod, 0.0)));
    let mut by_pod = fill(&bench, 1, 10);
    assert_eq!(counts(&bench, &PODS), [5, 5]);
    let (four, step) = send(&bench, 20, &chat("four", "4"));
    assert_eq!(step, Step::Pause, "6 places free in the pool, 3 on each pod: 4 samples fit on neither");
    assert_eq!(counts(&bench, &PODS), [5, 5], "no pod taken past its 8");
    let (single, step) = send(&bench, 21, &chat("single", "1"));
    assert_eq!(step, Step::Pause, "it waits behind the 4 (its turn is kept)");
    bench.tick();
    assert!(resumed(&bench).is_empty(), "still 3 places on each pod");
    // One request ends on the first pod: 4 places there.
    let mut first = by_pod.remove(PODS[0]).unwrap();
    first.pop().unwrap().on_log(&bench.host);
    assert_eq!(resumed(&bench), [20, 21], "the 4 samples go to the pod with 4 places, the single after them");
    assert_eq!(counts(&bench, &PODS), [8, 6]);
    for mut stream in first.into_iter().chain(by_pod.into_values().flatten()).chain([four, single]) {
        stream.on_log(&bench.host);
    }
    assert_eq!(counts(&bench, &PODS), [0, 0]);
}

#[test]
fn a_held_request_of_n_choices_is_released_when_one_pod_has_its_places_not_before() {
    const PODS: [&str; 2] = ["10.0.0.1:8000", "10.0.0.2:8000"];
    let bench = Bench::new(&flow(8));
    bench.publish(1, &PODS.map(|pod| (pod, 0.0)));
    let mut by_pod = fill(&bench, 1, 16);
    assert_eq!(counts(&bench, &PODS), [8, 8]);
    let (four, step) = send(&bench, 20, &chat("four", "4"));
    assert_eq!(step, Step::Pause, "the pool is full");
    let (mut a, mut b) = (by_pod.remove(PODS[0]).unwrap(), by_pod.remove(PODS[1]).unwrap());
    // Three requests end on each pod, one pod after the other: 3 places on each, 6 in all.
    for mut stream in a.drain(..3).chain(b.drain(..3)) {
        stream.on_log(&bench.host);
        assert!(resumed(&bench).is_empty(), "4 samples fit on no pod: {:?}", counts(&bench, &PODS));
    }
    bench.tick();
    assert!(resumed(&bench).is_empty());
    assert_eq!(counts(&bench, &PODS), [5, 5], "no pod taken past its 8");
    a.pop().unwrap().on_log(&bench.host);
    assert_eq!(resumed(&bench), [20], "4 places on the first pod");
    assert_eq!(counts(&bench, &PODS), [8, 5]);
    for mut stream in a.into_iter().chain(b).chain([four]) {
        stream.on_log(&bench.host);
    }
    assert_eq!(counts(&bench, &PODS), [0, 0]);
}

/// [`send`] on `worker` (another worker of the same Envoy).
fn send_on(bench: &Bench, worker: &std::rc::Rc<wasm_epp_router::Worker>, id: u32, body: &str) -> (RequestStream, Step) {
    bench.host.set_request(&CHAT, body.as_bytes());
    let mut stream = RequestStream::for_context(worker.clone(), id);
    assert_eq!(stream.on_request_headers(&bench.host, false), Step::Pause);
    let step = stream.on_request_body(&bench.host, body.len(), true);
    (stream, step)
}

/// 16 single requests held on `worker` (ids 201..=216): a backlog that takes every place it
/// may as it frees.
fn backlog_on(bench: &Bench, worker: &std::rc::Rc<wasm_epp_router::Worker>) -> Vec<RequestStream> {
    (201..=216)
        .map(|id| {
            let (stream, step) = send_on(bench, worker, id, &chat(&format!("backlog {id}"), "1"));
            assert_eq!(step, Step::Pause);
            stream
        })
        .collect()
}

/// Two waiting ticks of both workers, 5 ms apart: each reads the other's queue.
fn two_waiting_ticks(bench: &Bench, other: &wasm_epp_router::Worker) {
    for _ in 0..2 {
        bench.tick_with(other);
        bench.later(5);
    }
}

#[test]
fn samples_on_a_worker_with_nothing_in_flight_are_not_held_for_a_pod_another_worker_s_backlog_never_leaves() {
    const PODS: [&str; 2] = ["10.0.0.1:8000", "10.0.0.2:8000"];
    let bench = Bench::new(&flow(8));
    bench.publish(1, &PODS.map(|pod| (pod, 0.0)));
    let other = bench.another_worker(9);
    let ticks = || two_waiting_ticks(&bench, &other);
    // The other worker fills both pods and has more waiting: a backlog that takes every place
    // it may as it frees.
    let mut by_pod: std::collections::HashMap<String, Vec<RequestStream>> = Default::default();
    for id in 101..=116 {
        let (stream, step) = send_on(&bench, &other, id, &chat(&format!("busy {id}"), "1"));
        assert_eq!(step, Step::Continue);
        by_pod.entry(bench.host.header("x-gateway-destination-endpoint").unwrap()).or_default().push(stream);
    }
    let backlog = backlog_on(&bench, &other);
    ticks();
    let (eight, step) = send(&bench, 1, &chat("eight", "8"));
    assert_eq!(step, Step::Pause, "the pool is full");
    ticks();
    // The other worker's requests end, a pod after the other: it keeps its share (8 of the
    // 16 places), spread 4 and 4, and never leaves 8 free on one pod.
    let (mut a, mut b) = (by_pod.remove(PODS[0]).unwrap(), by_pod.remove(PODS[1]).unwrap());
    let mut ended = Vec::new();
    let mut released = false;
    for round in 0..8 {
        let mut stream = if round % 2 == 0 { a.pop() } else { b.pop() }.unwrap();
        stream.on_log(&bench.host);
        ended.push(stream);
        ticks();
        released |= resumed(&bench).contains(&1);
    }
    assert!(released, "its worker has nothing in flight to end: it takes 8 places across the pool, not its TTL");
    assert!(counts(&bench, &PODS).contains(&12), "its pod passes the bound by what it lacked there: 4 of its 8");
    for mut stream in a.into_iter().chain(b).chain(backlog).chain([eight]) {
        stream.on_log(&bench.host);
    }
}

#[test]
fn places_freed_on_two_pods_at_once_take_a_request_of_n_choices_on_each_in_one_release() {
    const PODS: [&str; 2] = ["10.0.0.1:8000", "10.0.0.2:8000"];
    let bench = Bench::new(&flow(8));
    bench.publish(1, &PODS.map(|pod| (pod, 0.0)));
    let other = bench.another_worker(9);
    let mut mine = fill(&bench, 1, 8);
    bench.tick_with(&other);
    let theirs: Vec<RequestStream> = (101..=108)
        .map(|id| {
            let (stream, step) = send_on(&bench, &other, id, &chat(&format!("theirs {id}"), "1"));
            assert_eq!(step, Step::Continue);
            stream
        })
        .collect();
    bench.tick_with(&other);
    assert_eq!(counts(&bench, &PODS), [8, 8]);
    let (first, step) = send(&bench, 20, &chat("first four", "4"));
    assert_eq!(step, Step::Pause);
    let (second, step) = send(&bench, 21, &chat("second four", "4"));
    assert_eq!(step, Step::Pause);
    // The other worker's requests end: this worker sees 4 places free on each pod at its tick.
    for mut stream in theirs {
        stream.on_log(&bench.host);
    }
    bench.tick();
    assert_eq!(
        resumed(&bench),
        [20, 21],
        "one pod each, in one release: the first's pod is not the only one looked at"
    );
    assert_eq!(counts(&bench, &PODS), [8, 8]);
    for mut stream in mine.drain().flat_map(|(_, streams)| streams).chain([first, second]) {
        stream.on_log(&bench.host);
    }
    assert_eq!(counts(&bench, &PODS), [0, 0]);
}

#[test]
fn samples_heavier_than_a_worker_s_share_go_when_the_share_is_free_while_another_worker_keeps_its_own() {
    const POD: &str = "10.0.0.1:8000";
    let bench = Bench::new(&flow(8));
    bench.publish(1, &[(POD, 0.0)]);
    let other = bench.another_worker(9);
    let ticks = || two_waiting_ticks(&bench, &other);
    let mut busy: Vec<RequestStream> = (101..=108)
        .map(|id| {
            let (stream, step) = send_on(&bench, &other, id, &chat(&format!("busy {id}"), "1"));
            assert_eq!(step, Step::Continue);
            stream
        })
        .collect();
    let backlog = backlog_on(&bench, &other);
    ticks();
    let (eight, step) = send(&bench, 1, &chat("eight", "8"));
    assert_eq!(step, Step::Pause, "the pod is full");
    ticks();
    // Both workers wait: each may keep 4 of the pod's 8 places. The other keeps its 4, so 8
    // are never free at once.
    let mut released_at = None;
    for _ in 0..8 {
        busy.remove(0).on_log(&bench.host);
        ticks();
        if resumed(&bench).contains(&1) {
            released_at = released_at.or(Some(count(&bench, POD)));
        }
    }
    let released_at = released_at.expect("heavier than its share of 4, it goes when its share is free, not at its TTL");
    assert_eq!(released_at, 12, "the other worker's 4 and its 8: the engine queues 4");
    for mut stream in busy.into_iter().chain(backlog).chain([eight]) {
        stream.on_log(&bench.host);
    }
}
