//! A fake vLLM pod, for the tests whose pod must answer what the simulator never does (cut
//! its answer, go silent mid-answer, end it in trailers): it answers the pool service's
//! scrapes and model list as an idle pod serving `sim-model`, over HTTP/1.1 keep-alive, and
//! hands every other request to the test.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;

/// An idle vLLM page naming the simulator's model.
pub const IDLE_METRICS: &str = "vllm:num_requests_running{model_name=\"sim-model\",engine=\"0\"} 0\n\
vllm:num_requests_waiting{model_name=\"sim-model\",engine=\"0\"} 0\n\
vllm:kv_cache_usage_perc{model_name=\"sim-model\",engine=\"0\"} 0\n";

/// Its `/v1/models` answer.
pub const ONE_MODEL: &str = r#"{"object":"list","data":[{"id":"sim-model","object":"model","parent":null}]}"#;

/// A request the pod read: its request line and body.
pub struct Request {
    pub line: String,
    pub body: Vec<u8>,
}

impl Request {
    /// Whether the body (the prompt) contains `text`.
    pub fn asks_for(&self, text: &str) -> bool {
        String::from_utf8_lossy(&self.body).contains(text)
    }
}

/// The connection the request came on: the test may write part of an answer and wait there.
pub struct Connection {
    pub reader: BufReader<TcpStream>,
    pub writer: TcpStream,
}

/// A whole HTTP/1.1 `200` answer of `body`.
pub fn whole(content_type: &str, body: &str) -> String {
    format!("HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\r\n{body}", body.len())
}

/// Starts a pod on a free port of 127.0.0.1 and returns its address. `answer` is called for
/// each request but the scrapes: the answer to write (the connection then serves the next
/// request), or `None` when the test answered on the connection itself (it is then closed).
pub fn start(answer: impl Fn(&Request, &mut Connection) -> Option<String> + Send + Sync + 'static) -> String {
    start_listing(IDLE_METRICS, ONE_MODEL, answer)
}

/// [`start`] for a pod whose scrapes answer `metrics` and whose `/v1/models` answers `models`
/// (a pod that lists what it does not serve).
pub fn start_listing(
    metrics: &'static str,
    models: &'static str,
    answer: impl Fn(&Request, &mut Connection) -> Option<String> + Send + Sync + 'static,
) -> String {
    let listing = Listing { metrics, models };
    let listener = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("cannot bind a fake pod: {e}"));
    let address = listener.local_addr().map(|a| a.to_string()).unwrap_or_default();
    let answer = Arc::new(answer);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let answer = answer.clone();
            std::thread::spawn(move || serve(stream, listing, &*answer));
        }
    });
    address
}

/// What the pod says of itself to the pool service.
#[derive(Clone, Copy)]
struct Listing {
    metrics: &'static str,
    models: &'static str,
}

fn serve(stream: TcpStream, listing: Listing, answer: &dyn Fn(&Request, &mut Connection) -> Option<String>) {
    let Ok(reader) = stream.try_clone().map(BufReader::new) else { return };
    let mut connection = Connection { reader, writer: stream };
    while let Some(request) = read_request(&mut connection.reader) {
        let text = if request.line.starts_with("GET /metrics") {
            whole("text/plain", listing.metrics)
        } else if request.line.starts_with("GET /v1/models") {
            whole("application/json", listing.models)
        } else {
            match answer(&request, &mut connection) {
                Some(text) => text,
                None => return,
            }
        };
        if connection.writer.write_all(text.as_bytes()).is_err() {
            return;
        }
    }
}

/// The next request on the connection (`None` once it closes): its line, headers (of which
/// `content-length` is read), and body.
fn read_request(reader: &mut BufReader<TcpStream>) -> Option<Request> {
    let (mut line, mut content_length) = (String::new(), 0usize);
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).unwrap_or(0) == 0 {
            return None;
        }
        if line.is_empty() {
            line = header.clone();
        }
        if let Some(value) = header.to_ascii_lowercase().strip_prefix("content-length:") {
            content_length = value.trim().parse().unwrap_or(0);
        }
        if header == "\r\n" {
            break;
        }
    }
    let mut body = vec![0; content_length];
    reader.read_exact(&mut body).ok()?;
    Some(Request { line, body })
}
