//! Bodies vLLM serves that the picker's parse refuses (vLLM reads JSON with Python and
//! pydantic, in lax mode): routed by their model, rewritten like any other, and answered 400
//! under `invalid_body: reject` only when no model can be read at all.

// Helpers outside #[test] functions read replies: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use common::{publish_models, Bench, COMPLETIONS};

const CHAT: [(&str, &str); 3] =
    [(":method", "POST"), (":path", "/v1/chat/completions"), ("content-type", "application/json")];

/// The least loaded pod serves another model: routed by load, every request would go there.
const POOL: [(&str, &str, &[&str], f64); 2] =
    [("10.0.0.1:8000", "llama", &[], 0.0), ("10.0.0.2:8000", "qwen", &["sql-lora"], 5.0)];

const MESSAGES: &str = r#""messages":[{"role":"user","content":"hi"}]"#;

/// Bodies for `model` the picker's parse refuses and vLLM serves, with the endpoint each is for.
fn lenient_bodies(model: &str) -> Vec<(&'static [(&'static str, &'static str)], String)> {
    vec![
        (&CHAT, format!(r#"{{"model":"{model}",{MESSAGES},"stream":true,"stream":"true"}}"#)),
        (&CHAT, format!(r#"{{"model":"{model}",{MESSAGES},"temperature":-Infinity}}"#)),
        (&CHAT, format!(r#"{{"model":"llama",{MESSAGES},"model":"{model}"}}"#)),
        (&CHAT, format!("\u{feff}{{\"model\":\"{model}\",{MESSAGES}}}")),
        (&CHAT, format!(r#"{{"model":"{model}",{MESSAGES},"temperature":NaN}}"#)),
        (&COMPLETIONS, format!(r#"{{"model":"{model}","prompt_embeds":"AAAA","max_tokens":4}}"#)),
    ]
}

fn chosen(destination: Option<String>) -> String {
    destination.unwrap_or_default().split(',').next().unwrap_or_default().to_owned()
}

#[test]
fn bodies_vllm_reads_are_routed_to_pods_of_their_model() {
    let bench = Bench::new(r#"{"invalid_body": "reject"}"#);
    publish_models(&bench, &POOL);
    let bodies = lenient_bodies("sql-lora");
    for (headers, body) in &bodies {
        let answer = bench.complete(headers, body);
        assert_eq!((answer.reply, chosen(answer.destination)), (None, "10.0.0.2:8000".to_owned()), "{body}");
    }
    let count = bodies.len() as u64;
    assert_eq!(bench.stat("wasm_epp.body_routed_by_model"), count);
    assert_eq!((bench.stat("wasm_epp.body_invalid"), bench.stat("wasm_epp.body_rejected")), (count, 0));
    assert_eq!(bench.stat("wasm_epp.model_requests.model.sql-lora"), count);
}

#[test]
fn a_rewritten_public_name_in_such_a_body_reaches_the_pod_as_its_target() {
    let config = r#"{"models": {"rewrites": [{"model": "public", "targets": [{"model": "sql-lora", "weight": 1}]}]}}"#;
    let bench = Bench::new(config);
    publish_models(&bench, &POOL);
    for (headers, body) in lenient_bodies("public") {
        let answer = bench.complete(headers, &body);
        assert_eq!(chosen(answer.destination), "10.0.0.2:8000", "{body}");
        let sent = String::from_utf8(bench.host.body.borrow().clone()).unwrap();
        // The last `model` is the one vLLM reads (a body naming it twice keeps its first).
        let expected = match body.rfind(r#""model":"public""#) {
            Some(at) => format!("{}\"model\":\"sql-lora\"{}", &body[..at], &body[at + r#""model":"public""#.len()..]),
            None => panic!("{body}"),
        };
        assert_eq!(sent, expected);
    }
}

#[test]
fn only_bodies_with_no_readable_model_are_rejected() {
    let bench = Bench::new(r#"{"invalid_body": "reject"}"#);
    publish_models(&bench, &POOL);
    let unusable = [
        "{not json",
        r#"{"model":"sql-lora","messages":[{"role":"user","content":"hi"}"#,
        r#"{"model":7,"messages":[]}"#,
        r#"[{"model":"sql-lora"}]"#,
        r#"{"model":"sql-lora","messages":[]} and more"#,
    ];
    for body in unusable {
        let answer = bench.complete(&CHAT, body);
        assert_eq!((answer.reply, answer.destination), (Some(400), None), "{body}");
    }
    // A body vLLM refuses itself but whose model is plain goes to that model's pods, which
    // answer it: the gateway does not guess pydantic's verdict.
    let answer = bench.complete(&CHAT, r#"{"model":"sql-lora","messages":"not a list"}"#);
    assert_eq!(chosen(answer.destination), "10.0.0.2:8000");
    assert_eq!(bench.stat("wasm_epp.body_rejected"), unusable.len() as u64);
    // Routed by load under the default policy, as before.
    let routing = Bench::new("{}");
    publish_models(&routing, &POOL);
    assert_eq!(chosen(routing.complete(&CHAT, "{not json").destination), "10.0.0.1:8000");
}
