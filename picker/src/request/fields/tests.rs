//! The fast parses of the Responses and Messages APIs against serde's: the same answer for
//! every body, and the fast path really taken for plain bodies.

use crate::prefix::{hash_prompt_noting_replies, HashParams};
use crate::request::{
    parse_messages, parse_messages_plainly, parse_responses, parse_responses_plainly, BodyError, Endpoint,
    InferenceRequest,
};

use super::{read_object, value_at, Known};

type Fields<'a> = (Option<String>, Option<bool>, [Option<&'a str>; 4], Option<String>, Option<String>);

fn fields<'a>(request: &InferenceRequest<'a>) -> Fields<'a> {
    (
        request.model.as_deref().map(str::to_owned),
        request.stream,
        [request.messages, request.tools, request.instructions, request.input],
        request.cache_salt.as_deref().map(str::to_owned),
        request.previous_response_id.as_deref().map(str::to_owned),
    )
}

type Parse = for<'a> fn(&'a [u8]) -> Result<InferenceRequest<'a>, BodyError>;

/// Tiny blocks, so short bodies make many hashes and blocks span items and parts.
const PARAMS: HashParams = HashParams { block_tokens: 1, bytes_per_token: 3, max_blocks: 64 };

type Hashed = Result<(Vec<u64>, Vec<(u32, u32)>), String>;

fn hashed(request: &InferenceRequest<'_>, endpoint: Endpoint) -> Hashed {
    let (mut out, mut replies) = (Vec::new(), Vec::new());
    hash_prompt_noting_replies(request, endpoint, &PARAMS, &mut out, &mut replies).map_err(|e| e.to_string())?;
    Ok((out, replies.iter().map(|r| (r.start_block, r.end_block)).collect()))
}

/// Both parses of each API answer the same on `body`, and hash the same; returns whether a
/// scan cut the items out.
fn same_answers(body: &[u8]) -> bool {
    let pairs: [(Endpoint, Parse, Parse); 2] = [
        (Endpoint::Responses, parse_responses, parse_responses_plainly),
        (Endpoint::Messages, parse_messages, parse_messages_plainly),
    ];
    let mut cut = false;
    for (endpoint, fast, plain) in pairs {
        match (fast(body), plain(body)) {
            (Ok(fast), Ok(plain)) => {
                assert_eq!(fields(&fast), fields(&plain), "{}", String::from_utf8_lossy(body));
                assert!(plain.messages_cut.is_none());
                cut |= fast.messages_cut.is_some();
                assert_eq!(hashed(&fast, endpoint), hashed(&plain, endpoint), "{}", String::from_utf8_lossy(body));
            }
            (Err(fast), Err(plain)) => assert_eq!(fast, plain, "{}", String::from_utf8_lossy(body)),
            (fast, plain) => panic!("{fast:?} vs {plain:?} on {}", String::from_utf8_lossy(body)),
        }
    }
    cut
}

/// Whether the scan reads `text` at all (else serde does).
fn scanned(text: &str) -> bool {
    let mut known = Known::default();
    read_object(text, |key, start| {
        let (value, end) = value_at(text, start)?;
        if key == "model" {
            known.text(0, value)?;
        }
        Some(end)
    })
    .is_some()
}

#[test]
fn plain_agent_bodies_are_scanned_and_read_as_serde_reads_them() {
    let bodies = [
        r#"{"model":"m","instructions":"Be brief.","input":[{"role":"user","content":"hi \"there\""}],"stream":true,"previous_response_id":"resp_1","tools":[{"type":"function","name":"f"}],"cache_salt":"s"}"#,
        r#"{"model":"m\u00e9","input":"text","instructions":null,"stream":null}"#,
        r#"{"model":"m","max_tokens":64,"system":[{"type":"text","text":"You code.","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"text","text":"fix\nit"}]}],"stream":true}"#,
        r#" { "messages" : [ ] , "system" : "s" , "metadata" : { "user_id" : "u" } } "#,
        r#"{"messages":[{"role":"user","content":[{"type":"text","text":"look","cache_control":{"type":"ephemeral"}},{"type":"image","source":{"type":"base64","data":"AAAA"}}]},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"bash","input":{"cmd":"ls"}}]}]}"#,
    ];
    for body in bodies {
        assert!(scanned(body), "{body}");
        same_answers(body.as_bytes());
    }
    // Items as the scan found them: hashing does not cut the list again.
    for body in [bodies[0], bodies[2], bodies[4]] {
        assert!(same_answers(body.as_bytes()), "not cut: {body}");
    }
}

#[test]
fn other_shapes_are_left_to_serde_with_its_answer() {
    let bodies: [&[u8]; 12] = [
        br#"{"model":"a","model":"b","input":"x"}"#,
        br#"{"mod\u0065l":"a","input":"x"}"#,
        br#"{"model":5,"input":"x","messages":[]}"#,
        br#"{"stream":"yes","input":"x","messages":[]}"#,
        br#"{"model":"\ud800","input":"x","messages":[]}"#,
        br#"{"input":"x","messages":[],}"#,
        br#"{"input":"x","messages":[]} x"#,
        br#"["m",true]"#,
        br#"{"input":7,"messages":"x"}"#,
        br#"{"instructions":[1],"system":7,"input":"x","messages":[]}"#,
        b"{\"input\":\"\xff\",\"messages\":[]}",
        br#"{}"#,
    ];
    for body in bodies {
        same_answers(body);
    }
}

/// Every mutant of an agent's body (a byte replaced, removed or doubled with one of the
/// characters JSON's grammar turns on) answers the same both ways.
#[test]
fn mutated_agent_bodies_answer_the_same_both_ways() {
    let bases = [
        r#"{"model":"m","input":[{"type":"function_call_output","output":"{\"ok\":true}"}],"stream":true,"instructions":"x"}"#,
        r#"{"system":"s","messages":[{"role":"user","content":"a\tb"}],"tools":null,"previous_response_id":"r"}"#,
    ];
    let specials = b"[]{}\",:\\ \nau0";
    for base in bases {
        let base = base.as_bytes();
        for at in 0..base.len() {
            same_answers(&[&base[..at], &base[at + 1..]].concat());
            for &special in specials {
                same_answers(&[&base[..at], &[special], &base[at + 1..]].concat());
                same_answers(&[&base[..at], &[special], &base[at..]].concat());
            }
        }
    }
}
