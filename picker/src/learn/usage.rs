//! The `usage` object of an OpenAI answer, found while the answer streams past.
//!
//! vLLM reports `usage` (prompt, completion and cached prompt tokens) at the end of a JSON
//! answer, and in the last SSE event of a stream when the client asked for
//! `stream_options.include_usage`. The proxy must not buffer the answer, so the scanner sees
//! each chunk once, as it passes, and keeps only a few bytes of state: where it is in the key
//! `"usage"` (which may straddle two chunks) and, once the key is found, the object's bytes
//! up to [`MAX_USAGE_BYTES`]. The last complete object seen wins (a stream with continuous
//! usage stats repeats it; the final one is the total). Inside a JSON string a quote is always
//! escaped, so the key cannot be matched inside generated text.

use serde::Deserialize;

/// Bytes of one `usage` object kept at most: vLLM's is ~150 bytes; 1 KiB leaves room for
/// extra detail fields, and an object past it is abandoned rather than grown without bound.
pub const MAX_USAGE_BYTES: usize = 1024;

const KEY: &[u8] = b"\"usage\"";

/// What the pod reported about one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// `prompt_tokens_details.cached_tokens`, when the engine reports prompt token details.
    pub cached_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct RawUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<RawDetails>,
}

#[derive(Deserialize)]
struct RawDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// Looking for the key; the count is how many of its bytes matched so far.
    Key(usize),
    /// After the key: whitespace, then `:`.
    Colon,
    /// After the colon: whitespace, then `{` (anything else, such as `null`, is skipped).
    Value,
    /// Inside the object: nesting depth, inside a string, after a backslash.
    Object { depth: u32, in_string: bool, escaped: bool },
}

/// Finds the last `usage` object of an answer, chunk by chunk.
#[derive(Debug, Clone)]
pub struct UsageScanner {
    state: State,
    object: Vec<u8>,
    latest: Option<Usage>,
}

impl Default for UsageScanner {
    fn default() -> Self {
        Self { state: State::Key(0), object: Vec::new(), latest: None }
    }
}

impl UsageScanner {
    /// The last complete `usage` object seen so far.
    pub fn usage(&self) -> Option<Usage> {
        self.latest
    }

    /// Scans one chunk of the answer (any split, any size).
    pub fn feed(&mut self, chunk: &[u8]) {
        let mut rest = chunk;
        while !rest.is_empty() {
            rest = match self.state {
                // Fast path: no partial match, skip to the next quote.
                State::Key(0) => match rest.iter().position(|&b| b == b'"') {
                    Some(at) => {
                        self.state = State::Key(1);
                        rest.get(at + 1..).unwrap_or_default()
                    }
                    None => &[],
                },
                _ => {
                    let (&byte, tail) = rest.split_first().unwrap_or((&0, &[]));
                    self.step(byte);
                    tail
                }
            };
        }
    }

    fn step(&mut self, byte: u8) {
        self.state = match std::mem::replace(&mut self.state, State::Key(0)) {
            State::Key(matched) => {
                if KEY.get(matched) == Some(&byte) {
                    if matched + 1 == KEY.len() {
                        State::Colon
                    } else {
                        State::Key(matched + 1)
                    }
                } else if byte == b'"' {
                    State::Key(1)
                } else {
                    State::Key(0)
                }
            }
            State::Colon if byte.is_ascii_whitespace() => State::Colon,
            State::Colon if byte == b':' => State::Value,
            State::Value if byte.is_ascii_whitespace() => State::Value,
            State::Value if byte == b'{' => {
                self.object.clear();
                self.object.push(byte);
                State::Object { depth: 1, in_string: false, escaped: false }
            }
            State::Colon | State::Value => State::Key(usize::from(byte == b'"')),
            State::Object { depth, in_string, escaped } => self.in_object(byte, depth, in_string, escaped),
        };
    }

    fn in_object(&mut self, byte: u8, depth: u32, in_string: bool, escaped: bool) -> State {
        if self.object.len() >= MAX_USAGE_BYTES {
            self.object.clear();
            return State::Key(0);
        }
        self.object.push(byte);
        if in_string {
            let in_string = escaped || byte != b'"';
            return State::Object { depth, in_string, escaped: !escaped && byte == b'\\' };
        }
        let depth = match byte {
            b'"' => return State::Object { depth, in_string: true, escaped: false },
            b'{' => depth + 1,
            b'}' => depth - 1,
            _ => depth,
        };
        if depth > 0 {
            return State::Object { depth, in_string: false, escaped: false };
        }
        if let Ok(raw) = serde_json::from_slice::<RawUsage>(&self.object) {
            self.latest = Some(Usage {
                prompt_tokens: raw.prompt_tokens.unwrap_or(0),
                completion_tokens: raw.completion_tokens.unwrap_or(0),
                cached_tokens: raw.prompt_tokens_details.and_then(|d| d.cached_tokens),
            });
        }
        self.object.clear();
        State::Key(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const JSON_ANSWER: &str = r#"{"id":"x","choices":[{"text":"say \"usage\": {\"prompt_tokens\": 9}"}],"usage":{"prompt_tokens":10,"total_tokens":13,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":8}}}"#;

    fn scan_in_pieces(text: &str, piece: usize) -> Option<Usage> {
        let mut scanner = UsageScanner::default();
        for chunk in text.as_bytes().chunks(piece) {
            scanner.feed(chunk);
        }
        scanner.usage()
    }

    #[test]
    fn finds_usage_in_a_json_answer_however_it_is_split() {
        let expected = Usage { prompt_tokens: 10, completion_tokens: 3, cached_tokens: Some(8) };
        for piece in [1, 2, 3, 7, 64, 4096] {
            assert_eq!(scan_in_pieces(JSON_ANSWER, piece), Some(expected), "pieces of {piece}");
        }
    }

    #[test]
    fn the_last_sse_event_wins_and_null_usage_is_skipped() {
        let stream = concat!(
            "data: {\"choices\":[{\"text\":\"a\"}],\"usage\":null}\n\n",
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":1}}\n\n",
            "data: {\"choices\":[],\"usage\" : {\"prompt_tokens\":5,\"completion_tokens\":2,",
            "\"prompt_tokens_details\":null}}\n\ndata: [DONE]\n\n"
        );
        let expected = Usage { prompt_tokens: 5, completion_tokens: 2, cached_tokens: None };
        assert_eq!(scan_in_pieces(stream, 5), Some(expected));
    }

    #[test]
    fn an_oversized_or_missing_object_reports_nothing() {
        let huge = format!("{{\"usage\":{{\"pad\":\"{}\",\"prompt_tokens\":1}}}}", "x".repeat(MAX_USAGE_BYTES));
        assert_eq!(scan_in_pieces(&huge, 100), None);
        assert_eq!(scan_in_pieces(r#"{"choices":[]}"#, 3), None);
        let mut scanner = UsageScanner::default();
        scanner.feed(huge.as_bytes());
        scanner.feed(JSON_ANSWER.as_bytes());
        assert_eq!(scanner.usage().map(|u| u.prompt_tokens), Some(10), "recovers after an oversized one");
    }
}
