//! Priority across Envoy workers, in a pool of several models: a higher band waiting on one
//! worker holds another worker's lower bands only for the pods it waits for. Each worker's
//! waiting record names its bands' models; a request of a model on pods of its own is not
//! held by another model's higher band (it was, until that band stopped waiting: a critical
//! backlog of one model made every other model's requests wait on every other worker).

mod common;

use std::rc::Rc;

use common::{completions_with, model_completion, publish_models, Bench};
use picker::flow_share::{publish_peer_waiting, waiting_key, waiting_record, Waiting};
use picker::store::SharedStore;
use wasm_epp_host::Host;
use wasm_epp_router::{RequestStream, Step, Worker};

const QWEN: &str = "10.0.0.1:8000";
const LLAMA: &str = "10.0.0.2:8000";

const CONFIG: &str = r#"{"fallback_destinations": 0,
    "flow_control": {"enabled": true, "max_inflight_per_pod": 1, "ttl_ms": 1000}}"#;

/// Sends a completion for `model` on `worker`, context `id`, with extra `headers`.
fn send_on(
    bench: &Bench,
    worker: &Rc<Worker>,
    id: u32,
    model: &str,
    headers: &[(&str, &str)],
) -> (RequestStream, Step) {
    bench.send_as(worker, id, &completions_with(headers), &model_completion(model, id, 1))
}

#[test]
fn a_critical_backlog_of_one_model_holds_another_workers_requests_only_for_its_pods() {
    let bench = Bench::new(CONFIG);
    publish_models(&bench, &[(QWEN, "qwen", &[], 0.0), (LLAMA, "llama", &[], 0.0)]);
    let other = bench.another_worker(9);
    let critical = [("x-gateway-inference-priority", "5")];

    // The other worker fills qwen's pod; this worker's critical qwen request waits for it.
    let (mut busy, step) = send_on(&bench, &other, 1, "qwen", &[]);
    assert_eq!(step, Step::Continue);
    bench.tick_with(&other);
    let (_critical, step) = send_on(&bench, &bench.worker, 2, "qwen", &critical);
    assert_eq!(step, Step::Pause);
    // Both tick: this worker publishes what it waits for, the other reads it.
    bench.tick_with(&other);

    // The other worker has a standard qwen request waiting too (so it reads who else waits).
    let (_standard, step) = send_on(&bench, &other, 4, "qwen", &[]);
    assert_eq!(step, Step::Pause);
    bench.tick_with(&other);

    // A standard llama request on the other worker: llama's pod is free and the critical band
    // waits for qwen's, so it goes at once.
    let (_llama, step) = send_on(&bench, &other, 3, "llama", &[]);
    assert_eq!(step, Step::Continue, "not held for a band waiting on another model's pods");
    assert_eq!(bench.destination().as_deref(), Some(LLAMA));

    // When qwen's place frees on the other worker, the critical request on this one takes it.
    bench.host.set_request(&[], b"");
    busy.on_log(&bench.host);
    assert!(bench.resumed().is_empty(), "the other worker holds its qwen request for the critical one");
    bench.tick();
    assert_eq!(bench.resumed(), [2], "the critical request takes qwen's place");
}

#[test]
fn workers_of_unknown_band_an_older_peer_or_build_hold_no_one() {
    // An older pool service's peer sum (workers of no band) and an older build's record (12
    // bytes, no band) count in the share at any band but make no worker hold (docs/design.md,
    // "Priority across workers"); a claim on every pod at the highest band held every request
    // below it for as long as they waited.
    for older in ["peer", "record"] {
        let bench = Bench::new(CONFIG);
        publish_models(&bench, &[(QWEN, "qwen", &[], 0.0)]);
        let (mut busy, step) = send_on(&bench, &bench.worker, 1, "qwen", &[]);
        assert_eq!(step, Step::Continue);
        let (_waiting, step) = send_on(&bench, &bench.worker, 2, "qwen", &[]);
        assert_eq!(step, Step::Pause);
        let now = bench.host.now_ms();
        if older == "peer" {
            let mut peer = Waiting::default();
            peer.add(None, 1);
            publish_peer_waiting(&bench.host, now, peer).unwrap();
        } else {
            let record = waiting_record(now, 3, 0);
            bench.host.set(&waiting_key(7), record.get(..12).unwrap(), None).unwrap();
        }
        bench.tick();
        busy.on_log(&bench.host);
        bench.later(5);
        bench.tick();
        assert_eq!(bench.resumed(), [2], "{older}: its share is ceil(1 / 2), none of its own in flight");
    }
}

#[test]
fn workers_at_one_band_share_their_pods_while_a_higher_band_waits_for_other_pods() {
    // Two workers backlogged at band 0 on qwen's pod (2 places) share it, one place each, as
    // they do when nothing else waits. A critical request waiting on a third worker for
    // llama's pod held neither, and took their share away: each then counted only the workers
    // of unknown band, so the one whose requests end first refilled the whole pod.
    let config = r#"{"fallback_destinations": 0,
        "flow_control": {"enabled": true, "max_inflight_per_pod": 2, "ttl_ms": 60000}}"#;
    for critical_elsewhere in [false, true] {
        let bench = Bench::new(config);
        publish_models(&bench, &[(QWEN, "qwen", &[], 0.0), (LLAMA, "llama", &[], 0.0)]);
        let (b, c, d) = (bench.another_worker(2), bench.another_worker(3), bench.another_worker(4));
        // Each worker takes its in-flight slot and finds the others'.
        for _ in 0..4 {
            for worker in [&bench.worker, &b, &c, &d] {
                wasm_epp_router::tick::on_tick(worker, &bench.host);
            }
        }
        let tick_all = || {
            for worker in [&bench.worker, &b, &c] {
                wasm_epp_router::tick::on_tick(worker, &bench.host);
            }
        };
        // qwen's pod: one of this worker's, one of d's (a worker that never waits).
        let (_mine, step) = send_on(&bench, &bench.worker, 1, "qwen", &[]);
        assert_eq!(step, Step::Continue);
        let (mut passing, step) = send_on(&bench, &d, 2, "qwen", &[]);
        assert_eq!(step, Step::Continue);
        for worker in [&bench.worker, &b, &c, &d] {
            wasm_epp_router::tick::on_tick(worker, &bench.host);
        }
        // This worker and b wait for qwen at band 0.
        let (_a_waits, step) = send_on(&bench, &bench.worker, 3, "qwen", &[]);
        assert_eq!(step, Step::Pause);
        let (_b_waits, step) = send_on(&bench, &b, 4, "qwen", &[]);
        assert_eq!(step, Step::Pause);
        let mut llama = Vec::new();
        if critical_elsewhere {
            // c fills llama's pod and waits for it at band 5.
            for id in 5..=6 {
                let (stream, step) = send_on(&bench, &c, id, "llama", &[]);
                assert_eq!(step, Step::Continue);
                llama.push(stream);
            }
            wasm_epp_router::tick::on_tick(&c, &bench.host);
            let (stream, step) = send_on(&bench, &c, 7, "llama", &[("x-gateway-inference-priority", "5")]);
            assert_eq!(step, Step::Pause);
            llama.push(stream);
        }
        // d's request ends: a place on qwen's pod. This worker holds its share (1) already.
        end_once_settled(&bench, &tick_all, &mut passing);
        assert!(bench.resumed().is_empty(), "critical elsewhere: {critical_elsewhere}: this worker holds its share");
        wasm_epp_router::tick::on_tick(&b, &bench.host);
        assert_eq!(bench.resumed(), [4], "critical elsewhere: {critical_elsewhere}: b takes its share");
    }
}

/// Lets every worker publish its waiting records (two ticks, 5 ms apart), then ends `stream`
/// (the host showing no request) and ticks this worker; what it resumed is left to read.
fn end_once_settled(bench: &Bench, tick_all: &dyn Fn(), stream: &mut RequestStream) {
    for _ in 0..2 {
        tick_all();
        bench.later(5);
    }
    bench.host.set_request(&[], b"");
    stream.on_log(&bench.host);
    bench.tick();
}

#[test]
fn a_worker_waiting_at_the_same_band_for_another_models_pods_takes_no_share_of_these() {
    // This worker waits for qwen's pod (2 places), b for llama's, both at band 0. b's requests
    // take no place on qwen's pod: this worker's share of it is the whole pod. It was half
    // (the workers at a band were counted whatever they waited for), and the other half of the
    // pod stayed empty while this worker's requests waited.
    let config = r#"{"fallback_destinations": 0,
        "flow_control": {"enabled": true, "max_inflight_per_pod": 2, "ttl_ms": 60000}}"#;
    let bench = Bench::new(config);
    publish_models(&bench, &[(QWEN, "qwen", &[], 0.0), (LLAMA, "llama", &[], 0.0)]);
    let (b, d) = (bench.another_worker(2), bench.another_worker(4));
    let tick_all = || {
        for worker in [&bench.worker, &b, &d] {
            wasm_epp_router::tick::on_tick(worker, &bench.host);
        }
    };
    for _ in 0..4 {
        tick_all();
    }
    let (_mine, step) = send_on(&bench, &bench.worker, 1, "qwen", &[]);
    assert_eq!(step, Step::Continue);
    let (mut passing, step) = send_on(&bench, &d, 2, "qwen", &[]);
    assert_eq!(step, Step::Continue);
    let mut llama = Vec::new();
    for id in 3..=5 {
        let (stream, step) = send_on(&bench, &b, id, "llama", &[]);
        assert_eq!(step, if id < 5 { Step::Continue } else { Step::Pause });
        llama.push(stream);
        tick_all();
    }
    let (_waits, step) = send_on(&bench, &bench.worker, 6, "qwen", &[]);
    assert_eq!(step, Step::Pause);
    end_once_settled(&bench, &tick_all, &mut passing);
    assert_eq!(bench.resumed(), [6], "b waits for llama's pod: qwen's free place is this worker's");
}

#[test]
fn a_higher_band_waiting_for_a_model_this_workers_table_does_not_know_holds_every_pod() {
    // Another worker's table may be a poll ahead (a model just deployed): its claim cannot be
    // placed on pods here, so it holds them all rather than none.
    let bench = Bench::new(CONFIG);
    publish_models(&bench, &[(QWEN, "qwen", &[], 0.0), (LLAMA, "llama", &[], 0.0)]);
    let (mut busy, step) = send_on(&bench, &bench.worker, 1, "qwen", &[]);
    assert_eq!(step, Step::Continue);
    let (_waiting, step) = send_on(&bench, &bench.worker, 2, "qwen", &[]);
    assert_eq!(step, Step::Pause);
    let now = bench.host.now_ms();
    let record = picker::flow_share::waiting_record_with_claims(now, 1, 5, &[(5, Some("new-model"))]);
    bench.host.set(&waiting_key(7), &record, None).unwrap();
    bench.tick();
    busy.on_log(&bench.host);
    bench.later(5);
    bench.tick();
    assert!(bench.resumed().is_empty(), "held: the band waiting elsewhere may need qwen's pod");
}
