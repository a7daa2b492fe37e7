//! The bytes a chat request hashes as: `tools`, then every message as written, with media parts
//! replaced by placeholders.
//!
//! Whole message objects are hashed, role included, because the engine's chat template puts
//! role tokens into the prompt too: a chat and a completions request of the same words never
//! share blocks, there or here. A message whose `content` is a list of parts is spliced: the
//! object's bytes around the list, then each part; a text part as written, a media part
//! (image, audio, video, file) as `NUL type NUL hash(url or data)`. So a 1 MB base64 image costs
//! one short placeholder, not the whole block budget, and its JSON whitespace does not matter.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;
use xxhash_rust::xxh3::xxh3_64;

use super::hash::{BlockChain, ShapeError, SEPARATOR};
use super::json::{around_member, for_each_element, member_value, span_of, string_contents, Element};
use super::system::feed_system;
use crate::request::Message;
use crate::request::MEDIA_FIELDS;

/// `tools` (as written), the tagged `system` prompt of a Messages API request (vLLM makes it
/// the chat's system message, without Claude Code's billing header: `system.rs`; a chat's is
/// one of its messages), then every message, in order.
/// `cut`: where the body parse found each message, if it did; otherwise the raw list is cut
/// here (the same messages either way).
pub(super) fn hash_chat(
    messages: &str,
    cut: Option<&[Message<'_>]>,
    tools: Option<&str>,
    system: Option<&str>,
    chain: &mut BlockChain<'_>,
) -> Result<(), ShapeError> {
    let messages = messages.trim_ascii();
    if !messages.starts_with('[') {
        return Err(ShapeError("messages is not a list"));
    }
    feed_tools(tools, chain);
    if let Some(system) = system {
        if !(chain.feed(INSTRUCTIONS_TAG) && feed_system(system, chain)?) {
            return Ok(());
        }
    }
    hash_list(messages, cut, chain)
}

/// Every message (or input item) of `list`, in order: where the body parse found them (`cut`),
/// if it did; otherwise cut out of the raw list here.
fn hash_list(list: &str, cut: Option<&[Message<'_>]>, chain: &mut BlockChain<'_>) -> Result<(), ShapeError> {
    match cut {
        Some(cut) => {
            for message in cut {
                if !hash_message(message.text, message.parts, chain)? {
                    break;
                }
            }
            Ok(())
        }
        None => for_each_element(list, |message| hash_message(message.text, message_parts(message)?, chain)),
    }
}

/// Marks where a Responses API request's `instructions` (or a Messages API request's `system`)
/// begin, so they never read as the bytes of an input item (raw JSON text holds no NUL byte).
const INSTRUCTIONS_TAG: &[u8] = b"\0instructions\0";

/// A Responses API prompt: `tools` (as written), `instructions` (tagged), then `input`, a
/// string as written or every item as a chat message is (a message item is the same object a
/// chat sends, and vLLM renders both through the same chat template).
pub(super) fn hash_responses(
    instructions: Option<&str>,
    input: Option<&str>,
    cut: Option<&[Message<'_>]>,
    tools: Option<&str>,
    chain: &mut BlockChain<'_>,
) -> Result<(), ShapeError> {
    feed_tools(tools, chain);
    if let Some(instructions) = instructions {
        if !(chain.feed(INSTRUCTIONS_TAG) && chain.feed(instructions.as_bytes())) {
            return Ok(());
        }
    }
    let Some(input) = input.map(str::trim_ascii) else { return Ok(()) };
    if input.starts_with('"') {
        chain.feed(input.as_bytes());
        return Ok(());
    }
    hash_list(input, cut, chain)
}

fn feed_tools(tools: Option<&str>, chain: &mut BlockChain<'_>) {
    if let Some(tools) = tools.map(str::trim_ascii).filter(|t| *t != "null") {
        chain.feed(tools.as_bytes());
    }
}

/// One message (or input item), noting where an assistant's lies; false once the chain is full.
fn hash_message(text: &str, parts: Option<&str>, chain: &mut BlockChain<'_>) -> Result<bool, ShapeError> {
    let start_block = chain.current_block();
    let more = feed_message(text, parts, chain)?;
    if is_assistant(text) {
        chain.note_reply(start_block);
    }
    Ok(more)
}

/// Whether the message's own `role` member is `"assistant"`, wherever it is among its
/// members: clients write it first (as typed), last (serializers that sort keys) or in the
/// middle (the OpenAI Python SDK's `ChatCompletionMessage`, appended as the SDK returned it:
/// content, refusal, role, annotations, ...; looked for near either end only, such a reply
/// was never credited). A role written last is read from the end ([`last_member_role`]: a
/// sorted message's content is not walked again, which cost a 32 KB chat 4 µs); otherwise the
/// members before it are skipped by the hashing's own scan, not parsed, and nothing after it
/// is read.
fn is_assistant(message: &str) -> bool {
    last_member_role(message).or_else(|| member_value(message, "role")) == Some(ASSISTANT)
}

/// The value, quotes included, of `message`'s last member when that member is `"role"` and
/// its value a string without escapes; `None` otherwise (the members are then walked). Read
/// backwards on an object the body scan checked is JSON: `"role"` after a `,` or the `{`, and
/// before a `:`, is a key of this object (a quote right after a comma or brace starts a
/// string; one inside a string would be escaped), and its value closes the object.
fn last_member_role(message: &str) -> Option<&str> {
    let trim = |text: &str| text.trim_end_matches([' ', '\t', '\n', '\r']).len();
    let close = trim(message);
    let value_end = trim(message.get(..close)?.strip_suffix('}')?);
    let open = message.get(..value_end)?.strip_suffix('"')?.rfind('"')?;
    let value = message.get(open..value_end)?;
    if value.contains('\\') {
        return None;
    }
    let key_end = trim(message.get(..trim(message.get(..open)?))?.strip_suffix(':')?);
    let key_start = key_end.checked_sub("\"role\"".len())?;
    (message.get(key_start..key_end)? == "\"role\"").then_some(())?;
    let separator = message.get(..trim(message.get(..key_start)?))?;
    (separator.ends_with(',') || separator.ends_with('{')).then_some(value)
}

const ASSISTANT: &str = "\"assistant\"";

/// A message cut out of the raw list: its `content` if that is a list of parts (`None` if not).
fn message_parts(element: Element<'_>) -> Result<Option<&str>, ShapeError> {
    #[derive(Deserialize)]
    struct MessageView<'a> {
        #[serde(borrow, default)]
        content: Option<&'a RawValue>,
    }
    let message = element.text;
    if !message.starts_with('{') {
        return Err(ShapeError("a message is not an object"));
    }
    // Without a `[` the content cannot be a list: skip the parse, which would read a long
    // message to its end although hashing may stop long before. (The scan that cut the
    // element out saw every byte, brackets included.)
    if !element.has_bracket {
        return Ok(None);
    }
    let view: MessageView<'_> = serde_json::from_str(message).map_err(|_| ShapeError("a message is not an object"))?;
    Ok(view.content.map(RawValue::get).filter(|c| c.starts_with('[')))
}

/// The message object as written, except a list `content` (`parts`, borrowed from `message`),
/// whose parts are hashed one by one so media parts become placeholders.
fn feed_message(message: &str, parts: Option<&str>, chain: &mut BlockChain<'_>) -> Result<bool, ShapeError> {
    let Some((parts, (start, end))) = parts.and_then(|p| Some((p, span_of(message, p)?))) else {
        return Ok(chain.feed(message.as_bytes()));
    };
    if !chain.feed(message.get(..start).unwrap_or_default().as_bytes()) {
        return Ok(false);
    }
    let mut more = true;
    for_each_element(parts, |part| {
        more = hash_part(part.text, chain)?;
        Ok(more)
    })?;
    Ok(more && chain.feed(message.get(end..).unwrap_or_default().as_bytes()))
}

/// A text part as written; a media part as `NUL type NUL hash(url or data)`.
fn hash_part(part: &str, chain: &mut BlockChain<'_>) -> Result<bool, ShapeError> {
    #[derive(Deserialize)]
    struct PartView<'a> {
        #[serde(rename = "type", borrow, default)]
        kind: Option<Cow<'a, str>>,
        #[serde(borrow, default)]
        image_url: Option<&'a RawValue>,
        #[serde(borrow, default)]
        input_audio: Option<&'a RawValue>,
        #[serde(borrow, default)]
        video_url: Option<&'a RawValue>,
        #[serde(borrow, default)]
        audio_url: Option<&'a RawValue>,
        #[serde(borrow, default)]
        file: Option<&'a RawValue>,
        #[serde(borrow, default)]
        image_pil: Option<&'a RawValue>,
        #[serde(borrow, default)]
        file_data: Option<&'a RawValue>,
        #[serde(borrow, default)]
        source: Option<&'a RawValue>,
        #[serde(borrow, default)]
        cache_control: Option<&'a RawValue>,
    }
    let view: PartView<'_> = serde_json::from_str(part).map_err(|_| ShapeError("a content part is not an object"))?;
    let media = [
        view.image_url,
        view.input_audio,
        view.video_url,
        view.audio_url,
        view.file,
        view.image_pil,
        view.file_data,
        view.source,
    ];
    let Some((field, payload)) = MEDIA_FIELDS.iter().zip(media).find_map(|(name, value)| Some((*name, value?))) else {
        // An Anthropic-style `cache_control` marker is no part of the prompt (vLLM renders
        // none), and an agent moves it to its newest block each turn (Claude Code does): the
        // part hashes as written without it, as the next turn resends it.
        if let Some((head, tail)) = view.cache_control.and_then(|marker| around_member(part, marker.get())) {
            return Ok(chain.feed(head.as_bytes()) && chain.feed(tail.as_bytes()));
        }
        return Ok(chain.feed(part.as_bytes()));
    };
    let kind = view.kind.as_deref().unwrap_or(field);
    Ok(chain.feed(&[SEPARATOR])
        && chain.feed(kind.as_bytes())
        && chain.feed(&[SEPARATOR])
        && chain.feed(&media_identity(payload.get()).to_le_bytes()))
}

/// What names a media payload: its URL or inline data, whichever it carries, so the same image
/// sent with other whitespace or another `detail` hashes the same.
fn media_identity(payload: &str) -> u64 {
    #[derive(Deserialize)]
    struct MediaView<'a> {
        #[serde(borrow, default)]
        url: Option<&'a RawValue>,
        #[serde(borrow, default)]
        data: Option<&'a RawValue>,
        #[serde(borrow, default)]
        file_data: Option<&'a RawValue>,
        #[serde(borrow, default)]
        file_id: Option<&'a RawValue>,
    }
    if let Some(contents) = string_contents(payload) {
        return xxh3_64(contents.as_bytes());
    }
    let identity = serde_json::from_str::<MediaView<'_>>(payload)
        .ok()
        .and_then(|v| v.url.or(v.data).or(v.file_data).or(v.file_id))
        .and_then(|v| string_contents(v.get()));
    xxh3_64(identity.unwrap_or(payload).as_bytes())
}

#[cfg(test)]
mod tests {
    use crate::prefix::hash::{hash_prompt, HashParams};
    use crate::request::{Endpoint, InferenceRequest};

    fn chat(body: &str) -> Vec<u64> {
        let request: InferenceRequest<'_> = serde_json::from_str(body).unwrap();
        let mut out = Vec::new();
        hash_prompt(&request, Endpoint::ChatCompletions, &HashParams::default(), &mut out).unwrap();
        out
    }

    fn completion(prompt: &str) -> Vec<u64> {
        let body = format!(r#"{{"model":"m","prompt":"{prompt}"}}"#);
        let request: InferenceRequest<'_> = serde_json::from_str(&body).unwrap();
        let mut out = Vec::new();
        hash_prompt(&request, Endpoint::Completions, &HashParams::default(), &mut out).unwrap();
        out
    }

    fn text(len: usize, seed: u8) -> String {
        (0..len).map(|i| char::from(b'a' + ((i * 7 + usize::from(seed)) % 26) as u8)).collect()
    }

    /// What hashing a chat of plain-text messages must give: the messages' raw bytes, as
    /// serde_json cuts them, one after another, in chained 64-byte blocks (at most 256).
    fn reference_chat_hashes(body: &str) -> Vec<u64> {
        use crate::prefix::hash::chain_seed;
        use serde_json::value::RawValue;
        use xxhash_rust::xxh3::xxh3_64_with_seed;
        let request: InferenceRequest<'_> = serde_json::from_str(body).unwrap();
        let messages: Vec<&RawValue> = serde_json::from_str(request.messages.unwrap()).unwrap();
        let bytes: Vec<u8> = messages.iter().flat_map(|m| m.get().bytes()).collect();
        let mut previous = chain_seed(request.model.as_deref().unwrap_or(""), "");
        let blocks = bytes.chunks_exact(64).take(256).map(|block| {
            previous = xxh3_64_with_seed(block, previous);
            previous
        });
        blocks.collect()
    }

    #[test]
    fn a_follow_up_turn_notes_the_reply_right_where_the_previous_turn_s_blocks_end() {
        use crate::prefix::hash::{hash_prompt_noting_replies, ReplySpan};
        let system = format!(r#"{{"role":"system","content":"{}"}}"#, text(1500, 1));
        let user = |seed| format!(r#"{{"role": "user", "content": "{}"}}"#, text(300, seed));
        let reply = format!(r#"{{"content":"{}","role":"assistant"}}"#, text(400, 9));
        let previous = chat(&format!(r#"{{"model":"m","messages":[{system},{}]}}"#, user(2)));
        let body = format!(r#"{{"model":"m","messages":[{system},{},{reply},{}]}}"#, user(2), user(3));
        let request: InferenceRequest<'_> = serde_json::from_str(&body).unwrap();
        let (mut next, mut replies) = (Vec::new(), Vec::new());
        hash_prompt_noting_replies(
            &request,
            Endpoint::ChatCompletions,
            &HashParams::default(),
            &mut next,
            &mut replies,
        )
        .unwrap();
        assert_eq!(next.get(..previous.len()), Some(previous.as_slice()), "the previous turn is a prefix");
        let start_block = previous.len() as u32;
        let reply_end = (system.len() + user(2).len() + reply.len()) / 64;
        assert_eq!(replies, [ReplySpan { start_block, end_block: reply_end as u32 }]);
        let mut none = Vec::new();
        let without_reply = format!(r#"{{"model":"m","messages":[{system},{},{}]}}"#, user(2), user(3));
        let request: InferenceRequest<'_> = serde_json::from_str(&without_reply).unwrap();
        hash_prompt_noting_replies(&request, Endpoint::ChatCompletions, &HashParams::default(), &mut next, &mut none)
            .unwrap();
        assert!(none.is_empty(), "user messages are not replies");
    }

    #[test]
    fn a_reply_is_told_by_its_own_role_wherever_it_is() {
        use super::is_assistant;
        let long = text(500, 4);
        assert!(is_assistant(&format!(r#"{{"role": "assistant", "content": "{long}"}}"#)));
        assert!(is_assistant(&format!(r#"{{"content":"{long}","role":"assistant"}}"#)), "keys sorted");
        assert!(!is_assistant(&format!(r#"{{"role":"user","content":"{long} \"role\":\"assistant\""}}"#)));
        assert!(!is_assistant(&format!(r#"{{"content":"{long}","role":"user"}}"#)));
        assert!(!is_assistant(r#"{"role":"user","name":"assistant","content":"hi"}"#), "another member's value");
        assert!(!is_assistant(r#"{"role":"tool","content":[{"role":"assistant"}]}"#), "a nested role");
        assert!(!is_assistant(""));
        // Read from the end: only a last member that is `role` with a plain string value.
        use super::last_member_role;
        assert_eq!(last_member_role(r#"{"content":"x" , "role" : "assistant" }  "#), Some(r#""assistant""#));
        assert_eq!(last_member_role(r#"{"role":"user"}"#), Some(r#""user""#));
        assert_eq!(last_member_role(r#"{"role":"user","name":"assistant"}"#), None, "not the role");
        assert_eq!(last_member_role(r#"{"content":"a"role":"assistant"}"#), None, "inside a string");
        assert_eq!(last_member_role(r#"{"content":"x","role":"assi"stant"}"#), None, "escapes: walked");
        assert_eq!(last_member_role(r#"{"content":"x","xrole":"assistant"}"#), None);
        assert_eq!(last_member_role(r#"{"content":{"role":"assistant"}}"#), None, "a nested object's");
        assert!(is_assistant(r#"{"content":"x","role":"assistant"}"#));
    }

    #[test]
    fn a_reply_appended_as_the_openai_python_sdk_returned_it_is_credited() {
        use crate::prefix::hash::{hash_prompt_noting_replies, ReplySpan};
        // `messages.append(resp.choices[0].message)`: ChatCompletionMessage's fields in order.
        let reply = format!(
            r#"{{"content":"{}","refusal":null,"role":"assistant","annotations":[],"audio":null,"function_call":null,"tool_calls":null}}"#,
            text(600, 5)
        );
        let user = |seed| format!(r#"{{"role":"user","content":"{}"}}"#, text(600, seed));
        let body = format!(r#"{{"model":"m","messages":[{},{reply},{}]}}"#, user(6), user(7));
        for request in [
            crate::request::parse_request(body.as_bytes(), Endpoint::ChatCompletions).unwrap(),
            serde_json::from_str::<InferenceRequest<'_>>(&body).unwrap(),
        ] {
            let (mut hashes, mut replies) = (Vec::new(), Vec::new());
            hash_prompt_noting_replies(
                &request,
                Endpoint::ChatCompletions,
                &HashParams::default(),
                &mut hashes,
                &mut replies,
            )
            .unwrap();
            let start_block = (user(6).len() / 64) as u32;
            let end_block = ((user(6).len() + reply.len()) / 64) as u32;
            assert_eq!(replies, [ReplySpan { start_block, end_block }]);
        }
    }

    #[test]
    fn plain_messages_hash_as_their_raw_bytes_in_order() {
        // Escapes, brackets inside text (which send a message through the content check),
        // white space between messages, and more text than 256 blocks hold.
        let turn = |role: &str, seed: u8| {
            format!(r#"{{"role":"{role}","content":"{} \"[x]\" \\ \n{}"}}"#, text(900, seed), text(333, seed + 1))
        };
        let messages: Vec<String> = (0..24).map(|i| turn(if i % 2 == 0 { "user" } else { "assistant" }, i)).collect();
        for separator in [",", " ,\n  "] {
            let body = format!(r#"{{"model":"m","messages":[ {} ]}}"#, messages.join(separator));
            let hashes = chat(&body);
            assert_eq!(hashes.len(), 256);
            assert_eq!(hashes, reference_chat_hashes(&body));
        }
        let few = format!(r#"{{"model":"m","messages":[{}]}}"#, messages[..3].join(","));
        assert_eq!(chat(&few), reference_chat_hashes(&few));
    }

    #[test]
    fn chat_and_completions_of_the_same_words_differ() {
        // Chat hashes whole message objects: the engine's chat template adds role tokens too.
        let words = text(256, 6);
        let chat = chat(&format!(r#"{{"model":"m","messages":[{{"role":"user","content":"{words}"}}]}}"#));
        let plain = completion(&words);
        assert!(!chat.is_empty() && !plain.is_empty());
        assert!(chat.iter().all(|h| !plain.contains(h)));
    }

    #[test]
    fn chat_shares_the_prefix_of_a_longer_conversation() {
        let system = format!(r#"{{"role":"system","content":"{}"}}"#, text(300, 7));
        let turn = |seed| format!(r#"{{"role":"user","content":"{}"}}"#, text(300, seed));
        let body = |messages: String| format!(r#"{{"model":"m","tools":[{{"x":1}}],"messages":[{messages}]}}"#);
        let short = chat(&body(format!("{system},{}", turn(8))));
        let long = chat(&body(format!("{system},{},{}", turn(8), turn(9))));
        assert_eq!(long[..short.len()], short[..]);
        assert!(long.len() > short.len());
    }

    #[test]
    fn media_parts_hash_by_content_not_whitespace() {
        let message = |space: &str, data: &str| {
            format!(
                r#"{{"model":"m","messages":[{{"role":"user","content":[{{"type":"text","text":"{}"}},
                {{"type":"image_url",{space}"image_url":{space}{{"url":"data:image/png;base64,{data}",
                    "detail":"low"}}}},
                {{"type":"text","text":"{}"}}]}}]}}"#,
                text(100, 10),
                text(300, 11)
            )
        };
        let big_image = "QUJD".repeat(50_000);
        let a = chat(&message("", &big_image));
        let b = chat(&message("   ", &big_image));
        let other = chat(&message("", "RUZH"));
        assert_eq!(a, b, "whitespace around an image does not matter");
        assert!(a.len() < 20, "a 200 KB image is one placeholder, not 3,000 blocks: {}", a.len());
        assert_eq!(a[0], other[0], "the text before the image is shared");
        assert_ne!(a.last(), other.last(), "another image is another prefix");
    }
}
