//! The `usage` object of an OpenAI answer, found while the answer streams past.
//!
//! vLLM reports `usage` (prompt, completion and cached prompt tokens) at the end of a JSON
//! answer, and in the last SSE event of a stream when the client asked for
//! `stream_options.include_usage` (a Responses API stream's last event, `response.completed`,
//! always carries it, as `input_tokens` and `output_tokens`). The proxy must not buffer the answer, so the scanner sees
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

/// The completions' names, or the Responses API's (`input_tokens`, `output_tokens`,
/// `input_tokens_details`), which vLLM fills alike. Separate fields, not serde aliases: an
/// object carrying both names (an engine writing both) would be a duplicate-field error and
/// its whole report lost; the completions' name wins.
#[derive(Deserialize)]
struct RawUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<RawDetails>,
    #[serde(default)]
    input_tokens_details: Option<RawDetails>,
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

    /// Scans one chunk of the answer (any split, any size). The chunk is walked in runs, not
    /// byte by byte through the state machine: in Envoy's V8 a per-byte step cost ~10 ns.
    pub fn feed(&mut self, chunk: &[u8]) {
        let mut rest = chunk;
        while !rest.is_empty() {
            rest = match self.state {
                State::Key(0) => self.find_key(rest),
                State::Object { depth, in_string, escaped } => self.take_object(rest, depth, in_string, escaped),
                _ => {
                    let (&byte, tail) = rest.split_first().unwrap_or((&0, &[]));
                    self.step(byte);
                    tail
                }
            };
        }
    }

    /// No partial match: the next quote that starts the whole key, or a part of it the chunk
    /// ends in. Returns what follows.
    fn find_key<'c>(&mut self, chunk: &'c [u8]) -> &'c [u8] {
        let mut from = 0;
        while let Some(at) = chunk.get(from..).and_then(|rest| rest.iter().position(|&b| b == b'"')) {
            let start = from + at;
            let candidate = chunk.get(start..).unwrap_or_default();
            if candidate.starts_with(KEY) {
                self.state = State::Colon;
                return candidate.get(KEY.len()..).unwrap_or_default();
            }
            if candidate.len() < KEY.len() && KEY.starts_with(candidate) {
                self.state = State::Key(candidate.len());
                return &[];
            }
            from = start + 1;
        }
        &[]
    }

    /// Inside the object: up to its closing brace (then parsed) or the chunk's end, copied at
    /// once. An object that reaches [`MAX_USAGE_BYTES`] unclosed is dropped there and the scan
    /// goes on with the next byte (wherever the chunks split, the same byte).
    fn take_object<'c>(&mut self, chunk: &'c [u8], mut depth: u32, mut in_string: bool, mut escaped: bool) -> &'c [u8] {
        let room = MAX_USAGE_BYTES.saturating_sub(self.object.len());
        let window = chunk.get(..room).unwrap_or(chunk);
        let mut closed_at = None;
        for (at, &byte) in window.iter().enumerate() {
            if in_string {
                (in_string, escaped) = (escaped || byte != b'"', !escaped && byte == b'\\');
                continue;
            }
            match byte {
                b'"' => in_string = true,
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        closed_at = Some(at);
                        break;
                    }
                }
                _ => {}
            }
        }
        let taken = closed_at.map_or(window.len(), |at| at + 1);
        let (object, rest) = chunk.split_at_checked(taken).unwrap_or((chunk, &[]));
        if closed_at.is_none() && window.len() == room {
            self.object.clear();
            self.state = State::Key(0);
            return rest;
        }
        self.object.extend_from_slice(object);
        if closed_at.is_none() {
            self.state = State::Object { depth, in_string, escaped };
            return rest;
        }
        if let Ok(raw) = serde_json::from_slice::<RawUsage>(&self.object) {
            let details = raw.prompt_tokens_details.or(raw.input_tokens_details);
            self.latest = Some(Usage {
                prompt_tokens: raw.prompt_tokens.or(raw.input_tokens).unwrap_or(0),
                completion_tokens: raw.completion_tokens.or(raw.output_tokens).unwrap_or(0),
                cached_tokens: details.and_then(|d| d.cached_tokens),
            });
        }
        self.object.clear();
        self.state = State::Key(0);
        rest
    }

    /// One byte between the key and the object's `{` (or of a key split between chunks).
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
            object @ State::Object { .. } => object,
        };
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
    fn every_split_point_gives_the_answer_the_whole_text_gives() {
        let texts = [
            JSON_ANSWER,
            r#"{"usage":"usage","x":{"usage" :{"prompt_tokens":1,"note":"a \"}\" b {","completion_tokens":2}}}"#,
            r#"{"a":"\\","usage":{"prompt_tokens":3,"d":{"e":[{"f":"}"}]},"completion_tokens":4}}"#,
            "data: {\"usage\":null}\n\ndata: {\"\"usage\":{\"prompt_tokens\":5}}\n\n",
            r#"{"usage":{"prompt_tokens":6,"prompt_tokens_details":{"cached_tokens":5}},"usage":7}"#,
        ];
        for (text, prompt_tokens) in texts.into_iter().zip([10, 1, 3, 5, 6]) {
            let whole = scan_in_pieces(text, text.len());
            assert_eq!(whole.map(|usage| usage.prompt_tokens), Some(prompt_tokens), "{text}");
            for split in 0..=text.len() {
                let (head, tail) = text.as_bytes().split_at(split);
                let mut scanner = UsageScanner::default();
                scanner.feed(head);
                scanner.feed(tail);
                assert_eq!(scanner.usage(), whole, "{text} split at {split}");
            }
            assert_eq!(scan_in_pieces(text, 1), whole, "{text} byte by byte");
        }
    }

    #[test]
    fn a_responses_api_answer_reports_input_and_output_tokens() {
        // The `response.completed` event: the response object echoes the request's tools (a
        // schema may name a property `usage`) and ends with the real `usage`.
        let completed = concat!(
            "event: response.completed\ndata: {\"response\":{\"id\":\"resp_1\",\"tools\":[{\"parameters\":",
            "{\"properties\":{\"usage\":{\"type\":\"string\"}}}}],\"usage\":{\"input_tokens\":40,",
            "\"input_tokens_details\":{\"cached_tokens\":32},\"output_tokens\":5,",
            "\"output_tokens_details\":{\"reasoning_tokens\":0},\"total_tokens\":45}},\"type\":\"response.completed\"}\n\n"
        );
        let expected = Usage { prompt_tokens: 40, completion_tokens: 5, cached_tokens: Some(32) };
        for piece in [1, 3, 17, 4096] {
            assert_eq!(scan_in_pieces(completed, piece), Some(expected), "pieces of {piece}");
        }
        // Both names in one object (an engine writing both): read, not a duplicate-field error.
        let both = r#"{"usage":{"prompt_tokens":40,"input_tokens":40,"completion_tokens":5,"output_tokens":5,"prompt_tokens_details":{"cached_tokens":32}}}"#;
        assert_eq!(scan_in_pieces(both, 4096), Some(expected));
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
