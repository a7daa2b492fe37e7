//! The discovery list cycle (`discovery::PoolDiscovery`) answered by an arbitrary API server.
//!
//! The input is a sequence of answers separated by `---` lines (see `split_steps`), each
//! answering the request the lister just asked for: a 200 body, or `status NNN` on its first
//! line then the body, or `no answer`, or `too large`. With `InferencePool` in the first
//! answer the pool is named by an InferencePool, otherwise by a label selector. Checked:
//! every request path is clean (no byte of an answer can add a parameter or break the path),
//! a cycle asks a bounded number of requests, a listed pool is sorted, unique, canonical and
//! within `MAX_PODS`, and a failed or unchanged cycle keeps the last pool.

#![no_main]

use libfuzzer_sys::fuzz_target;
use picker::address::PodAddress;
use picker::config::parse_json;
use picker::discovery::lister::{MAX_LIST_RESTARTS, MAX_PAGES};
use picker::discovery::{ApiResponse, KubernetesConfig, PoolDiscovery, Progress};
use picker::pod_table::MAX_PODS;
use picker_fuzz::{assert_canonical_address, split_steps};

const SELECTOR_CONFIG: &[u8] = br#"{"namespace": "llm", "label_selector": "app=vllm,tier in (gpu)",
    "target_port": 8000, "relist_interval_ms": 1000, "timeout_ms": 500, "page_size": 2}"#;
const POOL_CONFIG: &[u8] = br#"{"namespace": "llm", "inference_pool": "qwen-pool",
    "relist_interval_ms": 1000, "timeout_ms": 500}"#;

/// Requests one cycle may send: the InferencePool, then every page of every restart.
const MAX_REQUESTS_PER_CYCLE: usize = 1 + (MAX_LIST_RESTARTS as usize + 1) * MAX_PAGES;

fuzz_target!(|data: &[u8]| {
    let mut answers = split_steps(data).take(512).peekable();
    let names_pool = answers.peek().is_some_and(|first| first.windows(13).any(|w| w == b"InferencePool"));
    let config: KubernetesConfig = parse_json(if names_pool { POOL_CONFIG } else { SELECTOR_CONFIG }).expect("config");
    let mut discovery = PoolDiscovery::new(config).expect("valid config");
    let mut now: u64 = 0;
    let mut token: u32 = 0;
    while answers.peek().is_some() {
        let before: Vec<PodAddress> = discovery.pool().to_vec();
        let mut progress = discovery.tick(now);
        let mut requests = 0;
        while let Progress::Fetch(request) = progress {
            requests += 1;
            assert!(requests <= MAX_REQUESTS_PER_CYCLE, "cycle did not end after {requests} requests");
            check_path(&request.path);
            token = token.wrapping_add(1);
            discovery.sent(token);
            assert!(matches!(discovery.on_response(token.wrapping_add(1), ApiResponse::NoAnswer, now), Progress::Idle));
            let Some(answer) = answers.next() else { return };
            now += 10;
            let response = match answer {
                b"no answer" => ApiResponse::NoAnswer,
                b"too large" => ApiResponse::TooLarge(1 << 30),
                _ => {
                    let (status, body) = status_and_body(answer);
                    ApiResponse::Answered { status, body }
                }
            };
            progress = discovery.on_response(token, response, now);
        }
        match progress {
            Progress::Listed { changed: Some(pool) } => {
                assert!(pool.len() <= MAX_PODS);
                assert!(pool.windows(2).all(|w| w[0] < w[1]), "pool not sorted and unique");
                pool.iter().for_each(|a| assert_canonical_address(a.as_str()));
                assert_eq!(discovery.pool(), &pool[..]);
                assert_ne!(pool, before, "reported a change that is none");
            }
            Progress::Listed { changed: None } | Progress::Failed(_) | Progress::Idle => {
                assert_eq!(discovery.pool(), &before[..], "pool changed without being reported")
            }
            Progress::Fetch(_) => unreachable!(),
        }
        now += 1_000;
    }
});

fn status_and_body(text: &[u8]) -> (u16, &[u8]) {
    if let Some(rest) = text.strip_prefix(b"status ") {
        let (line, body) = match rest.iter().position(|&b| b == b'\n') {
            Some(at) => (&rest[..at], &rest[at + 1..]),
            None => (rest, &[][..]),
        };
        if let Some(status) = std::str::from_utf8(line).ok().and_then(|s| s.trim().parse().ok()) {
            return (status, body);
        }
    }
    (200, text)
}

/// A path the lister asks for: fixed prefix, visible ASCII, only its own parameters.
fn check_path(path: &str) {
    assert!(path.starts_with("/api/v1/namespaces/llm/pods?") || path.starts_with("/apis/"), "{path}");
    assert!(path.bytes().all(|b| b.is_ascii_graphic()), "{path:?}");
    if let Some((_, query)) = path.split_once('?') {
        for parameter in query.split('&') {
            let name = parameter.split_once('=').map_or(parameter, |(name, _)| name);
            assert!(["labelSelector", "fieldSelector", "limit", "continue"].contains(&name), "{path}");
        }
    }
}
