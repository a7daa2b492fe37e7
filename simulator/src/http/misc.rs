//! The smaller vLLM endpoints: models, health, tokenize, render, and LoRA load/unload.
//!
//! Render shapes (chosen to match what routers read from vLLM's render server):
//! `POST /v1/completions/render` answers a JSON array with one `{"model", "prompt", "token_ids"}`
//! per prompt (`prompt` is `null` for token-id prompts); `POST /v1/chat/completions/render`
//! answers one `{"model", "prompt", "token_ids", "features": null}` where `prompt` is the text
//! after the chat template.

use std::sync::Arc;

use bytes::Bytes;
use hyper::Response;
use serde::Deserialize;
use serde_json::{json, Value};

use super::body::{empty_ok, full_response, json_response, SimBody};
use crate::api::errors::ApiError;
use crate::api::request::{parse_chat, parse_completion, PromptInput};
use crate::pod::{unix_now, Pod};
use crate::tokenizer::tokenize;

/// `GET /v1/models`: the base model and every loaded adapter (with `parent`).
pub fn models(pod: &Pod) -> Response<SimBody> {
    let created = unix_now() as u64;
    let config = pod.config();
    let mut data = vec![json!({
        "id": config.model, "object": "model", "created": created, "owned_by": "vllm",
        "root": config.model, "parent": null, "max_model_len": config.max_model_len, "permission": [],
    })];
    let state = pod.lock();
    for (name, path) in state.lora.adapters() {
        data.push(json!({
            "id": name, "object": "model", "created": created, "owned_by": "vllm",
            "root": path, "parent": config.model, "max_model_len": null, "permission": [],
        }));
    }
    json_response(200, &json!({"object": "list", "data": data}))
}

/// `GET /health`: empty 200, or 503 under the `health_fail` fault.
pub fn health(pod: &Pod) -> Response<SimBody> {
    if pod.faults().health_fail {
        return full_response(503, "text/plain; charset=utf-8", "unhealthy (fault injection)");
    }
    empty_ok()
}

/// `POST /tokenize`: `{"prompt": "..."}` or `{"messages": [...]}` → `{count, max_model_len, tokens}`.
pub fn tokenize_endpoint(pod: &Pod, body: &Bytes) -> Result<Response<SimBody>, ApiError> {
    let value: Value = serde_json::from_slice(body).map_err(|error| ApiError::bad_request(error.to_string()))?;
    let model = value.get("model").and_then(Value::as_str);
    pod.lock().lora.resolve(model)?;
    let tokens = if value.get("messages").is_some() {
        tokenize(&parse_chat(body)?.rendered_prompt())
    } else {
        match value.get("prompt") {
            Some(Value::String(prompt)) => tokenize(prompt),
            _ => return Err(ApiError::bad_param("prompt", "Field 'prompt' (a string) or 'messages' is required.")),
        }
    };
    let answer = json!({
        "count": tokens.len(), "max_model_len": pod.config().max_model_len, "tokens": tokens, "token_strs": null,
    });
    Ok(json_response(200, &answer))
}

/// `POST /v1/completions/render`: the token ids of every prompt.
pub fn render_completion(pod: &Pod, body: &Bytes) -> Result<Response<SimBody>, ApiError> {
    let request = parse_completion(body)?;
    pod.lock().lora.resolve(request.options.model.as_deref())?;
    let model = request.options.model.clone().unwrap_or_else(|| pod.config().model.clone());
    let rendered: Vec<Value> = request
        .prompts
        .iter()
        .map(|prompt| {
            let text = match prompt {
                PromptInput::Text(text) => Some(text.as_str()),
                PromptInput::TokenIds(_) => None,
            };
            json!({"model": model, "prompt": text, "token_ids": prompt.tokens()})
        })
        .collect();
    Ok(json_response(200, &Value::Array(rendered)))
}

/// `POST /v1/chat/completions/render`: the templated prompt and its token ids.
pub fn render_chat(pod: &Pod, body: &Bytes) -> Result<Response<SimBody>, ApiError> {
    let request = parse_chat(body)?;
    pod.lock().lora.resolve(request.options.model.as_deref())?;
    let model = request.options.model.clone().unwrap_or_else(|| pod.config().model.clone());
    let prompt = request.rendered_prompt();
    let token_ids = tokenize(&prompt);
    Ok(json_response(200, &json!({"model": model, "prompt": prompt, "token_ids": token_ids, "features": null})))
}

#[derive(Deserialize)]
struct LoraRequest {
    lora_name: String,
    lora_path: Option<String>,
}

/// `POST /v1/load_lora_adapter` with `{"lora_name", "lora_path"}`.
pub fn load_lora(pod: &Arc<Pod>, body: &Bytes) -> Result<Response<SimBody>, ApiError> {
    let request: LoraRequest =
        serde_json::from_slice(body).map_err(|error| ApiError::bad_request(error.to_string()))?;
    let path = request.lora_path.unwrap_or_default();
    pod.lock().lora.load(&request.lora_name, &path)?;
    let message = format!("Success: LoRA adapter '{}' added successfully.", request.lora_name);
    Ok(full_response(200, "text/plain; charset=utf-8", message))
}

/// `POST /v1/unload_lora_adapter` with `{"lora_name"}`.
pub fn unload_lora(pod: &Arc<Pod>, body: &Bytes) -> Result<Response<SimBody>, ApiError> {
    let request: LoraRequest =
        serde_json::from_slice(body).map_err(|error| ApiError::bad_request(error.to_string()))?;
    let mut state = pod.lock();
    state.lora.unload(&request.lora_name)?;
    state.engine.forget_lora(&request.lora_name);
    drop(state);
    let message = format!("Success: LoRA adapter '{}' removed successfully.", request.lora_name);
    Ok(full_response(200, "text/plain; charset=utf-8", message))
}
