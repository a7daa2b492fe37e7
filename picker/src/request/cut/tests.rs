//! The cut parse against the plain one: the same answer for every body, the same hashes and
//! replies, and the cut path really taken for plain chats.

use super::super::{parse_request, parse_request_plainly, BodyError, Endpoint, InferenceRequest};
use super::MAX_CUT_MESSAGES;
use crate::prefix::{hash_prompt_noting_replies, HashParams};

/// The fields both parses read: (model, stream, stream_options, prompt, messages, tools,
/// cache_salt), then (prompt_logprobs, echo, logprobs, n), as the `request` fuzz target compares.
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

/// Tiny blocks, so short bodies make many hashes and blocks span messages and parts.
const PARAMS: [HashParams; 2] = [
    HashParams { block_tokens: 16, bytes_per_token: 4, max_blocks: 256 },
    HashParams { block_tokens: 1, bytes_per_token: 3, max_blocks: 64 },
];

type Hashed = Result<(Vec<u64>, Vec<(u32, u32)>), String>;

fn hashed(request: &InferenceRequest<'_>, endpoint: Endpoint, params: &HashParams) -> Hashed {
    let (mut out, mut replies) = (Vec::new(), Vec::new());
    hash_prompt_noting_replies(request, endpoint, params, &mut out, &mut replies).map_err(|e| e.to_string())?;
    Ok((out, replies.iter().map(|r| (r.start_block, r.end_block)).collect()))
}

/// Both parses give the same answer on `body` for every endpoint, and the same hashes; returns
/// whether the chat parse cut the messages.
fn same_answers(body: &[u8]) -> bool {
    let mut cut = false;
    for endpoint in [Endpoint::ChatCompletions, Endpoint::Completions, Endpoint::Other] {
        let (fast, plain) = (parse_request(body, endpoint), parse_request_plainly(body, endpoint));
        match (&fast, &plain) {
            (Ok(fast), Ok(plain)) => {
                assert_eq!(fields(fast), fields(plain), "{}", String::from_utf8_lossy(body));
                assert!(plain.messages_cut.is_none());
                let media = crate::request::media_in;
                assert_eq!(media(fast), media(plain), "media of {}", String::from_utf8_lossy(body));
                cut |= endpoint == Endpoint::ChatCompletions && fast.messages_cut.is_some();
                for params in &PARAMS {
                    let (a, b) = (hashed(fast, endpoint, params), hashed(plain, endpoint, params));
                    assert_eq!(a, b, "hashes of {}", String::from_utf8_lossy(body));
                }
            }
            (Err(fast), Err(plain)) => assert_eq!(fast, plain, "{}", String::from_utf8_lossy(body)),
            _ => panic!("{fast:?} vs {plain:?} on {}", String::from_utf8_lossy(body)),
        }
    }
    cut
}

fn long_text(len: usize, seed: u64) -> String {
    let words = ["the", "cache", "\\\"q\\\"", "[x]", "line\\n", "C:\\\\p", "é☃", "{", "}", ","];
    let mut state = seed;
    let mut text = String::new();
    while text.len() < len {
        state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        text.push_str(words[(state >> 33) as usize % words.len()]);
        text.push(' ');
    }
    text
}

#[test]
fn plain_chats_are_cut_and_hash_as_before() {
    let long = long_text(9_000, 1);
    let bodies = [
        r#"{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}]}"#.to_owned(),
        r#" { "messages" : [ { "role" : "user" , "content" : "x" } ,	{"content":"y","role":"assistant"} ] , "stream":true } "#.to_owned(),
        r#"{"messages":[{"role":"user","content":"a [b] c"},{"role":"assistant","content":null}]}"#.to_owned(),
        r#"{"messages":[{"role":"user","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"http://x/i.png"}}]}]}"#.to_owned(),
        r#"{"messages":[{"role":"user","content":[]},{"role":"user","content":[{"type":"text","text":"\u00e9\ud83d\ude00"}]}],"tools":[{"type":"function"}]}"#.to_owned(),
        r#"{"messages":[{"content":"lone \ud800 surrogate","role":"user"}],"cache_salt":"s\u00e9","model":"m\u00e9"}"#.to_owned(),
        r#"{"messages":[{"role":"user","content":"x"}],"prompt_logprobs":1,"echo":true,"logprobs":null}"#.to_owned(),
        r#"{"messages":[{"role":"user","content":"x"}],"n":2}"#.to_owned(),
        format!(r#"{{"model":"m","messages":[{{"role":"system","content":"{long}"}},{{"role":"user","content":"{long}"}},{{"role":"assistant","content":"{long}"}},{{"role":"user","content":"q"}}]}}"#),
        format!(r#"{{"messages":[{{"role":"user","content":{}1{}}}]}}"#, "[".repeat(10_000), "]".repeat(10_000)),
        format!(r#"{{"messages":[{}{{"role":"user","content":"last"}}]}}"#, r#"{"role":"user","content":"m"},"#.repeat(MAX_CUT_MESSAGES - 1)),
    ];
    for body in &bodies {
        assert!(same_answers(body.as_bytes()), "not cut: {body}");
    }
}

#[test]
fn other_shapes_take_the_plain_parse_with_its_answer() {
    let many = format!(
        r#"{{"messages":[{}{{"role":"user","content":"last"}}]}}"#,
        r#"{"content":"m"},"#.repeat(MAX_CUT_MESSAGES)
    );
    let bodies: [&[u8]; 24] = [
        br#"{"messages":[]}"#,
        br#"{"messages":[ ]}"#,
        br#"{"messages":[{}]}"#,
        br#"{"messages":[{"role":"user","content":"a"},{}]}"#,
        br#"{"messages":[{"r\u006fle":"user","content":"x"}]}"#,
        br#"{"messages":[{"role":"user","c\u006fntent":[{"type":"text","text":"a"}]}]}"#,
        br#"{"messages":[{"content":"a","content":[{"type":"text","text":"b"}]}]}"#,
        br#"{"messages":[{"content":"a","content":"b"}]}"#,
        br#"{"messages":["hi"]}"#,
        br#"{"messages":[{"content":"a"},1]}"#,
        br#"{"messages":"x"}"#,
        br#"{"messages":"\ud800"}"#,
        br#"{"messages":{"content":"x"}}"#,
        br#"{"messages":null}"#,
        br#"{"messages":[{"content":"a"},]}"#,
        br#"{"messages":[{"content":"a"} {"content":"b"}]}"#,
        br#"{"messages":[{"content":"a"}"#,
        br#"{"messages":[{"content":"a"}],"messages":[{"content":"b"}]}"#,
        b"{\"x\":\"\xff\",\"messages\":[{\"content\":\"a\"}]}",
        b"{\"messages\":[{\"content\":\"\xff\"}]}",
        b"\xef\xbb\xbf{\"messages\":[{\"content\":\"a\"}]}",
        br#"{"messages":[{"content":"a"}]} x"#,
        br#"{"prompt":"p","messages":[{"content":"a"}]}"#,
        many.as_bytes(),
    ];
    for body in bodies {
        same_answers(body);
    }
    let empty = parse_request(br#"{"messages":[]}"#, Endpoint::ChatCompletions).unwrap();
    assert_eq!(empty.messages, Some("[]"));
    let error = parse_request(br#"{"messages":"x"}"#, Endpoint::ChatCompletions).unwrap_err();
    assert_eq!(error, BodyError::WrongType("messages"));
}

/// Every mutant of a few bodies (a byte replaced, removed or doubled, with the characters JSON
/// turns on) answers the same both ways.
#[test]
fn mutated_bodies_answer_the_same_both_ways() {
    let bases = [
        r#"{"model":"m","messages":[{"role":"user","content":"a \"b\" [c]"},{"role":"assistant","content":[{"type":"text","text":"t"},{"type":"image_url","image_url":{"url":"u"}}]}],"stream":false}"#,
        r#"{"messages" : [ {"content":"x\ny","role":"system"} , {"role":"user","content":"\u00e9"} ], "tools":null}"#,
    ];
    let specials = b"[]{}\",:\\ \nau0";
    let mut cut = 0;
    for base in bases {
        let base = base.as_bytes();
        for at in 0..base.len() {
            for &special in specials {
                let mut replaced = base.to_vec();
                replaced[at] = special;
                cut += usize::from(same_answers(&replaced));
                let mut doubled = base.to_vec();
                doubled.insert(at, special);
                cut += usize::from(same_answers(&doubled));
            }
            let mut removed = base.to_vec();
            removed.remove(at);
            cut += usize::from(same_answers(&removed));
        }
    }
    assert!(cut > 100, "the cut parse took only {cut} mutants");
}
