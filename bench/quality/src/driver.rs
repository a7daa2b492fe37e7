//! Replays a workload's jobs against one target with a fixed number of client slots.
//!
//! Closed loop: each slot takes the next job, runs it to the end (every turn of a
//! conversation, one after the other) and takes another. A burst gives every job its own
//! slot, so all requests leave at once. Outcomes are kept per request in completion order.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::client::{StreamingClient, Success};
use crate::workload::{AgentApi, Job, MODEL};

/// One request's result: the stream's measurements, or why it failed.
pub type Outcome = Result<Success, String>;

/// Everything one replay produced.
#[derive(Debug)]
pub struct Replay {
    pub outcomes: Vec<Outcome>,
    /// When the replay began: scheduled jobs' `at_ms` count from here.
    pub started: Instant,
    /// From the first request sent to the last response ended.
    pub wall: Duration,
}

/// Runs `jobs` against `base_url` (e.g. `http://127.0.0.1:10000`) with `concurrency` slots.
pub async fn replay(client: &StreamingClient, base_url: &str, jobs: Vec<Job>, concurrency: usize) -> Replay {
    let queue = Arc::new(Mutex::new(jobs.into_iter().collect::<VecDeque<Job>>()));
    let started = Instant::now();
    let mut slots = Vec::with_capacity(concurrency);
    for _ in 0..concurrency.max(1) {
        let queue = Arc::clone(&queue);
        let client = client.clone();
        let base_url = base_url.to_string();
        slots.push(tokio::spawn(async move {
            let mut outcomes = Vec::new();
            loop {
                let next = queue.lock().unwrap_or_else(PoisonError::into_inner).pop_front();
                let job = match next {
                    Some(Job::Scheduled { at_ms, job }) => {
                        tokio::time::sleep_until((started + Duration::from_millis(at_ms)).into()).await;
                        *job
                    }
                    Some(job) => job,
                    None => break,
                };
                run_job(&client, &base_url, job, &mut outcomes).await;
            }
            outcomes
        }));
    }
    join_slots(slots, started).await
}

/// Waits for every client slot and gathers their outcomes (a slot that died counts as one
/// failed request), timed from `started`.
pub async fn join_slots(slots: Vec<tokio::task::JoinHandle<Vec<Outcome>>>, started: Instant) -> Replay {
    let mut outcomes = Vec::new();
    for slot in slots {
        match slot.await {
            Ok(mut slot_outcomes) => outcomes.append(&mut slot_outcomes),
            Err(error) => outcomes.push(Err(format!("client task failed: {error}"))),
        }
    }
    Replay { outcomes, started, wall: started.elapsed() }
}

async fn run_job(client: &StreamingClient, base_url: &str, job: Job, outcomes: &mut Vec<Outcome>) {
    match job {
        // Unwrapped by the slot loop; a scheduled job inside another is sent at once.
        Job::Scheduled { job, .. } => Box::pin(run_job(client, base_url, *job, outcomes)).await,
        Job::Completion { prompt, max_tokens } => {
            let body = completion_body(MODEL, &prompt, max_tokens);
            let mut outcome = client.post_streaming(&format!("{base_url}/v1/completions"), body).await;
            if let Ok(success) = &mut outcome {
                success.prompt_key = Some(prompt_key(&prompt));
            }
            outcomes.push(outcome);
        }
        Job::ForModel { model, prompt, max_tokens } => {
            let body = completion_body(&model, &prompt, max_tokens);
            outcomes.push(client.post_streaming(&format!("{base_url}/v1/completions"), body).await);
        }
        Job::Agent { api: AgentApi::Messages, instructions, task, turns, think_ms, max_tokens } => {
            let url = format!("{base_url}/v1/messages");
            let mut messages = vec![json!({"role": "user", "content": [{"type": "text", "text": task}]})];
            for (index, turn) in turns.into_iter().enumerate() {
                let body = messages_body(&instructions, &messages, max_tokens);
                let outcome = client.post_streaming(&url, body).await;
                let answer = outcome.as_ref().ok().map(|success| success.text.trim().to_string());
                outcomes.push(outcome);
                let Some(answer) = answer else { break };
                let id = format!("toolu_{index}");
                let input: Value = serde_json::from_str(&turn.tool_arguments).unwrap_or(Value::Null);
                messages.push(json!({"role": "assistant", "content": [
                    {"type": "text", "text": answer},
                    {"type": "tool_use", "id": id, "name": "shell", "input": input}]}));
                messages.push(json!({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": id, "content": turn.tool_output},
                    {"type": "text", "text": turn.next_step}]}));
                let pause = think_ms.get(index).copied().unwrap_or(0);
                tokio::time::sleep(Duration::from_millis(pause)).await;
            }
        }
        Job::Agent { api: AgentApi::Responses, instructions, task, turns, think_ms, max_tokens } => {
            let url = format!("{base_url}/v1/responses");
            let mut items = vec![json!({"role": "user", "content": task})];
            for (index, turn) in turns.into_iter().enumerate() {
                let outcome = client.post_streaming(&url, responses_body(&instructions, &items, max_tokens)).await;
                let answer = outcome.as_ref().ok().map(|success| success.text.trim().to_string());
                outcomes.push(outcome);
                // A session whose turn failed has no answer to build on: it ends there.
                let Some(answer) = answer else { break };
                let call_id = format!("call_{index}");
                items.push(json!({"type": "message", "role": "assistant",
                                  "content": [{"type": "output_text", "text": answer}]}));
                items.push(json!({"type": "function_call", "call_id": call_id, "name": "shell",
                                  "arguments": turn.tool_arguments}));
                items.push(json!({"type": "function_call_output", "call_id": call_id, "output": turn.tool_output}));
                items.push(json!({"role": "user", "content": turn.next_step}));
                let pause = think_ms.get(index).copied().unwrap_or(0);
                tokio::time::sleep(Duration::from_millis(pause)).await;
            }
        }
        Job::Chat { system, user_turns, think_ms, max_tokens } => {
            let url = format!("{base_url}/v1/chat/completions");
            let mut messages = vec![json!({"role": "system", "content": system})];
            for (turn, user_turn) in user_turns.into_iter().enumerate() {
                let pause = turn.checked_sub(1).and_then(|previous| think_ms.get(previous)).copied().unwrap_or(0);
                tokio::time::sleep(Duration::from_millis(pause)).await;
                messages.push(json!({"role": "user", "content": user_turn}));
                let outcome = client.post_streaming(&url, chat_body(&messages, max_tokens)).await;
                // A conversation whose turn failed has no reply to build on: it ends there.
                let reply = outcome.as_ref().ok().map(|success| success.text.trim().to_string());
                outcomes.push(outcome);
                match reply {
                    Some(text) => messages.push(json!({"role": "assistant", "content": text})),
                    None => break,
                }
            }
        }
    }
}

/// Bytes of a prompt's head that name its shared prefix: the workloads' shared prefixes are
/// thousands of tokens, their heads distinct.
const PROMPT_KEY_BYTES: usize = 256;

/// A hash of the prompt's head, stable within a run (for `decisions.txt`).
fn prompt_key(prompt: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let head = prompt.as_bytes().get(..PROMPT_KEY_BYTES).unwrap_or(prompt.as_bytes());
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    head.hash(&mut hasher);
    hasher.finish()
}

fn completion_body(model: &str, prompt: &str, max_tokens: usize) -> String {
    json!({
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "stream": true,
        "stream_options": {"include_usage": true},
    })
    .to_string()
}

fn responses_body(instructions: &str, items: &[Value], max_tokens: usize) -> String {
    json!({
        "model": MODEL,
        "instructions": instructions,
        "input": items,
        "max_output_tokens": max_tokens,
        "stream": true,
    })
    .to_string()
}

/// A Messages API turn as Claude Code sends it: the system prompt marked for caching and a
/// `cache_control` marker on the newest block only (moved every turn).
fn messages_body(system: &str, messages: &[Value], max_tokens: usize) -> String {
    let mut messages = messages.to_vec();
    let newest = messages.last_mut().and_then(|m| m.get_mut("content")).and_then(Value::as_array_mut);
    if let Some(block) = newest.and_then(|blocks| blocks.last_mut()).and_then(Value::as_object_mut) {
        block.insert("cache_control".into(), json!({"type": "ephemeral"}));
    }
    json!({
        "model": MODEL,
        "max_tokens": max_tokens,
        "stream": true,
        "system": [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
        "messages": messages,
    })
    .to_string()
}

fn chat_body(messages: &[Value], max_tokens: usize) -> String {
    json!({
        "model": MODEL,
        "messages": messages,
        "max_tokens": max_tokens,
        "stream": true,
        "stream_options": {"include_usage": true},
    })
    .to_string()
}
