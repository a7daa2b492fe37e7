//! Prompt block hashing (`prefix::hash::hash_prompt`) on arbitrary bodies: never panics,
//! bounded by `max_blocks`, deterministic, leaves no hashes behind on a shape error, and a
//! smaller `max_blocks` only cuts the chain short (it never changes a hash).
//!
//! Bodies are read straight with serde, as the unit tests do, so shapes `parse_request`
//! would refuse are hashed too; a body `parse_request` accepts (with its messages cut where
//! it could) hashes as the same body read straight.

#![no_main]

use libfuzzer_sys::fuzz_target;
use picker::prefix::hash::{hash_prompt, HashParams, MAX_BLOCKS};
use picker::request::{parse_request, Endpoint, InferenceRequest};

/// Block shapes: the default, tiny blocks (many hashes from small inputs, blocks that span
/// JSON pieces), and absurd values that hashing must clamp.
const PARAMS: [HashParams; 3] = [
    HashParams { block_tokens: 16, bytes_per_token: 4, max_blocks: 256 },
    HashParams { block_tokens: 1, bytes_per_token: 3, max_blocks: 64 },
    HashParams { block_tokens: usize::MAX, bytes_per_token: usize::MAX, max_blocks: usize::MAX },
];

fuzz_target!(|body: &[u8]| {
    let Ok(request) = serde_json::from_slice::<InferenceRequest<'_>>(body) else { return };
    let mut out = Vec::new();
    let mut again = Vec::new();
    let mut short = Vec::new();
    for endpoint in [Endpoint::Completions, Endpoint::ChatCompletions, Endpoint::Other] {
        for params in &PARAMS {
            let outcome = hash_prompt(&request, endpoint, params, &mut out);
            match outcome {
                Ok(count) => assert_eq!(count, out.len()),
                Err(error) => {
                    assert!(out.is_empty(), "hashes left behind after {error}");
                    assert!(!error.to_string().is_empty());
                }
            }
            assert!(out.len() <= params.max_blocks.clamp(1, MAX_BLOCKS), "{} blocks for {params:?}", out.len());
            assert_eq!(hash_prompt(&request, endpoint, params, &mut again), outcome, "not deterministic");
            assert_eq!(again, out, "not deterministic");
            if let Ok(parsed) = parse_request(body, endpoint) {
                let cut_outcome = hash_prompt(&parsed, endpoint, params, &mut again);
                assert_eq!((cut_outcome, &again), (outcome, &out), "a parsed body hashes otherwise");
            }
            if outcome.is_ok() {
                let cut = HashParams { max_blocks: 3, ..*params };
                let cut_outcome = hash_prompt(&request, endpoint, &cut, &mut short);
                assert!(cut_outcome.is_ok(), "fewer blocks turned an accepted shape into {cut_outcome:?}");
                assert!(out.starts_with(&short), "max_blocks changed hashes: {short:?} vs {out:?}");
                assert_eq!(short.len(), out.len().min(3));
            }
        }
    }
    // The Responses and Messages APIs' prompts have their own parses (`instructions` and
    // `input`; `system` and `messages`).
    for endpoint in [Endpoint::Responses, Endpoint::Messages] {
        let Ok(request) = parse_request(body, endpoint) else { continue };
        for params in &PARAMS {
            let outcome = hash_prompt(&request, endpoint, params, &mut out);
            match outcome {
                Ok(count) => assert_eq!(count, out.len()),
                Err(_) => assert!(out.is_empty(), "hashes left behind"),
            }
            assert!(out.len() <= params.max_blocks.clamp(1, MAX_BLOCKS), "{} blocks for {params:?}", out.len());
            assert_eq!(hash_prompt(&request, endpoint, params, &mut again), outcome, "not deterministic");
            assert_eq!(again, out, "not deterministic");
        }
    }
});
