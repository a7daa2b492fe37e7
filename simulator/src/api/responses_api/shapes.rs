//! The Responses API's objects: the `response` (whole, or in stream events) and its one
//! assistant `message` item, with `usage` as `input_tokens`, `input_tokens_details.
//! cached_tokens` and `output_tokens`.
//!
//! The simulator always generates the whole budget. An answer cut by the client's
//! `max_output_tokens` is `incomplete` (`incomplete_details.reason: "max_output_tokens"`), as
//! OpenAI and vLLM report a length cut; one that ran to the simulator's default length is
//! `completed`, standing for a model that stopped by itself.

use serde_json::{json, Value};

use crate::pod::Usage;

/// What every event and the final object of one response repeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponsesMeta {
    /// `resp_...`.
    pub id: String,
    /// The message item's `msg_...`.
    pub message_id: String,
    /// Unix seconds.
    pub created_at: u64,
    /// The model (or adapter) name as requested.
    pub model: String,
    /// Echoed as given.
    pub instructions: Option<String>,
    /// The client's `max_output_tokens`, if it set one.
    pub max_output_tokens: Option<usize>,
}

impl ResponsesMeta {
    /// Ids derived from `request_number` and the pod's `pod_tag`: ids stay unique in a pool
    /// (as vLLM's random ones are), so a router keying sessions by them never mixes two pods'.
    pub fn new(pod_tag: u32, request_number: u64, created_at: u64, model: &str) -> Self {
        Self {
            id: format!("resp_{pod_tag:08x}{request_number:016x}"),
            message_id: format!("msg_{pod_tag:08x}{request_number:016x}"),
            created_at,
            model: model.to_owned(),
            instructions: None,
            max_output_tokens: None,
        }
    }

    /// `completed`, or `incomplete` when the client's budget cut the answer.
    pub fn final_status(&self) -> &'static str {
        if self.max_output_tokens.is_some() {
            "incomplete"
        } else {
            "completed"
        }
    }
}

/// The assistant's message item, with `text` so far.
pub fn message_item(meta: &ResponsesMeta, text: &str, status: &str) -> Value {
    let content = if status == "in_progress" { json!([]) } else { json!([output_text(text)]) };
    json!({"id": meta.message_id, "type": "message", "role": "assistant", "status": status, "content": content})
}

/// One `output_text` content part.
pub fn output_text(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
}

/// The `response` object in `status`, its output and usage as far as known.
pub fn response_object(meta: &ResponsesMeta, status: &str, output: Value, usage: Option<&Usage>) -> Value {
    let incomplete = (status == "incomplete").then(|| json!({"reason": "max_output_tokens"}));
    json!({
        "id": meta.id,
        "object": "response",
        "created_at": meta.created_at,
        "model": meta.model,
        "status": status,
        "output": output,
        "usage": usage.map(usage_json),
        "error": null,
        "incomplete_details": incomplete,
        "instructions": meta.instructions,
        "max_output_tokens": meta.max_output_tokens,
        "metadata": {},
        "parallel_tool_calls": true,
        "previous_response_id": null,
        "reasoning": null,
        "store": false,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "truncation": "disabled",
    })
}

/// A finished (non-streamed) response.
pub fn full_response(meta: &ResponsesMeta, text: &str, usage: &Usage) -> Value {
    let status = meta.final_status();
    response_object(meta, status, json!([message_item(meta, text, "completed")]), Some(usage))
}

/// The Responses API's `usage`.
pub fn usage_json(usage: &Usage) -> Value {
    json!({
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_tokens},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_whole_response_carries_its_text_and_usage_in_the_responses_shape() {
        let usage = Usage { prompt_tokens: 10, completion_tokens: 3, cached_tokens: 8 };
        let mut meta = ResponsesMeta::new(7, 1, 5, "m");
        let body = full_response(&meta, " a b", &usage);
        assert_eq!((body["object"].as_str(), body["status"].as_str()), (Some("response"), Some("completed")));
        assert_eq!(body["output"][0]["content"][0]["text"], " a b");
        assert_eq!(body["usage"]["input_tokens_details"]["cached_tokens"], 8);
        assert_eq!(body["usage"]["total_tokens"], 13);
        assert!(body["id"].as_str().is_some_and(|id| id.starts_with("resp_")));
        meta.max_output_tokens = Some(3);
        let cut = full_response(&meta, " a b", &usage);
        assert_eq!(
            (cut["status"].as_str(), cut["incomplete_details"]["reason"].as_str()),
            (Some("incomplete"), Some("max_output_tokens"))
        );
    }
}
