//! Faults among gateway replicas: a replica killed mid-run, and a hostile or broken peer
//! posting garbage, replays or a wrong secret straight to a peer listener.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use e2e::replicas::{prompt, ReplicaCluster};
use launcher::http;

const SECRET_HEADER: &str = "x-wasm-epp-peer-secret";

#[test]
fn a_killed_replica_does_not_hold_up_the_others() {
    let mut cluster = ReplicaCluster::start("replicas-kill", 3, 3, 3, true, |_| {});
    for group in 0..6 {
        cluster.served_via(group % 3, &prompt(group, 0));
    }
    cluster.wait_stat(0, "wasm_epp_peers_live", 2.0);
    let refused_before = cluster.stat(0, "wasm_epp_peer_send_skipped") + cluster.stat(0, "wasm_epp_peer_send_failed");
    cluster.kill(2);
    let started = Instant::now();
    let mut slowest = Duration::ZERO;
    let mut sent = 0;
    while started.elapsed() < Duration::from_secs(4) {
        let begun = Instant::now();
        cluster.served_via(sent % 2, &prompt(sent % 5, sent));
        slowest = slowest.max(begun.elapsed());
        sent += 1;
        std::thread::sleep(Duration::from_millis(10)); // a steady stream, not a CPU hog
    }
    let refused = (0..2)
        .map(|i| cluster.stat(i, "wasm_epp_peer_send_skipped") + cluster.stat(i, "wasm_epp_peer_send_failed"))
        .collect::<Vec<_>>();
    assert!(refused[0] > refused_before, "replica 0 never noticed the dead peer ({refused:?})");
    assert!(refused[1] > 0.0, "replica 1 never noticed the dead peer ({refused:?})");
    let live = cluster.stat(0, "wasm_epp_peers_live");
    let live_dropped = launcher::wait_until(Duration::from_secs(10), || cluster.stat(0, "wasm_epp_peers_live") <= 1.0);
    assert!(live_dropped, "replica 0 still counts {live} live peers");
    eprintln!("MEASURED {sent} requests through the 2 survivors, all 200, slowest {slowest:?}; sends to the dead peer skipped or failed: {refused:?}");
    cluster.assert_plugins_healthy();
}

/// A fake peer on a free port: answers every request 204 and hands over what it got
/// (headers, body), for at most `MAX_CAPTURED` requests.
fn capture_peer() -> (String, mpsc::Receiver<(String, Vec<u8>)>) {
    /// Enough messages to pick one; afterwards the fake peer stops answering.
    const MAX_CAPTURED: usize = 8;
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        let mut captured = 0;
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            while captured < MAX_CAPTURED {
                let mut head = String::new();
                let mut line = String::new();
                while reader.read_line(&mut line).unwrap_or(0) > 2 {
                    head.push_str(&line);
                    line.clear();
                }
                if head.is_empty() {
                    break;
                }
                let length = head
                    .lines()
                    .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_string()))
                    .and_then(|v| v.parse::<usize>().ok())
                    .unwrap_or(0);
                let mut body = vec![0; length];
                if reader.read_exact(&mut body).is_err() {
                    break;
                }
                let _ = stream.write_all(b"HTTP/1.1 204 No Content\r\n\r\n");
                captured += 1;
                if sender.send((head, body)).is_err() {
                    return;
                }
            }
            if captured >= MAX_CAPTURED {
                return;
            }
        }
    });
    (address, receiver)
}

#[test]
fn garbage_replays_and_wrong_secrets_are_refused_and_counted() {
    let (fake, captured) = capture_peer();
    // Replica 0 also sends to the fake peer, which keeps a real message to replay.
    let mut cluster = ReplicaCluster::start("replicas-hostile", 3, 2, 1, true, |_| {});
    let envoy = cluster
        .plan
        .start_replica_with(1, &cluster.dir, move |options| {
            let peers = options.poller_config.as_mut().and_then(|c| c.pointer_mut("/peers/peers"));
            peers.and_then(|p| p.as_array_mut()).unwrap().push(fake.into());
        })
        .unwrap();
    assert!(envoy.wait_for_healthy_pods(3, e2e::replicas::SETTLE));
    cluster.replicas[1] = Some(envoy);
    let home = cluster.served_via(1, &prompt(7, 0));
    let (head, message) =
        captured.recv_timeout(e2e::replicas::SETTLE).expect("replica 1 sent nothing to the fake peer");
    assert!(head.starts_with("POST /wasm-epp/v1/peer ") && message.starts_with(b"WEPP"), "{head}");
    let secret = head
        .lines()
        .find_map(|l| {
            l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case(SECRET_HEADER)).map(|(_, v)| v.trim().to_string())
        })
        .expect("the secret header");
    cluster.wait_stat(0, "wasm_epp_peer_messages_received", 1.0);
    let url = cluster.peer_url(0, "/wasm-epp/v1/peer");
    let post = |secret: &str, body: &[u8]| {
        http::post_bytes(
            &url,
            &[(SECRET_HEADER, secret), ("content-type", "application/octet-stream")],
            body,
            Duration::from_secs(5),
        )
        .unwrap()
        .status
    };
    let refused_before = cluster.stat(0, "wasm_epp_peer_requests_refused");
    assert_eq!(post("not-the-shared-secret-at-all", &message), 403, "wrong secret");
    assert_eq!(post("", &message), 403, "no secret");
    assert_eq!(post(&secret, b"not a peer message"), 400, "garbage");
    let not_found =
        http::post(&cluster.peer_url(0, "/v1/completions"), &[(SECRET_HEADER, &secret)], "{}", Duration::from_secs(5))
            .unwrap();
    assert_eq!(not_found.status, 404, "only the peer path exists");
    assert!(not_found.served_by().is_none(), "the peer listener routed a request to a pod");
    cluster.wait_stat(0, "wasm_epp_peer_requests_refused", refused_before + 4.0);
    // A well-framed message that decodes to nothing sensible, and a replay of a real one:
    // the listener takes both (it only checks framing); the pool service refuses them.
    let rejected_before = cluster.stat(0, "wasm_epp_peer_messages_rejected");
    let replayed_before = cluster.stat(0, "wasm_epp_peer_messages_replayed");
    let mut truncated = message.clone();
    truncated.truncate(message.len() / 2);
    truncated.extend_from_slice(&[0xff; 64]);
    assert_eq!(post(&secret, &truncated), 204);
    assert_eq!(post(&secret, &message), 204);
    cluster.wait_stat(0, "wasm_epp_peer_messages_rejected", rejected_before + 1.0);
    cluster.wait_stat(0, "wasm_epp_peer_messages_replayed", replayed_before + 1.0);
    // The public listener does not take peer messages: it routes the path to a pod like any other.
    // (Its counters cannot show it: real peers keep posting meanwhile. The answer can: a
    // message taken by the inbox is answered 204 by the filter, anything else by a pod.)
    let public = cluster.replica(0).url("/wasm-epp/v1/peer");
    let reply = http::post_bytes(&public, &[(SECRET_HEADER, &secret)], &message, Duration::from_secs(5)).unwrap();
    assert_ne!(reply.status, 204, "a client reached the peer inbox through the public listener");
    assert!(reply.served_by().is_some(), "the public listener routes the path to a pod: {}", reply.status);
    // Routing is unaffected: the prefix replica 1 placed still goes to the same pod.
    assert_eq!(cluster.served_via(0, &prompt(7, 1)), home);
    cluster.assert_plugins_healthy();
}
