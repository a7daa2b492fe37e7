//! `parse_request` on arbitrary bodies, for each endpoint: never panics, what it accepts
//! has the shape it promises (the prompt field the endpoint needs, of an allowed JSON type,
//! itself valid JSON), and it answers as the plain parse does (`parse_request_plainly`,
//! serde alone, where `parse_request` scans chat and completions bodies itself): the same
//! fields, the same refusal, and messages cut where they lie. What the routing and learning
//! paths then read of an accepted request (its prompt size, media and batch reads, whether it
//! asks for usage) never panics, and a batch of prompts, read from its first element alone, is
//! what serde's whole list says. The same bytes as a header value: the TTL header's Go
//! duration and the path prefix strip never panic.

#![no_main]

use libfuzzer_sys::fuzz_target;
use picker::go_duration::positive_duration_ms;
use picker::learn::tokens::prompt_size;
use picker::request::{
    media_in, parse_messages_plainly, parse_request, parse_request_plainly, parse_responses_plainly, strip_path_prefix,
    BodyError, Endpoint, InferenceRequest,
};
use serde_json::value::RawValue;

fuzz_target!(|body: &[u8]| {
    check(body);
    // The same bytes as a field's value and as a message's content in a chat the fast parse
    // takes, so its scan of every value is held to serde's on arbitrary input.
    let mut wrapped = br#"{"model":"m","messages":[{"role":"user","content":"x"}],"extra":"#.to_vec();
    wrapped.extend_from_slice(body);
    wrapped.push(b'}');
    check(&wrapped);
    let mut content = br#"{"messages":[{"role":"user","content":"#.to_vec();
    content.extend_from_slice(body);
    content.extend_from_slice(b"}]}");
    check(&content);
});

fn check(body: &[u8]) {
    for endpoint in [Endpoint::Completions, Endpoint::ChatCompletions, Endpoint::Other] {
        let answer = parse_request(body, endpoint);
        match (&answer, parse_request_plainly(body, endpoint)) {
            (Ok(cut), Ok(plain)) => {
                assert_eq!(fields(cut), fields(&plain), "cut and plain parses differ");
                assert_eq!(media_in(cut), media_in(&plain), "the scan's media count is not the walk's");
            }
            (Err(cut), Err(plain)) => assert_eq!(cut, &plain, "cut and plain parses refuse differently"),
            (cut, plain) => panic!("cut parse {cut:?}, plain parse {plain:?}"),
        }
        match answer {
            Ok(request) => {
                match endpoint {
                    Endpoint::Completions => assert!(request.prompt.is_some(), "completions without a prompt"),
                    Endpoint::ChatCompletions => assert!(request.messages.is_some(), "chat without messages"),
                    Endpoint::Responses | Endpoint::Messages | Endpoint::Other => {}
                }
                if let Some(prompt) = request.prompt {
                    assert!(matches!(prompt.as_bytes().first(), Some(b'"' | b'[')), "prompt {prompt}");
                    assert_valid_json(prompt);
                }
                if let Some(messages) = request.messages {
                    assert!(messages.starts_with('['), "messages {messages}");
                    assert_valid_json(messages);
                    let listed = serde_json::from_str::<Vec<&RawValue>>(messages).ok();
                    if let (Some(cut), Some(listed)) = (&request.messages_cut, listed) {
                        let texts: Vec<&str> = listed.iter().map(|m| m.get()).collect();
                        assert_eq!(cut.iter().map(|m| m.text).collect::<Vec<_>>(), texts, "messages cut elsewhere");
                    }
                }
                if let Some(tools) = request.tools {
                    assert_valid_json(tools);
                }
                check_reads(&request, endpoint);
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
    // The Responses and Messages APIs have their own parses, each scanned or by serde alone
    // to the same answer.
    for (endpoint, plainly) in
        [(Endpoint::Responses, parse_responses_plainly as Parse), (Endpoint::Messages, parse_messages_plainly as Parse)]
    {
        match (parse_request(body, endpoint), plainly(body)) {
            (Ok(fast), Ok(plain)) => {
                assert_eq!(agent_fields(&fast), agent_fields(&plain), "scan and serde differ");
                assert_eq!(media_in(&fast), media_in(&plain), "the scan's media count is not the walk's");
            }
            (Err(fast), Err(plain)) => assert_eq!(fast, plain, "scan and serde refuse differently"),
            (fast, plain) => panic!("scan {fast:?}, serde {plain:?}"),
        }
    }
    // What the Responses parse accepts has an `input` string or list and `instructions` a
    // string, each valid JSON; a refusal renders.
    match parse_request(body, Endpoint::Responses) {
        Ok(request) => {
            let input = request.input.unwrap_or_default();
            assert!(matches!(input.as_bytes().first(), Some(b'"' | b'[')), "input {input}");
            assert_valid_json(input);
            if let Some(instructions) = request.instructions {
                assert!(instructions.starts_with('"'), "instructions {instructions}");
            }
            assert!(request.prompt.is_none() && request.messages.is_none());
            check_reads(&request, Endpoint::Responses);
        }
        Err(error) => assert!(!error.to_string().is_empty()),
    }
    // The Messages API's parse: `messages` a list, `system` a string or a list, each valid JSON.
    match parse_request(body, Endpoint::Messages) {
        Ok(request) => {
            let messages = request.messages.unwrap_or_default();
            assert!(messages.starts_with('['), "messages {messages}");
            assert_valid_json(messages);
            if let Some(system) = request.instructions {
                assert!(matches!(system.as_bytes().first(), Some(b'"' | b'[')), "system {system}");
                assert_valid_json(system);
            }
            assert!(request.prompt.is_none() && request.input.is_none());
            check_reads(&request, Endpoint::Messages);
        }
        Err(error) => assert!(!error.to_string().is_empty()),
    }
    // A Responses answer's id, read from a chunk's head: a plain `resp...` string if any.
    if let Some(id) = picker::response_id::find_response_id(body) {
        assert!(id.starts_with(b"resp") && id.len() <= picker::response_id::MAX_ID_BYTES);
        assert!(!id.contains(&b'"') && !id.contains(&b'\\'));
    }
    if let Ok(text) = std::str::from_utf8(body) {
        let _ = Endpoint::from_path(text);
        // A header's value: the request TTL (Go's duration syntax), the path behind a prefix.
        if let Some(ms) = positive_duration_ms(text) {
            assert!(ms >= 1, "{text:?} read as {ms} ms");
        }
        let (prefix, path) = text.split_at(text.char_indices().nth(text.len() / 3).map_or(0, |(at, _)| at));
        let stripped = strip_path_prefix(path, prefix);
        assert!(stripped == "/" || path.ends_with(stripped), "{path:?} less {prefix:?} read as {stripped:?}");
    }
}

/// What routing and learning read of an accepted request: its size estimate (media parts, token
/// ids), whether it asks for usage, whether its cached tokens speak for one prompt.
fn check_reads(request: &InferenceRequest<'_>, endpoint: Endpoint) {
    let _ = request.includes_usage();
    for bytes_per_token in [0, 1, 4, usize::MAX] {
        let size = prompt_size(request, endpoint, bytes_per_token);
        assert!(!size.exact || endpoint == Endpoint::Completions, "exact size for {endpoint:?}");
    }
    // Without prompt logprobs, only a batch of prompts (a list of two or more whose first is a
    // text or a token-id list) has cached tokens that do not speak for the prompt.
    if request.prompt_logprobs.is_none_or(|value| value == "false") && request.echo != Some("true") {
        let batch = match request.prompt.map(serde_json::from_str::<Vec<&RawValue>>) {
            Some(Ok(list)) => {
                let first_opens = list.first().and_then(|first| first.get().bytes().next());
                list.len() >= 2 && matches!(first_opens, Some(b'"' | b'['))
            }
            // A list serde cannot read on its own (nested past its depth limit): not judged.
            Some(Err(_)) if request.prompt.is_some_and(|prompt| prompt.starts_with('[')) => return,
            _ => false,
        };
        // Nor, since n is read, a whole answer of n > 1 choices (the last child's report).
        let n_above_one = request.n.and_then(lax_count).is_some_and(|n| n > 1);
        let samples_answered_whole = n_above_one && request.stream != Some(true);
        assert_eq!(
            request.cached_tokens_speak_for_the_prompt(),
            !batch && !samples_answered_whole,
            "prompt {:?}, n {:?}",
            request.prompt,
            request.n
        );
    }
    // Its weight in flight: n (a count vLLM accepts, else 1) times a completions batch's
    // prompts, at most a whole batch; read by serde here, by a scan there.
    let n = request.n.and_then(lax_count).filter(|n| (2..=16_384).contains(n));
    let prompts = match (endpoint, request.prompt.map(serde_json::from_str::<Vec<&RawValue>>)) {
        (Endpoint::Completions, Some(Ok(list))) => {
            let first_opens = list.first().and_then(|first| first.get().bytes().next());
            if matches!(first_opens, Some(b'"' | b'[')) {
                list.len().max(1)
            } else {
                1
            }
        }
        // A list serde cannot read on its own (nested past its depth limit): not judged.
        (Endpoint::Completions, Some(Err(_))) if request.prompt.is_some_and(|prompt| prompt.starts_with('[')) => return,
        _ => 1,
    };
    let expected = (n.unwrap_or(1) as usize).saturating_mul(prompts).min(picker::request::MAX_SEQUENCES as usize);
    let expected = if endpoint.answers_like_completions() { expected } else { 1 };
    assert_eq!(request.sequences(endpoint) as usize, expected, "prompt {:?}, n {:?}", request.prompt, request.n);
}

/// `n` as vLLM's pydantic models read an integer (lax mode), by serde's value: a whole JSON
/// number, or a string of decimal digits with an optional `+`, a fraction of zeros and
/// whitespace around (a string with an escape is left out: the picker does not decode it).
fn lax_count(raw: &str) -> Option<u64> {
    match serde_json::from_str::<serde_json::Value>(raw).ok()? {
        serde_json::Value::Number(number) => number.as_u64().or_else(|| {
            let value = number.as_f64()?;
            (value >= 0.0 && value.fract() == 0.0).then_some(value as u64)
        }),
        serde_json::Value::String(text) if !raw.contains('\\') => {
            let text = text.trim_matches(|c: char| c.is_ascii_whitespace());
            let text = text.strip_prefix('+').unwrap_or(text);
            let (whole, zeros) = text.split_once('.').unwrap_or((text, "0"));
            let all = |part: &str, allowed: &[u8]| !part.is_empty() && part.bytes().all(|b| allowed.contains(&b));
            (all(whole, b"0123456789") && all(zeros, b"0")).then(|| whole.parse().ok()).flatten()
        }
        _ => None,
    }
}

/// A borrowed raw value re-parses on its own (without recursion: deep nesting is allowed).
fn assert_valid_json(raw: &str) {
    assert!(serde_json::from_str::<Box<RawValue>>(raw).is_ok(), "raw value is not JSON: {raw}");
}

type Parse = for<'a> fn(&'a [u8]) -> Result<InferenceRequest<'a>, BodyError>;

/// What an agent's request says, to compare its two parses.
#[allow(clippy::type_complexity)]
fn agent_fields<'a>(
    request: &InferenceRequest<'a>,
) -> (Option<String>, Option<bool>, [Option<&'a str>; 4], Option<String>) {
    (
        request.model.as_deref().map(str::to_owned),
        request.stream,
        [request.messages, request.tools, request.instructions, request.input],
        request.previous_response_id.as_deref().map(str::to_owned),
    )
}

/// What a request says, to compare the two parses.
#[allow(clippy::type_complexity)]
/// The fields both parses read: (model, stream, stream_options, prompt, messages, tools,
/// cache_salt), then (prompt_logprobs, echo, logprobs, n).
type Fields<'a> = (
    (Option<String>, Option<bool>, Option<&'a str>, Option<&'a str>, Option<&'a str>, Option<&'a str>, Option<String>),
    (Option<&'a str>, Option<&'a str>, Option<&'a str>, Option<&'a str>),
);

fn fields<'a>(request: &InferenceRequest<'a>) -> Fields<'a> {
    (
        (
            request.model.as_deref().map(str::to_owned),
            request.stream,
            request.stream_options,
            request.prompt,
            request.messages,
            request.tools,
            request.cache_salt.as_deref().map(str::to_owned),
        ),
        (request.prompt_logprobs, request.echo, request.logprobs, request.n),
    )
}
