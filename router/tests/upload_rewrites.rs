//! Model rewrites on uploads (`multipart/form-data`, vLLM's audio endpoints): a form asking
//! for a public name is sent as a rule's target, as a JSON body is: routed to a pod serving
//! the target, its form's `model` value replaced in the body, `content-length` following.

// Helpers outside #[test] functions read replies: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use common::{publish_models, Bench};
use wasm_epp_host::warnings::logged_warnings;
use wasm_epp_router::Step;

const STABLE: &str = "10.0.0.2:8000";
const CANARY: &str = "10.0.0.3:8000";

/// The idle pod serves another model; no pod serves the public name `whisper`.
const POOL: [(&str, &str, &[&str], f64); 3] =
    [("10.0.0.1:8000", "llama", &[], 0.0), (STABLE, "whisper-v3", &[], 2.0), (CANARY, "whisper-v4", &[], 2.0)];

const CANARY_RULE: &str = r#"{"models": {"rewrites": [{"model": "whisper", "targets": [
    {"model": "whisper-v3", "weight": 90}, {"model": "whisper-v4", "weight": 10}]}]}}"#;

const BOUNDARY: &str = "formdata-77c1";

/// A form of `parts`; a part named `model` gets `model_headers` after its disposition.
fn form(parts: &[(&str, &[u8])], model_headers: &str) -> Vec<u8> {
    let mut body = Vec::new();
    for (name, content) in parts {
        let extra = match *name {
            "file" => "; filename=\"a.wav\"\r\nContent-Type: audio/wav",
            "model" => model_headers,
            _ => "",
        };
        body.extend(format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"{extra}\r\n\r\n").bytes());
        body.extend_from_slice(content);
        body.extend(b"\r\n");
    }
    body.extend(format!("--{BOUNDARY}--\r\n").bytes());
    body
}

/// What the pod is sent.
struct Sent {
    steps: Vec<Step>,
    pick: String,
    body: Vec<u8>,
    content_length: Option<String>,
}

/// Uploads `body` in chunks of `chunk` bytes, with a declared length unless `chunked`, and
/// `extra` headers.
fn upload(bench: &Bench, body: &[u8], chunk: usize, chunked: bool, extra: &[(&str, &str)]) -> Sent {
    upload_typed(bench, &format!("multipart/form-data; boundary={BOUNDARY}"), body, chunk, chunked, extra)
}

/// [`upload`] with a content type of one's own.
fn upload_typed(
    bench: &Bench,
    content_type: &str,
    body: &[u8],
    chunk: usize,
    chunked: bool,
    extra: &[(&str, &str)],
) -> Sent {
    let length = body.len().to_string();
    let mut headers = vec![(":method", "POST"), (":path", "/v1/audio/transcriptions")];
    headers.push(("content-type", content_type));
    if !chunked {
        headers.push(("content-length", length.as_str()));
    }
    headers.extend_from_slice(extra);
    let (mut stream, steps) = bench.upload_in_chunks(&headers, body, chunk);
    let destination = bench.host.header("x-gateway-destination-endpoint").unwrap_or_default();
    stream.on_log(&bench.host);
    Sent {
        steps,
        pick: destination.split(',').next().unwrap_or_default().to_owned(),
        body: bench.host.body.borrow().clone(),
        content_length: bench.host.header("content-length"),
    }
}

#[test]
fn an_uploads_public_name_is_sent_as_a_drawn_target_to_a_pod_serving_it() {
    let bench = Bench::new(CANARY_RULE);
    publish_models(&bench, &POOL);
    let file = vec![9u8; 20_000];
    let mut to_stable = 0;
    for _ in 0..1000 {
        let body = form(&[("model", b"whisper"), ("language", b"en"), ("file", &file)], "");
        let sent = upload(&bench, &body, 16_384, false, &[]);
        assert_eq!(sent.steps.first(), Some(&Step::Continue), "routed with its first chunk, as before");
        let target = match sent.pick.as_str() {
            STABLE => "whisper-v3",
            CANARY => "whisper-v4",
            other => panic!("sent to {other}, a pod not serving a target"),
        };
        to_stable += usize::from(target == "whisper-v3");
        let expected = form(&[("model", target.as_bytes()), ("language", b"en"), ("file", &file)], "");
        assert!(sent.body == expected, "only the model's value changed, to the pod's model {target}");
        assert_eq!(sent.content_length, Some(expected.len().to_string()), "content-length follows the body");
    }
    assert!((850..=950).contains(&to_stable), "90 % of 1,000 within ±5 %: {to_stable}");
    assert_eq!(bench.stat("wasm_epp.model_rewritten"), 1000);
    assert_eq!(bench.stat("wasm_epp.upload_routed_by_model"), 1000);
    let by_model =
        bench.stat("wasm_epp.model_requests.model.whisper-v3") + bench.stat("wasm_epp.model_requests.model.whisper-v4");
    assert_eq!(by_model, 1000, "counted as the targets they were sent as");
}

#[test]
fn a_file_sent_first_has_its_model_rewritten_deep_in_the_body_and_a_chunked_body_no_length() {
    let bench = Bench::new(
        r#"{"models": {"rewrites": [{"model": "whisper", "targets": [{"model": "whisper-v4", "weight": 1}]}]}}"#,
    );
    publish_models(&bench, &POOL);
    let file = vec![b'-'; 300_000];
    let body = form(&[("file", &file), ("model", b"whisper"), ("language", b"en")], "");
    for chunked in [false, true] {
        let sent = upload(&bench, &body, 16_384, chunked, &[]);
        let (last, held) = sent.steps.split_last().unwrap();
        assert!(held.iter().all(|step| *step == Step::Pause) && *last == Step::Continue, "read to its model");
        assert_eq!(sent.pick, CANARY);
        let expected = form(&[("file", &file), ("model", b"whisper-v4"), ("language", b"en")], "");
        assert!(sent.body == expected, "chunked: {chunked}");
        let declared = (!chunked).then(|| expected.len().to_string());
        assert_eq!(sent.content_length, declared, "a chunked body gets no length");
    }
    assert_eq!(bench.stat("wasm_epp.model_rewritten"), 2);
}

#[test]
fn without_a_rule_the_form_goes_as_it_came_and_the_gateway_header_rewrites_it_as_a_json_body() {
    let bench = Bench::new(CANARY_RULE);
    publish_models(&bench, &POOL);
    let body = form(&[("model", b"whisper-v4"), ("file", &[1u8; 3_000])], "");
    let sent = upload(&bench, &body, 1_000, false, &[]);
    assert_eq!((sent.pick.as_str(), sent.content_length), (CANARY, Some(body.len().to_string())));
    assert!(sent.body == body, "a model without a rule is not touched");
    assert_eq!(bench.stat("wasm_epp.model_rewritten"), 0);
    // The gateway's header wins over the rules, as on a JSON body; naming the form's own model,
    // it changes nothing.
    let public = form(&[("model", b"whisper"), ("file", &[1u8; 3_000])], "");
    let header = [("x-llm-d-model-name-rewrite", "whisper-v4")];
    let sent = upload(&bench, &public, 1_000, false, &header);
    assert_eq!(sent.pick, CANARY);
    assert!(sent.body == form(&[("model", b"whisper-v4"), ("file", &[1u8; 3_000])], ""));
    assert_eq!(bench.stat("wasm_epp.model_rewritten"), 1);
    let sent = upload(&bench, &body, 1_000, false, &header);
    assert!(sent.pick == CANARY && sent.body == body);
    assert_eq!(bench.stat("wasm_epp.model_rewritten"), 1);
}

#[test]
fn a_value_under_a_transfer_encoding_is_not_rewritten_but_logged_and_counted() {
    let _ = logged_warnings(); // (installs the logger)
    let bench = Bench::new(CANARY_RULE);
    publish_models(&bench, &POOL);
    let body =
        form(&[("model", b"whisper"), ("file", &[1u8; 3_000])], "\r\nContent-Transfer-Encoding: quoted-printable");
    let sent = upload(&bench, &body, 1_000, false, &[]);
    assert!(sent.body == body, "the form as it came");
    assert_eq!(sent.content_length, Some(body.len().to_string()));
    // As before rewrites reached uploads: routed by the name it asks for, which no pod serves.
    assert_eq!(bench.host.replies.borrow().last().map(|reply| reply.status), Some(404));
    assert_eq!((bench.stat("wasm_epp.upload_not_rewritten"), bench.stat("wasm_epp.model_rewritten")), (1, 0));
    let warnings = logged_warnings();
    assert!(warnings.iter().any(|w| w.contains("\"whisper\" is not sent as \"whisper-v")), "{warnings:?}");
}

#[test]
fn a_form_of_an_ascii_compatible_charset_is_rewritten_when_both_names_are_ascii() {
    let _ = logged_warnings(); // (installs the logger)
    let bench = Bench::new(
        r#"{"models": {"rewrites": [{"model": "whisper", "targets": [{"model": "whisper-v4", "weight": 1}]},
            {"model": "whisper-eu", "targets": [{"model": "whisper-v4-\u00e9", "weight": 1}]}]}}"#,
    );
    publish_models(&bench, &POOL);
    let file = [5u8; 4_000];
    let body = form(&[("model", b"whisper"), ("file", &file)], "");
    for charset in ["us-ascii", "ISO-8859-1", "windows-1252"] {
        let content_type = format!("multipart/form-data; boundary={BOUNDARY}; charset={charset}");
        let sent = upload_typed(&bench, &content_type, &body, 1_000, false, &[]);
        assert_eq!(sent.pick, CANARY, "{charset}");
        let expected = form(&[("model", b"whisper-v4"), ("file", &file)], "");
        assert!(sent.body == expected, "{charset}: the target's bytes read as the target in it");
        assert_eq!(sent.content_length, Some(expected.len().to_string()), "{charset}");
    }
    assert_eq!((bench.stat("wasm_epp.model_rewritten"), bench.stat("wasm_epp.upload_not_rewritten")), (3, 0));
    // A target that is not ASCII (its UTF-8 bytes read as other characters in Latin-1), or a
    // charset not known to keep ASCII: sent as it came, logged and counted.
    let latin1 = format!("multipart/form-data; boundary={BOUNDARY}; charset=latin1");
    let to_accented = form(&[("model", b"whisper-eu"), ("file", &file)], "");
    let utf16 = format!("multipart/form-data; boundary={BOUNDARY}; charset=utf-16");
    for (content_type, body) in [(&latin1, &to_accented), (&utf16, &body)] {
        let sent = upload_typed(&bench, content_type, body, 1_000, false, &[]);
        assert!(sent.body == *body, "{content_type}: the form as it came");
    }
    assert_eq!((bench.stat("wasm_epp.model_rewritten"), bench.stat("wasm_epp.upload_not_rewritten")), (3, 2));
    let warnings = logged_warnings();
    assert!(warnings.iter().any(|w| w.contains("\"whisper-eu\" is not sent as \"whisper-v4-\u{e9}\"")), "{warnings:?}");
}

#[test]
fn flow_control_never_holds_an_upload_so_its_rewrite_is_made_at_once() {
    // Both target pods full (one in flight each, of one allowed): a chat for a target waits in
    // the queue; an upload is not flow control's, so it goes on, rewritten, with its first chunk.
    let config = r#"{"flow_control": {"enabled": true, "max_inflight_per_pod": 1, "ttl_ms": 1000},
        "models": {"rewrites": [{"model": "whisper", "targets": [{"model": "whisper-v3", "weight": 1}]}]}}"#;
    let bench = Bench::new(config);
    publish_models(&bench, &POOL);
    let chat = |model: &str| format!(r#"{{"model":"{model}","messages":[{{"role":"user","content":"hi"}}]}}"#);
    let path = [(":method", "POST"), (":path", "/v1/chat/completions")];
    let (_running, answer) = bench.request(&path, &chat("whisper-v3"));
    assert_eq!(answer.destination.unwrap_or_default().split(',').next(), Some(STABLE));
    let (_queued, answer) = bench.request(&path, &chat("whisper"));
    assert_eq!((answer.body_step, answer.destination), (Some(Step::Pause), None), "a chat waits");
    let body = form(&[("model", b"whisper"), ("file", &[7u8; 50_000])], "");
    let sent = upload(&bench, &body, 16_384, false, &[]);
    assert_eq!((sent.steps.first(), sent.pick.as_str()), (Some(&Step::Continue), STABLE), "not queued");
    assert!(sent.body == form(&[("model", b"whisper-v3"), ("file", &[7u8; 50_000])], ""));
}

#[test]
fn a_rewritten_form_naming_its_model_again_is_refused_as_the_repeat_would_go_unrewritten() {
    let bench = Bench::new(CANARY_RULE);
    publish_models(&bench, &POOL);
    let body = form(&[("model", b"whisper"), ("file", &[1u8; 20_000]), ("model", b"whisper")], "");
    let sent = upload(&bench, &body, 4_096, false, &[]);
    assert_eq!(sent.steps.first(), Some(&Step::Continue));
    assert_eq!(sent.steps.last(), Some(&Step::Pause), "{:?}", sent.steps);
    assert_eq!(bench.host.replies.borrow().last().map(|reply| reply.status), Some(400));
    assert_eq!(bench.stat("wasm_epp.upload_model_conflict"), 1);
}

#[test]
fn a_form_naming_its_model_again_goes_on_when_the_drawn_target_is_that_name() {
    // A rule that keeps its name for most requests (a canary taking a share of its traffic):
    // drawn as itself, the value is written again as it was, so the repeat reaches the pod as
    // the name it was picked for, which vLLM reads; refusing it would refuse a form that
    // names its model twice alike, as without the rule.
    let bench = Bench::new(
        r#"{"models": {"rewrites": [{"model": "whisper-v3", "targets": [{"model": "whisper-v3", "weight": 1}]}]}}"#,
    );
    publish_models(&bench, &POOL);
    let body = form(&[("model", b"whisper-v3"), ("file", &[1u8; 20_000]), ("model", b"whisper-v3")], "");
    let sent = upload(&bench, &body, 4_096, false, &[]);
    assert!(sent.steps.iter().all(|step| *step == Step::Continue), "{:?}", sent.steps);
    assert_eq!((sent.pick.as_str(), bench.host.replies.borrow().len()), (STABLE, 0));
    assert_eq!(bench.stat("wasm_epp.upload_model_conflict"), 0);
}
