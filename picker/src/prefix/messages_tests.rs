//! Hashing of Anthropic Messages API prompts (`system` and `messages`, `chat::hash_chat`).

use crate::prefix::hash::{hash_prompt, HashParams};
use crate::request::{parse_request, Endpoint};

fn hashes(body: &str) -> Vec<u64> {
    let request = parse_request(body.as_bytes(), Endpoint::Messages).unwrap();
    let mut out = Vec::new();
    hash_prompt(&request, Endpoint::Messages, &HashParams::default(), &mut out).unwrap();
    out
}

fn words(count: usize, seed: usize) -> String {
    (0..count).map(|i| format!("w{}", (i * 31 + seed) % 997)).collect::<Vec<_>>().join(" ")
}

fn turn(system: &str, messages: &[String]) -> String {
    format!(
        r#"{{"model":"m","max_tokens":64,"system":[{{"type":"text","text":"{system}"}}],"messages":[{}],"stream":true}}"#,
        messages.join(",")
    )
}

#[test]
fn an_agents_next_turn_shares_every_block_of_the_turn_before() {
    let system = words(200, 1);
    let mut messages = vec![format!(r#"{{"role":"user","content":"{}"}}"#, words(60, 2))];
    let first = hashes(&turn(&system, &messages));
    messages.push(format!(
        r#"{{"role":"assistant","content":[{{"type":"text","text":"{}"}},{{"type":"tool_use","id":"t1","name":"bash","input":{{"cmd":"ls"}}}}]}}"#,
        words(40, 3)
    ));
    messages.push(r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"a.txt"}]}"#.into());
    let second = hashes(&turn(&system, &messages));
    assert!(first.len() >= 20 && second.len() > first.len(), "{} then {}", first.len(), second.len());
    let full_blocks_of_first = first.len() - 1;
    assert_eq!(second.get(..full_blocks_of_first), first.get(..full_blocks_of_first), "the earlier turn is a prefix");
}

#[test]
fn the_system_prompt_leads_and_images_hash_by_their_data() {
    let user = |content: &str| format!(r#"{{"role":"user","content":{content}}}"#);
    let a = hashes(&turn(&words(100, 5), &[user(r#""hi""#)]));
    let b = hashes(&turn(&words(100, 6), &[user(r#""hi""#)]));
    assert_ne!(a.first(), b.first(), "another system prompt shares nothing");
    let image = |spacing: &str| {
        user(&format!(
            r#"[{{"type":"image",{spacing}"source":{{"type":"base64","media_type":"image/png","data":"{}"}}}},{{"type":"text","text":"what is it?"}}]"#,
            "A".repeat(50_000)
        ))
    };
    let tight = hashes(&turn("s", &[image("")]));
    let spaced = hashes(&turn("s", &[image(" ")]));
    assert!(tight.len() < 10, "a 50 kB image is a placeholder, not {} blocks", tight.len());
    assert_eq!(tight, spaced, "whitespace around a media block does not change its hash");
}

#[test]
fn a_cache_control_marker_moved_to_the_newest_blocks_keeps_the_earlier_turns_blocks() {
    // Claude Code marks the newest blocks of the conversation each turn; vLLM renders no marker.
    let marker = r#","cache_control":{"type":"ephemeral"}"#;
    let block = |text: &str, marked: bool| {
        let marker = if marked { marker } else { "" };
        format!(r#"{{"role":"user","content":[{{"type":"text","text":"{text}"{marker}}}]}}"#)
    };
    let reply = |seed| format!(r#"{{"role":"assistant","content":[{{"type":"text","text":"{}"}}]}}"#, words(60, seed));
    let (system, task, step) = (words(150, 7), words(80, 9), words(60, 10));
    // Turn 2 marks its two newest user blocks; turn 3 moves both markers on.
    let second = hashes(&turn(&system, &[block(&task, true), reply(1), block(&step, true)]));
    let third = [block(&task, false), reply(1), block(&step, true), reply(2), block("go on", true)];
    let third = hashes(&turn(&system, &third));
    let kept = second.len() - 1;
    assert_eq!(third.get(..kept), second.get(..kept), "the marker's move broke the prefix");
}

#[test]
fn claude_code_s_billing_header_changing_every_turn_keeps_the_earlier_turn_s_blocks() {
    // Claude Code's first system block carries a `cch=` hash that changes with every request;
    // vLLM drops that block before rendering, so the pod holds the turn without it.
    let tools = format!(r#"[{{"name":"Bash","description":"{}","input_schema":{{"type":"object"}}}}]"#, words(300, 11));
    let body = |cch: &str, messages: &[String]| {
        format!(
            r#"{{"model":"m","max_tokens":64,"tools":{tools},"system":[{{"type":"text","text":"x-anthropic-billing-header: cc_version=2.1.77.a1b; cc_entrypoint=cli; cch={cch};"}},{{"type":"text","text":"{}"}}],"messages":[{}]}}"#,
            words(200, 12),
            messages.join(",")
        )
    };
    let mut messages = vec![format!(r#"{{"role":"user","content":[{{"type":"text","text":"{}"}}]}}"#, words(80, 13))];
    let first = hashes(&body("3f9a1", &messages));
    messages.push(r#"{"role":"assistant","content":"ok"}"#.into());
    messages.push(r#"{"role":"user","content":"next"}"#.into());
    let second = hashes(&body("77c02", &messages));
    let tools_blocks = tools.len() / 64;
    assert!(first.len() > tools_blocks + 20 && second.len() > first.len(), "{} then {}", first.len(), second.len());
    assert_eq!(second.get(..first.len()), Some(first.as_slice()), "the earlier turn is a prefix");
    let other_block = hashes(&body("77c02", &messages).replace("x-anthropic-billing-header", "You are Claude"));
    assert_ne!(other_block.get(..first.len()), second.get(..first.len()), "any other block is hashed as written");
}
