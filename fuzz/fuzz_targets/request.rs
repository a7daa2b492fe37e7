//! `parse_request` on arbitrary bodies, for each endpoint: never panics, and what it accepts
//! has the shape it promises (the prompt field the endpoint needs, of an allowed JSON type,
//! itself valid JSON).

#![no_main]

use libfuzzer_sys::fuzz_target;
use picker::request::{parse_request, BodyError, Endpoint};
use serde_json::value::RawValue;

fuzz_target!(|body: &[u8]| {
    for endpoint in [Endpoint::Completions, Endpoint::ChatCompletions, Endpoint::Other] {
        match parse_request(body, endpoint) {
            Ok(request) => {
                match endpoint {
                    Endpoint::Completions => assert!(request.prompt.is_some(), "completions without a prompt"),
                    Endpoint::ChatCompletions => assert!(request.messages.is_some(), "chat without messages"),
                    Endpoint::Other => {}
                }
                if let Some(prompt) = request.prompt {
                    assert!(matches!(prompt.get().as_bytes().first(), Some(b'"' | b'[')), "prompt {}", prompt.get());
                    assert_valid_json(prompt);
                }
                if let Some(messages) = request.messages {
                    assert!(messages.get().starts_with('['), "messages {}", messages.get());
                    assert_valid_json(messages);
                }
                if let Some(tools) = request.tools {
                    assert_valid_json(tools);
                }
            }
            Err(error) => {
                // The message goes into an OpenAI-shaped error body: it must render.
                let text = error.to_string();
                assert!(!text.is_empty());
                if let BodyError::MissingPrompt(field) = error {
                    assert!(["prompt", "messages"].contains(&field));
                }
            }
        }
    }
    if let Ok(path) = std::str::from_utf8(body) {
        let _ = Endpoint::from_path(path);
    }
});

/// A borrowed raw value re-parses on its own (without recursion: deep nesting is allowed).
fn assert_valid_json(raw: &RawValue) {
    assert!(serde_json::from_str::<Box<RawValue>>(raw.get()).is_ok(), "raw value is not JSON: {}", raw.get());
}
