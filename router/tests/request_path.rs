//! The whole request path of one worker, natively: every branch the filter takes in Envoy.

mod common;

use common::{completion, Bench, COMPLETIONS};
use picker::keys;
use picker::prefix::events::{encode_batch, RoutingEvent};
use picker::prefix::RingWriter;
use wasm_epp_host::{HeaderMap, SharedStore};
use wasm_epp_router::Step;

const POOL: [(&str, f64); 3] = [("10.0.0.1:8000", 0.0), ("10.0.0.2:8000", 0.0), ("10.0.0.3:8000", 0.0)];

fn members(destination: &str) -> Vec<&str> {
    destination.split(',').collect()
}

#[test]
fn routes_to_a_pool_member_with_fallbacks_and_releases_in_flight_at_the_end() {
    let bench = Bench::new("{}");
    bench.publish(1, &POOL);
    let (mut stream, answer) = bench.request(&COMPLETIONS, &completion("hello"));
    assert_eq!(answer.headers_step, Step::Pause, "headers held while the body is read");
    assert_eq!(answer.body_step, Some(Step::Continue));
    let destination = answer.destination.unwrap();
    let chosen = members(&destination);
    assert_eq!(chosen.len(), 3, "chosen plus two fallbacks: {destination}");
    assert!(chosen.iter().all(|a| POOL.iter().any(|(p, _)| p == a)));
    assert_eq!(bench.worker.inflight.borrow().count(chosen[0]), 1);
    stream.on_log(&bench.host);
    assert_eq!(bench.worker.inflight.borrow().count(chosen[0]), 0);
    assert_eq!(bench.stat("wasm_epp.requests_routed"), 1);
}

#[test]
fn a_request_before_any_tick_uses_the_published_table_not_the_static_pool() {
    let bench = Bench::new(r#"{"pool": ["10.9.9.9:8000"], "fallback_destinations": 0}"#);
    bench.publish(1, &[("10.0.0.1:8000", 0.0)]);
    let answer = bench.complete(&COMPLETIONS, &completion("catch up"));
    assert_eq!(answer.destination.as_deref(), Some("10.0.0.1:8000"));
}

#[test]
fn client_destination_headers_are_removed_and_counted_whatever_their_bytes() {
    let bench = Bench::new(r#"{"destination_header": "x-my-destination"}"#);
    bench.publish(1, &POOL);
    let mut pairs: Vec<(Vec<u8>, Vec<u8>)> =
        COMPLETIONS.iter().map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec())).collect();
    for name in
        ["x-my-destination", "x-gateway-destination-endpoint", "x-envoy-original-dst-host", "x-prefiller-host-port"]
    {
        pairs.push((name.as_bytes().to_vec(), b"6.6.6.6:6666".to_vec()));
    }
    pairs.push((b"x-anything".to_vec(), b"caf\xe9".to_vec()));
    pairs.push((b"x-session-id".to_vec(), b"\xff\xfe\x00".to_vec()));
    pairs.push((b"x-gateway-inference-priority".to_vec(), b"\xe9".to_vec()));
    bench.host.set_request(&[], completion("bytes").as_bytes());
    *bench.host.headers.borrow_mut() = HeaderMap::new(pairs);
    let mut stream = wasm_epp_router::RequestStream::new(bench.worker.clone());
    assert_eq!(stream.on_request_headers(&bench.host, false), Step::Pause);
    assert_eq!(stream.on_request_body(&bench.host, completion("bytes").len(), true), Step::Continue);
    let headers = bench.host.headers.borrow();
    for name in ["x-gateway-destination-endpoint", "x-envoy-original-dst-host", "x-prefiller-host-port"] {
        assert!(headers.get(name).is_none(), "{name} survived");
    }
    let ours = String::from_utf8(headers.get("x-my-destination").unwrap().to_vec()).unwrap();
    assert!(!ours.contains("6.6.6.6"), "the client's value was kept: {ours}");
    assert_eq!(bench.stat("wasm_epp.forged_destination_removed"), 4);
}

#[test]
fn the_health_path_is_answered_by_the_filter() {
    let bench = Bench::new("{}");
    bench.publish(1, &POOL);
    bench.tick();
    let answer = bench.complete(&[(":method", "GET"), (":path", "/wasm-epp/healthz")], "");
    assert_eq!(answer.reply, Some(200));
    assert_eq!(answer.destination, None, "no pod is asked");
    let body: serde_json::Value = serde_json::from_slice(&bench.host.replies.borrow().last().unwrap().body).unwrap();
    assert_eq!(body["healthy_pods"], 3);
}

#[test]
fn an_invalid_body_is_routed_by_default_and_rejected_when_configured() {
    let bench = Bench::new("{}");
    bench.publish(1, &POOL);
    let answer = bench.complete(&COMPLETIONS, "{not json");
    assert!(answer.destination.is_some());
    assert_eq!(bench.stat("wasm_epp.body_invalid"), 1);

    let strict = Bench::new(r#"{"invalid_body": "reject"}"#);
    strict.publish(1, &POOL);
    let answer = strict.complete(&COMPLETIONS, "{not json");
    assert_eq!(answer.reply, Some(400));
    assert_eq!(answer.destination, None);
}

#[test]
fn a_sheddable_request_gets_429_when_every_pod_is_saturated() {
    let bench = Bench::new("{}");
    bench.publish(1, &[("10.0.0.1:8000", 500.0), ("10.0.0.2:8000", 500.0)]);
    let mut headers = COMPLETIONS.to_vec();
    headers.push(("x-gateway-inference-priority", "-1"));
    assert_eq!(bench.complete(&headers, &completion("x")).reply, Some(429));
    let normal = bench.complete(&COMPLETIONS, &completion("x"));
    assert!(normal.destination.is_some(), "only sheddable requests are shed");
}

#[test]
fn no_pod_anywhere_is_503() {
    let bench = Bench::new("{}");
    assert_eq!(bench.complete(&COMPLETIONS, &completion("x")).reply, Some(503));
    assert_eq!(bench.stat("wasm_epp.no_pod"), 1);
}

#[test]
fn stale_pod_data_fails_open_and_is_counted() {
    let bench = Bench::new(r#"{"fallback_destinations": 0}"#);
    bench.publish(1, &POOL);
    bench.host.advance(10_000); // past stale_after_ms (5 s), the service still beating
    bench.heartbeat();
    bench.tick();
    let answer = bench.complete(&COMPLETIONS, &completion("x"));
    assert!(POOL.iter().any(|(p, _)| Some(*p) == answer.destination.as_deref()));
    assert_eq!(bench.stat("wasm_epp.fail_open"), 1);
}

#[test]
fn fail_open_ends_when_the_pool_service_has_been_gone_too_long() {
    let bench = Bench::new(r#"{"fail_open_max_age_ms": 60000}"#);
    bench.publish(1, &POOL);
    bench.host.advance(59_000);
    assert!(bench.complete(&COMPLETIONS, &completion("x")).destination.is_some(), "within the bound");
    bench.host.advance(2_000);
    let answer = bench.complete(&COMPLETIONS, &completion("x"));
    assert_eq!(answer.reply, Some(503), "the last table's pods are no longer trusted");
    assert_eq!(bench.stat("wasm_epp.fail_open_expired"), 1);

    // With a static pool, that pool is what remains.
    let with_pool = Bench::new(r#"{"fail_open_max_age_ms": 60000, "pool": ["10.9.9.9:8000"]}"#);
    with_pool.publish(1, &POOL);
    with_pool.host.advance(61_000);
    let answer = with_pool.complete(&COMPLETIONS, &completion("x"));
    assert_eq!(answer.destination.as_deref(), Some("10.9.9.9:8000"));
}

#[test]
fn the_pool_service_heartbeat_age_grows_when_the_service_stops() {
    const AGE: &str = "wasm_epp.service_heartbeat_age_ms";
    let bench = Bench::new("{}");
    bench.publish(1, &POOL);
    bench.host.advance(40);
    bench.tick();
    assert_eq!(bench.host.metric(AGE), 40);
    // The singleton dies: no heartbeat, no publish. Its own gauges stay where they were;
    // the workers' reading of its heartbeat grows.
    bench.host.advance(30_000);
    bench.tick();
    assert_eq!(bench.host.metric(AGE), 30_040);
    bench.heartbeat();
    bench.tick();
    assert_eq!(bench.host.metric(AGE), 0, "back when it beats again");
}

#[test]
fn a_table_that_does_not_decode_keeps_the_last_good_one() {
    let bench = Bench::new(r#"{"fallback_destinations": 0}"#);
    bench.publish(1, &[("10.0.0.1:8000", 0.0)]);
    bench.tick();
    bench.host.set(keys::POD_TABLE, b"\x00garbage", None).unwrap();
    bench.host.set(keys::POD_TABLE_VERSION, &picker::pod_table::encode_version(2), None).unwrap();
    bench.tick();
    assert_eq!(bench.stat("wasm_epp.table_decode_failed"), 1);
    let answer = bench.complete(&COMPLETIONS, &completion("x"));
    assert_eq!(answer.destination.as_deref(), Some("10.0.0.1:8000"));
}

#[test]
fn bodies_over_the_limits_are_routed_unread() {
    let bench = Bench::new(r#"{"max_body_bytes": 1024, "max_buffered_bytes": 4096}"#);
    bench.publish(1, &POOL);
    // Declared too long: routed at the headers.
    let mut headers = COMPLETIONS.to_vec();
    headers.push(("content-length", "5000"));
    bench.host.set_request(&headers, b"");
    let mut stream = wasm_epp_router::RequestStream::new(bench.worker.clone());
    assert_eq!(stream.on_request_headers(&bench.host, false), Step::Continue);
    stream.on_log(&bench.host);
    assert_eq!(bench.stat("wasm_epp.body_over_limit"), 1);

    // Slow uploads of 1,000 bytes each: the fifth passes the worker's 4,096-byte cap.
    let mut held = Vec::new();
    for _ in 0..5 {
        bench.host.set_request(&COMPLETIONS, &[b' '; 1000]);
        let mut stream = wasm_epp_router::RequestStream::new(bench.worker.clone());
        assert_eq!(stream.on_request_headers(&bench.host, false), Step::Pause);
        let step = stream.on_request_body(&bench.host, 1000, false);
        held.push((stream, step));
    }
    let steps: Vec<Step> = held.iter().map(|(_, step)| *step).collect();
    assert_eq!(steps, [Step::Pause, Step::Pause, Step::Pause, Step::Pause, Step::Continue]);
    assert_eq!(bench.stat("wasm_epp.buffer_cap_reached"), 1);
    assert_eq!(bench.worker.buffered_bytes.get(), 4000);
    for (mut stream, _) in held {
        stream.on_log(&bench.host);
    }
    assert_eq!(bench.worker.buffered_bytes.get(), 0, "every byte accounted back");
}

#[test]
fn decisions_are_queued_only_while_the_pool_service_is_alive() {
    let bench = Bench::new("{}");
    let queue = wasm_epp_host::Host::register_queue(&bench.host, keys::EVENT_QUEUE).unwrap();
    bench.publish(1, &POOL);
    let long_prompt = "a shared system prompt that spans several blocks ".repeat(20);
    bench.complete(&COMPLETIONS, &completion(&long_prompt));
    bench.tick();
    assert_eq!(bench.host.queue_messages.borrow()[&queue].len(), 1, "one batch per tick");
    assert_eq!(bench.stat("wasm_epp.prefix_events_sent"), 1);

    // The service stops beating: nobody drains the queue, so it must not grow.
    bench.host.advance(5_000);
    for _ in 0..10 {
        bench.complete(&COMPLETIONS, &completion(&long_prompt));
        bench.tick();
    }
    assert_eq!(bench.host.queue_messages.borrow()[&queue].len(), 1);
    assert_eq!(bench.stat("wasm_epp.prefix_send_skipped"), 10);
}

#[test]
fn stats_reach_the_host_on_the_tick_only() {
    let bench = Bench::new("{}");
    bench.publish(1, &POOL);
    bench.complete(&COMPLETIONS, &completion("x"));
    assert_eq!(bench.host.metric("wasm_epp.requests_routed"), 0);
    bench.tick();
    assert_eq!(bench.host.metric("wasm_epp.requests_routed"), 1);
}

#[test]
fn a_burst_spreads_and_another_workers_load_counts_after_its_tick() {
    let pods = [("10.0.0.1:8000", 0.0), ("10.0.0.2:8000", 0.0)];
    let first = Bench::new(r#"{"prefix": {"enabled": false}}"#);
    first.publish(1, &pods);
    let held: Vec<_> = (0..8).map(|i| first.request(&COMPLETIONS, &completion(&format!("burst {i}"))).0).collect();
    let per_pod = |bench: &Bench, pod: &str| bench.worker.inflight.borrow().count(pod);
    assert_eq!((per_pod(&first, pods[0].0), per_pod(&first, pods[1].0)), (4, 4), "spread within one tick");

    // A second worker of the same Envoy (same shared data) sees them after both ticks.
    first.tick();
    let second_worker = wasm_epp_router::configure(&first.host, 0, 9).unwrap();
    second_worker.serving.set(true);
    wasm_epp_router::tick::on_tick(&second_worker, &first.host);
    assert_eq!(second_worker.inflight.borrow().count(pods[0].0), 4);
    drop(held);
}

const SECRET: &str = "a-shared-secret-of-some-length";

#[test]
fn the_peer_listener_takes_only_authenticated_messages_and_routes_nothing() {
    let config = format!(r#"{{"peer_receiver": {{"secret": "{SECRET}"}}}}"#);
    let bench = Bench::new(&config);
    let inbox = wasm_epp_host::Host::register_queue(&bench.host, keys::PEER_INBOX).unwrap();
    let peer = |secret: &str, path: &str, body: &str| {
        let headers = [(":method", "POST"), (":path", path), ("x-wasm-epp-peer-secret", secret)];
        bench.complete(&headers, body)
    };
    let queued = || bench.host.queue_messages.borrow().get(&inbox).map_or(0, |messages| messages.len());
    assert_eq!(peer(SECRET, "/wasm-epp/v1/peer", "WEPP....").reply, Some(204), "a service not ticked yet");
    assert_eq!(queued(), 1);
    bench.heartbeat();
    bench.host.advance(wasm_epp_router::tick::QUEUE_STALE_AFTER_MS + 1);
    assert_eq!(peer(SECRET, "/wasm-epp/v1/peer", "WEPP....").reply, Some(503), "its pool service is gone");
    assert_eq!(queued(), 1, "nothing piles up unread in the inbox");
    bench.heartbeat();
    assert_eq!(peer(SECRET, "/wasm-epp/v1/peer", "WEPP....").reply, Some(204));
    assert_eq!(queued(), 2);
    assert_eq!(peer("a-shared-secret-of-some-lengtX", "/wasm-epp/v1/peer", "WEPP").reply, Some(403));
    assert_eq!(peer(SECRET, "/v1/completions", &completion("x")).reply, Some(404));
    assert_eq!(peer(SECRET, "/wasm-epp/v1/peer", "garbage").reply, Some(400));
    // A POST without a body ends with its headers: answered then, not held until a timeout.
    assert_eq!(peer(SECRET, "/wasm-epp/v1/peer", "").reply, Some(400), "no body, no message");
    assert_eq!(queued(), 2, "only the good messages queued");
    assert_eq!(bench.host.header("x-gateway-destination-endpoint"), None);
}

#[test]
fn a_snapshot_holds_the_newest_decisions_that_fit_what_the_asker_reads() {
    // 4,096 decisions of 256 blocks (~2 KiB each): more than a 1 MiB answer can hold. The
    // asker reads at most 1 MiB and keeps a batch's first events, so a snapshot of the ring's
    // last 4,096 was cut (or reset by Envoy) and kept the oldest.
    let config = format!(r#"{{"peer_receiver": {{"secret": "{SECRET}"}}}}"#);
    let bench = Bench::new(&config);
    bench.publish(1, &POOL);
    let mut ring = RingWriter::resume(&bench.host).unwrap();
    let events: Vec<RoutingEvent> = (0..4_096u64)
        .map(|n| RoutingEvent {
            pod: POOL[0].0.into(),
            epoch: 0,
            origin: 0,
            hashes: (n * 256..(n + 1) * 256).collect(),
        })
        .collect();
    for chunk in events.chunks(16) {
        ring.append(&bench.host, &encode_batch(chunk)).unwrap();
    }
    let headers = [(":method", "GET"), (":path", "/wasm-epp/v1/peer/snapshot"), ("x-wasm-epp-peer-secret", SECRET)];
    assert_eq!(bench.complete(&headers, "").reply, Some(200));
    let body = bench.host.replies.borrow().last().unwrap().body.clone();
    assert!(body.len() <= picker::peer::MAX_MESSAGE_BYTES, "an answer of {} bytes", body.len());
    let sent = picker::peer::PeerMessage::decode(&body).unwrap().events;
    assert!(sent.len() > 400, "as many as fit: {}", sent.len());
    assert!(events.ends_with(&sent), "the newest, oldest first, up to the last one made");
}

#[test]
fn a_snapshot_names_the_replica_that_gives_it() {
    // A replica that asked its own listener (a label selector lists its own pod) knows itself.
    let config = format!(r#"{{"peer_receiver": {{"secret": "{SECRET}"}}}}"#);
    let bench = Bench::new(&config);
    bench.publish(1, &POOL);
    bench.host.set(keys::REPLICA_ID, b"00000000000000ab", None).unwrap();
    let headers = [(":method", "GET"), (":path", "/wasm-epp/v1/peer/snapshot"), ("x-wasm-epp-peer-secret", SECRET)];
    assert_eq!(bench.complete(&headers, "").reply, Some(200));
    let reply = bench.host.replies.borrow().last().cloned().unwrap();
    assert!(reply.headers.contains(&("x-wasm-epp-replica".into(), "00000000000000ab".into())), "{:?}", reply.headers);
}

#[test]
fn a_body_that_ends_in_trailers_is_routed_at_the_trailers() {
    let bench = Bench::new("{}");
    bench.publish(1, &POOL);
    let body = completion("with trailers");
    bench.host.set_request(&COMPLETIONS, body.as_bytes());
    let mut stream = wasm_epp_router::RequestStream::new(bench.worker.clone());
    assert_eq!(stream.on_request_headers(&bench.host, false), Step::Pause);
    assert_eq!(stream.on_request_body(&bench.host, body.len(), false), Step::Pause);
    assert_eq!(stream.on_request_trailers(&bench.host), Step::Continue);
    assert!(bench.host.header("x-gateway-destination-endpoint").is_some());
    stream.on_log(&bench.host);
    assert_eq!(bench.worker.buffered_bytes.get(), 0);
}

#[test]
fn a_pool_name_labels_the_filters_stats_and_goes_to_its_embedded_pool_service() {
    let bench =
        Bench::new(r#"{"pool": ["10.0.0.1:8000"], "pool_name": "llama", "poller": {"pool": ["10.0.0.1:8000"]}}"#);
    let embedded = bench.worker.config.poller.as_ref().map(|poller| poller.pool_name.as_str());
    assert_eq!(embedded, Some("llama"), "the no-singleton pool service is named after the filter's pool");
    let answer = bench.complete(&[], r#"{"model": "m", "prompt": "hello"}"#);
    assert_eq!(answer.destination.as_deref(), Some("10.0.0.1:8000"));
    bench.worker.stats.metrics.flush(&bench.host);
    assert_eq!(bench.host.metric("wasm_epp.pool.llama.requests_routed"), 1);
    assert_eq!(bench.host.metric("wasm_epp.requests_routed"), 0);
}

#[test]
fn a_session_sticks_to_its_pod_only_with_the_prefix_index_on() {
    for (config, sticks) in [("{}", true), (r#"{"prefix": {"enabled": false}}"#, false)] {
        let bench = Bench::new(config);
        let session = [COMPLETIONS.as_slice(), &[("x-session-id", "conversation-1")]].concat();
        bench.publish(1, &[("10.0.0.1:8000", 0.0), ("10.0.0.2:8000", 3.0)]);
        let first = bench.complete(&session, &completion("first turn"));
        assert_eq!(members(first.destination.as_deref().unwrap())[0], "10.0.0.1:8000", "{config}");
        // The session's pod is now the busier one (not saturated: below queue_threshold).
        bench.publish(2, &[("10.0.0.1:8000", 3.0), ("10.0.0.2:8000", 0.0)]);
        bench.tick();
        let second = bench.complete(&session, &completion("second turn, unrelated text"));
        let expected = if sticks { "10.0.0.1:8000" } else { "10.0.0.2:8000" };
        assert_eq!(members(second.destination.as_deref().unwrap())[0], expected, "{config}");
    }
}

#[test]
fn a_pool_service_scraping_less_often_than_pod_data_is_trusted_is_told_once() {
    use picker::address::PodAddress;
    use picker::pod_table::{encode_version, PodState, PodTable};
    let publish = |bench: &Bench, version: u64, poll_interval_ms: u64| {
        let now = bench.host.clock_ms.get();
        let mut pod = PodState::unknown(&PodAddress::parse("10.0.0.1:8000").unwrap());
        (pod.healthy, pod.last_success_ms) = (true, now);
        let table = PodTable { version, published_at_ms: now, poll_interval_ms, pods: vec![pod] };
        bench.host.set(keys::POD_TABLE, &table.encode(), None).unwrap();
        bench.host.set(keys::POD_TABLE_VERSION, &encode_version(version), None).unwrap();
        bench.heartbeat();
        bench.tick();
    };
    let bench = Bench::new(r#"{"stale_after_ms": 5000}"#);
    publish(&bench, 1, 100);
    assert!(!bench.worker.stale_cadence_told.get(), "scraped every 100 ms, trusted for 5 s");
    // The singleton's own configuration scrapes every 10 s: each pod is stale half the time.
    publish(&bench, 2, 10_000);
    assert!(bench.worker.stale_cadence_told.get());
}
