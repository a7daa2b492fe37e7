//! Hashing of Responses API prompts (`instructions` and `input`, see `chat::hash_responses`).

use crate::prefix::hash::{hash_prompt, hash_prompt_noting_replies, HashParams};
use crate::request::{parse_request, Endpoint};

fn hashes(body: &str) -> Vec<u64> {
    let request = parse_request(body.as_bytes(), Endpoint::Responses).unwrap();
    let mut out = Vec::new();
    hash_prompt(&request, Endpoint::Responses, &HashParams::default(), &mut out).unwrap();
    out
}

fn words(count: usize, seed: usize) -> String {
    (0..count).map(|i| format!("w{}", (i * 31 + seed) % 997)).collect::<Vec<_>>().join(" ")
}

fn turn(instructions: &str, items: &[String]) -> String {
    format!(r#"{{"model":"m","instructions":"{instructions}","input":[{}],"stream":true}}"#, items.join(","))
}

#[test]
fn a_conversations_next_turn_shares_every_block_of_the_turn_before() {
    let system = words(200, 1);
    let mut items = vec![format!(r#"{{"role":"user","content":"{}"}}"#, words(60, 2))];
    let first = hashes(&turn(&system, &items));
    items.push(format!(
        r#"{{"type":"message","role":"assistant","content":[{{"type":"output_text","text":"{}"}}]}}"#,
        words(40, 3)
    ));
    items.push(r#"{"type":"function_call","call_id":"c1","name":"ls","arguments":"{}"}"#.to_owned());
    items.push(r#"{"type":"function_call_output","call_id":"c1","output":"a.txt b.txt"}"#.to_owned());
    items.push(format!(r#"{{"role":"user","content":"{}"}}"#, words(30, 4)));
    let second = hashes(&turn(&system, &items));
    assert!(first.len() >= 20, "a long prompt hashes many blocks: {}", first.len());
    assert!(second.len() > first.len());
    let full_blocks_of_first = first.len() - 1;
    assert_eq!(second.get(..full_blocks_of_first), first.get(..full_blocks_of_first), "the earlier turn is a prefix");
}

#[test]
fn instructions_model_and_salt_tell_prompts_apart_and_a_string_input_hashes_too() {
    let input = words(100, 5);
    let base = hashes(&format!(r#"{{"model":"m","input":"{input}"}}"#));
    assert!(base.len() >= 5);
    let instructed = hashes(&format!(r#"{{"model":"m","instructions":"x","input":"{input}"}}"#));
    let other_model = hashes(&format!(r#"{{"model":"n","input":"{input}"}}"#));
    let salted = hashes(&format!(r#"{{"model":"m","input":"{input}","cache_salt":"t"}}"#));
    for other in [&instructed, &other_model, &salted] {
        assert_ne!(other.first(), base.first());
    }
}

#[test]
fn an_inline_image_or_file_costs_a_placeholder_not_the_block_budget() {
    let huge = "A".repeat(200_000);
    let with = |data: &str, kind: &str, field: &str| {
        let part = format!(r#"{{"type":"{kind}","{field}":"{data}"}}"#);
        let after = words(40, 8);
        let item = format!(
            r#"{{"role":"user","content":[{{"type":"input_text","text":"look"}},{part},{{"type":"input_text","text":"{after}"}}]}}"#
        );
        hashes(&turn("i", &[item]))
    };
    for (kind, field) in [("input_image", "image_url"), ("input_file", "file_data")] {
        let one = with(&huge, kind, field);
        assert!((2..8).contains(&one.len()), "{kind}: {} blocks", one.len());
        assert_ne!(one, with(&"B".repeat(200_000), kind, field), "{kind}: another payload, another hash");
    }
}

#[test]
fn assistant_items_are_noted_as_replies_and_odd_shapes_hash_nothing() {
    let items = [
        format!(r#"{{"role":"user","content":"{}"}}"#, words(50, 6)),
        format!(r#"{{"role":"assistant","content":"{}"}}"#, words(50, 7)),
        r#"{"role":"user","content":"more"}"#.to_owned(),
    ];
    let body = turn("i", &items);
    let request = parse_request(body.as_bytes(), Endpoint::Responses).unwrap();
    let (mut out, mut replies) = (Vec::new(), Vec::new());
    hash_prompt_noting_replies(&request, Endpoint::Responses, &HashParams::default(), &mut out, &mut replies).unwrap();
    assert_eq!(replies.len(), 1, "{replies:?}");
    for odd in [r#"{"input":[1,2]}"#, r#"{"input":["text"]}"#, r#"{"input":[{"role":"user"},7]}"#] {
        let request = parse_request(odd.as_bytes(), Endpoint::Responses).unwrap();
        let mut out = vec![1];
        assert!(hash_prompt(&request, Endpoint::Responses, &HashParams::default(), &mut out).is_err(), "{odd}");
        assert!(out.is_empty());
    }
}
