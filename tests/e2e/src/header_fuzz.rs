//! Seeded hostile HTTP/1.1 requests for the header fuzz: arbitrary bytes in header names and
//! values (obs-text 0x80-0xFF, control bytes), values near Envoy's header-size limit, many
//! headers, repeated names, odd casing, and hostile values in the headers wasm-epp reads.
//! Sent over raw TCP ([`crate::hostile::raw_exchange`]): HTTP libraries refuse most of it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::hostile::raw_exchange;
use crate::Cluster;

const TIMEOUT: Duration = Duration::from_secs(20);

/// Envoy's default `max_request_headers_kb` is 60: values are drawn up to a little beyond.
pub const MAX_VALUE_BYTES: usize = 70 * 1024;
/// Envoy's default `max_headers_count` is 100. Counts between these two bounds are skipped:
/// Envoy would accept them and add its own, and the simulated pod (hyper, 100 headers) would
/// then refuse the request, which says nothing about the gateway.
pub const MANY_HEADERS_ACCEPTED: usize = 80;
pub const MANY_HEADERS_REFUSED: usize = 101;

/// Headers wasm-epp reads or writes, so hostile values reach its parsing code.
const READ_BY_THE_PLUGIN: [&str; 8] = [
    "x-session-id",
    "x-gateway-inference-priority",
    "x-gateway-destination-endpoint",
    "content-type",
    "content-encoding",
    "x-envoy-original-dst-host",
    "x-prefiller-host-port",
    "x-request-id",
];

/// xorshift64*: deterministic from the seed, so a failing case can be replayed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// Percent of requests that also carry one header with a byte no field value may hold.
const ILLEGAL_PERCENT: usize = 10;

/// A value of bytes legal in a field value: visible ASCII, space, tab, obs-text (0x80-0xFF).
fn value(rng: &mut Rng, len: usize) -> Vec<u8> {
    (0..len)
        .map(|_| match rng.below(10) {
            0..=3 => 0x80 + rng.below(0x80) as u8,
            4 => b'\t',
            _ => 0x20 + rng.below(0x5f) as u8,
        })
        .collect()
}

/// A value with one control byte (NUL, bare CR or LF, DEL, ...) that Envoy must refuse.
fn illegal_value(rng: &mut Rng) -> Vec<u8> {
    let mut bytes = value(rng, 8);
    let control = *rng.pick(&[0x00, 0x01, 0x0b, b'\r', b'\n', 0x1f, 0x7f]);
    bytes.insert(rng.below(bytes.len() + 1), control);
    bytes
}

/// A header name: a known one in odd casing, a random token, or bytes no name may hold.
fn name(rng: &mut Rng) -> Vec<u8> {
    match rng.below(10) {
        0..=5 => rng
            .pick(&READ_BY_THE_PLUGIN)
            .bytes()
            .map(|b| if rng.chance(50) { b.to_ascii_uppercase() } else { b })
            .collect(),
        6..=8 => (0..1 + rng.below(40))
            .map(|_| b"abcdefghijklmnopqrstuvwxyz0123456789-_!#$%&'*+.^`|~"[rng.below(51)])
            .collect(),
        _ => (0..1 + rng.below(20)).map(|_| 0x21 + rng.below(0xde) as u8).filter(|b| *b != b':').collect(),
    }
}

fn header_line(name: &[u8], value: &[u8]) -> Vec<u8> {
    let mut line = name.to_vec();
    line.extend_from_slice(b": ");
    line.extend_from_slice(value);
    line.extend_from_slice(b"\r\n");
    line
}

/// The extra header lines of one hostile request.
pub fn hostile_headers(rng: &mut Rng) -> Vec<u8> {
    let mut lines = Vec::new();
    match rng.below(6) {
        // A handful of random headers with random values.
        0 | 1 => {
            for _ in 0..1 + rng.below(8) {
                let len = rng.below(64);
                lines.extend(header_line(&name(rng), &value(rng, len)));
            }
        }
        // The issue's own case, and other Latin-1 in the headers the plugin reads.
        2 => {
            lines.extend(header_line(b"x-anything", b"caf\xe9"));
            let header = rng.pick(&READ_BY_THE_PLUGIN).as_bytes();
            let len = 1 + rng.below(32);
            lines.extend(header_line(header, &value(rng, len)));
        }
        // One very long value.
        3 => {
            let len = 1024 + rng.below(MAX_VALUE_BYTES - 1024);
            lines.extend(header_line(&name(rng), &value(rng, len)));
        }
        // Many headers, well under or over Envoy's count limit.
        4 => {
            let count =
                if rng.chance(50) { rng.below(MANY_HEADERS_ACCEPTED) } else { MANY_HEADERS_REFUSED + rng.below(100) };
            for i in 0..count {
                let len = rng.below(16);
                lines.extend(header_line(format!("x-many-{i}").as_bytes(), &value(rng, len)));
            }
        }
        // One name repeated, with odd casing and odd values.
        _ => {
            let header = rng.pick(&READ_BY_THE_PLUGIN).to_string();
            for _ in 0..2 + rng.below(20) {
                let cased: String =
                    header.chars().map(|c| if rng.chance(30) { c.to_ascii_uppercase() } else { c }).collect();
                let len = rng.below(24);
                lines.extend(header_line(cased.as_bytes(), &value(rng, len)));
            }
        }
    }
    if rng.chance(ILLEGAL_PERCENT) {
        let bytes = illegal_value(rng);
        lines.extend(header_line(&name(rng), &bytes));
    }
    lines
}

/// One hostile request: a completion POST, or a body-less GET with hostile headers (the model
/// list the gateway answers itself, or a pod's health routed at the headers).
pub fn hostile_request(rng: &mut Rng, index: usize) -> Vec<u8> {
    let headers = hostile_headers(rng);
    if rng.chance(25) {
        let path = if index.is_multiple_of(2) { "/v1/models" } else { "/health" };
        let mut request = format!("GET {path} HTTP/1.1\r\nhost: gateway\r\nconnection: close\r\n").into_bytes();
        request.extend(headers);
        request.extend_from_slice(b"\r\n");
        return request;
    }
    crate::hostile::completion_request(&headers, &format!("fuzz {index}"))
}

/// Shows a request's bytes readably (for a failure message).
pub fn escape(bytes: &[u8]) -> String {
    let shown: String = bytes.iter().take(600).flat_map(|b| std::ascii::escape_default(*b)).map(char::from).collect();
    format!("{shown}{}", if bytes.len() > 600 { "..." } else { "" })
}

/// Sends `count` hostile requests (or until `seconds` pass, when set) and returns how many
/// answers had each status.
pub fn fuzz(cluster: &Cluster, seed: u64, count: usize, seconds: Option<u64>) -> BTreeMap<u16, usize> {
    let mut rng = Rng::new(seed);
    let started = Instant::now();
    let mut statuses = BTreeMap::new();
    for index in 0.. {
        let done = match seconds {
            Some(limit) => started.elapsed() >= Duration::from_secs(limit),
            None => index >= count,
        };
        if done {
            break;
        }
        let request = hostile_request(&mut rng, index);
        let reply = raw_exchange(cluster.envoy.listen_port, &request, TIMEOUT).unwrap_or_else(|error| {
            panic!("request {index} (seed {seed:#x}) got no well-formed answer: {error}\n{}", escape(&request))
        });
        *statuses.entry(reply.status).or_insert(0) += 1;
    }
    statuses
}
