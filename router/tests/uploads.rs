//! Uploads (`multipart/form-data`, vLLM's audio transcriptions and translations) are routed
//! by their form's `model`, read as the body arrives: in a pool of several models they reach
//! a pod serving that model, not any pod by load.

// Helpers outside #[test] functions read replies: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use common::{publish_models, Bench};
use wasm_epp_router::{RequestStream, Step};

const WHISPER: &str = "10.0.0.2:8000";

/// The idle pod serves another model: routed by load, every upload would go there.
const POOL: [(&str, &str, &[&str], f64); 2] = [("10.0.0.1:8000", "llama", &[], 0.0), (WHISPER, "whisper", &[], 5.0)];

const BOUNDARY: &str = "formdata-3f9a";

fn form(parts: &[(&str, &[u8])]) -> Vec<u8> {
    let mut body = Vec::new();
    for (name, content) in parts {
        let file = if *name == "file" { "; filename=\"a.wav\"\r\nContent-Type: audio/wav" } else { "" };
        body.extend(format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"{file}\r\n\r\n").bytes());
        body.extend_from_slice(content);
        body.extend(b"\r\n");
    }
    body.extend(format!("--{BOUNDARY}--\r\n").bytes());
    body
}

/// Sends `body` as an upload in chunks of `chunk` bytes; returns the step of each body call
/// and the destination written.
fn upload(bench: &Bench, body: &[u8], chunk: usize) -> (Vec<Step>, Option<String>) {
    let content_type = format!("multipart/form-data; boundary={BOUNDARY}");
    let headers = [(":method", "POST"), (":path", "/v1/audio/transcriptions"), ("content-type", content_type.as_str())];
    bench.host.set_request(&headers, body);
    let mut stream = RequestStream::new(bench.worker.clone());
    assert_eq!(stream.on_request_headers(&bench.host, false), Step::Pause, "held for its form");
    let mut steps = Vec::new();
    let mut arrived = 0;
    while arrived < body.len() {
        arrived = (arrived + chunk).min(body.len());
        steps.push(stream.on_request_body(&bench.host, arrived, arrived == body.len()));
    }
    let destination = bench.host.header("x-gateway-destination-endpoint");
    stream.on_log(&bench.host);
    (steps, destination)
}

fn pick(destination: Option<String>) -> String {
    destination.unwrap_or_default().split(',').next().unwrap_or_default().to_owned()
}

#[test]
fn an_upload_that_names_its_model_first_goes_on_with_its_first_chunk() {
    let bench = Bench::new("{}");
    publish_models(&bench, &POOL);
    let body = form(&[("model", b"whisper"), ("language", b"en"), ("file", &vec![7u8; 100_000])]);
    let (steps, destination) = upload(&bench, &body, 16_384);
    assert_eq!(pick(destination), WHISPER);
    assert_eq!(steps.first(), Some(&Step::Continue), "routed as its first chunk arrived: {steps:?}");
    assert!(steps.iter().all(|step| *step == Step::Continue), "the file streams on: {steps:?}");
    assert_eq!(bench.stat("wasm_epp.upload_routed_by_model"), 1);
    assert_eq!(bench.stat("wasm_epp.model_requests.model.whisper"), 1);
}

#[test]
fn an_upload_whose_file_comes_first_is_read_to_its_model() {
    let bench = Bench::new("{}");
    publish_models(&bench, &POOL);
    let body = form(&[("file", &vec![b'-'; 300_000]), ("model", b"whisper")]);
    let (steps, destination) = upload(&bench, &body, 16_384);
    assert_eq!(pick(destination), WHISPER);
    let (last, held) = steps.split_last().unwrap();
    assert!(held.iter().all(|step| *step == Step::Pause) && *last == Step::Continue, "{steps:?}");
}

#[test]
fn an_upload_without_a_readable_model_goes_by_load_as_before() {
    let bench = Bench::new("{}");
    publish_models(&bench, &POOL);
    for body in [form(&[("file", &[1u8; 5_000])]), form(&[("model", b"\xff\xfe"), ("file", &[1u8; 5_000])])] {
        let (steps, destination) = upload(&bench, &body, 1_000);
        assert_eq!(pick(destination), "10.0.0.1:8000", "the least loaded pod");
        assert_eq!(steps.last(), Some(&Step::Continue));
    }
    assert_eq!(bench.stat("wasm_epp.upload_routed_by_model"), 0);
}

#[test]
fn an_upload_past_max_body_bytes_without_its_model_goes_by_load() {
    let bench = Bench::new(r#"{"max_body_bytes": 65536}"#);
    publish_models(&bench, &POOL);
    let body = form(&[("file", &vec![3u8; 200_000]), ("model", b"whisper")]);
    let (steps, destination) = upload(&bench, &body, 16_384);
    assert_eq!(pick(destination), "10.0.0.1:8000");
    assert_eq!(steps.iter().filter(|step| **step == Step::Pause).count(), 4, "held up to the limit: {steps:?}");
    assert_eq!(bench.stat("wasm_epp.body_over_limit"), 1);
}
