//! Kubernetes answers parsed by discovery, on arbitrary bytes: a `PodList` page
//! (`discovery::pod_list::parse_pod_page`) and an `InferencePool`
//! (`discovery::inference_pool::parse_inference_pool`), plus the percent-encoding of what
//! goes back into a query (`discovery::query::encode`). Never panics; a page yields only
//! canonical addresses on the pool's port, no more than its items; a pool yields a selector
//! that cannot smuggle selector operators and a non-zero port; encoding is reversible and
//! leaves nothing that could end the parameter.

#![no_main]

use libfuzzer_sys::fuzz_target;
use picker::discovery::inference_pool::{parse_inference_pool, MAX_SELECTOR_LABELS, MAX_TARGET_PORTS};
use picker::discovery::pod_list::parse_pod_page;
use picker::discovery::query::encode;
use picker_fuzz::assert_canonical_address;

fuzz_target!(|body: &[u8]| {
    for port in [8000, 1, u16::MAX] {
        let Ok(page) = parse_pod_page(body, &[port]) else { break };
        assert!(page.ready.len() <= page.items, "{} ready of {} items", page.ready.len(), page.items);
        for address in &page.ready {
            assert_canonical_address(address.as_str());
            assert!(address.as_str().ends_with(&format!(":{port}")), "{address} not on port {port}");
        }
        assert!(page.continue_token.as_deref() != Some(""), "an empty continue token means no more pages");
    }
    if let Ok(pool) = parse_inference_pool(body) {
        let ports = &pool.target_ports;
        assert!(!ports.is_empty() && ports.len() <= MAX_TARGET_PORTS && !ports.contains(&0), "{ports:?}");
        let pairs: Vec<&str> = pool.selector.split(',').collect();
        assert!(!pairs.is_empty() && pairs.len() <= MAX_SELECTOR_LABELS, "{}", pool.selector);
        for pair in pairs {
            let (key, value) = pair.split_once('=').unwrap_or_else(|| panic!("selector pair {pair:?}"));
            assert!(!key.is_empty() && !value.contains('='), "selector pair {pair:?}");
            let allowed = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'/');
            assert!(key.bytes().chain(value.bytes()).all(allowed), "selector pair {pair:?}");
        }
    }
    let text = String::from_utf8_lossy(body);
    let encoded = encode(&text);
    assert!(encoded.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'%')));
    assert_eq!(percent_decode(&encoded), text.as_bytes(), "encode is not reversible");
});

fn percent_decode(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).expect("two hex digits after %");
            out.push(u8::from_str_radix(hex, 16).expect("two hex digits after %"));
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    out
}
