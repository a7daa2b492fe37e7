//! A prompt's size in tokens, from the request body, before the pod has seen it.
//!
//! Token ids are counted exactly. Text is estimated from its raw JSON bytes at the
//! configured bytes per token, then corrected by what the pods report: the ratio of
//! `usage.prompt_tokens` to the estimate, averaged over recent answers ([`TextRatio`]), so a
//! tokenizer denser or sparser than the configured guess is learned, not assumed. A media part
//! (an image, audio, a file) is no text: its bytes are left out and it counts
//! [`MEDIA_PART_TOKENS`] (`request/media.rs` finds them).

use crate::request::{media_in, Endpoint, InferenceRequest};

/// Weight of the newest answer in the text ratio's moving average once warmed up: ~20 answers
/// of memory. Before that the ratio is the plain mean of the answers so far, so the first
/// answer already corrects the configured guess.
const RATIO_STEP: f64 = 0.05;

/// Tokens a media part (an image, audio, a file) is counted as in the prompt's size. The
/// engine's count depends on the model and the image (Gemma 3: 256 an image; LLaVA-1.5: 576;
/// Qwen2.5-VL: one per 28×28 pixels, 334 at 512×512, 1,369 at 1024×1024); this is the order of
/// magnitude, which is what load and TTFT estimates need. The learned text ratio scales it with
/// the text.
pub const MEDIA_PART_TOKENS: u32 = 512;

/// The ratio is believed within these bounds: beyond them the estimate is broken, not biased.
const RATIO_BOUNDS: (f64, f64) = (0.1, 10.0);

/// Once warmed up, one answer is believed at most this factor away from the ratio: the ratio is
/// the pool's, and one odd answer (a pod with another tokenizer, a prompt of an unusual
/// script) would otherwise move it by 5 % of a tenfold error for every pod. A real change
/// still gets through, 5 % a step (a doubling in ~14 answers).
const ANSWER_FACTOR: f64 = 2.0;

/// A prompt's size as estimated from the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PromptSize {
    /// Tokens: exact for token ids, the raw byte estimate for text (before correction).
    pub tokens: u32,
    /// Counted from token ids, not estimated from text.
    pub exact: bool,
}

/// Counts or estimates the prompt's tokens: every part the engine renders (`tools` too), media
/// parts at [`MEDIA_PART_TOKENS`] each.
pub fn prompt_size(request: &InferenceRequest<'_>, endpoint: Endpoint, bytes_per_token: usize) -> PromptSize {
    let per_token = bytes_per_token.max(1);
    if endpoint == Endpoint::Completions {
        if let Some(ids) = request.prompt.and_then(token_id_count) {
            return PromptSize { tokens: ids, exact: true };
        }
    }
    let raw_values = [request.prompt, request.messages, request.tools, request.instructions, request.input];
    let bytes: usize = raw_values.iter().flatten().map(|raw| raw.len()).sum();
    let media = media_in(request);
    let text_tokens = bytes.saturating_sub(media.bytes) / per_token;
    let media_tokens = u64::from(media.parts) * u64::from(MEDIA_PART_TOKENS);
    let tokens = (text_tokens as u64).saturating_add(media_tokens);
    PromptSize { tokens: u32::try_from(tokens).unwrap_or(u32::MAX), exact: false }
}

/// The number of ids in a JSON list of unsigned integers, or in a batch of such lists
/// (`[[1, 2], [3]]`, the completions API's prompts as token ids); `None` for anything else
/// (text, which is estimated).
fn token_id_count(raw: &str) -> Option<u32> {
    let inside = raw.trim_ascii().strip_prefix('[')?.strip_suffix(']')?;
    let id_list_bytes = |b: u8| b.is_ascii_digit() || b == b',' || b == b'[' || b == b']' || b.is_ascii_whitespace();
    if !inside.bytes().all(id_list_bytes) {
        return None;
    }
    // Each id is one run of digits.
    let ids = inside.as_bytes().split(|b| !b.is_ascii_digit()).filter(|run| !run.is_empty()).count();
    u32::try_from(ids).ok().filter(|&ids| ids > 0)
}

/// Reported text tokens per estimated text token, learned from the pods' answers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TextRatio(f64, u32);

impl Default for TextRatio {
    fn default() -> Self {
        Self(1.0, 0)
    }
}

impl TextRatio {
    /// The prompt's tokens, corrected when estimated from text.
    pub fn corrected(&self, size: PromptSize) -> u32 {
        if size.exact {
            return size.tokens;
        }
        (f64::from(size.tokens) * self.0).round().clamp(0.0, f64::from(u32::MAX)) as u32
    }

    /// A pod reported `reported` prompt tokens for a prompt estimated at `size`.
    pub fn observe(&mut self, size: PromptSize, reported: u64) {
        if size.exact || size.tokens == 0 || reported == 0 {
            return;
        }
        let mut ratio = (reported as f64 / f64::from(size.tokens)).clamp(RATIO_BOUNDS.0, RATIO_BOUNDS.1);
        let step = (1.0 / f64::from(self.1.saturating_add(1))).max(RATIO_STEP);
        if step <= RATIO_STEP {
            ratio = ratio.clamp(self.0 / ANSWER_FACTOR, self.0 * ANSWER_FACTOR);
        }
        self.1 = self.1.saturating_add(1);
        self.0 += step * (ratio - self.0);
    }

    /// Prompt tokens in one prefix block of `block_tokens`: exact for token ids; for text,
    /// scaled by the ratio (a text block is `block_tokens` estimated tokens).
    pub fn tokens_per_block(&self, size: PromptSize, block_tokens: usize) -> f64 {
        let block = block_tokens as f64;
        if size.exact {
            block
        } else {
            block * self.0
        }
    }

    pub fn value(&self) -> f64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::parse_request;

    #[test]
    fn token_ids_are_counted_and_text_is_estimated() {
        let ids = parse_request(br#"{"prompt":[1, 2,3 ,4]}"#, Endpoint::Completions).unwrap();
        assert_eq!(prompt_size(&ids, Endpoint::Completions, 4), PromptSize { tokens: 4, exact: true });
        let batch = parse_request(br#"{"prompt":[[1, 2], [3,4,5]]}"#, Endpoint::Completions).unwrap();
        assert_eq!(prompt_size(&batch, Endpoint::Completions, 4), PromptSize { tokens: 5, exact: true }, "a batch");
        let texts = parse_request(br#"{"prompt":["12", "3"]}"#, Endpoint::Completions).unwrap();
        assert!(!prompt_size(&texts, Endpoint::Completions, 4).exact, "a batch of texts is estimated");
        let text = parse_request(br#"{"prompt":"0123456789abcdef"}"#, Endpoint::Completions).unwrap();
        assert_eq!(prompt_size(&text, Endpoint::Completions, 4), PromptSize { tokens: 4, exact: false });
        let chat = parse_request(br#"{"messages":[{"role":"user","content":"hi"}]}"#, Endpoint::ChatCompletions);
        assert!(prompt_size(&chat.unwrap(), Endpoint::ChatCompletions, 4).tokens > 0);
    }

    #[test]
    fn an_image_counts_a_fixed_allowance_not_its_base64_bytes() {
        let question = r#"{"type":"text","text":"What is in this picture?"}"#;
        let chat = |image: &str| {
            let part = format!(r#"{{"type":"image_url","image_url":{{"url":"data:image/png;base64,{image}"}}}}"#);
            format!(r#"{{"model":"m","messages":[{{"role":"user","content":[{question},{part}]}}]}}"#)
        };
        let estimate = |body: String| {
            let request = parse_request(body.as_bytes(), Endpoint::ChatCompletions).unwrap();
            prompt_size(&request, Endpoint::ChatCompletions, 4)
        };
        let big = estimate(chat(&"QUJD".repeat(100_000)));
        assert_eq!(big, estimate(chat("QUJD")), "400 KB of base64 weighs what 4 bytes do");
        assert!(big.tokens > MEDIA_PART_TOKENS && big.tokens < MEDIA_PART_TOKENS + 40, "{big:?}");
        // What vLLM reports for such a request leaves the ratio near 1, not at its floor.
        let mut ratio = TextRatio::default();
        ratio.observe(big, u64::from(MEDIA_PART_TOKENS) + 300);
        assert!(ratio.value() > 0.5, "{ratio:?}");
    }

    #[test]
    fn the_text_ratio_converges_on_what_pods_report() {
        let mut ratio = TextRatio::default();
        let estimate = PromptSize { tokens: 1_000, exact: false };
        for _ in 0..200 {
            ratio.observe(estimate, 1_300);
        }
        assert!((ratio.corrected(estimate) as i64 - 1_300).abs() <= 5, "{ratio:?}");
        let exact = PromptSize { tokens: 7, exact: true };
        ratio.observe(exact, 700);
        assert_eq!(ratio.corrected(exact), 7, "exact counts are never corrected");
    }

    #[test]
    fn one_odd_answer_moves_the_warmed_up_ratio_a_little() {
        let mut ratio = TextRatio::default();
        let estimate = PromptSize { tokens: 1_000, exact: false };
        for _ in 0..50 {
            ratio.observe(estimate, 1_000);
        }
        ratio.observe(estimate, 10_000);
        assert!((ratio.value() - 1.05).abs() < 1e-9, "5 % of a doubling, not of a tenfold: {ratio:?}");
        for _ in 0..100 {
            ratio.observe(estimate, 3_000);
        }
        assert!((ratio.value() - 3.0).abs() < 0.05, "a real change still gets through: {ratio:?}");
    }
}
