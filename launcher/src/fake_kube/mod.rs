//! A fake Kubernetes API server for the discovery tests: plain HTTP/1.1 on 127.0.0.1,
//! one thread per connection, answering LIST pods and GET InferencePool in the shapes the
//! real API server uses (PodList with `resourceVersion` and `continue`, `Status` errors).
//!
//! The test changes the cluster while Envoy watches it ([`FakeKube::update`]): pods turning
//! NotReady, changing IP, terminating; pagination; `410 Gone`; 401 without the expected
//! bearer token; outages. [`envoy`] starts Envoy in Kubernetes mode against it, with the
//! token delivered the way the manifests deliver it (an SDS file Envoy watches).

pub mod envoy;
pub mod state;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use state::{FakePod, KubeState, Outage, RecordedRequest};

use state::{status_answer, Answer};

/// Connections served at once; more are closed unanswered (Envoy opens a handful).
const MAX_CONNECTIONS: usize = 64;
/// Request head size accepted (request line plus headers).
const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Header lines accepted per request.
const MAX_HEADERS: usize = 100;
/// Requests served on one keep-alive connection before it is closed.
const MAX_REQUESTS_PER_CONNECTION: usize = 1000;
/// How often a hung answer checks whether the server is stopping.
const HANG_STEP: Duration = Duration::from_millis(50);

pub struct FakeKube {
    port: u16,
    state: Arc<Mutex<KubeState>>,
    stopping: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
}

impl FakeKube {
    /// Starts serving `namespace` on a free port of 127.0.0.1.
    pub fn start(namespace: &str) -> std::io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0))?;
        let port = listener.local_addr()?.port();
        let state = Arc::new(Mutex::new(KubeState::new(namespace)));
        let stopping = Arc::new(AtomicBool::new(false));
        let acceptor = {
            let (state, stopping) = (Arc::clone(&state), Arc::clone(&stopping));
            std::thread::spawn(move || accept_loop(&listener, &state, &stopping))
        };
        Ok(Self { port, state, stopping, acceptor: Some(acceptor) })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Changes the cluster (or the server's behaviour) and returns what `change` returns.
    pub fn update<R>(&self, change: impl FnOnce(&mut KubeState) -> R) -> R {
        change(&mut lock(&self.state))
    }

    /// The requests received so far.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.update(|state| state.requests.clone())
    }
}

impl Drop for FakeKube {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::SeqCst);
        // Wake the blocking accept.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

fn accept_loop(listener: &TcpListener, state: &Arc<Mutex<KubeState>>, stopping: &Arc<AtomicBool>) {
    let open = Arc::new(AtomicUsize::new(0));
    for stream in listener.incoming() {
        if stopping.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = stream else { continue };
        if open.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            open.fetch_sub(1, Ordering::SeqCst);
            let _ = stream.shutdown(Shutdown::Both);
            continue;
        }
        let (state, stopping, open) = (Arc::clone(state), Arc::clone(stopping), Arc::clone(&open));
        std::thread::spawn(move || {
            serve(stream, &state, &stopping);
            open.fetch_sub(1, Ordering::SeqCst);
        });
    }
}

struct Request {
    path: String,
    authorization: Option<String>,
    keep_alive: bool,
}

fn serve(stream: TcpStream, state: &Mutex<KubeState>, stopping: &AtomicBool) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let Ok(mut writer) = stream.try_clone() else { return };
    let mut reader = BufReader::new(stream);
    for _ in 0..MAX_REQUESTS_PER_CONNECTION {
        let Some(request) = read_request(&mut reader) else { return };
        let outage = lock(state).outage.clone();
        let answer = match outage {
            Some(Outage::Close) => {
                record(state, &request, 0);
                let _ = writer.shutdown(Shutdown::Both);
                return;
            }
            Some(Outage::Hang(duration)) => {
                record(state, &request, 0);
                let until = Instant::now() + duration;
                while Instant::now() < until && !stopping.load(Ordering::SeqCst) {
                    std::thread::sleep(HANG_STEP);
                }
                let _ = writer.shutdown(Shutdown::Both);
                return;
            }
            Some(Outage::Status(code)) => status_answer(code, "InternalError", "the fake API server is down"),
            Some(Outage::Garbage) => Answer { status: 200, body: "<html><body>502 Bad Gateway</body></html>".into() },
            None => authorised_answer(&mut lock(state), &request),
        };
        record(state, &request, answer.status);
        if write_answer(&mut writer, &answer, request.keep_alive).is_err() || !request.keep_alive {
            return;
        }
    }
}

fn authorised_answer(state: &mut KubeState, request: &Request) -> Answer {
    if let Some(token) = &state.required_token {
        if request.authorization.as_deref() != Some(format!("Bearer {token}").as_str()) {
            return status_answer(401, "Unauthorized", "Unauthorized");
        }
    }
    state.answer(&request.path)
}

/// A poisoned lock only means a test thread panicked; the state is still usable.
fn lock(state: &Mutex<KubeState>) -> std::sync::MutexGuard<'_, KubeState> {
    state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn record(state: &Mutex<KubeState>, request: &Request, status: u16) {
    lock(state).record(RecordedRequest {
        path: request.path.clone(),
        authorization: request.authorization.clone(),
        status,
    });
}

/// Reads one request head (GET requests carry no body); `None` on EOF or garbage.
fn read_request(reader: &mut BufReader<TcpStream>) -> Option<Request> {
    let mut limited = reader.take(MAX_HEAD_BYTES as u64);
    let mut line = String::new();
    limited.read_line(&mut line).ok().filter(|n| *n > 0)?;
    let mut parts = line.split_whitespace();
    let (_method, path, version) = (parts.next()?, parts.next()?.to_string(), parts.next()?.to_string());
    let mut authorization = None;
    let mut keep_alive = version == "HTTP/1.1";
    for _ in 0..MAX_HEADERS {
        let mut header = String::new();
        limited.read_line(&mut header).ok()?;
        let header = header.trim_end();
        if header.is_empty() {
            return Some(Request { path, authorization, keep_alive });
        }
        let (name, value) = header.split_once(':')?;
        match name.trim().to_ascii_lowercase().as_str() {
            "authorization" => authorization = Some(value.trim().to_string()),
            "connection" if value.trim().eq_ignore_ascii_case("close") => keep_alive = false,
            _ => {}
        }
    }
    None
}

fn write_answer(writer: &mut TcpStream, answer: &Answer, keep_alive: bool) -> std::io::Result<()> {
    let reason = match answer.status {
        200 => "OK",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        410 => "Gone",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    };
    let connection = if keep_alive { "keep-alive" } else { "close" };
    let head = format!(
        "HTTP/1.1 {} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: {connection}\r\n\r\n",
        answer.status,
        answer.body.len()
    );
    writer.write_all(head.as_bytes())?;
    writer.write_all(answer.body.as_bytes())?;
    writer.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(port: u16, path: &str, token: Option<&str>) -> (u16, String) {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let auth = token.map(|t| format!("authorization: Bearer {t}\r\n")).unwrap_or_default();
        write!(stream, "GET {path} HTTP/1.1\r\nhost: kubernetes\r\n{auth}connection: close\r\n\r\n").unwrap();
        let mut reply = String::new();
        stream.read_to_string(&mut reply).unwrap();
        let status = reply.split_whitespace().nth(1).unwrap().parse().unwrap();
        (status, reply.split_once("\r\n\r\n").unwrap().1.to_string())
    }

    #[test]
    fn serves_lists_checks_tokens_and_fails_on_demand() {
        let kube = FakeKube::start("llm").unwrap();
        kube.update(|s| s.put_pod(FakePod::ready("a", "10.0.0.1", &[("app", "vllm")])));
        let (status, body) = get(kube.port(), "/api/v1/namespaces/llm/pods?labelSelector=app%3Dvllm", None);
        assert_eq!(status, 200);
        assert!(body.contains("\"podIP\":\"10.0.0.1\""));
        kube.update(|s| s.required_token = Some("secret".into()));
        assert_eq!(get(kube.port(), "/api/v1/namespaces/llm/pods", None).0, 401);
        assert_eq!(get(kube.port(), "/api/v1/namespaces/llm/pods", Some("secret")).0, 200);
        kube.update(|s| s.outage = Some(Outage::Status(503)));
        assert_eq!(get(kube.port(), "/api/v1/namespaces/llm/pods", Some("secret")).0, 503);
        let seen = kube.requests();
        assert_eq!(seen.len(), 4);
        assert_eq!(seen[2].authorization.as_deref(), Some("Bearer secret"));
    }
}
