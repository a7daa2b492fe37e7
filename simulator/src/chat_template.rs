//! The simulator's chat template: how `messages` become one prompt text.
//!
//! Template (documented in the README): every message renders as `<|role|>\n` + content + `\n`;
//! with a generation prompt, `<|assistant|>\n` follows. Text parts of one message are joined
//! with `\n`. An image part renders as [`IMAGE_PLACEHOLDER_TOKENS`] one-token words derived from
//! a hash of its URL, so the same image shares cache blocks and different images never do (as
//! vLLM folds a multimodal hash into its block keys). The rendered text of `[m1..mk]` plus the
//! generation prompt is a prefix of the rendering of `[m1..mk, assistant reply, ...]`, which is
//! what makes multi-turn conversations hit the prefix cache, as they do with real templates.

use crate::hashing::StableHasher;

/// Tokens an image occupies in the prompt (a fixed run, like a vision encoder's placeholder).
pub const IMAGE_PLACEHOLDER_TOKENS: usize = 64;
/// Seed separating image hashes from other uses of the stable hasher.
const IMAGE_HASH_SEED: u64 = 0x0069_6d61_6765; // "image"

/// One part of a message's content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContentPart {
    /// Plain text.
    Text(String),
    /// An image, identified by its URL (a data URL or a link; it is never fetched).
    Image(String),
}

/// One chat message after parsing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant`, `tool`, ... (rendered as given).
    pub role: String,
    /// Content parts in order; empty content renders as an empty line.
    pub content: Vec<ContentPart>,
}

impl ChatMessage {
    /// A message with a single text part.
    pub fn text(role: &str, text: &str) -> Self {
        Self { role: role.to_owned(), content: vec![ContentPart::Text(text.to_owned())] }
    }
}

/// Renders messages with the template above.
pub fn render_chat(messages: &[ChatMessage], add_generation_prompt: bool) -> String {
    let mut rendered = String::new();
    for message in messages {
        rendered.push_str("<|");
        rendered.push_str(&message.role);
        rendered.push_str("|>\n");
        for (index, part) in message.content.iter().enumerate() {
            if index > 0 {
                rendered.push('\n');
            }
            match part {
                ContentPart::Text(text) => rendered.push_str(text),
                ContentPart::Image(url) => push_image_placeholder(url, &mut rendered),
            }
        }
        rendered.push('\n');
    }
    if add_generation_prompt {
        rendered.push_str("<|assistant|>\n");
    }
    rendered
}

/// Appends the image's placeholder run: `i` + three hex digits per word, one token each.
fn push_image_placeholder(url: &str, rendered: &mut String) {
    let mut hasher = StableHasher::with_seed(IMAGE_HASH_SEED);
    hasher.write_bytes(url.as_bytes());
    let image_hash = hasher.finish();
    for position in 0..IMAGE_PLACEHOLDER_TOKENS {
        let mut word_hasher = StableHasher::with_seed(image_hash);
        word_hasher.write_u64(position as u64);
        // 12 bits per word: a 4-byte word (`i` + 3 hex digits) is exactly one token.
        let word = format!("i{:03x}", word_hasher.finish() & 0xfff);
        if !rendered.is_empty() && !rendered.ends_with(char::is_whitespace) {
            rendered.push(' ');
        }
        rendered.push_str(&word);
        rendered.push(' ');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenizer::tokenize;

    #[test]
    fn renders_roles_contents_and_generation_prompt() {
        let messages = [ChatMessage::text("system", "be brief"), ChatMessage::text("user", "hello")];
        assert_eq!(render_chat(&messages, true), "<|system|>\nbe brief\n<|user|>\nhello\n<|assistant|>\n");
        assert_eq!(render_chat(&messages, false), "<|system|>\nbe brief\n<|user|>\nhello\n");
    }

    #[test]
    fn multi_turn_rendering_extends_the_previous_prompt() {
        let first = [ChatMessage::text("user", "hello")];
        let second = [
            ChatMessage::text("user", "hello"),
            ChatMessage::text("assistant", "the of and"),
            ChatMessage::text("user", "more"),
        ];
        let first_tokens = tokenize(&format!("{} the of and", render_chat(&first, true)));
        let second_tokens = tokenize(&render_chat(&second, true));
        assert!(second_tokens.starts_with(&first_tokens));
    }

    #[test]
    fn images_become_a_fixed_run_that_depends_on_the_url() {
        let image = |url: &str| ChatMessage {
            role: "user".to_owned(),
            content: vec![ContentPart::Text("look".to_owned()), ContentPart::Image(url.to_owned())],
        };
        let with_a = tokenize(&render_chat(&[image("data:a")], false));
        let with_b = tokenize(&render_chat(&[image("data:b")], false));
        let plain = tokenize(&render_chat(&[ChatMessage::text("user", "look")], false));
        assert_eq!(with_a.len(), plain.len() + IMAGE_PLACEHOLDER_TOKENS);
        assert_ne!(with_a, with_b);
        assert_eq!(with_a, tokenize(&render_chat(&[image("data:a")], false)));
    }
}
