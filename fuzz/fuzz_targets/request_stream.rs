//! The shipped request path (`wasm_epp_router::RequestStream` on a configured `Worker`) on a
//! `MockHost`, driven as Envoy drives it, with everything a client or shared data can hold:
//! header names and values as arbitrary bytes (not UTF-8 included), arbitrary bodies split
//! into arbitrary chunks, streams reset early, pod tables published as arbitrary bytes or
//! built from pods, corrupt in-flight counts, heartbeats and clock jumps, ticks in between,
//! two requests at once (body chunks interleaved, sharing the worker's buffer cap), and the
//! answer of a routed request: its status, the pod Envoy says answered (a pod or any bytes),
//! response flags and arbitrary body chunks, read by learning (usage, TTFT), outlier
//! detection, the response-id watch and the comparison. Requests and answers may also be
//! client- and vLLM-shaped ones (`REQUESTS`, `ANSWERS`), cut anywhere, which random bytes would
//! rarely spell: routed by model, learned from. Configurations include learning,
//! outlier detection, a path prefix, flow control (requests held, released on ticks) and P/D.
//!
//! Properties: never panics; a destination header present after a request alone was written
//! by the router in this request (never the client's); any destination header names only
//! pods of the worker's table or configured pool, each comma-separated entry; no client copy of
//! `x-gateway-destination-endpoint`, `x-envoy-original-dst-host` or `x-prefiller-host-port`
//! survives; a local reply is 200 (the health probe), 400, 429 or 503; the worker's buffered
//! byte count is back to 0 once the stream has logged.

#![no_main]

use std::rc::Rc;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use picker::keys;
use picker::pod_table::{encode_version, PodState, PodTable};
use picker::role::PodRole;
use picker::store::SharedStore;
use picker_fuzz::CANONICAL_ADDRESSES;
use wasm_epp_host::{HeaderMap, MockHost};
use wasm_epp_router::{configure, tick, RequestStream, Step, Worker};

/// Configurations the worker may start with: defaults; small body limits that reject invalid
/// bodies, with a static pool; prefix off, another destination header, no fallbacks, a rewrite;
/// the live comparison; learning (every answer watched, every usage chunk read), outlier
/// detection and a path prefix; flow control (one request a pod, a TTL header) with P/D.
const CONFIGS: [&str; 6] = [
    "{}",
    r#"{"max_body_bytes": 1024, "max_buffered_bytes": 1536, "invalid_body": "reject",
        "pool": ["10.0.0.9:8000", "[fd00::9]:80"], "fail_open_max_age_ms": 1000}"#,
    r#"{"destination_header": "x-pick", "prefix": {"enabled": false}, "fallback_destinations": 0,
        "priority_header": "x-priority",
        "models": {"rewrites": [{"model": "public", "targets": [{"model": "sql-lora", "weight": 1}]}]}}"#,
    // The live comparison: each arm on its own pods, the baseline by load.
    r#"{"comparison": {"baseline_share": 0.5}, "debug_decision_header": true}"#,
    r#"{"learning": {"enabled": true, "watch_share": 1.0, "usage_chunks_per_stream": 1000.0,
        "usage_chunks_per_second": 1000000.0}, "outlier_detection": {"enabled": true, "consecutive_failures": 1},
        "path_prefix": "/llama"}"#,
    r#"{"flow_control": {"enabled": true, "max_inflight_per_pod": 1, "max_queued_requests": 2},
        "learning": {"enabled": true, "watch_share": 1.0}, "pd": {"threshold_tokens": 8}, "fallback_destinations": 2}"#,
];

/// Headers a pool cluster could follow; no client copy may survive the request headers.
const FORBIDDEN: [&str; 3] = ["x-gateway-destination-endpoint", "x-envoy-original-dst-host", "x-prefiller-host-port"];

/// Paths a request draws from (besides arbitrary bytes).
/// (`/tokenize` and `/v1/embeddings` are other endpoints: their bodies are read for `model`.)
const PATHS: [&str; 8] = [
    "/v1/responses",
    "/v1/completions",
    "/v1/chat/completions",
    "/wasm-epp/healthz",
    "/v1/models",
    "/v1/completions?x=1",
    "/tokenize",
    "/v1/embeddings",
];

/// Requests as clients send them (path, body), which a fuzzer would rarely write byte by byte:
/// each endpoint's, streamed with usage, with media, a batch, behind the path prefix.
const REQUESTS: [(&str, &str); 6] = [
    (
        "/v1/chat/completions",
        r#"{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"system","content":"You are a helpful assistant. Answer in one short sentence, and never more than twenty words, whatever the question."},{"role":"user","content":"hi"}]}"#,
    ),
    (
        "/v1/completions",
        r#"{"model":"qwen","prompt":"Once upon a time, in a land far away, there lived","max_tokens":4}"#,
    ),
    (
        "/v1/responses",
        r#"{"model":"m","stream":true,"input":[{"role":"user","content":[{"type":"input_text","text":"what is it?"},{"type":"input_image","image_url":"data:image/png;base64,QUJDRA=="}]}]}"#,
    ),
    (
        "/llama/v1/chat/completions",
        r#"{"model":"sql-lora","messages":[{"role":"user","content":"x"},{"content":"y","role":"assistant"},{"role":"user","content":"z"}]}"#,
    ),
    (
        "/v1/completions",
        r#"{"model":"m","prompt":["a","b"],"echo":true,"logprobs":1,"stream":true,"stream_options":{}}"#,
    ),
    ("/v1/messages", r#"{"model":"m","max_tokens":9,"stream":true,"messages":[{"role":"user","content":"hi"}]}"#),
];

/// Answers as vLLM writes them (cut where the input says): a whole completion, a chat stream
/// and a Responses stream, each with `usage` and cached tokens, and a Messages stream.
const ANSWERS: [&str; 5] = [
    r#"{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":" a king"}],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15,"prompt_tokens_details":{"cached_tokens":8}}}"#,
    concat!(
        "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}],\"usage\":null}\n\n",
        "data: {\"id\":\"c1\",\"choices\":[],\"usage\":{\"prompt_tokens\":40,\"completion_tokens\":2,",
        "\"total_tokens\":42,\"prompt_tokens_details\":{\"cached_tokens\":32}}}\n\ndata: [DONE]\n\n",
    ),
    concat!(
        "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_abc\"}}\n\n",
        "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"x\"}\n\n",
        "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_abc\",",
        "\"usage\":{\"input_tokens\":30,\"output_tokens\":2,\"total_tokens\":32,",
        "\"input_tokens_details\":{\"cached_tokens\":16}}}}\n\n",
    ),
    concat!(
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",",
        "\"usage\":{\"input_tokens\":20,\"output_tokens\":1,\"cache_read_input_tokens\":16}}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"Hi\"}}\n\n",
        "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
    ),
    // A stream whose generation failed after its 200 (outlier detection reads its first event).
    concat!(
        "data: {\"error\": {\"message\": \"Internal server error\", \"type\": \"InternalServerError\", ",
        "\"param\": null, \"code\": 500}}\n\ndata: [DONE]\n\n",
    ),
];

/// Most operations, requests, header pairs and body chunks one input drives: enough to reach
/// every branch, small enough that one run stays fast.
const MAX_OPS: usize = 32;
const MAX_EXTRA_HEADERS: usize = 16;
const MAX_CHUNKS: usize = 8;

#[derive(Arbitrary, Debug, Clone)]
struct Request {
    method_get: bool,
    path: Result<u8, Vec<u8>>,
    /// Extra headers, names and values as bytes (may repeat or forge anything).
    headers: Vec<(Vec<u8>, Vec<u8>)>,
    /// Client copies of the forbidden headers and the configured destination header.
    forged: [Option<Vec<u8>>; 4],
    /// `Some(true)`: the body's real length; `Some(false)`: a made-up one.
    content_length: Option<(bool, u64)>,
    body: Vec<u8>,
    /// Where the body is cut into chunks (cumulative sizes, as Envoy reports them).
    cuts: Vec<u16>,
    /// The headers end the stream (no body callbacks follow).
    headers_end_stream: bool,
    /// The client goes away after this many body chunks.
    reset_after: Option<u8>,
    /// The answer, if the request reached a pod.
    response: Option<Response>,
    /// A client's request from [`REQUESTS`] in place of `path` and `body`.
    canned: Option<u8>,
}

impl Request {
    /// The request as sent: `canned` replaces the path and the body.
    fn resolved(&self) -> Request {
        let mut request = self.clone();
        if let Some(which) = self.canned {
            let (path, body) = REQUESTS[usize::from(which) % REQUESTS.len()];
            request.path = Err(path.as_bytes().to_vec());
            request.body = body.as_bytes().to_vec();
            // Half of them give their own queue TTL (llm-d's header, in Go's duration syntax).
            if usize::from(which) / REQUESTS.len() % 2 == 1 {
                request.headers.insert(0, (b"x-llm-d-inference-ttl".to_vec(), b"1m0.25s".to_vec()));
            }
        }
        request
    }
}

/// What comes back from upstream: Envoy's view of the answer.
#[derive(Arbitrary, Debug, Clone)]
struct Response {
    /// `:status`: a number or any bytes.
    status: Result<u16, Vec<u8>>,
    /// The pod Envoy says answered (`upstream.address`): one of the pods, or any bytes.
    served: Option<Result<u8, Vec<u8>>>,
    /// Envoy's served-endpoint header as well.
    served_header: bool,
    /// `response.flags` (an upstream reset, a downstream one).
    flags: Option<u64>,
    headers: Vec<(Vec<u8>, Vec<u8>)>,
    /// The headers end the answer.
    end_at_headers: bool,
    chunks: Vec<Vec<u8>>,
    /// An answer from [`ANSWERS`] in place of `chunks`, cut where `cuts` say.
    canned: Option<(u8, Vec<u16>)>,
}

impl Response {
    /// The body chunks as they pass.
    fn chunks(&self) -> Vec<Vec<u8>> {
        let Some((which, cuts)) = &self.canned else {
            return self.chunks.iter().take(MAX_CHUNKS).cloned().collect();
        };
        let answer = ANSWERS[usize::from(*which) % ANSWERS.len()].as_bytes();
        let mut cuts: Vec<usize> = cuts.iter().take(MAX_CHUNKS).map(|&c| usize::from(c).min(answer.len())).collect();
        cuts.push(answer.len());
        cuts.sort_unstable();
        let mut start = 0;
        let mut chunks = Vec::new();
        for end in cuts {
            if end > start {
                chunks.extend(answer.get(start..end).map(<[u8]>::to_vec));
                start = end;
            }
        }
        chunks
    }
}

#[derive(Arbitrary, Debug)]
enum Op {
    Request(Request),
    PublishBytes {
        table: Vec<u8>,
        version: u64,
    },
    PublishPods {
        pods: Vec<(u8, bool, u8, u16)>,
        version: u64,
    },
    Heartbeat {
        age_ms: u32,
    },
    /// Another worker's (or a bug's) bytes in an in-flight slot.
    CorruptInflight {
        slot: u8,
        bytes: Vec<u8>,
    },
    Advance {
        ms: u32,
    },
    Jump {
        to_ms: u64,
    },
    Tick,
    Overlapping(Box<(Request, Request)>),
}

#[derive(Arbitrary, Debug)]
struct Input {
    config: u8,
    start_ms: u32,
    ops: Vec<Op>,
}

/// Names a published pod may serve (base model, or adapter when `true`), one bit each of
/// `which / CANONICAL_ADDRESSES.len()`: the model filter and the gateway's model list see
/// pods that name nothing, some, or all of them.
const MODEL_NAMES: [(&str, bool); 4] = [("m", false), ("qwen", false), ("sql-lora", true), ("m-lora", true)];

fn publish_pods(host: &MockHost, pods: &[(u8, bool, u8, u16)], version: u64) {
    let now = host.clock_ms.get();
    let mut table = PodTable { version, published_at_ms: now, poll_interval_ms: 100, ..PodTable::default() };
    for &(which, healthy, waiting, age) in pods.iter().take(CANONICAL_ADDRESSES.len()) {
        let address = CANONICAL_ADDRESSES[usize::from(which) % CANONICAL_ADDRESSES.len()];
        let Ok(address) = picker::address::PodAddress::parse(address) else { continue };
        let mut pod = PodState::unknown(&address);
        pod.healthy = healthy;
        pod.waiting = f64::from(waiting);
        pod.last_success_ms = now.saturating_sub(u64::from(age));
        let names = usize::from(which) / CANONICAL_ADDRESSES.len();
        // The bits past the names: its P/D role (the P/D configuration splits between them).
        pod.role = [PodRole::Both, PodRole::Prefill, PodRole::Decode][(names >> MODEL_NAMES.len()) % 3];
        for (bit, (name, adapter)) in MODEL_NAMES.iter().enumerate() {
            if names & (1 << bit) != 0 {
                let list = if *adapter { &mut pod.adapters } else { &mut pod.models };
                list.push((*name).to_owned());
            }
        }
        table.pods.push(pod);
    }
    let _ = host.set(keys::POD_TABLE, &table.encode(), None);
    let _ = host.set(keys::POD_TABLE_VERSION, &encode_version(version), None);
    // The pool service writes its heartbeat as it publishes: the table is fresh, not fail-open.
    let _ = host.set(keys::SERVICE_HEARTBEAT, &encode_version(now), None);
}

/// Every pod the worker could route to now: its table's and its configured pool.
fn members(worker: &Worker) -> Vec<String> {
    let cache = worker.table.borrow();
    let table = cache.table().into_iter().flat_map(|t| t.pods.iter().map(|p| p.address.to_string()));
    table.chain(worker.fallback_pool.iter().map(|p| p.as_str().to_string())).collect()
}

fn routed_count(worker: &Worker, host: &MockHost) -> u64 {
    worker.stats.metrics.pending("wasm_epp.requests_routed") + host.metric("wasm_epp.requests_routed")
}

fn request_headers(request: &Request, destination: &str) -> HeaderMap {
    let mut pairs: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    pairs.push((b":method".to_vec(), if request.method_get { b"GET".to_vec() } else { b"POST".to_vec() }));
    let path = match &request.path {
        Ok(which) => PATHS[usize::from(*which) % PATHS.len()].as_bytes().to_vec(),
        Err(bytes) => bytes.clone(),
    };
    pairs.push((b":path".to_vec(), path));
    if let Some((real, made_up)) = request.content_length {
        let length = if real { request.body.len() as u64 } else { made_up };
        pairs.push((b"content-length".to_vec(), length.to_string().into_bytes()));
    }
    let forged_names = FORBIDDEN.iter().copied().chain(std::iter::once(destination));
    for (name, value) in forged_names.zip(&request.forged) {
        if let Some(value) = value {
            pairs.push((name.as_bytes().to_vec(), value.clone()));
        }
    }
    pairs.extend(request.headers.iter().take(MAX_EXTRA_HEADERS).cloned());
    HeaderMap::new(pairs)
}

/// One stream in progress: what the mock shows while its callbacks run, and how far it got.
struct Flow {
    stream: RequestStream,
    headers: HeaderMap,
    body: Vec<u8>,
    /// Cumulative body sizes Envoy reports, the last one the whole body at end of stream.
    cuts: Vec<usize>,
    /// Body callbacks before the client goes away (or all of them).
    chunks: usize,
    fed: usize,
    replied: bool,
    /// The last callback paused the stream (held by flow control, or read past its body).
    paused: bool,
}

impl Flow {
    /// Sends the request headers; no client destination header may survive them.
    fn start(worker: &Rc<Worker>, host: &MockHost, request: &Request) -> Self {
        let destination = &worker.config.destination_header;
        *host.headers.borrow_mut() = request_headers(request, destination);
        *host.body.borrow_mut() = request.body.clone();
        let mut stream = RequestStream::new(Rc::clone(worker));
        let replies = host.replies.borrow().len();
        let step = stream.on_request_headers(host, request.headers_end_stream);
        for name in FORBIDDEN.iter().filter(|name| *name != destination) {
            assert!(host.headers.borrow().get(name).is_none(), "client's {name} survived the request headers");
        }
        let mut cuts: Vec<usize> = if request.headers_end_stream {
            Vec::new()
        } else {
            let cuts = request.cuts.iter().take(MAX_CHUNKS).map(|&c| usize::from(c).min(request.body.len()));
            cuts.chain(std::iter::once(request.body.len())).collect()
        };
        cuts.sort_unstable();
        Self {
            stream,
            headers: host.headers.borrow().clone(),
            body: request.body.clone(),
            chunks: request.reset_after.map_or(cuts.len(), usize::from),
            cuts,
            fed: 0,
            replied: host.replies.borrow().len() > replies,
            paused: step == Step::Pause,
        }
    }

    /// The next body callback, if Envoy would make one; `false` once there is none.
    fn feed(&mut self, host: &MockHost) -> bool {
        // After a local reply Envoy calls nothing more but `on_log`.
        let Some(&size) = self.cuts.get(self.fed).filter(|_| self.fed < self.chunks && !self.replied) else {
            return false;
        };
        *host.headers.borrow_mut() = self.headers.clone();
        *host.body.borrow_mut() = self.body.clone();
        let replies = host.replies.borrow().len();
        self.fed += 1;
        self.paused = self.stream.on_request_body(host, size, self.fed == self.cuts.len()) == Step::Pause;
        self.replied |= host.replies.borrow().len() > replies;
        self.headers = host.headers.borrow().clone();
        true
    }

    /// The answer comes back, once the request went upstream (its body all sent, no local
    /// reply).
    fn answer(&mut self, host: &MockHost, response: &Response) {
        if self.replied || self.paused || self.fed < self.cuts.len() {
            return;
        }
        let mut pairs: Vec<(Vec<u8>, Vec<u8>)> = vec![(
            b":status".to_vec(),
            match &response.status {
                Ok(status) => status.to_string().into_bytes(),
                Err(bytes) => bytes.clone(),
            },
        )];
        let served = response.served.as_ref().map(|served| match served {
            Ok(which) => CANONICAL_ADDRESSES[usize::from(*which) % CANONICAL_ADDRESSES.len()].as_bytes().to_vec(),
            Err(bytes) => bytes.clone(),
        });
        if let (Some(served), true) = (&served, response.served_header) {
            pairs.push((b"x-gateway-destination-endpoint-served".to_vec(), served.clone()));
        }
        pairs.extend(response.headers.iter().take(MAX_EXTRA_HEADERS).cloned());
        *host.response_headers.borrow_mut() = HeaderMap::new(pairs);
        {
            let mut properties = host.properties.borrow_mut();
            properties.clear();
            if let Some(served) = served {
                properties.insert("upstream\0address".into(), served);
            }
            if let Some(flags) = response.flags {
                properties.insert("response\0flags".into(), flags.to_le_bytes().to_vec());
            }
        }
        self.stream.on_response_headers(host, response.end_at_headers);
        if response.end_at_headers {
            return;
        }
        let chunks = response.chunks();
        if chunks.is_empty() {
            host.response_body.borrow_mut().clear();
            self.stream.on_response_body(host, 0, true);
        }
        for (index, chunk) in chunks.iter().enumerate() {
            *host.response_body.borrow_mut() = chunk.clone();
            self.stream.on_response_body(host, chunk.len(), index + 1 == chunks.len());
        }
    }

    /// Ends the stream as Envoy does (`on_done`, then `on_log`); a destination header left
    /// names only pool members.
    fn finish(mut self, worker: &Worker, host: &MockHost) -> Option<Vec<u8>> {
        self.stream.on_done(host);
        self.stream.on_log(host);
        let written = self.headers.get(&worker.config.destination_header).map(<[u8]>::to_vec);
        if let Some(value) = &written {
            let members = members(worker);
            let text = std::str::from_utf8(value).unwrap_or_else(|_| panic!("destination {value:?} is not UTF-8"));
            for entry in text.split(',') {
                assert!(members.iter().any(|m| m == entry), "destination entry {entry:?} is no pod of {members:?}");
            }
        }
        written
    }
}

fn check_replies_and_buffers(worker: &Worker, host: &MockHost) {
    assert_eq!(worker.buffered_bytes.get(), 0, "bytes still counted as buffered after on_log");
    for reply in host.replies.borrow().iter() {
        assert!([200, 400, 404, 429, 503].contains(&reply.status), "local reply {}", reply.status);
        if reply.status == 200 {
            // The health probe or the pool's model list: JSON, listing only names pods serve.
            let body: serde_json::Value = serde_json::from_slice(&reply.body).expect("a 200 local reply is JSON");
            let listed = body["data"].as_array().into_iter().flatten();
            for id in listed.map(|entry| entry["id"].as_str().unwrap_or_default()) {
                assert!(MODEL_NAMES.iter().any(|(name, _)| *name == id) || id == "public", "listed {id:?}");
            }
        }
    }
    host.replies.borrow_mut().clear();
}

/// One request alone: a destination header left must be the router's, from this request.
fn run_request(worker: &Rc<Worker>, host: &MockHost, request: &Request) {
    let request = &request.resolved();
    let routed_before = routed_count(worker, host);
    let mut flow = Flow::start(worker, host, request);
    while flow.feed(host) {}
    if let Some(response) = &request.response {
        flow.answer(host, response);
    }
    let routed = routed_count(worker, host) > routed_before;
    let replied = flow.replied;
    let written = flow.finish(worker, host);
    check_replies_and_buffers(worker, host);
    match written {
        Some(value) => assert!(routed, "destination header {value:?} present but nothing was routed: the client's"),
        None => assert!(!routed || replied, "routed without a destination header"),
    }
}

/// Two requests at once on the worker, body chunks interleaved: they share its buffer cap.
fn run_overlapping(worker: &Rc<Worker>, host: &MockHost, first: &Request, second: &Request) {
    let (first, second) = (&first.resolved(), &second.resolved());
    let mut flows = [Flow::start(worker, host, first), Flow::start(worker, host, second)];
    loop {
        let [a, b] = &mut flows;
        let (fed_a, fed_b) = (a.feed(host), b.feed(host));
        if !fed_a && !fed_b {
            break;
        }
    }
    for (mut flow, request) in flows.into_iter().zip([first, second]) {
        if let Some(response) = &request.response {
            flow.answer(host, response);
        }
        flow.finish(worker, host);
    }
    check_replies_and_buffers(worker, host);
}

fuzz_target!(|input: Input| {
    let host = MockHost::new();
    host.clock_ms.set(1_700_000_000_000 + u64::from(input.start_ms));
    let config = CONFIGS[usize::from(input.config) % CONFIGS.len()];
    *host.configuration.borrow_mut() = config.as_bytes().to_vec();
    let worker = Rc::new(configure(&host, config.len(), 7).expect("the fuzz configurations are valid"));
    worker.serving.set(true);
    for op in input.ops.into_iter().take(MAX_OPS) {
        match op {
            Op::Request(request) => run_request(&worker, &host, &request),
            Op::Overlapping(pair) => run_overlapping(&worker, &host, &pair.0, &pair.1),
            Op::PublishBytes { table, version } => {
                let _ = host.set(keys::POD_TABLE, &table, None);
                let _ = host.set(keys::POD_TABLE_VERSION, &encode_version(version), None);
            }
            Op::PublishPods { pods, version } => publish_pods(&host, &pods, version),
            Op::Heartbeat { age_ms } => {
                let seen = host.clock_ms.get().saturating_sub(u64::from(age_ms));
                let _ = host.set(keys::SERVICE_HEARTBEAT, &encode_version(seen), None);
            }
            Op::CorruptInflight { slot, bytes } => {
                let key = keys::INFLIGHT_SLOT_KEYS[usize::from(slot) % keys::INFLIGHT_SLOT_KEYS.len()];
                let _ = host.set(key, &bytes, None);
            }
            Op::Advance { ms } => host.clock_ms.set(host.clock_ms.get().saturating_add(u64::from(ms))),
            Op::Jump { to_ms } => host.clock_ms.set(to_ms),
            Op::Tick => tick::on_tick(&worker, &host),
        }
    }
});
