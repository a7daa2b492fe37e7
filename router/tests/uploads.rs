//! Uploads (`multipart/form-data`, vLLM's audio transcriptions and translations) are routed
//! by their form's `model`, read as the body arrives: in a pool of several models they reach
//! a pod serving that model, not any pod by load.

// Helpers outside #[test] functions read replies: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use common::{publish_models, Bench};
use wasm_epp_router::{RequestStream, Step};

const WHISPER: &str = "10.0.0.2:8000";

/// The idle pod serves another model: routed by load, every upload would go there (the
/// other pod has a queue, short of saturated: flow control lets its model's requests go).
const POOL: [(&str, &str, &[&str], f64); 2] = [("10.0.0.1:8000", "llama", &[], 0.0), (WHISPER, "whisper", &[], 2.0)];

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
    let (mut stream, steps) = bench.upload_in_chunks(&headers, body, chunk);
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

/// Sends the whole `body` in one chunk that does not end the stream, then its trailers.
fn upload_with_trailers(bench: &Bench, body: &[u8]) -> (Step, Step, Option<String>) {
    let content_type = format!("multipart/form-data; boundary={BOUNDARY}");
    let headers = [(":method", "POST"), (":path", "/v1/audio/translations"), ("content-type", content_type.as_str())];
    bench.host.set_request(&headers, body);
    let mut stream = RequestStream::new(bench.worker.clone());
    assert_eq!(stream.on_request_headers(&bench.host, false), Step::Pause);
    let body_step = stream.on_request_body(&bench.host, body.len(), false);
    let trailers_step = stream.on_request_trailers(&bench.host);
    let destination = bench.host.header("x-gateway-destination-endpoint");
    stream.on_log(&bench.host);
    (body_step, trailers_step, destination)
}

#[test]
fn trailers_end_an_upload_still_waiting_for_its_form() {
    let bench = Bench::new("{}");
    publish_models(&bench, &POOL);
    // The model's part cut short of its delimiter: only the trailers say the form has ended.
    let mut cut = form(&[("file", &[5u8; 3_000])]);
    cut.truncate(cut.len() - BOUNDARY.len() - 6);
    cut.extend(format!("\r\n--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper").bytes());
    let (body_step, trailers_step, destination) = upload_with_trailers(&bench, &cut);
    assert_eq!((body_step, trailers_step), (Step::Pause, Step::Continue), "routed at the trailers, by load");
    assert_eq!(pick(destination), "10.0.0.1:8000");
    let whole = form(&[("file", &[5u8; 3_000]), ("model", b"whisper")]);
    let (body_step, trailers_step, destination) = upload_with_trailers(&bench, &whole);
    assert_eq!((body_step, trailers_step), (Step::Continue, Step::Continue));
    assert_eq!(pick(destination), WHISPER);
}

#[test]
fn an_upload_naming_a_model_no_pod_serves_is_answered_404_as_vllm_answers_it() {
    let bench = Bench::new("{}");
    publish_models(&bench, &POOL);
    let (_, destination) = upload(&bench, &form(&[("model", b"whisper-9"), ("file", &[1u8; 2_000])]), 1_000);
    assert_eq!(destination, None);
    let replies = bench.host.replies.borrow();
    assert_eq!(replies.last().map(|r| r.status), Some(404));
    let reply: serde_json::Value = serde_json::from_slice(&replies.last().unwrap().body).unwrap();
    assert_eq!(reply["error"]["message"], "The model `whisper-9` does not exist.");
}

#[test]
fn flow_control_does_not_hold_an_upload() {
    // The pool full (one in flight on each pod, of one allowed), a chat waits in the queue;
    // an upload is not flow control's (as when it went unread), so it goes on.
    let bench = Bench::new(r#"{"flow_control": {"enabled": true, "max_inflight_per_pod": 1, "ttl_ms": 1000}}"#);
    publish_models(&bench, &POOL);
    let chat = |model: &str| format!(r#"{{"model":"{model}","messages":[{{"role":"user","content":"hi"}}]}}"#);
    let path = [(":method", "POST"), (":path", "/v1/chat/completions")];
    let (_whisper, answer) = bench.request(&path, &chat("whisper"));
    assert_eq!(pick(answer.destination), WHISPER);
    let (_llama, answer) = bench.request(&path, &chat("llama"));
    assert_eq!(pick(answer.destination), "10.0.0.1:8000");
    let (_queued, answer) = bench.request(&path, &chat("whisper"));
    assert_eq!((answer.body_step, answer.destination), (Some(Step::Pause), None), "a chat waits");
    let body = form(&[("model", b"whisper"), ("file", &vec![7u8; 50_000])]);
    let (steps, destination) = upload(&bench, &body, 16_384);
    assert_eq!(pick(destination), WHISPER);
    assert_eq!(steps.first(), Some(&Step::Continue), "not queued: {steps:?}");
}

/// Uploads `body` in chunks, as [`upload`], and leaves the stream open: the steps, the
/// replies sent and the pod's count before the stream's end and after it.
fn upload_held(bench: &Bench, body: &[u8], chunk: usize) -> (Vec<Step>, Vec<u32>, (u32, u32)) {
    let content_type = format!("multipart/form-data; boundary={BOUNDARY}");
    let headers = [(":method", "POST"), (":path", "/v1/audio/transcriptions"), ("content-type", content_type.as_str())];
    let (mut stream, steps) = bench.upload_in_chunks(&headers, body, chunk);
    let during = bench.worker.inflight.borrow().local_count(WHISPER);
    stream.on_log(&bench.host);
    let after = bench.worker.inflight.borrow().local_count(WHISPER);
    (steps, bench.host.replies.borrow().iter().map(|reply| reply.status).collect(), (during, after))
}

#[test]
fn a_form_naming_another_model_after_its_file_is_refused_before_it_ends() {
    // vLLM serves a form's last `model`: routed by the first, this one would be answered as
    // "llama" by the whisper pod (or its 404). Refused as the second name streams past.
    let bench = Bench::new("{}");
    publish_models(&bench, &POOL);
    let body = form(&[("model", b"whisper"), ("file", &vec![7u8; 100_000]), ("model", b"llama")]);
    let (steps, replies, counts) = upload_held(&bench, &body, 16_384);
    assert_eq!(steps.first(), Some(&Step::Continue), "routed with its first chunk: {steps:?}");
    assert_eq!(steps.last(), Some(&Step::Pause), "the chunk with the second model is stopped: {steps:?}");
    assert_eq!(replies, vec![400]);
    let reply: serde_json::Value = serde_json::from_slice(&bench.host.replies.borrow()[0].body).unwrap();
    assert!(reply["error"]["message"].as_str().unwrap().contains("\"llama\""), "{reply}");
    assert_eq!(bench.stat("wasm_epp.upload_model_conflict"), 1);
    assert_eq!(counts, (0, 0), "given back to the pod picked as the upload is refused");
}

#[test]
fn a_second_model_already_buffered_is_refused_before_the_request_goes_on() {
    let bench = Bench::new("{}");
    publish_models(&bench, &POOL);
    // The file first: the whole form is read to its first model, the second in the same read.
    let body = form(&[("file", &[b'-'; 30_000]), ("model", b"whisper"), ("model", b"llama")]);
    let (steps, replies, counts) = upload_held(&bench, &body, 16_384);
    assert!(steps.iter().all(|step| *step == Step::Pause), "never went on: {steps:?}");
    assert_eq!((replies, counts), (vec![400], (0, 0)));
}

#[test]
fn a_form_naming_its_model_twice_alike_goes_on_as_vllm_reads_it() {
    let bench = Bench::new("{}");
    publish_models(&bench, &POOL);
    let body = form(&[("model", b"whisper"), ("file", &vec![7u8; 50_000]), ("model", b"whisper")]);
    let (steps, replies, counts) = upload_held(&bench, &body, 4_096);
    assert!(steps.iter().all(|step| *step == Step::Continue), "{steps:?}");
    assert_eq!((replies, counts), (vec![], (1, 0)));
    assert_eq!(bench.stat("wasm_epp.upload_model_conflict"), 0);
}

/// Uploads `body` to the transcriptions endpoint in chunks, its answer to come from the
/// whisper pod (Envoy's upstream address): the stream, for the answer's hooks.
fn upload_to_whisper(bench: &Bench, body: &[u8]) -> RequestStream {
    let content_type = format!("multipart/form-data; boundary={BOUNDARY}");
    let headers = [(":method", "POST"), (":path", "/v1/audio/transcriptions"), ("content-type", content_type.as_str())];
    let (stream, _) = bench.upload_in_chunks(&headers, body, 8_192);
    bench.host.properties.borrow_mut().insert("upstream\0address".into(), WHISPER.as_bytes().to_vec());
    stream
}

/// Uploads `body` in chunks, then answers it as Envoy does: `status` from the pod (named by
/// the served-endpoint header), or, for `None`, the gateway's own reply, the 400 it sent,
/// passed through the response hooks (the upstream Envoy had begun sending to still known).
fn upload_answered(bench: &Bench, body: &[u8], status: Option<&str>) {
    let mut stream = upload_to_whisper(bench, body);
    match status {
        Some(status) => {
            bench.host.set_response(&[(":status", status), ("x-gateway-destination-endpoint-served", WHISPER)], b"")
        }
        None => {
            let reply = bench.host.replies.borrow().last().map(|reply| reply.body.clone()).unwrap();
            bench.host.set_response(&[(":status", "400")], &reply);
        }
    }
    stream.on_response_headers(&bench.host, false);
    stream.on_response_body(&bench.host, 64, true);
    stream.on_log(&bench.host);
}

#[test]
fn a_refused_upload_is_the_gateways_answer_not_its_pods() {
    // Outlier detection counts a pod's failures in a row: the gateway's own 400 to a form
    // naming two models, sent after the upload went on to the pod, is no success of that pod.
    let bench = Bench::new(
        r#"{"outlier_detection": {"consecutive_failures": 2, "base_ejection_ms": 1000},
            "models": {"served_endpoint_header": "x-served"}}"#,
    );
    publish_models(&bench, &POOL);
    let one = form(&[("model", b"whisper"), ("file", &vec![7u8; 20_000])]);
    let two = form(&[("model", b"whisper"), ("file", &vec![7u8; 20_000]), ("model", b"llama")]);
    upload_answered(&bench, &one, Some("500"));
    upload_answered(&bench, &two, None);
    assert_eq!(bench.stat("wasm_epp.upload_model_conflict"), 1);
    assert_eq!(bench.host.response_header("x-served"), None, "no pod served the gateway's 400");
    upload_answered(&bench, &one, Some("500"));
    assert_eq!(bench.stat(&format!("wasm_epp.pod_ejections.pod.{WHISPER}")), 1, "two failures in a row");
}

/// Uploads `body` in chunks, its pod sending answer headers of `status` once the first chunk
/// went on (before it read the whole form): the step of each body call, the gateway's replies.
fn upload_answered_early(bench: &Bench, body: &[u8], status: &str) -> (Vec<Step>, Vec<u32>) {
    let content_type = format!("multipart/form-data; boundary={BOUNDARY}");
    let headers = [(":method", "POST"), (":path", "/v1/audio/transcriptions"), ("content-type", content_type.as_str())];
    bench.host.replies.borrow_mut().clear();
    let (mut stream, steps) = bench.upload_in_chunks_with(&headers, body, 8_192, false, |stream, arrived| {
        if arrived == 8_192 {
            bench.host.set_response(&[(":status", status)], b"");
            assert_eq!(stream.on_response_headers(&bench.host, false), Step::Continue);
        }
    });
    stream.on_log(&bench.host);
    (steps, bench.host.replies.borrow().iter().map(|reply| reply.status).collect())
}

#[test]
fn a_second_model_after_the_pod_refused_the_upload_leaves_the_pods_answer_whole() {
    let bench = Bench::new("{}");
    publish_models(&bench, &POOL);
    let body = form(&[("model", b"whisper"), ("file", &vec![7u8; 50_000]), ("model", b"llama")]);
    // A pod that wants a key answers 401 before it reads the form: that is the client's answer,
    // and a 400 sent after it would reset the stream. Counted all the same.
    let (steps, replies) = upload_answered_early(&bench, &body, "401");
    assert!(steps.iter().all(|step| *step == Step::Continue), "{steps:?}");
    assert_eq!((replies, bench.stat("wasm_epp.upload_model_conflict")), (vec![], 1));
    // A 2xx begun before the pod read the whole form may be the second model's: reset (Envoy
    // turns a reply after the answer's headers into one).
    let (steps, replies) = upload_answered_early(&bench, &body, "200");
    assert_eq!(steps.last(), Some(&Step::Pause), "{steps:?}");
    assert_eq!((replies, bench.stat("wasm_epp.upload_model_conflict")), (vec![400], 2));
}

const MODEL_DISPOSITION: &[u8] = b"Content-Disposition: form-data; name=\"model\"";

/// `body` with a part of raw header `lines` (without their line breaks) and `content` added
/// before its close delimiter.
fn with_part(body: &[u8], lines: &[&[u8]], content: &[u8]) -> Vec<u8> {
    let close = format!("--{BOUNDARY}--\r\n");
    let mut added = body[..body.len() - close.len()].to_vec();
    added.extend(format!("--{BOUNDARY}\r\n").bytes());
    for line in lines {
        added.extend_from_slice(line);
        added.extend(b"\r\n");
    }
    added.extend(b"\r\n");
    added.extend_from_slice(content);
    added.extend(b"\r\n");
    added.extend(close.bytes());
    added
}

/// A header line of `bytes` bytes that says nothing of its part.
fn padding_header(bytes: usize) -> Vec<u8> {
    let mut line = b"X-Pad: ".to_vec();
    line.resize(bytes, b'p');
    line
}

/// The message of the last reply sent.
fn last_message(bench: &Bench) -> String {
    let reply: serde_json::Value = serde_json::from_slice(&bench.host.replies.borrow().last().unwrap().body).unwrap();
    reply["error"]["message"].as_str().unwrap().to_owned()
}

#[test]
fn a_second_model_behind_long_part_headers_is_refused_and_long_file_headers_go_on() {
    // python-multipart bounds no header line: vLLM reads this part's model past the padding.
    let bench = Bench::new("{}");
    publish_models(&bench, &POOL);
    let first = form(&[("model", b"whisper"), ("file", &vec![7u8; 50_000])]);
    let hidden = with_part(&first, &[&padding_header(5 * 1024), MODEL_DISPOSITION], b"llama");
    let (steps, replies, counts) = upload_held(&bench, &hidden, 16_384);
    assert_eq!(steps.first(), Some(&Step::Continue), "routed with its first chunk: {steps:?}");
    assert_eq!(steps.last(), Some(&Step::Pause), "{steps:?}");
    assert_eq!((replies, counts), (vec![400], (0, 0)));
    assert!(last_message(&bench).contains("\"llama\""), "{}", last_message(&bench));
    // A Content-Disposition longer than any client writes may name a model past what is read.
    let mut disposition = b"Content-Disposition: form-data; filename=\"".to_vec();
    disposition.resize(5_000, b'a');
    disposition.extend(b"\"; name=\"model\"");
    let (_, replies, counts) = upload_held(&bench, &with_part(&first, &[&disposition], b"llama"), 16_384);
    assert_eq!((replies, counts), (vec![400, 400], (0, 0)));
    assert!(last_message(&bench).contains("Content-Disposition"), "{}", last_message(&bench));
    assert_eq!(bench.stat("wasm_epp.upload_model_conflict"), 2);
    // A client's long header beside its file is no conflict: the upload streams on.
    let file_disposition = b"Content-Disposition: form-data; name=\"file\"; filename=\"a.wav\"";
    let long_file =
        with_part(&form(&[("model", b"whisper")]), &[file_disposition, &padding_header(100_000)], &[7; 50_000]);
    let (steps, replies, counts) = upload_held(&bench, &long_file, 16_384);
    assert!(steps.iter().all(|step| *step == Step::Continue), "{steps:?}");
    assert_eq!((replies, counts), (vec![400, 400], (1, 0)));
}

#[test]
fn a_second_model_cut_by_the_forms_end_is_refused_at_its_trailers() {
    let bench = Bench::new("{}");
    publish_models(&bench, &POOL);
    let content_type = format!("multipart/form-data; boundary={BOUNDARY}");
    let headers = [(":method", "POST"), (":path", "/v1/audio/transcriptions"), ("content-type", content_type.as_str())];
    let whole = form(&[("model", b"whisper"), ("file", &vec![7u8; 50_000])]);
    // The second model's value has no delimiter after it: only the trailers say it is whole.
    let mut cut = whole[..whole.len() - BOUNDARY.len() - 6].to_vec();
    cut.extend(format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nllama").bytes());
    for (body, refused) in [(&cut, true), (&whole, false)] {
        let (mut stream, steps) = bench.upload_in_chunks_until(&headers, body, 16_384, true);
        let during = bench.worker.inflight.borrow().local_count(WHISPER);
        stream.on_log(&bench.host);
        assert_eq!(steps.first(), Some(&Step::Continue), "routed with its first chunk: {steps:?}");
        let at_trailers = if refused { Step::Pause } else { Step::Continue };
        assert_eq!(steps.last(), Some(&at_trailers), "{steps:?}");
        assert_eq!(during, u32::from(!refused), "given back as it is refused");
    }
    assert_eq!(bench.host.replies.borrow().iter().map(|reply| reply.status).collect::<Vec<_>>(), vec![400]);
    assert!(last_message(&bench).contains("cannot be read"), "{}", last_message(&bench));
    assert_eq!(bench.stat("wasm_epp.upload_model_conflict"), 1);
}

/// vLLM's answer to a transcription asked with the form's `stream=true`: a `200` of
/// `text/event-stream` before it generates; a generation's error is its first event, then
/// `[DONE]` (speech_to_text.py, `_speech_to_text_stream_generator`).
const TRANSCRIPTION_ERROR: &[u8] = b"data: {\"error\": {\"message\": \"Internal server error\", \"type\": \"InternalServerError\", \"param\": null, \"code\": 500}}\n\ndata: [DONE]\n\n";
const TRANSCRIPTION_CHUNK: &[u8] =
    b"data: {\"id\":\"transcribe-1\",\"object\":\"transcription.chunk\",\"choices\":[{\"delta\":{\"content\":\" Hello\"}}]}\n\n";

/// Uploads `body`, answered `200` of `content_type` whose body opens with `first`.
fn upload_streamed(bench: &Bench, body: &[u8], content_type: &str, first: &[u8]) {
    let mut stream = upload_to_whisper(bench, body);
    bench.host.set_response(&[(":status", "200"), ("content-type", content_type), ("x-served", WHISPER)], first);
    stream.on_response_headers(&bench.host, false);
    stream.on_response_body(&bench.host, first.len(), true);
    stream.on_log(&bench.host);
}

#[test]
fn a_streamed_transcription_that_opens_with_a_server_error_is_its_pods_failure() {
    let bench = Bench::new(
        r#"{"outlier_detection": {"consecutive_failures": 2, "base_ejection_ms": 1000},
            "models": {"served_endpoint_header": "x-served"}}"#,
    );
    publish_models(&bench, &POOL);
    let body = form(&[("model", b"whisper"), ("stream", b"true"), ("file", &vec![7u8; 20_000])]);
    // A stream that opens with its first words, and a whole answer (JSON, or the text formats'
    // text/plain) whose text reads like an error event, are the pod's successes.
    let event_stream = "text/event-stream; charset=utf-8";
    upload_streamed(&bench, &body, event_stream, TRANSCRIPTION_CHUNK);
    upload_streamed(&bench, &body, "text/plain; charset=utf-8", TRANSCRIPTION_ERROR);
    assert_eq!(bench.stat("wasm_epp.streams_failed"), 0);
    upload_streamed(&bench, &body, event_stream, TRANSCRIPTION_ERROR);
    upload_streamed(&bench, &body, event_stream, TRANSCRIPTION_ERROR);
    assert_eq!(bench.stat("wasm_epp.streams_failed"), 2);
    assert_eq!(bench.stat("wasm_epp.pod_attempts_failed"), 2);
    assert_eq!(bench.stat(&format!("wasm_epp.pod_ejections.pod.{WHISPER}")), 1, "two failures in a row");
}
