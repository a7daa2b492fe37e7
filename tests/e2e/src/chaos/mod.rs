//! Mixed traffic for the "everything on" test (tests/chaos.rs): requests of every kind a
//! user sends, drawn from a seeded generator so a failing run can be replayed, each sent and
//! its outcome recorded (status, answering pod, whether its body ended whole) for the
//! invariants to judge.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

pub mod h2;
pub mod judge;

/// A small deterministic generator (splitmix64): the e2e crate has no `rand`, and a seed
/// printed by the test replays the same requests in the same order per client.
pub struct Draw(u64);

impl Draw {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// 0..bound.
    pub fn below(&mut self, bound: u64) -> u64 {
        self.next_u64() % bound.max(1)
    }

    /// True with `percent` % chance.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

/// The inference API a request uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Api {
    Completions,
    Chat,
    Responses,
    Messages,
}

impl Api {
    pub fn path(self) -> &'static str {
        match self {
            Self::Completions => "/v1/completions",
            Self::Chat => "/v1/chat/completions",
            Self::Responses => "/v1/responses",
            Self::Messages => "/v1/messages",
        }
    }
}

/// What a request is, and so what answer it may get.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// A request vLLM serves: 200 expected.
    Valid { api: Api, stream: bool },
    /// A body that is not JSON: vLLM's 400 (the gateway routes it by load, `invalid_body: route`).
    BadJson,
    /// A completions body without `prompt`: the pod's 400.
    MissingPrompt,
    /// A model no pod serves: the gateway's 404.
    UnknownModel,
    /// A stream the client closes after its first bytes: no answer to judge, only what it leaves.
    LeavesMidStream,
    /// A body the client stops sending halfway, then closes: likewise.
    LeavesMidBody,
    /// A whole request the client gives up on before its answer (while it waits in the
    /// queue, or while its pod generates): likewise.
    LeavesWaiting,
    /// An audio upload (`multipart/form-data`, vLLM's transcriptions and translations), routed
    /// by its form's `model`, its fields before the file as the SDKs send them or the file
    /// first as a hand-written form may: 200 from a pod of its model, not queued by flow control.
    Upload { file_first: bool },
    /// A request vLLM serves whose client reads its answer's first bytes, then stops reading
    /// for a while (`Planned::pause`) with its connection open, as a paused consumer or a slow
    /// link does: an HTTP/1 client leaves its socket unread, an HTTP/2 client leaves its
    /// stream's flow-control window shut. Then it `resumes` reading to the end (judged as a
    /// `Valid` answer), or leaves (a reset or a close; judged as `LeavesMidStream`).
    StopsReading { api: Api, stream: bool, resumes: bool },
}

/// One request to send.
#[derive(Debug, Clone)]
pub struct Planned {
    pub kind: Kind,
    pub path: &'static str,
    pub content_type: String,
    pub model: String,
    pub body: Vec<u8>,
    pub headers: Vec<(String, String)>,
}

const BOUNDARY: &str = "chaos-form-7d3b";

/// An upload's form: `model` and another field, and a file of a few KB (before the fields when
/// `file_first`).
fn upload_form(draw: &mut Draw, model: &str, file_first: bool) -> Vec<u8> {
    let field = |name: &str, value: &[u8]| {
        let mut part = format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"").into_bytes();
        if name == "file" {
            part.extend_from_slice(b"; filename=\"talk.wav\"\r\nContent-Type: audio/wav");
        }
        part.extend_from_slice(b"\r\n\r\n");
        part.extend_from_slice(value);
        part.extend_from_slice(b"\r\n");
        part
    };
    // Bytes of every value, line breaks and dashes among them, as a recording has.
    let seed = draw.next_u64();
    let audio: Vec<u8> = (0..1_000 + draw.below(8_000)).map(|i| (seed.wrapping_add(i * 7) % 256) as u8).collect();
    let fields = [field("model", model.as_bytes()), field("language", b"en")].concat();
    let file = field("file", &audio);
    let mut body = if file_first { [file, fields].concat() } else { [fields, file].concat() };
    body.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
    body
}

/// Shared prompt openings (about 1 KB each), so prefix affinity has something to keep.
const SHARED_PREFIXES: usize = 4;

fn prompt(draw: &mut Draw, client: usize, index: usize) -> String {
    let tail = format!("client {client} request {index}: say something");
    if draw.chance(60) {
        let prefix = draw.below(SHARED_PREFIXES as u64);
        let opening = (0..60).map(|i| format!("doc{prefix} line {i};")).collect::<String>();
        format!("{opening} {tail}")
    } else {
        format!("unique {} {tail}", draw.next_u64())
    }
}

/// The `stream` flag as a client writes it: `true`, or sometimes vLLM's lax `"true"`.
fn stream_flag(draw: &mut Draw, stream: bool) -> Value {
    match (stream, draw.chance(25)) {
        (true, true) => json!("true"),
        (stream, _) => json!(stream),
    }
}

fn valid_body(draw: &mut Draw, api: Api, model: &str, stream: bool, text: &str) -> Value {
    let max_tokens = if draw.chance(20) { 32 + draw.below(96) } else { 4 + draw.below(24) };
    let flag = stream_flag(draw, stream);
    let n = if draw.chance(20) { 1 + draw.below(4) } else { 1 };
    match api {
        Api::Completions => {
            json!({"model": model, "prompt": text, "max_tokens": max_tokens, "stream": flag, "n": n})
        }
        Api::Chat => json!({"model": model, "messages": [{"role": "user", "content": text}],
                            "max_tokens": max_tokens, "stream": flag, "n": n}),
        Api::Responses => json!({"model": model, "input": text, "max_output_tokens": max_tokens, "stream": flag}),
        Api::Messages => json!({"model": model, "messages": [{"role": "user", "content": text}],
                                "max_tokens": max_tokens, "stream": flag}),
    }
}

impl Planned {
    /// The request's priority (`x-gateway-inference-priority`), 0 when it sets none.
    pub fn priority(&self) -> i32 {
        let header = self.headers.iter().find(|(name, _)| name == "x-gateway-inference-priority");
        header.and_then(|(_, value)| value.parse().ok()).unwrap_or(0)
    }
}

/// Priority bands the traffic uses (`x-gateway-inference-priority`); `None` is the default 0.
pub const PRIORITIES: [Option<i32>; 4] = [None, Some(-1), Some(0), Some(2)];
const TENANTS: [Option<&str>; 4] = [None, Some("tenant-a"), Some("tenant-b"), Some("tenant-c")];

/// What share of the requests is which kind, beyond the fixed mix of `plan`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Mix {
    /// Percent of the requests vLLM serves whose clients stop reading their answers
    /// ([`Kind::StopsReading`]); 0 draws the same requests as before that kind existed.
    pub stops_reading: u64,
}

/// Draws the next request of `client`; `models` are the ones the pool serves, `forged` the
/// addresses a client names as its destination (none may be followed: outside the pool, or
/// pods of any model).
pub fn plan(draw: &mut Draw, client: usize, index: usize, models: &[&str], forged: &[String], mix: Mix) -> Planned {
    let model = draw.pick(models).to_string();
    let text = prompt(draw, client, index);
    let roll = draw.below(100);
    let api = *draw.pick(&[Api::Completions, Api::Chat, Api::Responses, Api::Messages]);
    let stream = draw.chance(50);
    let path = match roll {
        0..=10 => Api::Completions.path(),
        27..=29 => "/v1/audio/transcriptions",
        30..=31 => "/v1/audio/translations",
        _ => api.path(),
    };
    let content_type = match roll {
        27..=31 => format!("multipart/form-data; boundary={BOUNDARY}"),
        _ => "application/json".to_owned(),
    };
    let (kind, model, body) = match roll {
        0..=3 => (Kind::BadJson, model, br#"{"model": "sim-model", "prompt": "cut sh"#.to_vec()),
        4..=7 => (Kind::MissingPrompt, model.clone(), json!({"model": model, "max_tokens": 4}).to_string().into()),
        8..=10 => {
            let body = json!({"model": "no-such-model", "prompt": text, "max_tokens": 4});
            (Kind::UnknownModel, "no-such-model".to_owned(), body.to_string().into())
        }
        11..=16 => {
            let body = valid_body(draw, api, &model, true, &text);
            (Kind::LeavesMidStream, model, body.to_string().into())
        }
        17..=21 => {
            let body = valid_body(draw, api, &model, stream, &text);
            (Kind::LeavesMidBody, model, body.to_string().into())
        }
        22..=26 => {
            let body = valid_body(draw, api, &model, stream, &text);
            (Kind::LeavesWaiting, model, body.to_string().into())
        }
        27..=31 => {
            let file_first = draw.chance(30);
            let body = upload_form(draw, &model, file_first);
            (Kind::Upload { file_first }, model, body)
        }
        _ => {
            let body = valid_body(draw, api, &model, stream, &text);
            // Drawn only when asked for: a replayed seed of a run without them draws the same.
            let kind = if mix.stops_reading > 0 && draw.chance(mix.stops_reading) {
                Kind::StopsReading { api, stream, resumes: draw.chance(50) }
            } else {
                Kind::Valid { api, stream }
            };
            (kind, model, body.to_string().into())
        }
    };
    let mut headers = Vec::new();
    if let Some(priority) = draw.pick(&PRIORITIES) {
        headers.push(("x-gateway-inference-priority".to_owned(), priority.to_string()));
    }
    if let Some(tenant) = draw.pick(&TENANTS) {
        headers.push(("x-llm-d-inference-fairness-id".to_owned(), tenant.to_string()));
    }
    if draw.chance(15) {
        headers.push(("x-gateway-destination-endpoint".to_owned(), draw.pick(forged).clone()));
    }
    if draw.chance(20) {
        // A conversation's session, which sticks to its pod while that pod serves.
        headers.push(("x-session-id".to_owned(), format!("session-{}", draw.below(8))));
    }
    if draw.chance(10) {
        // llm-d's own queue TTL for this request, a Go duration.
        headers.push(("x-llm-d-inference-ttl".to_owned(), format!("{}ms", 50 + draw.below(500))));
    }
    Planned { kind, path, content_type, model, body, headers }
}

/// What came back.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub planned: Planned,
    pub started: Instant,
    pub ended: Instant,
    /// `None`: no answer at all (a transport error or a timeout), with the reason.
    pub status: Result<u16, String>,
    /// The simulator's `x-served-by`, else Envoy's `x-gateway-destination-endpoint-served`.
    pub pod: Option<String>,
    pub dropped_reason: Option<String>,
    /// `x-llm-d-flow-queue-duration-ms`: set on answers flow control let through.
    pub queue_duration: Option<String>,
    pub local_reply: bool,
    pub body: String,
    /// The body was read to its end without a transport error.
    pub whole: bool,
    /// Sent on a stream of a shared HTTP/2 connection (`h2`), not on a connection of its own.
    pub http2: bool,
}

/// Longest a request may take before it counts as a hang (the flow-control TTL, a generation
/// and Envoy's retries fit well within it).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Sends `planned` to the gateway on `port` and records what came back.
pub fn send(port: u16, planned: Planned) -> Outcome {
    let started = Instant::now();
    match planned.kind {
        Kind::LeavesMidBody => leave_early(port, &planned, planned.body.len() / 2, MID_BODY_PAUSE),
        Kind::LeavesWaiting => leave_early(port, &planned, planned.body.len(), planned.patience()),
        _ => return send_whole(port, planned, started),
    }
    Outcome::unanswered(planned, started, "left".into())
}

/// How long a client that leaves mid-body waits after its first half (so the gateway holds
/// the partial body) before it goes.
pub const MID_BODY_PAUSE: Duration = Duration::from_millis(50);

impl Planned {
    /// How long a client that leaves while waiting waits for its answer: 0-300 ms, varied by
    /// the body, so some leave while queued, some while generating.
    pub fn patience(&self) -> Duration {
        Duration::from_millis(self.body.len() as u64 % 300)
    }

    /// How long a client that stops reading leaves its answer unread: 0.5-3 s, varied by the
    /// body. Longer than a generation here (so the pod is done while the gateway still holds
    /// the answer's end), a flow-control TTL of a sheddable request and the outlier ejections'
    /// base; well within `REQUEST_TIMEOUT` and the test.
    pub fn pause(&self) -> Duration {
        Duration::from_millis(500 + (self.body.len() as u64).wrapping_mul(7) % 2_500)
    }

    /// The client reads the answer's first bytes only, then leaves.
    pub fn reads_first_bytes_only(&self) -> bool {
        matches!(self.kind, Kind::LeavesMidStream | Kind::StopsReading { resumes: false, .. })
    }
}

impl Outcome {
    /// No answer came (the client left, or the transport failed): `why`.
    pub fn unanswered(planned: Planned, started: Instant, why: String) -> Self {
        Self {
            planned,
            started,
            ended: Instant::now(),
            status: Err(why),
            pod: None,
            dropped_reason: None,
            queue_duration: None,
            local_reply: false,
            body: String::new(),
            whole: false,
            http2: false,
        }
    }
}

fn send_whole(port: u16, planned: Planned, started: Instant) -> Outcome {
    let url = format!("http://127.0.0.1:{port}{}", planned.path);
    let agent = ureq::AgentBuilder::new().timeout(REQUEST_TIMEOUT).build();
    let mut request = agent.post(&url).set("content-type", &planned.content_type);
    for (name, value) in &planned.headers {
        request = request.set(name, value);
    }
    let response = match request.send_bytes(&planned.body) {
        Ok(response) | Err(ureq::Error::Status(_, response)) => response,
        Err(ureq::Error::Transport(error)) => return Outcome::unanswered(planned, started, error.to_string()),
    };
    let status = response.status();
    let header = |name: &str| response.header(name).map(str::to_owned);
    let pod = header("x-served-by").or_else(|| header("x-gateway-destination-endpoint-served"));
    let dropped_reason = header("x-llm-d-request-dropped-reason");
    let queue_duration = header("x-llm-d-flow-queue-duration-ms");
    let local_reply = header("x-wasm-epp").as_deref() == Some("local-reply");
    let mut body = String::new();
    let mut reader = response.into_reader().take(4 << 20);
    let whole = match planned.kind {
        // Read the first bytes, then go: dropping the reader closes the connection.
        Kind::LeavesMidStream => {
            let mut first = [0u8; 64];
            let _ = reader.read(&mut first);
            false
        }
        // Read the first bytes, leave the socket unread a while, then read on or go. (The
        // answers here fit the sockets' buffers, so Envoy's stream ends at once: it is the
        // HTTP/2 clients, their windows shut, that keep Envoy holding an answer's end.)
        Kind::StopsReading { resumes, .. } => {
            let mut read = Vec::new();
            let mut first = [0u8; 64];
            let first_read = reader.read(&mut first).unwrap_or(0);
            read.extend_from_slice(&first[..first_read]);
            std::thread::sleep(planned.pause());
            let whole = resumes && reader.read_to_end(&mut read).is_ok();
            if resumes {
                body = String::from_utf8_lossy(&read).into_owned();
            }
            whole
        }
        _ => reader.read_to_string(&mut body).is_ok(),
    };
    Outcome {
        planned,
        started,
        ended: Instant::now(),
        status: Ok(status),
        pod,
        dropped_reason,
        queue_duration,
        local_reply,
        body,
        whole,
        http2: false,
    }
}

/// Sends the headers and the first `sent` bytes of the body, waits `patience` (so the
/// gateway holds it), closes.
fn leave_early(port: u16, planned: &Planned, sent: usize, patience: Duration) {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else { return };
    let mut head =
        format!("POST {} HTTP/1.1\r\nhost: gateway\r\ncontent-type: {}\r\n", planned.path, planned.content_type);
    for (name, value) in &planned.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!("content-length: {}\r\n\r\n", planned.body.len()));
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(planned.body.get(..sent).unwrap_or_default());
    std::thread::sleep(patience);
}

/// A stream that opened with an error event (vLLM's way of failing after its headers).
pub fn stream_has_error_event(body: &str) -> bool {
    body.lines().filter_map(|line| line.strip_prefix("data: ")).any(|data| data.starts_with("{\"error\""))
        || body.contains("event: error")
}
