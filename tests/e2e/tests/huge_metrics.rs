//! A pod whose /metrics page is huge (a GiB, streamed as fast as Envoy reads it): Envoy's
//! async client cuts each scrape once `http.async_response_buffer_limit` bytes are
//! buffered (set to the singleton's 4 MiB max_metrics_bytes in the template), so Envoy's
//! memory stays bounded while the singleton scrapes it every 100 ms.
//!
//! The bound is Envoy's, not the plugin's: `AsyncRequestSharedImpl::onData`
//! (source/common/http/async_client_impl.cc) drains the data and resets the stream when
//! the buffered body would pass the runtime limit (default 32 MiB).

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use e2e::Cluster;
use launcher::proc_stats::rss_bytes;

/// What the huge page claims to be; it is never sent whole.
const DECLARED_PAGE_BYTES: u64 = 1 << 30;
const CHUNK: usize = 64 * 1024;
const RUN: Duration = Duration::from_secs(10);
const MIB: f64 = 1024.0 * 1024.0;
/// Slack over the limit for allocator behaviour and the rest of the traffic.
const SLACK: u64 = 64 << 20;

/// A fake pod: /metrics answers 404 until `huge` is set, then a page of DECLARED_PAGE_BYTES.
struct HugeMetricsPod {
    address: String,
    huge: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
}

impl HugeMetricsPod {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let (huge, sent) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
        let (flag, counter) = (huge.clone(), sent.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (flag, counter) = (flag.clone(), counter.clone());
                std::thread::spawn(move || serve(stream, &flag, &counter));
            }
        });
        Self { address, huge, sent }
    }
}

fn serve(stream: TcpStream, huge: &AtomicBool, sent: &AtomicU64) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    loop {
        let mut line = String::new();
        let mut request_line = String::new();
        // Request line and headers; the scrape has no body.
        loop {
            line.clear();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if request_line.is_empty() {
                request_line = line.clone();
            }
            if line == "\r\n" {
                break;
            }
        }
        // The singleton asks `/metrics?name[]=...` (filtered, as vLLM serves it); a server
        // that ignores the query answers the whole page, as this one does.
        if !(request_line.starts_with("GET /metrics ") || request_line.starts_with("GET /metrics?")) {
            // Not a model server: anything routed here is retried on the real pod.
            let _ =
                writer.write_all(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
            return;
        }
        if !huge.load(Ordering::SeqCst) {
            if writer.write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n").is_err() {
                return;
            }
            continue;
        }
        let head =
            format!("HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {DECLARED_PAGE_BYTES}\r\n\r\n");
        if writer.write_all(head.as_bytes()).is_err() {
            return;
        }
        let chunk: Vec<u8> =
            b"vllm:num_requests_waiting{model_name=\"m\"} 0\n".iter().copied().cycle().take(CHUNK).collect();
        let mut written = 0;
        while written < DECLARED_PAGE_BYTES {
            if writer.write_all(&chunk).is_err() {
                return;
            }
            written += CHUNK as u64;
            sent.fetch_add(CHUNK as u64, Ordering::Relaxed);
        }
    }
}

#[test]
fn a_huge_metrics_page_is_cut_while_it_streams_and_memory_stays_bounded() {
    let fake = HugeMetricsPod::start();
    let cluster =
        Cluster::start("huge-metrics", 1, &["--time-scale", "0"], |options| e2e::add_to_pool(options, &fake.address));
    assert!(cluster.envoy.wait_for_healthy_pods(1, Duration::from_secs(15)), "{}", cluster.envoy.log_tail(20));
    let pid = cluster.envoy.pid();
    let baseline = rss_bytes(pid).unwrap();
    fake.huge.store(true, Ordering::SeqCst);
    let samples = Mutex::new(Vec::new());
    let started = std::time::Instant::now();
    while started.elapsed() < RUN {
        samples.lock().unwrap().push(rss_bytes(pid).unwrap());
        std::thread::sleep(Duration::from_millis(500));
    }
    let samples = samples.into_inner().unwrap();
    let peak = samples.iter().copied().max().unwrap_or(baseline);
    let limit = launcher::envoy::DEFAULT_ASYNC_RESPONSE_LIMIT_BYTES;
    // One scrape of the fake pod at a time, each buffering at most `limit` (plus one read).
    let bound = baseline + 2 * limit + SLACK;
    let sent = fake.sent.load(Ordering::Relaxed);
    let series: Vec<String> = samples.iter().map(|s| format!("{:.0}", *s as f64 / MIB)).collect();
    println!(
        "huge /metrics for {RUN:?}: the fake pod wrote {:.0} MiB; Envoy RSS MiB baseline {:.0}, peak {:.0}, bound {:.0}: [{}]",
        sent as f64 / MIB,
        baseline as f64 / MIB,
        peak as f64 / MIB,
        bound as f64 / MIB,
        series.join(", ")
    );
    assert!(
        cluster.envoy.log().contains("buffer size limit for async client response body has been exceeded"),
        "Envoy never cut a scrape:\n{}",
        cluster.envoy.log_tail(20)
    );
    // Scraped every 100 ms: at least ten cut scrapes in the run, or the singleton stopped.
    assert!(sent > 10 * limit, "the huge page was scraped only {sent} bytes' worth: did the singleton stop?");
    assert!(!cluster.envoy.log().contains("panicked"), "a VM panicked:\n{}", cluster.envoy.log_tail(20));
    assert!(peak <= bound, "Envoy RSS {peak} over the bound {bound}");
    assert_eq!(cluster.envoy.stat("wasm_epp_pods_healthy"), Some(1.0), "the real pod left the rotation");
    for i in 0..10 {
        let reply = cluster.complete(&format!("beside a huge page {i}"));
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
}
