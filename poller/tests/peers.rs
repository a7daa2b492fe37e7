//! Two gateway replicas' pool services exchanging decisions and load, natively: each on its
//! own in-memory host; the test is the network, copying each POST body into the other's
//! peer inbox.

// Test support functions unwrap and index too: a failure is a failed test.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use picker::inflight::WorkerInflight;
use picker::keys;
use picker::pod_table::PodTable;
use picker::prefix::events::{encode_batch, RoutingEvent};
use picker::prefix::{RingReader, StartAt};
use wasm_epp_host::{Host, MockHost, SharedStore};
use wasm_epp_poller::PoolService;

const NOW: u64 = 1_700_000_000_000;
const POD: &str = "10.0.0.1:8000";
const SECRET: &str = "a-shared-secret-of-some-length";
const METRICS: &str = "vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 0.0\n\
vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 0.0\n";

struct Replica {
    host: MockHost,
    service: PoolService,
    /// Calls already handled (answered or delivered).
    handled: usize,
}

impl Replica {
    fn new(seed: u64, peer: &str) -> Self {
        let host = MockHost::new();
        host.clock_ms.set(NOW);
        host.seed.set(seed);
        let config = format!(
            r#"{{"pool": ["{POD}"], "poll_interval_ms": 100,
                "peers": {{"peers": ["{peer}"], "secret": "{SECRET}", "send_interval_ms": 20}}}}"#
        );
        let mut service = PoolService::default();
        service.configure(&host, config.as_bytes()).unwrap();
        let mut replica = Self { host, service, handled: 0 };
        replica.tick(NOW);
        replica
    }

    /// Ticks, answering every new scrape healthy; returns the peer messages it sent.
    fn tick(&mut self, now: u64) -> Vec<Vec<u8>> {
        self.host.clock_ms.set(now);
        self.service.tick(&self.host, now);
        let calls = self.host.calls.borrow().clone();
        let mut sent = Vec::new();
        for call in calls.iter().skip(self.handled) {
            let snapshot = call.headers.iter().any(|(n, v)| n == ":method" && v == "GET");
            if call.cluster == "wasm_epp_metrics" {
                *self.host.call_answer.borrow_mut() = Some((200, METRICS.as_bytes().to_vec()));
                self.service.http_response(&self.host, call.token, METRICS.len());
            } else if snapshot {
                // No peer listener answers in these tests: the replica tries, then gives up.
                *self.host.call_answer.borrow_mut() = Some((404, Vec::new()));
                self.service.http_response(&self.host, call.token, 0);
            } else {
                sent.push(call.body.clone());
                *self.host.call_answer.borrow_mut() = Some((204, Vec::new()));
                self.service.http_response(&self.host, call.token, 0);
            }
        }
        self.handled = calls.len();
        sent
    }

    fn epoch(&self) -> u32 {
        PodTable::decode(&self.host.get(keys::POD_TABLE).unwrap().0.unwrap()).unwrap().pods[0].epoch
    }

    /// One of this replica's workers routed a prompt with `hashes` to the pod.
    fn decide(&mut self, hashes: &[u64]) {
        let event = RoutingEvent { pod: POD.into(), epoch: self.epoch(), origin: 0, hashes: hashes.to_vec() };
        let queue = self.host.resolve_queue("wasm-epp", keys::EVENT_QUEUE).unwrap().unwrap();
        self.host.enqueue(queue, &encode_batch(&[event])).unwrap();
        self.service.queue_ready(&self.host, queue);
    }

    fn receive(&mut self, messages: &[Vec<u8>]) {
        let inbox = self.host.resolve_queue("wasm-epp", keys::PEER_INBOX).unwrap().unwrap();
        for message in messages {
            self.host.enqueue(inbox, message).unwrap();
        }
        self.service.queue_ready(&self.host, inbox);
    }

    /// Every decision in this replica's ring.
    fn ring(&self) -> Vec<RoutingEvent> {
        RingReader::new(StartAt::Oldest).poll(&self.host, 64).unwrap().events
    }

    fn stat(&self, name: &str) -> u64 {
        self.service.metrics().pending(name) + self.host.metric(name)
    }
}

#[test]
fn a_decision_on_one_replica_reaches_the_others_ring_under_its_epochs() {
    let mut a = Replica::new(1, "127.0.0.2:10001");
    let mut b = Replica::new(2, "127.0.0.1:10001");
    a.decide(&[1, 2, 3]);
    let sent = a.tick(NOW + 50);
    assert_eq!(sent.len(), 1, "one message per peer per send");
    b.receive(&sent);
    let learned = b.ring();
    assert_eq!(learned.len(), 1);
    assert_eq!(learned[0].hashes, [1, 2, 3]);
    assert_eq!(learned[0].epoch, b.epoch(), "recorded under the receiver's epoch");
    assert_eq!(b.stat("wasm_epp.peer_events_received"), 1);
    // The receiver does not echo it back.
    let echoed = b.tick(NOW + 100);
    assert!(echoed.iter().all(|m| picker::peer::PeerMessage::decode(m).unwrap().events.is_empty()));
}

#[test]
fn a_burst_of_long_prompts_goes_out_in_messages_a_peer_accepts() {
    // ~500 decisions of 256 blocks (~2 KiB each) in one interval made one message over the
    // receivers' 1 MiB limit, refused whole (413): every peer lost the interval.
    let mut a = Replica::new(1, "127.0.0.2:10001");
    let epoch = a.epoch();
    let events: Vec<RoutingEvent> = (0..600u64)
        .map(|n| RoutingEvent { pod: POD.into(), epoch, origin: 0, hashes: (n * 256..(n + 1) * 256).collect() })
        .collect();
    let queue = a.host.resolve_queue("wasm-epp", keys::EVENT_QUEUE).unwrap().unwrap();
    a.host.enqueue(queue, &encode_batch(&events)).unwrap();
    a.service.queue_ready(&a.host, queue);
    let mut delivered = Vec::new();
    for round in 1..=5 {
        for body in a.tick(NOW + 50 * round) {
            assert!(body.len() <= picker::peer::MAX_MESSAGE_BYTES, "a message of {} bytes", body.len());
            delivered.extend(picker::peer::PeerMessage::decode(&body).unwrap().events);
        }
    }
    assert_eq!(delivered, events, "every decision, in order, none dropped");
    assert_eq!(a.stat("wasm_epp.peer_outbox_dropped"), 0);
}

#[test]
fn replays_garbage_and_stale_epochs_are_refused() {
    let mut a = Replica::new(1, "127.0.0.2:10001");
    let mut b = Replica::new(2, "127.0.0.1:10001");
    a.decide(&[7]);
    let sent = a.tick(NOW + 50);
    b.receive(&sent);
    b.receive(&sent);
    assert_eq!(b.stat("wasm_epp.peer_messages_replayed"), 1);
    b.receive(&[b"WEPP\x01garbage".to_vec(), vec![0; 3]]);
    assert_eq!(b.stat("wasm_epp.peer_messages_rejected"), 2);
    // A decision under an epoch the sender itself no longer holds is stale.
    let mut message = picker::peer::PeerMessage::decode(&sent[0]).unwrap();
    message.seq += 10;
    message.pods[0].epoch += 1;
    let event = RoutingEvent { pod: POD.into(), epoch: message.pods[0].epoch - 1, origin: 0, hashes: vec![9] };
    b.receive(&[message.encode(&encode_batch(&[event]))]);
    assert_eq!(b.stat("wasm_epp.peer_events_stale"), 1);
    assert_eq!(b.ring().len(), 1, "only the first, valid decision");
}

#[test]
fn a_peer_whose_clock_is_too_far_off_is_counted() {
    let mut a = Replica::new(1, "127.0.0.2:10001");
    let mut b = Replica::new(2, "127.0.0.1:10001");
    a.decide(&[7]);
    let sent = a.tick(NOW + 50);
    // b's clock is 20 s ahead of a's: every message of a's is refused (and a warning logged).
    b.host.clock_ms.set(NOW + 50 + 20_000);
    b.receive(&sent);
    assert_eq!(b.stat("wasm_epp.peer_messages_out_of_time"), 1);
    assert_eq!(b.stat("wasm_epp.peer_messages_rejected"), 1, "still counted among the rejected");
    assert!(b.ring().is_empty());
}

/// Replicas a and b, a's workers holding three requests on `POD`, one of them a 6,000-token
/// prompt not yet answered (published in a's store).
fn a_with_three_requests_and_b() -> (Replica, Replica) {
    let a = Replica::new(1, "127.0.0.2:10001");
    let b = Replica::new(2, "127.0.0.1:10001");
    let mut worker = WorkerInflight::new();
    for _ in 0..3 {
        worker.started(POD, 1, NOW);
    }
    worker.add_tokens(POD, 6_000);
    worker.sync(&a.host, NOW + 40, 60_000);
    (a, b)
}

#[test]
fn a_peers_load_reaches_the_workers_in_flight_view() {
    let (mut a, mut b) = a_with_three_requests_and_b();
    let sent = a.tick(NOW + 600); // a heartbeat carries the load even without decisions
    assert!(!sent.is_empty());
    b.receive(&sent);
    b.tick(NOW + 620);
    let mut b_worker = WorkerInflight::new();
    b_worker.sync(&b.host, NOW + 630, 60_000);
    assert_eq!(b_worker.count(POD), 3, "a's three requests count on b");
    assert_eq!(b_worker.tokens(POD), 6_000, "and its long prompt's tokens, before any scrape shows it");
}

#[test]
fn a_peers_older_message_handed_over_second_does_not_bring_back_its_older_load() {
    let mut a = Replica::new(1, "127.0.0.2:10001");
    let mut b = Replica::new(2, "127.0.0.1:10001");
    let mut worker = WorkerInflight::new();
    worker.started(POD, 1, NOW);
    worker.add_tokens(POD, 6_000);
    worker.sync(&a.host, NOW + 40, 60_000);
    let older = a.tick(NOW + 600);
    // The long prompt's first token: its tokens are released, and the next heartbeat says so.
    worker.release_tokens(POD, 6_000);
    worker.sync(&a.host, NOW + 1_150, 60_000);
    let newer = a.tick(NOW + 1_200);
    assert!(!older.is_empty() && !newer.is_empty());
    // Two connections hand them to b's workers in the other order (the ledger takes both).
    b.receive(&[newer, older].concat());
    b.tick(NOW + 1_220);
    assert_eq!(b.stat("wasm_epp.peer_messages_received"), 2);
    let mut b_worker = WorkerInflight::new();
    b_worker.sync(&b.host, NOW + 1_230, 60_000);
    assert_eq!(b_worker.count(POD), 1);
    assert_eq!(b_worker.tokens(POD), 0, "a's newest load, not the one it sent before");
}

#[test]
fn a_peers_waiting_workers_reach_the_workers_share_and_expire_with_it() {
    use picker::flow_share::{peer_waiting, waiting_key, waiting_record, SERVICE_STALE_AFTER_MS};
    let mut a = Replica::new(1, "127.0.0.2:10001");
    let mut b = Replica::new(2, "127.0.0.1:10001");
    // Two of a's workers hold requests waiting; a third's queue emptied; a fourth died waiting.
    for (slot, waiting, at) in [(0, 4, NOW + 590), (1, 1, NOW + 595), (2, 0, NOW + 595)] {
        a.host.set(&waiting_key(slot), &waiting_record(at, waiting, 0), None).unwrap();
    }
    a.host.set(&waiting_key(3), &waiting_record(NOW + 600 - SERVICE_STALE_AFTER_MS - 1, 7, 0), None).unwrap();
    let sent = a.tick(NOW + 600);
    assert_eq!(picker::peer::PeerMessage::decode(&sent[0]).unwrap().waiting_workers, 2);
    assert_eq!(peer_waiting(&b.host, NOW + 610).workers, 0, "nothing heard yet");
    b.receive(&sent);
    b.tick(NOW + 620);
    assert_eq!(peer_waiting(&b.host, NOW + 630).workers, 2, "b's workers count a's two waiting workers");
    assert_eq!(b.host.metric("wasm_epp.peer_waiting_workers"), 2);
    // a's queues empty: its next message says so.
    for slot in 0..2 {
        a.host.set(&waiting_key(slot), &waiting_record(NOW + 1_100, 0, 0), None).unwrap();
    }
    b.receive(&a.tick(NOW + 1_200));
    b.tick(NOW + 1_220);
    assert_eq!(peer_waiting(&b.host, NOW + 1_230).workers, 0);
    // a waits again, then goes silent: counted until SLOT_STALE_MS after its last message.
    a.host.set(&waiting_key(0), &waiting_record(NOW + 1_700, 3, 0), None).unwrap();
    let sent = a.tick(NOW + 1_800);
    b.host.clock_ms.set(NOW + 1_800);
    b.receive(&sent);
    let stale = picker::inflight::SLOT_STALE_MS;
    b.tick(NOW + 1_800 + stale);
    assert_eq!(peer_waiting(&b.host, NOW + 1_800 + stale).workers, 1);
    b.tick(NOW + 1_800 + stale + 100);
    assert_eq!(peer_waiting(&b.host, NOW + 1_800 + stale + 100).workers, 0, "a stopped sending: it no longer counts");
}

#[test]
fn a_peers_highest_waiting_band_reaches_the_workers_and_an_older_peers_workers_count_at_any_band() {
    use picker::flow_share::{peer_waiting, waiting_key, waiting_record, Waiting};
    let mut a = Replica::new(1, "127.0.0.2:10001");
    let mut c = Replica::new(4, "127.0.0.3:10001");
    let mut b = Replica::new(2, "127.0.0.1:10001");
    // a: two workers wait at band 2, one at band 0, and an older build's worker (no band).
    for (slot, top) in [(0, 2), (1, 2), (2, 0)] {
        a.host.set(&waiting_key(slot), &waiting_record(NOW + 590, 3, top), None).unwrap();
    }
    a.host.set(&waiting_key(3), &waiting_record(NOW + 590, 3, 5)[..12], None).unwrap();
    let sent = a.tick(NOW + 600);
    let message = picker::peer::PeerMessage::decode(&sent[0]).unwrap();
    assert_eq!((message.waiting_workers, message.waiting_top), (4, Some((2, 3))), "the older worker at band 2 too");
    // c: as the last build sends it (waiting workers, no band): one worker of unknown band.
    c.host.set(&waiting_key(0), &waiting_record(NOW + 590, 1, 7), None).unwrap();
    let old: Vec<Vec<u8>> = c.tick(NOW + 600).into_iter().map(|m| m[..m.len() - 8].to_vec()).collect();
    b.receive(&sent);
    b.receive(&old);
    b.tick(NOW + 620);
    assert_eq!(peer_waiting(&b.host, NOW + 630), Waiting { top: Some((2, 3)), unknown: 1, workers: 5 });
    assert_eq!(b.host.metric("wasm_epp.peer_waiting_workers"), 5);
}

#[test]
fn a_peer_that_predates_the_waiting_workers_keeps_peering_and_counts_none() {
    let (mut a, mut b) = a_with_three_requests_and_b();
    a.host
        .set(&picker::flow_share::waiting_key(0), &picker::flow_share::waiting_record(NOW + 590, 4, 0), None)
        .unwrap();
    a.decide(&[1, 2, 3]);
    // As an older sender encodes it: nothing after the batch (nor the one pod's tokens).
    let old: Vec<Vec<u8>> = a.tick(NOW + 600).into_iter().map(|m| m[..m.len() - 13 - (2 + 4)].to_vec()).collect();
    b.receive(&old);
    b.tick(NOW + 620);
    assert_eq!(b.ring().len(), 1, "its decisions are taken");
    let mut b_worker = WorkerInflight::new();
    b_worker.sync(&b.host, NOW + 630, 60_000);
    assert_eq!(b_worker.count(POD), 3, "and its load");
    assert_eq!(b_worker.tokens(POD), 0, "no token from a sender that sends none");
    assert_eq!(picker::flow_share::peer_waiting(&b.host, NOW + 630).workers, 0, "but no worker of it waits");
    assert_eq!(b.stat("wasm_epp.peer_messages_rejected"), 0);
}

#[test]
fn a_departed_peers_load_expires_after_the_clock_steps_back() {
    let (mut a, mut b) = a_with_three_requests_and_b();
    b.tick(NOW + 600);
    b.receive(&a.tick(NOW + 600));
    // a is gone; b's wall clock steps back an hour (NTP, a VM restored).
    let back = NOW - 3_600_000;
    b.tick(back);
    b.tick(back + picker::inflight::SLOT_STALE_MS + 100);
    let mut b_worker = WorkerInflight::new();
    b_worker.sync(&b.host, back + picker::inflight::SLOT_STALE_MS + 110, 60_000);
    assert_eq!(b_worker.count(POD), 0, "a's three requests no longer count on b");
}

#[test]
fn nothing_queues_behind_a_dead_peer() {
    let mut a = Replica::new(1, "127.0.0.2:10001");
    for round in 0..20 {
        a.decide(&[round]);
        a.host.clock_ms.set(NOW + 50 * (round + 1));
        a.service.tick(&a.host, NOW + 50 * (round + 1)); // sends, never answered
    }
    let sent = a.host.calls.borrow().iter().filter(|c| c.cluster == "wasm_epp_peers").count();
    assert!(sent <= 2 + 2, "at most two unanswered sends at a time (and the first ones): {sent}");
    assert!(a.stat("wasm_epp.peer_send_skipped") > 0);
}

#[test]
fn a_starting_replica_catches_up_from_a_peers_snapshot() {
    // The answer a peer listener gives to GET <path>/snapshot (see router's peer_receiver).
    let mut a = Replica::new(1, "127.0.0.2:10001");
    a.decide(&[4, 5, 6]);
    let events = a.ring();
    let snapshot = snapshot_of(a.epoch(), &events);

    let host = MockHost::new();
    host.clock_ms.set(NOW);
    let config = format!(
        r#"{{"pool": ["{POD}"], "poll_interval_ms": 100, "peers": {{"peers": ["127.0.0.1:10001"], "secret": "{SECRET}"}}}}"#
    );
    let mut b = Replica { host, service: PoolService::default(), handled: 0 };
    b.service.configure(&b.host, config.as_bytes()).unwrap();
    b.tick(NOW); // first round: scrapes answered, then asks for the snapshot on the next tick
    b.host.clock_ms.set(NOW + 10);
    b.service.tick(&b.host, NOW + 10);
    let ask = b.host.calls.borrow().iter().find(|c| c.headers.iter().any(|(_, v)| v.ends_with("/snapshot"))).cloned();
    let ask = ask.expect("a snapshot is asked for once the pool is known");
    *b.host.call_answer.borrow_mut() = Some((200, snapshot.clone()));
    b.service.http_response(&b.host, ask.token, snapshot.len());
    let learned = b.ring();
    assert_eq!(learned.len(), 1);
    assert_eq!((learned[0].hashes.clone(), learned[0].epoch), (vec![4, 5, 6], b.epoch()));
}

#[test]
fn peers_are_found_in_kubernetes_by_label() {
    let host = MockHost::new();
    host.clock_ms.set(NOW);
    let config = format!(
        r#"{{"pool": ["{POD}"], "poll_interval_ms": 100,
            "peers": {{"secret": "{SECRET}", "kubernetes": {{"namespace": "gw", "label_selector": "app=gateway",
                       "target_port": 10001, "relist_interval_ms": 1000}}}}}}"#
    );
    let mut replica = Replica { host, service: PoolService::default(), handled: 0 };
    replica.service.configure(&replica.host, config.as_bytes()).unwrap();
    replica.host.clock_ms.set(NOW);
    replica.service.tick(&replica.host, NOW);
    let list = replica.host.calls.borrow().iter().find(|c| c.cluster == "kubernetes_api").cloned().expect("a list");
    assert!(list.headers.iter().any(|(n, v)| n == ":path" && v.contains("namespaces/gw/pods")), "{list:?}");
    let pods = r#"{"kind": "PodList", "metadata": {"resourceVersion": "1"}, "items": [
        {"metadata": {"name": "gw-a", "namespace": "gw"}, "status": {"phase": "Running", "podIP": "10.2.0.7",
         "conditions": [{"type": "Ready", "status": "True"}]}}]}"#;
    *replica.host.call_answer.borrow_mut() = Some((200, pods.as_bytes().to_vec()));
    replica.service.http_response(&replica.host, list.token, pods.len());
    replica.handled = replica.host.calls.borrow().len();
    replica.decide_after_first_round();
    let sent =
        replica.host.calls.borrow().iter().filter(|c| c.cluster == "wasm_epp_peers").cloned().collect::<Vec<_>>();
    assert!(
        sent.iter().any(|c| c.headers.contains(&("x-gateway-destination-endpoint".into(), "10.2.0.7:10001".into()))),
        "{sent:?}"
    );
}

/// A replica finding its peers in Kubernetes (relisted every second, lists timing out after
/// 100 ms), whose first list is still unanswered.
fn replica_discovering_peers() -> (Replica, wasm_epp_host::mock::Call) {
    let host = MockHost::new();
    host.clock_ms.set(NOW);
    let config = format!(
        r#"{{"pool": ["{POD}"], "poll_interval_ms": 100,
            "peers": {{"secret": "{SECRET}", "kubernetes": {{"namespace": "gw", "label_selector": "app=gateway",
                       "target_port": 10001, "relist_interval_ms": 1000, "timeout_ms": 100}}}}}}"#
    );
    let mut replica = Replica { host, service: PoolService::default(), handled: 0 };
    replica.service.configure(&replica.host, config.as_bytes()).unwrap();
    replica.service.tick(&replica.host, NOW);
    let list = replica.host.calls.borrow().iter().find(|c| c.cluster == "kubernetes_api").cloned().unwrap();
    (replica, list)
}

impl Replica {
    /// Ticks at `now`, answering the scrapes only (the peer list is left to the test).
    fn tick_answering_scrapes(&mut self, now: u64) {
        self.host.clock_ms.set(now);
        self.service.tick(&self.host, now);
        let calls = self.host.calls.borrow().clone();
        for call in calls.iter().skip(self.handled).filter(|c| c.cluster == "wasm_epp_metrics") {
            *self.host.call_answer.borrow_mut() = Some((200, METRICS.as_bytes().to_vec()));
            self.service.http_response(&self.host, call.token, METRICS.len());
        }
        self.handled = calls.len();
    }

    fn snapshot_asks(&self) -> usize {
        self.host.calls.borrow().iter().filter(|c| c.headers.iter().any(|(_, v)| v.ends_with("/snapshot"))).count()
    }
}

const ONE_PEER: &str = r#"{"kind": "PodList", "metadata": {"resourceVersion": "1"}, "items": [
    {"metadata": {"name": "gw-a", "namespace": "gw"}, "status": {"phase": "Running", "podIP": "10.2.0.7",
     "conditions": [{"type": "Ready", "status": "True"}]}}]}"#;

#[test]
fn a_replica_whose_pool_is_known_before_its_peers_still_asks_them_for_a_snapshot() {
    let (mut replica, list) = replica_discovering_peers();
    for now in [NOW, NOW + 10, NOW + 100, NOW + 200] {
        replica.tick_answering_scrapes(now); // the first round ends; the peer list is unanswered
    }
    *replica.host.call_answer.borrow_mut() = Some((200, ONE_PEER.as_bytes().to_vec()));
    replica.service.http_response(&replica.host, list.token, ONE_PEER.len());
    replica.tick_answering_scrapes(NOW + 300);
    assert_eq!(replica.snapshot_asks(), 1, "asked once the peers are listed");
}

#[test]
fn a_peer_list_that_never_comes_holds_the_snapshot_only_so_long() {
    let (mut replica, list) = replica_discovering_peers();
    // Relisted every 1,000 ms, lists time out at 100: the wait ends 1,200 ms after it began.
    for now in [NOW, NOW + 10, NOW + 1_100, NOW + 1_250] {
        replica.tick_answering_scrapes(now);
    }
    *replica.host.call_answer.borrow_mut() = Some((200, ONE_PEER.as_bytes().to_vec()));
    replica.service.http_response(&replica.host, list.token, ONE_PEER.len());
    replica.tick_answering_scrapes(NOW + 1_300);
    assert_eq!(replica.snapshot_asks(), 0, "started without one");
}

#[test]
fn a_replica_that_asks_its_own_listener_for_a_snapshot_knows_itself() {
    const ME: &str = "127.0.0.9:10001";
    const OTHER: &str = "127.0.0.8:10001";
    let host = MockHost::new();
    host.clock_ms.set(NOW);
    let config = format!(
        r#"{{"pool": ["{POD}"], "poll_interval_ms": 100, "peers": {{"peers": ["{ME}", "{OTHER}"], "secret": "{SECRET}"}}}}"#
    );
    let mut replica = Replica { host, service: PoolService::default(), handled: 0 };
    replica.service.configure(&replica.host, config.as_bytes()).unwrap();
    replica.tick_answering_scrapes(NOW);
    replica.tick_answering_scrapes(NOW + 10);
    let ask = replica.host.calls.borrow().last().cloned().unwrap();
    assert!(ask.headers.contains(&(":authority".into(), ME.into())), "{ask:?}");
    // Its own listener's snapshot: its own ring, named with its own id.
    let own_id = String::from_utf8(replica.host.get(keys::REPLICA_ID).unwrap().0.unwrap()).unwrap();
    let event = RoutingEvent { pod: POD.into(), epoch: replica.epoch(), origin: 0, hashes: vec![1] };
    let snapshot = snapshot_of(replica.epoch(), &[event]);
    *replica.host.call_answer_headers.borrow_mut() = vec![("x-wasm-epp-replica".into(), own_id)];
    *replica.host.call_answer.borrow_mut() = Some((200, snapshot.clone()));
    replica.service.http_response(&replica.host, ask.token, snapshot.len());
    assert!(replica.ring().is_empty(), "nothing learned from itself");
    replica.service.tick(&replica.host, NOW + 20);
    let next = replica.host.calls.borrow().last().cloned().unwrap();
    assert!(next.headers.contains(&(":authority".into(), OTHER.into())), "the other peer asked next: {next:?}");
    assert_eq!(replica.host.metric("wasm_epp.peer_self_listed"), 1, "a gauge, flushed on the tick");
}

impl Replica {
    /// Answers the first round of scrapes, then ticks until a heartbeat goes out.
    fn decide_after_first_round(&mut self) {
        self.tick(NOW + 100);
        self.tick(NOW + 700);
    }
}

#[test]
fn a_replica_that_lists_itself_stops_sending_to_itself() {
    const ME: &str = "127.0.0.9:10001";
    const OTHER: &str = "127.0.0.8:10001";
    let host = MockHost::new();
    host.clock_ms.set(NOW);
    let config = format!(
        r#"{{"pool": ["{POD}"], "poll_interval_ms": 100,
            "peers": {{"peers": ["{ME}", "{OTHER}"], "secret": "{SECRET}", "send_interval_ms": 20, "heartbeat_ms": 50}}}}"#
    );
    let mut service = PoolService::default();
    service.configure(&host, config.as_bytes()).unwrap();
    // What this Envoy's peer listener would put in its answers.
    let own_id = String::from_utf8(host.get(keys::REPLICA_ID).unwrap().0.unwrap()).unwrap();
    let posts_to = |host: &MockHost, address: &str| {
        host.calls
            .borrow()
            .iter()
            .filter(|c| {
                c.cluster == "wasm_epp_peers"
                    && c.headers.iter().any(|(n, v)| n == ":authority" && v == address)
                    && c.headers.iter().any(|(n, v)| n == ":method" && v == "POST")
            })
            .count()
    };
    let mut handled = 0;
    for round in 0..10u64 {
        let now = NOW + 60 * round;
        host.clock_ms.set(now);
        service.tick(&host, now);
        let calls = host.calls.borrow().clone();
        for call in calls.iter().skip(handled) {
            let to_me = call.headers.iter().any(|(n, v)| n == ":authority" && v == ME);
            let id = if to_me { own_id.clone() } else { "00000000000000aa".to_string() };
            *host.call_answer_headers.borrow_mut() = vec![("x-wasm-epp-replica".into(), id)];
            *host.call_answer.borrow_mut() =
                Some((if call.cluster == "wasm_epp_metrics" { 200 } else { 204 }, Vec::new()));
            service.http_response(&host, call.token, 0);
        }
        handled = calls.len();
    }
    assert_eq!(posts_to(&host, ME), 1, "one message reached itself, then no more");
    assert!(posts_to(&host, OTHER) >= 5, "the real peer still gets every message");
    // A gauge: the last value set, flushed to the host on a tick.
    service.tick(&host, NOW + 1_000);
    assert_eq!(host.metric("wasm_epp.peer_self_listed"), 1);
}

#[test]
fn a_thousand_replicas_coming_and_going_leave_only_the_live_ones_counted() {
    use picker::address::PodAddress;
    use picker::inflight::SLOT_STALE_MS;
    use picker::peer::{PeerMessage, PeerPod};
    let mut b = Replica::new(2, "10.0.9.9:9000");
    let mut now = NOW + 1_000;
    b.tick(now);
    // A replica every 100 ms, each heard once, each with one request on the pod, then gone
    // (a rollout of the gateway, scaled up and down all day): at most 21 heard within the
    // staleness window at any time.
    let live_at_most = (SLOT_STALE_MS / 100 + 1) as u32;
    for replica in 0..1_000u64 {
        let pods = vec![PeerPod { address: PodAddress::parse(POD).unwrap(), epoch: b.epoch(), inflight: 1, tokens: 0 }];
        let message = PeerMessage {
            replica: 1_000 + replica,
            seq: 1,
            sent_ms: now,
            pods,
            events: Vec::new(),
            waiting_workers: 0,
            waiting_top: None,
        };
        b.receive(&[message.encode(&encode_batch(&[]))]);
        b.tick(now);
        let mut worker = WorkerInflight::new();
        worker.sync(&b.host, now, 60_000);
        assert!(worker.count(POD) <= live_at_most, "replica {replica}: {} counted", worker.count(POD));
        assert!(b.host.metric("wasm_epp.peers_live") <= u64::from(live_at_most), "replica {replica}");
        now += 100;
    }
    assert_eq!(b.stat("wasm_epp.peer_messages_received"), 1_000, "each replica heard, none refused");
    now += SLOT_STALE_MS + 1;
    b.tick(now);
    let mut worker = WorkerInflight::new();
    worker.sync(&b.host, now, 60_000);
    assert_eq!(worker.count(POD), 0, "every departed replica's load expired");
    assert_eq!(b.host.metric("wasm_epp.peers_live"), 0);
}

#[test]
fn a_replica_whose_wall_clock_stepped_back_keeps_telling_its_peers() {
    let (mut a, _b) = a_with_three_requests_and_b();
    assert!(!a.tick(NOW + 600).is_empty(), "a heartbeat carries the load");
    // a's clock steps back an hour (NTP at boot, a VM restored): its last send lay an hour
    // ahead, and it sent nothing, heartbeat or decisions, until the clock caught up; its
    // peers dropped its load after SLOT_STALE_MS.
    let back = NOW - 3_600_000;
    let sent: usize = (0..10).map(|step| a.tick(back + step * 100).len()).sum();
    assert!(sent >= 1, "a heartbeat within the heartbeat interval");
}

/// A replica's snapshot answer: POD under `epoch` with nothing in flight, and `events`.
fn snapshot_of(epoch: u32, events: &[RoutingEvent]) -> Vec<u8> {
    let pods = vec![picker::peer::PeerPod {
        address: picker::address::PodAddress::parse(POD).unwrap(),
        epoch,
        inflight: 0,
        tokens: 0,
    }];
    let message = picker::peer::PeerMessage {
        replica: 0,
        seq: 0,
        sent_ms: NOW,
        pods,
        events: Vec::new(),
        waiting_workers: 0,
        waiting_top: None,
    };
    message.encode(&encode_batch(events))
}
