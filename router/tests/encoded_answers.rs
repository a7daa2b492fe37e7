//! Answers a pod sent compressed (`content-encoding`): gzip and deflate are read as they pass
//! (learning's `usage` and first token, a stream's opening error event); other encodings, and
//! bytes that do not inflate, are not read, counted, and never misread as a failure or usage.

// Test support: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use common::{Bench, COMPLETIONS};
use miniz_oxide::deflate::core::{create_comp_flags_from_zip_params, CompressorOxide};
use miniz_oxide::deflate::stream::deflate;
use miniz_oxide::{MZFlush, MZStatus};
use wasm_epp_router::{RequestStream, Step};

const POD: &str = "10.0.0.1:8000";
const LEARNING: &str = r#"{"fallback_destinations": 0, "learning": {"enabled": true}}"#;

const WHOLE: &[u8] = br#"{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":" a b c"}],"usage":{"prompt_tokens":12,"total_tokens":15,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":8}}}"#;
const FIRST_TOKEN: &[u8] = b"data: {\"id\":\"cmpl-1\",\"choices\":[{\"index\":0,\"text\":\" a\"}],\"usage\":null}\n\n";
const USAGE_EVENT: &[u8] = b"data: {\"id\":\"cmpl-1\",\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":4,\"prompt_tokens_details\":{\"cached_tokens\":8}}}\n\ndata: [DONE]\n\n";
const SERVER_ERROR: &[u8] =
    b"data: {\"error\": {\"message\": \"Internal server error\", \"type\": \"InternalServerError\", \"code\": 500}}\n\n";
const ROLE_CHUNK: &[u8] = b"data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n";

#[derive(Clone, Copy)]
enum Coding {
    Gzip,
    Zlib,
    RawDeflate,
}

/// `parts` compressed as a streaming compressor sends them: each part flushed (a sync flush,
/// as a proxy compressing an event stream must), the last one finishing the stream.
fn compress(coding: Coding, parts: &[&[u8]]) -> Vec<Vec<u8>> {
    compress_at(6, coding, parts)
}

/// [`compress`] at `level` (0: stored blocks, the text as it is between block headers).
fn compress_at(level: i32, coding: Coding, parts: &[&[u8]]) -> Vec<Vec<u8>> {
    let window_bits = if matches!(coding, Coding::Zlib) { 15 } else { -15 };
    let mut compressor = CompressorOxide::new(create_comp_flags_from_zip_params(level, window_bits, 0));
    let mut out = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        let mut chunk = if i == 0 && matches!(coding, Coding::Gzip) {
            vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff]
        } else {
            Vec::new()
        };
        let mut buffer = vec![0; 64 * 1024 + part.len() * 2];
        let result = deflate(&mut compressor, part, &mut buffer, if last { MZFlush::Finish } else { MZFlush::Sync });
        assert_eq!(result.bytes_consumed, part.len());
        assert!(matches!(result.status, Ok(MZStatus::Ok | MZStatus::StreamEnd)), "{:?}", result.status);
        chunk.extend_from_slice(&buffer[..result.bytes_written]);
        if last && matches!(coding, Coding::Gzip) {
            let whole: Vec<u8> = parts.concat();
            chunk.extend(crc32(&whole).to_le_bytes());
            chunk.extend((whole.len() as u32).to_le_bytes());
        }
        out.push(chunk);
    }
    out
}

fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0_u32;
    for &byte in bytes {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0xedb8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

fn bench() -> Bench {
    let bench = Bench::new(LEARNING);
    bench.publish(1, &[(POD, 0.0)]);
    bench.tick();
    bench
}

fn request(bench: &Bench, streamed: bool, prompt: &str) -> RequestStream {
    let stream = if streamed { r#","stream":true,"stream_options":{"include_usage":true}"# } else { "" };
    let body = format!(r#"{{"model":"m","prompt":"{prompt}","max_tokens":4{stream}}}"#);
    let (stream, answer) = bench.request(&COMPLETIONS, &body);
    assert_eq!(answer.destination.as_deref(), Some(POD));
    stream
}

/// The pod answers `200` with `encoding` (none: `None`) and `chunks`, 5 ms apart; the stream ends.
fn answer(bench: &Bench, mut stream: RequestStream, encoding: Option<&str>, chunks: &[Vec<u8>]) {
    let mut headers = vec![(":status", "200"), ("x-gateway-destination-endpoint-served", POD)];
    headers.extend(encoding.map(|coding| ("content-encoding", coding)));
    bench.host.set_response(&headers, b"");
    assert_eq!(stream.on_response_headers(&bench.host, false), Step::Continue);
    for (i, chunk) in chunks.iter().enumerate() {
        bench.host.advance(5);
        bench.host.set_response(&headers, chunk);
        let end = i + 1 == chunks.len();
        assert_eq!(stream.on_response_body(&bench.host, chunk.len(), end), Step::Continue, "the answer passes");
    }
    stream.on_log(&bench.host);
}

/// `bytes` cut in two at `at`: a chunk boundary anywhere in the compressed stream.
fn cut(bytes: Vec<Vec<u8>>, at: usize) -> Vec<Vec<u8>> {
    let whole = bytes.concat();
    let at = at.min(whole.len());
    vec![whole[..at].to_vec(), whole[at..].to_vec()]
}

#[test]
fn a_gzip_or_deflate_answer_teaches_its_usage() {
    let bench = bench();
    for (i, coding, name) in
        [(0, Coding::Gzip, "gzip"), (1, Coding::Zlib, "deflate"), (2, Coding::RawDeflate, "deflate")]
    {
        for at in [1, 5, 11, 40] {
            let compressed = cut(compress(coding, &[WHOLE]), at);
            answer(&bench, request(&bench, false, &format!("{i} {at}")), Some(name), &compressed);
        }
    }
    assert_eq!(bench.stat("wasm_epp.learning.usage_reports"), 12);
    assert_eq!(bench.stat("wasm_epp.learning.cached_reports"), 12);
    assert_eq!(bench.stat("wasm_epp.answers_inflated"), 12);
    assert_eq!(bench.stat("wasm_epp.answers_encoded_unread"), 0);
}

#[test]
fn stored_gzip_blocks_cut_inside_a_number_are_read_whole() {
    // Level 0 stores the text as it is, between 5-byte block headers: read as plain text, a
    // block boundary inside `"cached_tokens":48` read as 4 (or nothing).
    let bench = bench();
    let whole = String::from_utf8(WHOLE.to_vec()).unwrap().replace("\"cached_tokens\":8", "\"cached_tokens\":48");
    let at = whole.find(":48").unwrap() + 2;
    let parts = [&whole.as_bytes()[..at], &whole.as_bytes()[at..]];
    // (A prompt of ~1,000 tokens: the index holds more than 48 of them to compare with.)
    let prompt = format!("stored {}", "x".repeat(4_000));
    answer(&bench, request(&bench, false, &prompt), Some("gzip"), &[compress_at(0, Coding::Gzip, &parts).concat()]);
    assert_eq!(bench.stat("wasm_epp.learning.cached_tokens_reported"), 48);
}

#[test]
fn a_gzip_stream_gives_its_first_token_and_usage() {
    let bench = bench();
    let chunks = compress(Coding::Gzip, &[FIRST_TOKEN, USAGE_EVENT]);
    answer(&bench, request(&bench, true, "stream"), Some("gzip"), &chunks);
    assert_eq!(bench.stat("wasm_epp.learning.ttft_samples"), 1);
    assert_eq!(bench.stat("wasm_epp.learning.usage_reports"), 1);
    assert_eq!(bench.stat("wasm_epp.streams_failed"), 0);
}

#[test]
fn a_gzip_stream_that_opens_with_a_server_error_fails_its_pod() {
    let bench = bench();
    let chunks = compress(Coding::Gzip, &[SERVER_ERROR, b"data: [DONE]\n\n"]);
    answer(&bench, request(&bench, true, "error"), Some("gzip"), &chunks);
    assert_eq!(bench.stat("wasm_epp.streams_failed"), 1);
    assert_eq!(bench.stat("wasm_epp.pod_attempts_failed"), 1);
    assert_eq!(bench.stat("wasm_epp.learning.ttft_samples"), 0, "an error is no first token");
    // A chat stream's error after its role chunk, each flushed in its own chunk.
    let (stream, _) = bench.request(
        &[(":method", "POST"), (":path", "/v1/chat/completions"), ("content-type", "application/json")],
        r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}"#,
    );
    answer(&bench, stream, Some("gzip"), &compress(Coding::Gzip, &[ROLE_CHUNK, SERVER_ERROR, b"data: [DONE]\n\n"]));
    assert_eq!(bench.stat("wasm_epp.streams_failed"), 2);
}

#[test]
fn bytes_that_do_not_inflate_end_the_reading_not_the_answer() {
    let bench = bench();
    // A proxy that says gzip and sends plain text: neither its error event nor its usage is
    // read (the bytes are not what the header says), and no failure is counted.
    answer(&bench, request(&bench, true, "liar"), Some("gzip"), &[SERVER_ERROR.to_vec(), b"data: [DONE]\n\n".to_vec()]);
    answer(&bench, request(&bench, false, "liar"), Some("gzip"), &[WHOLE.to_vec()]);
    // Corrupt after a good start: the first token was read, the usage is not trusted.
    let mut chunks = compress(Coding::Gzip, &[FIRST_TOKEN, USAGE_EVENT]);
    chunks[1].iter_mut().take(6).for_each(|byte| *byte = 0xff);
    answer(&bench, request(&bench, true, "corrupt"), Some("gzip"), &chunks);
    assert_eq!(bench.stat("wasm_epp.streams_failed"), 0);
    assert_eq!(bench.stat("wasm_epp.pod_attempts_failed"), 0);
    assert_eq!(bench.stat("wasm_epp.learning.usage_reports"), 0);
    assert_eq!(bench.stat("wasm_epp.learning.ttft_samples"), 1, "the corrupt stream's first token was read");
    assert_eq!(bench.stat("wasm_epp.answers_encoded_unread"), 3);
    assert_eq!(bench.worker.inflight.borrow().tokens(POD), 0, "every prompt's tokens released");
}

#[test]
fn a_brotli_answer_is_counted_unread_and_never_copied() {
    let bench = bench();
    // (Bytes that would read as usage and as an error if they were taken as plain text.)
    let mut copies = 0;
    for (streamed, encoding, chunks) in
        [(false, "br", vec![WHOLE.to_vec()]), (true, "zstd", vec![SERVER_ERROR.to_vec(), FIRST_TOKEN.to_vec()])]
    {
        let stream = request(&bench, streamed, encoding);
        bench.host.tally.take();
        answer(&bench, stream, Some(encoding), &chunks);
        copies += bench.host.tally.take().get("proxy_get_buffer_bytes").map_or(0, |c| c.calls);
    }
    assert_eq!(copies, 0, "no chunk of theirs copied into the VM");
    assert_eq!(bench.stat("wasm_epp.answers_encoded_unread"), 2);
    assert_eq!(bench.stat("wasm_epp.learning.usage_reports"), 0);
    assert_eq!(bench.stat("wasm_epp.learning.ttft_samples"), 0);
    assert_eq!(bench.stat("wasm_epp.streams_failed"), 0);
    assert_eq!(bench.worker.inflight.borrow().tokens(POD), 0, "the stream's tokens released at its first byte");
    // `identity` is plain text.
    answer(&bench, request(&bench, false, "identity"), Some("identity"), &[WHOLE.to_vec()]);
    assert_eq!(bench.stat("wasm_epp.learning.usage_reports"), 1);
}
