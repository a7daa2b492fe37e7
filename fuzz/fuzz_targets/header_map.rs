//! `wasm_epp_host::HeaderMap::parse`, the one reader of header maps Envoy hands across the
//! ABI (request headers, call responses), and `headers::serialize`, its writer.
//!
//! Properties: parsing arbitrary bytes never panics and keeps at most `MAX_HEADER_PAIRS`
//! pairs; a parsed map whose pairs are text serializes back to bytes that parse to the same
//! map; pairs read from the input as text survive serialize → parse unchanged, in order.

#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use wasm_epp_host::headers::{serialize, MAX_HEADER_PAIRS};
use wasm_epp_host::HeaderMap;

/// Most pairs the structured round trip builds: Envoy's default limit is 100 headers.
const MAX_ROUND_TRIP_PAIRS: usize = 128;

fn text_pairs(map: &HeaderMap) -> Option<Vec<(&str, &str)>> {
    map.iter().map(|(n, v)| Some((std::str::from_utf8(n).ok()?, std::str::from_utf8(v).ok()?))).collect()
}

fn assert_round_trip(pairs: &[(&str, &str)]) {
    let bytes = serialize(pairs);
    let parsed = HeaderMap::parse(&bytes).expect("serialized map parses");
    let expected: Vec<(&[u8], &[u8])> = pairs.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())).collect();
    let got: Vec<(&[u8], &[u8])> = parsed.iter().collect();
    assert_eq!(got, expected, "pairs changed through serialize -> parse");
    for (name, value) in pairs {
        // `get` finds the first pair of that name.
        let first = pairs.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_bytes());
        assert_eq!(parsed.get(name), first, "get({name:?}) while {value:?} was written");
    }
}

fuzz_target!(|data: &[u8]| {
    if let Some(map) = HeaderMap::parse(data) {
        assert!(map.len() <= MAX_HEADER_PAIRS, "{} pairs parsed", map.len());
        if let Some(pairs) = text_pairs(&map) {
            assert_round_trip(&pairs);
        }
    }
    let mut input = Unstructured::new(data);
    let Ok(pairs) = Vec::<(String, String)>::arbitrary(&mut input) else { return };
    let pairs: Vec<(&str, &str)> =
        pairs.iter().take(MAX_ROUND_TRIP_PAIRS).map(|(n, v)| (n.as_str(), v.as_str())).collect();
    assert_round_trip(&pairs);
});
