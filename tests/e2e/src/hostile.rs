//! Tools for the hostile-input tests: a canary port that must never be reached, a raw TCP
//! HTTP/1.1 exchange (for bytes HTTP libraries refuse to send), and Envoy's Wasm failure
//! counters.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use launcher::envoy::Envoy;

/// A listening port outside the pool that counts every connection it receives.
pub struct Canary {
    pub address: String,
    hits: Arc<AtomicUsize>,
}

impl Canary {
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let hits = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&hits);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                counter.fetch_add(1, Ordering::SeqCst);
                drop(stream);
            }
        });
        Self { address, hits }
    }

    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

/// The most of an answer read back (a status line and headers are all a check needs).
const MAX_REPLY_BYTES: usize = 1 << 20;

/// What came back on a raw connection.
#[derive(Debug)]
pub struct RawReply {
    pub status: u16,
    /// The header block, lower-cased, for `x-served-by` and the like.
    pub head: String,
}

impl RawReply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|line| line.strip_prefix(name)?.strip_prefix(':').map(str::trim))
    }
}

/// Sends `request` as is and reads until the server closes (or `timeout`). The answer is
/// well formed when it starts with an HTTP/1.x status line and its headers end.
pub fn raw_exchange(port: u16, request: &[u8], timeout: Duration) -> Result<RawReply, String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
    stream.set_read_timeout(Some(timeout)).map_err(|e| e.to_string())?;
    stream.set_write_timeout(Some(timeout)).map_err(|e| e.to_string())?;
    // A server may answer (and close) before reading everything: a failed write is not
    // the verdict, the answer is.
    let _ = stream.write_all(request);
    let mut answer = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    while answer.len() < MAX_REPLY_BYTES {
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&chunk[..n]),
            Err(_) if !answer.is_empty() => break,
            Err(e) => return Err(format!("read: {e}")),
        }
        if complete(&answer) {
            break;
        }
    }
    let text = String::from_utf8_lossy(&answer).to_string();
    let (head, _) = text.split_once("\r\n\r\n").ok_or_else(|| format!("no end of headers in {:?}", clip(&text)))?;
    let status_line = head.lines().next().unwrap_or_default();
    let status = status_line
        .strip_prefix("HTTP/1.1 ")
        .or_else(|| status_line.strip_prefix("HTTP/1.0 "))
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("no status line in {:?}", clip(&text)))?;
    Ok(RawReply { status, head: head.to_lowercase() })
}

/// The answer is whole: headers ended and the content-length body is there.
fn complete(answer: &[u8]) -> bool {
    let text = String::from_utf8_lossy(answer);
    let Some((head, body)) = text.split_once("\r\n\r\n") else { return false };
    let length = head
        .to_lowercase()
        .lines()
        .find_map(|l| l.strip_prefix("content-length:").map(|v| v.trim().parse::<usize>().ok()));
    matches!(length, Some(Some(n)) if body.len() >= n)
}

fn clip(text: &str) -> String {
    text.chars().take(200).collect()
}

/// A plain completion request as raw bytes, with extra raw header lines.
pub fn completion_request(extra_headers: &[u8], prompt: &str) -> Vec<u8> {
    let body = format!(r#"{{"model":"sim-model","prompt":"{prompt}","max_tokens":2}}"#);
    let mut request = Vec::new();
    request.extend_from_slice(b"POST /v1/completions HTTP/1.1\r\nhost: gateway\r\nconnection: close\r\n");
    request.extend_from_slice(b"content-type: application/json\r\n");
    request.extend_from_slice(extra_headers);
    request.extend_from_slice(format!("content-length: {}\r\n\r\n{body}", body.len()).as_bytes());
    request
}

/// Envoy's Wasm failure counters that are not zero (`/stats`, text form): a VM that
/// failed at runtime or was reloaded after a failure. All zero = no VM has died.
pub fn wasm_failures(envoy: &Envoy) -> Vec<String> {
    let reply = launcher::http::get(&envoy.admin_url("/stats"), Duration::from_secs(5)).unwrap();
    reply
        .body
        .lines()
        .filter(|line| line.starts_with("wasm."))
        .filter(|line| {
            let name = line.split(':').next().unwrap_or_default();
            ["fail", "reload", "runtime_error", "crash"].iter().any(|word| name.contains(word))
        })
        .filter(|line| line.rsplit(':').next().map(str::trim) != Some("0"))
        .map(str::to_string)
        .collect()
}

/// Every `wasm.*` stat line, for failure messages and reports.
pub fn wasm_stats(envoy: &Envoy) -> String {
    let reply = launcher::http::get(&envoy.admin_url("/stats"), Duration::from_secs(5)).unwrap();
    reply.body.lines().filter(|line| line.starts_with("wasm.")).collect::<Vec<_>>().join("\n")
}

/// One stat from the admin `/stats` text form, by its exact name (names with characters the
/// Prometheus form rewrites, such as `wasm.wasm-epp.vm_reload_success`).
pub fn admin_stat(envoy: &Envoy, name: &str) -> Option<f64> {
    let reply = launcher::http::get(&envoy.admin_url("/stats"), Duration::from_secs(5)).ok()?;
    reply.body.lines().find_map(|line| line.strip_prefix(name)?.strip_prefix(": ")?.trim().parse().ok())
}

/// Ordinary requests in a row that must route after hostile input.
pub const ORDINARY_IN_A_ROW: usize = 20;

/// The plugin survived: no VM failure in Envoy's log or counters, and `ORDINARY_IN_A_ROW`
/// ordinary requests in a row are served by pool pods.
pub fn assert_vm_never_failed(cluster: &crate::Cluster) {
    for i in 0..ORDINARY_IN_A_ROW {
        let reply = cluster.complete(&format!("ordinary {i}"));
        assert_eq!(
            reply.status,
            200,
            "ordinary request {i} after hostile input: {}\n{}",
            reply.body,
            cluster.envoy.log_tail(20)
        );
        cluster.served_by_pool(&reply);
    }
    // The counters are there to be read (at 0): a renamed plugin or stat would leave nothing to
    // find non-zero, and the check would pass without looking.
    let stats = wasm_stats(&cluster.envoy);
    assert!(stats.contains("wasm.wasm-epp.vm_reload_failure: "), "no reload counters of the plugin:\n{stats}");
    let failures = wasm_failures(&cluster.envoy);
    assert!(failures.is_empty(), "Wasm failure counters are not 0: {failures:?}\n{}", wasm_stats(&cluster.envoy));
    let log = cluster.envoy.log();
    for sign in ["Wasm VM failed", "panicked", "Plugin configured to fail closed"] {
        assert!(!log.contains(sign), "Envoy's log shows a VM failure ({sign}):\n{}", cluster.envoy.log_tail(30));
    }
    println!(
        "after hostile input: {ORDINARY_IN_A_ROW} ordinary requests in a row routed; Wasm failure counters 0:\n{}",
        wasm_stats(&cluster.envoy)
    );
}
