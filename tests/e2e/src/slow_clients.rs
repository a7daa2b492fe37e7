//! Slow clients: each sends a completion's headers, then trickles its body a few KB at a
//! time, as a hostile or broken client holding memory would. Envoy's `request_timeout`
//! must cut each one (408), so the memory they can hold is bounded by
//! clients x request_timeout x trickle rate, whatever the declared body size.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes a slow client sends per step, and the pause between steps.
pub const TRICKLE_BYTES: usize = 4 * 1024;
pub const TRICKLE_PAUSE: Duration = Duration::from_millis(250);
/// The body size each slow client declares (it never gets that far).
pub const DECLARED_BODY_BYTES: usize = 1 << 20;

/// What the slow clients saw.
#[derive(Debug, Default)]
pub struct SlowOutcome {
    /// Requests cut by Envoy with 408 (request_timeout).
    pub timed_out: usize,
    /// Requests that ended otherwise (another status, a reset without an answer).
    pub other: usize,
    /// Body bytes sent by all clients together.
    pub bytes_sent: usize,
}

/// One slow request on a fresh connection, until the server answers or closes, or `stop`.
fn one_slow_request(port: u16, stop: &AtomicBool, sent: &AtomicUsize) -> Option<u16> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_millis(1))).ok()?;
    let head = format!(
        "POST /v1/completions HTTP/1.1\r\nhost: gateway\r\ncontent-type: application/json\r\ncontent-length: {DECLARED_BODY_BYTES}\r\n\r\n{{\"model\":\"sim-model\",\"prompt\":\""
    );
    stream.write_all(head.as_bytes()).ok()?;
    let chunk = vec![b'a'; TRICKLE_BYTES];
    let mut answer = [0u8; 512];
    let mut total = 0;
    while !stop.load(Ordering::SeqCst) && total + TRICKLE_BYTES < DECLARED_BODY_BYTES {
        match stream.read(&mut answer) {
            Ok(0) => return None,
            Ok(n) => return String::from_utf8_lossy(&answer[..n]).get(9..12).and_then(|s| s.parse().ok()),
            Err(_) => {}
        }
        if stream.write_all(&chunk).is_err() {
            return None;
        }
        total += TRICKLE_BYTES;
        sent.fetch_add(TRICKLE_BYTES, Ordering::Relaxed);
        std::thread::sleep(TRICKLE_PAUSE);
    }
    None
}

/// `clients` slow clients for `duration`, each starting a new slow request when Envoy
/// ends the last one.
pub fn run_slow_clients(port: u16, clients: usize, duration: Duration) -> SlowOutcome {
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicUsize::new(0));
    let timed_out = Arc::new(AtomicUsize::new(0));
    let other = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..clients)
        .map(|_| {
            let (stop, sent, timed_out, other) = (stop.clone(), sent.clone(), timed_out.clone(), other.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    match one_slow_request(port, &stop, &sent) {
                        Some(408) => timed_out.fetch_add(1, Ordering::SeqCst),
                        _ if stop.load(Ordering::SeqCst) => 0,
                        _ => other.fetch_add(1, Ordering::SeqCst),
                    };
                }
            })
        })
        .collect();
    let started = Instant::now();
    while started.elapsed() < duration {
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, Ordering::SeqCst);
    for thread in threads {
        let _ = thread.join();
    }
    SlowOutcome {
        timed_out: timed_out.load(Ordering::SeqCst),
        other: other.load(Ordering::SeqCst),
        bytes_sent: sent.load(Ordering::SeqCst),
    }
}
