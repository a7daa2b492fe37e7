//! The request bodies every benchmark sends: OpenAI completions and chat bodies of a given
//! size, made of prose-like text with the escapes real prompts carry (quotes, newlines).
//!
//! Deterministic from a seed, so criterion and the Envoy runs see the same bytes, and a
//! distinct seed gives a prompt that differs from its first block on (a distinct prefix).

use serde_json::json;

use picker::request::Endpoint;

/// The model every body names; the upstream ignores it.
pub const MODEL: &str = "sim-model";

/// Words prompts are made of: common English, some code and punctuation, so the JSON
/// parser meets the escapes (`"`, `\n`, `\\`) a real prompt has.
const WORDS: [&str; 48] = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "a",
    "is",
    "that",
    "for",
    "it",
    "as",
    "was",
    "with",
    "be",
    "by",
    "on",
    "not",
    "he",
    "this",
    "are",
    "or",
    "his",
    "from",
    "at",
    "which",
    "but",
    "have",
    "an",
    "they",
    "you",
    "were",
    "their",
    "one",
    "all",
    "we",
    "can",
    "\"quoted\"",
    "model",
    "cache",
    "token",
    "prefix",
    "fn main() {",
    "}\n",
    "C:\\path",
    "request,",
    "latency.",
    "\n\n",
    "Envoy",
];

/// SplitMix64: a tiny deterministic generator for word choice.
struct Words {
    state: u64,
}

impl Words {
    fn new(seed: u64) -> Self {
        Self { state: seed ^ 0x5DEE_CE66_D1CE_4E5B }
    }

    fn next(&mut self) -> &'static str {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        let index = ((z ^ (z >> 31)) % WORDS.len() as u64) as usize;
        WORDS.get(index).copied().unwrap_or("the")
    }
}

/// Prompt text of exactly `bytes` bytes (ASCII), starting with a seed-specific line so
/// distinct seeds never share a first block.
pub fn prompt_text(bytes: usize, seed: u64) -> String {
    let mut text = format!("Request {seed:016x}: ");
    let mut words = Words::new(seed);
    while text.len() < bytes {
        text.push_str(words.next());
        text.push(' ');
    }
    text.truncate(bytes);
    text
}

/// A `/v1/completions` body whose prompt text is `prompt_bytes` long.
pub fn completions_body(prompt_bytes: usize, seed: u64) -> String {
    let prompt = prompt_text(prompt_bytes, seed);
    json!({"model": MODEL, "prompt": prompt, "max_tokens": 16, "temperature": 0.7, "stream": false}).to_string()
}

/// A `/v1/chat/completions` body: a system prompt and alternating user and assistant turns,
/// `prompt_bytes` of text in all.
pub fn chat_body(prompt_bytes: usize, seed: u64) -> String {
    let text = prompt_text(prompt_bytes, seed);
    let system_len = (prompt_bytes / 8).min(2048);
    let (system, rest) = text.split_at(system_len.min(text.len()));
    let turns = 5;
    let turn_len = rest.len().div_ceil(turns).max(1);
    let mut messages = vec![json!({"role": "system", "content": system})];
    let mut start = 0;
    let mut user = true;
    while start < rest.len() {
        let end = (start + turn_len).min(rest.len());
        let role = if user { "user" } else { "assistant" };
        messages.push(json!({"role": role, "content": rest.get(start..end).unwrap_or("")}));
        start = end;
        user = !user;
    }
    json!({"model": MODEL, "messages": messages, "max_tokens": 16, "temperature": 0.7, "stream": false}).to_string()
}

/// A body of `endpoint` with `prompt_bytes` of prompt text.
pub fn body(endpoint: Endpoint, prompt_bytes: usize, seed: u64) -> String {
    match endpoint {
        Endpoint::ChatCompletions => chat_body(prompt_bytes, seed),
        _ => completions_body(prompt_bytes, seed),
    }
}

/// A completions body of `total_bytes` in all (within a few bytes): the Envoy benchmarks
/// are sized by body, as Envoy sees it.
pub fn completions_body_of_size(total_bytes: usize, seed: u64) -> String {
    let overhead = completions_body(0, seed).len();
    let mut prompt_bytes = total_bytes.saturating_sub(overhead);
    let mut body = completions_body(prompt_bytes, seed);
    // Escapes make the JSON longer than the text: adjust the prompt by the difference until
    // the body fits within a few bytes (a handful of passes always does).
    for _ in 0..SIZE_PASSES {
        let short = total_bytes.saturating_sub(body.len());
        if body.len() <= total_bytes && short <= SIZE_SLACK {
            break;
        }
        prompt_bytes = (prompt_bytes + short).saturating_sub(body.len().saturating_sub(total_bytes));
        body = completions_body(prompt_bytes, seed);
    }
    body
}

/// As [`completions_body_of_size`], asking for a stream (and for its final `usage` event when
/// `with_usage`). A few bytes longer than `total_bytes`.
pub fn streamed_body(total_bytes: usize, seed: u64, with_usage: bool) -> String {
    let body = completions_body_of_size(total_bytes, seed);
    let stream =
        if with_usage { r#""stream":true,"stream_options":{"include_usage":true}"# } else { r#""stream":true"# };
    body.replacen(r#""stream":false"#, stream, 1)
}

/// Passes [`completions_body_of_size`] makes at most.
const SIZE_PASSES: usize = 8;

/// How far under the asked size a body may stay.
const SIZE_SLACK: usize = 16;

/// The OpenAI path of `endpoint`.
pub fn path(endpoint: Endpoint) -> &'static str {
    match endpoint {
        Endpoint::ChatCompletions => "/v1/chat/completions",
        _ => "/v1/completions",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use picker::request::parse_request;

    #[test]
    fn bodies_have_the_asked_size_and_parse() {
        for size in [1024, 4096, 65_536] {
            let body = completions_body_of_size(size, 7);
            assert!(body.len() <= size && body.len() + 16 >= size, "{size}: {}", body.len());
            assert!(parse_request(body.as_bytes(), Endpoint::Completions).is_ok());
        }
        let chat = chat_body(32 * 1024, 1);
        let request = parse_request(chat.as_bytes(), Endpoint::ChatCompletions).unwrap();
        assert!(request.messages.unwrap().len() > 32 * 1024);
    }

    #[test]
    fn streamed_bodies_ask_for_a_stream_and_usage_as_told() {
        for with_usage in [true, false] {
            let body = streamed_body(4096, 3, with_usage);
            let request = parse_request(body.as_bytes(), Endpoint::Completions).unwrap();
            assert_eq!(request.stream, Some(true));
            assert_eq!(request.includes_usage(), with_usage, "{body:.80}");
        }
    }

    #[test]
    fn distinct_seeds_differ_from_the_first_block() {
        let a = prompt_text(256, 1);
        let b = prompt_text(256, 2);
        assert_eq!(a.len(), 256);
        assert_ne!(a.get(..40), b.get(..40));
        assert_eq!(prompt_text(256, 1), a, "deterministic");
    }
}
