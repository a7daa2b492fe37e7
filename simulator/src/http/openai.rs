//! `POST /v1/completions`, `POST /v1/chat/completions` and `POST /v1/responses`: validate,
//! apply faults, queue every prompt, then stream tokens as they are generated or answer once
//! all are done.
//!
//! Admission to the waiting queue happens before the response starts, so an overloaded pod
//! answers a proper 503 status rather than a stream that fails.

use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use hyper::Response;
use tokio::sync::mpsc;

use super::body::{error_response, json_response, SimBody};
use crate::api::errors::ApiError;
use crate::api::messages_api::{self, parse_messages, MessagesStream};
use crate::api::request::{parse_chat, parse_completion, CommonOptions};
use crate::api::responses::{full_response, ApiKind, ChoiceText, ResponseMeta};
use crate::api::responses_api::{self, parse_responses, ResponsesMeta, ResponsesStream};
use crate::api::sse::{EventBody, SseBody, StreamUsage};
use crate::chat_template::ChatMessage;
use crate::engine::extra_key;
use crate::hashing::StableHasher;
use crate::pd::sidecar::prefill_remotely;
use crate::pod::{run_generation, ChoiceEvent, GenerationEvent, GenerationJob, Pod, Submission, Usage, UsageTally};
use crate::tokenizer::tokenize;

/// Generation events buffered per choice before a slow client slows its generation task down.
const EVENTS_BUFFERED_PER_CHOICE: usize = 64;

/// Handles `POST /v1/completions`.
pub async fn completions(
    pod: &Arc<Pod>,
    body: &Bytes,
    arrival: Instant,
    prefiller: Option<&str>,
) -> Result<Response<SimBody>, ApiError> {
    let request = parse_completion(body)?;
    let prompts = request.prompts.iter().map(|prompt| prompt.tokens()).collect();
    let remote = prefiller.map(|prefiller| RemotePrefill { prefiller, path: "/v1/completions", body });
    generate(pod, ApiKind::Completion, prompts, request.n, request.options, arrival, remote).await
}

/// Handles `POST /v1/chat/completions`.
pub async fn chat_completions(
    pod: &Arc<Pod>,
    body: &Bytes,
    arrival: Instant,
    prefiller: Option<&str>,
) -> Result<Response<SimBody>, ApiError> {
    let request = parse_chat(body)?;
    let prompts = vec![tokenize(&request.rendered_prompt())];
    let remote = prefiller.map(|prefiller| RemotePrefill { prefiller, path: "/v1/chat/completions", body });
    generate(pod, ApiKind::Chat, prompts, request.n, request.options, arrival, remote).await
}

/// A request that names a prefill pod (`x-prefiller-host-port`): where, and what to send it.
struct RemotePrefill<'a> {
    prefiller: &'a str,
    path: &'static str,
    body: &'a Bytes,
}

/// Handles `POST /v1/responses`: one prompt from `instructions` and `input`, answered in the
/// Responses API's shapes (never split by P/D: llm-d's sidecar handles the two endpoints above).
pub async fn responses(pod: &Arc<Pod>, body: &Bytes, arrival: Instant) -> Result<Response<SimBody>, ApiError> {
    let mut request = parse_responses(body)?;
    let earlier = continued_conversation(pod, request.previous_response_id.as_deref())?;
    request.continue_from(&earlier);
    let prompts = vec![tokenize(&request.rendered_prompt())];
    let started = start_generation(pod, prompts, 1, &request.options, arrival, None).await?;
    let pod_tag = {
        let mut hasher = StableHasher::with_seed(0x7265_7370); // "resp"
        hasher.write_bytes(pod.served_by().as_bytes());
        hasher.finish() as u32
    };
    let mut meta = ResponsesMeta::new(pod_tag, started.request_number, unix_seconds(), &started.model);
    meta.instructions = request.instructions.clone();
    meta.max_output_tokens = request.options.max_tokens;
    // What a stored response keeps: the conversation before it, its input, then its answer.
    let store = pod.config().responses_store.then(|| {
        let (pod, meta) = (Arc::clone(pod), meta.clone());
        let mut conversation = earlier;
        conversation.extend(request.input.iter().cloned());
        move |text: &str, usage: &Usage| {
            conversation.push(ChatMessage::text("assistant", text));
            let response = responses_api::full_response(&meta, text, usage);
            pod.lock().responses.store(meta.id.clone(), conversation, response);
        }
    });
    if request.options.stream {
        let on_complete = store.map(|store| Box::new(store) as responses_api::OnComplete);
        return Ok(event_stream(EventBody(ResponsesStream::new(started.events, meta, on_complete)).boxed_unsync()));
    }
    let (texts, usage) = collect_choices(started.events, started.choices, 1).await?;
    let text = texts.concat();
    if let Some(store) = store {
        store(&text, &usage);
    }
    Ok(json_response(200, &responses_api::full_response(&meta, &text, &usage)))
}

/// Handles `POST /v1/messages` (the Anthropic Messages API, which vLLM runs as a chat): one
/// prompt from `system` and `messages`, answered in the Messages API's shapes (never split by
/// P/D: llm-d's sidecar handles completions and chat).
pub async fn messages(pod: &Arc<Pod>, body: &Bytes, arrival: Instant) -> Result<Response<SimBody>, ApiError> {
    let request = parse_messages(body)?;
    let prompt = tokenize(&request.rendered_prompt());
    let prompt_tokens = prompt.len();
    let max_tokens = request.options.max_tokens;
    let started = start_generation(pod, vec![prompt], 1, &request.options, arrival, None).await?;
    // vLLM answers with its chat's id.
    let id = ResponseMeta::new(ApiKind::Chat, started.request_number, unix_seconds(), &started.model).id;
    if request.options.stream {
        let stream = MessagesStream::new(started.events, id, started.model, prompt_tokens, max_tokens);
        return Ok(event_stream(EventBody(stream).boxed_unsync()));
    }
    let (texts, usage) = collect_choices(started.events, started.choices, 1).await?;
    Ok(json_response(200, &messages_api::full_message(&id, &started.model, &texts.concat(), &usage, max_tokens)))
}

/// Handles `GET /v1/responses/{id}`: the response stored under `id` on this pod (vLLM's
/// retrieval, which background requests are polled with).
pub fn retrieve_response(pod: &Pod, id: &str) -> Result<Response<SimBody>, ApiError> {
    if !pod.config().responses_store {
        return Err(ApiError::bad_request(
            "This server stores no responses (vLLM without VLLM_ENABLE_RESPONSES_API_STORE).",
        ));
    }
    let mut state = pod.lock();
    match state.responses.response(id) {
        Some(response) => Ok(json_response(200, response)),
        None => {
            state.responses.not_found += 1;
            Err(ApiError::not_found(format!("Response with id '{id}' not found.")))
        }
    }
}

/// The stored conversation `previous` ended: refused without `--responses-store`, 404 when
/// this pod does not hold it (another pod answered it, or it was dropped).
fn continued_conversation(pod: &Pod, previous: Option<&str>) -> Result<Vec<ChatMessage>, ApiError> {
    let Some(id) = previous else { return Ok(Vec::new()) };
    if !pod.config().responses_store {
        return Err(ApiError::bad_param(
            "previous_response_id",
            "This server stores no responses (vLLM without VLLM_ENABLE_RESPONSES_API_STORE): send the conversation in 'input'.",
        ));
    }
    let mut state = pod.lock();
    match state.responses.conversation(id) {
        Some(conversation) => Ok(conversation.to_vec()),
        None => {
            state.responses.not_found += 1;
            Err(ApiError::not_found(format!("Response with id '{id}' not found.")))
        }
    }
}

/// A request admitted to the pod, its generation tasks running.
struct Started {
    events: mpsc::Receiver<ChoiceEvent>,
    request_number: u64,
    /// As requested, or the pod's base model.
    model: String,
    choices: usize,
    /// Each choice's prompt tokens.
    prompt_tokens: Vec<usize>,
}

impl Started {
    /// A stream whose generation failed before its first token: its generation's only event
    /// is the failure (a chat stream sends each choice's role chunk before it, as vLLM does).
    fn failed(error: ApiError, options: &CommonOptions, pod: &Pod, prompts: &[Vec<u32>], n: usize) -> Self {
        let (sender, events) = mpsc::channel(1);
        // A fresh channel of one place: the send cannot find it full or closed.
        let _ = sender.try_send(ChoiceEvent { choice: 0, event: GenerationEvent::Failed(error) });
        let prompt_tokens = prompt_tokens_by_choice(prompts, n, prompts.len().saturating_mul(n.max(1)));
        Self {
            events,
            request_number: 0,
            model: options.model.clone().unwrap_or_else(|| pod.config().model.clone()),
            choices: prompt_tokens.len(),
            prompt_tokens,
        }
    }
}

/// Each choice's prompt tokens: choice `p*n + k` is sample `k` of prompt `p`.
fn prompt_tokens_by_choice(prompts: &[Vec<u32>], n: usize, choices: usize) -> Vec<usize> {
    let n = n.max(1);
    (0..choices).map(|choice| prompts.get(choice / n).map_or(0, Vec::len)).collect()
}

/// Serves a completions or chat request: `n` choices per prompt, numbered as vLLM numbers
/// them (prompt `p`'s samples are choices `p*n .. p*n + n - 1`).
async fn generate(
    pod: &Arc<Pod>,
    kind: ApiKind,
    prompts: Vec<Vec<u32>>,
    n: usize,
    options: CommonOptions,
    arrival: Instant,
    remote: Option<RemotePrefill<'_>>,
) -> Result<Response<SimBody>, ApiError> {
    let started = start_generation(pod, prompts, n, &options, arrival, remote).await?;
    let mut meta = ResponseMeta::new(kind, started.request_number, unix_seconds(), &started.model);
    meta.prompt_tokens_details = pod.config().prompt_tokens_details;
    if options.stream {
        let usage = StreamUsage {
            include_usage: options.include_usage,
            continuous: options.continuous_usage,
            prompt_tokens: started.prompt_tokens,
            samples: n,
        };
        let body = SseBody::new(started.events, meta, usage);
        return Ok(event_stream(EventBody(body).boxed_unsync()));
    }
    collect_response(started.events, &meta, started.choices, n).await
}

fn event_stream(body: SimBody) -> Response<SimBody> {
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream; charset=utf-8"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// Checks the model and lengths, applies faults and P/D, queues `n` samples of every prompt
/// (one engine request each, as vLLM's parallel sampling) and starts their generation tasks.
async fn start_generation(
    pod: &Arc<Pod>,
    prompts: Vec<Vec<u32>>,
    n: usize,
    options: &CommonOptions,
    arrival: Instant,
    remote: Option<RemotePrefill<'_>>,
) -> Result<Started, ApiError> {
    let adapter = {
        let mut state = pod.lock();
        let resolved = state.lora.resolve(options.model.as_deref());
        if resolved.is_err() {
            // Counted so a benchmark can read how many requests reached a pod lacking their model.
            state.model_not_found += 1;
        }
        resolved?
    };
    let max_tokens = prompts
        .iter()
        .map(|prompt| output_length(pod, prompt.len(), options.max_tokens))
        .collect::<Result<Vec<_>, _>>()?;
    let faults = pod.faults();
    if faults.fail_fraction > 0.0 && pod.fault_draw() < faults.fail_fraction {
        let error = ApiError::new(faults.fail_status, "Injected failure (fault injection).");
        if options.stream && faults.fail_in_stream {
            return Ok(Started::failed(error, options, pod, &prompts, n));
        }
        return Err(error);
    }
    pod.wait_while_hung().await?;
    if let Some(remote) = remote.filter(|_| pod.config().role.takes_remote_prefill()) {
        let key = extra_key(&adapter, &options.cache_salt);
        prefill_remotely(pod, remote.prefiller, remote.path, remote.body, &prompts, &key).await;
    }

    let n = n.max(1);
    let seeds: Vec<u64> = prompts.iter().map(|prompt| stream_seed(prompt, adapter.as_deref())).collect();
    // Choice `p*n + k` is sample `k` of prompt `p`, as vLLM numbers them.
    let submissions = prompts.iter().zip(&max_tokens).zip(&seeds).flat_map(|((prompt, &max_tokens), &seed)| {
        let adapter = &adapter;
        (0..n).map(move |sample| Submission {
            tokens: prompt.clone(),
            lora: adapter.clone(),
            cache_salt: options.cache_salt.clone(),
            max_tokens,
            stream_seed: sample_seed(seed, sample),
            arrival,
        })
    });
    let tickets = pod.submit_requests(submissions)?;
    let request_number = tickets.first().map(|ticket| ticket.id).unwrap_or_default();
    let model = options.model.clone().unwrap_or_else(|| pod.config().model.clone());
    let choices = tickets.len();
    let prompt_tokens = prompt_tokens_by_choice(&prompts, n, choices);
    let (sender, events) = mpsc::channel(EVENTS_BUFFERED_PER_CHOICE.saturating_mul(choices.max(1)));
    for (choice, ticket) in tickets.into_iter().enumerate() {
        let prompt = choice / n;
        let job = GenerationJob {
            choice,
            ticket,
            prompt_tokens: prompts.get(prompt).map_or(0, Vec::len),
            max_tokens: max_tokens.get(prompt).copied().unwrap_or_default(),
            stream_seed: sample_seed(seeds.get(prompt).copied().unwrap_or_default(), choice % n),
        };
        tokio::spawn(run_generation(Arc::clone(pod), job, sender.clone()));
    }
    drop(sender);
    Ok(Started { events, request_number, model, choices, prompt_tokens })
}

/// Sample `sample` of a prompt: the first keeps the prompt's seed (so `n` = 1 answers as it
/// always did), each other sample its own, so the `n` choices differ as sampled ones would.
fn sample_seed(prompt_seed: u64, sample: usize) -> u64 {
    if sample == 0 {
        return prompt_seed;
    }
    let mut hasher = StableHasher::with_seed(prompt_seed);
    hasher.write_u64(sample as u64);
    hasher.finish()
}

/// Tokens to generate: as asked if it fits `max_model_len` (else 400, as vLLM), or the default
/// clamped to what fits.
fn output_length(pod: &Pod, prompt_tokens: usize, requested: Option<usize>) -> Result<usize, ApiError> {
    let max_model_len = pod.config().max_model_len;
    if prompt_tokens == 0 {
        return Err(ApiError::bad_param("prompt", "The prompt cannot be empty."));
    }
    // vLLM v0.11's wording (entrypoints/openai/serving_engine.py 674-688): clients such as
    // LiteLLM recognise a context overflow by "This model's maximum context length is".
    if prompt_tokens >= max_model_len {
        return Err(ApiError::bad_param(
            "prompt",
            format!(
                "This model's maximum context length is {max_model_len} tokens. However, your request has \
                 {prompt_tokens} input tokens. Please reduce the length of the input messages."
            ),
        ));
    }
    match requested {
        Some(max_tokens) if prompt_tokens.saturating_add(max_tokens) > max_model_len => Err(ApiError::bad_param(
            "max_tokens",
            format!(
                "'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This model's maximum context \
                 length is {max_model_len} tokens and your request has {prompt_tokens} input tokens \
                 ({max_tokens} > {max_model_len} - {prompt_tokens})."
            ),
        )),
        Some(max_tokens) => Ok(max_tokens),
        None => Ok(pod.config().default_max_tokens.min(max_model_len - prompt_tokens)),
    }
}

async fn collect_response(
    receiver: mpsc::Receiver<ChoiceEvent>,
    meta: &ResponseMeta,
    choices: usize,
    n: usize,
) -> Result<Response<SimBody>, ApiError> {
    let (texts, usage) = collect_choices(receiver, choices, n).await?;
    let choice_texts: Vec<ChoiceText> =
        texts.into_iter().map(|text| ChoiceText { text, finish_reason: "length" }).collect();
    Ok(json_response(200, &full_response(meta, &choice_texts, &usage)))
}

/// Every choice's text and the usage summed (`n` choices per prompt), once all have finished.
async fn collect_choices(
    mut receiver: mpsc::Receiver<ChoiceEvent>,
    choices: usize,
    n: usize,
) -> Result<(Vec<String>, Usage), ApiError> {
    let mut texts = vec![String::new(); choices];
    let mut usage = UsageTally::with_samples(n);
    // Each event is a token, a finish or a failure; the tasks send a bounded number of them.
    while let Some(ChoiceEvent { choice, event }) = receiver.recv().await {
        match event {
            GenerationEvent::Token { text, .. } => {
                if let Some(accumulated) = texts.get_mut(choice) {
                    accumulated.push_str(&text);
                }
            }
            GenerationEvent::Finished(choice_usage) => {
                usage.finished(choice, choice_usage);
            }
            GenerationEvent::Failed(error) => return Err(error),
        }
    }
    if usage.finished_choices() < choices {
        return Err(ApiError::new(500, "Generation ended before every choice finished."));
    }
    Ok((texts, usage.answered()))
}

/// Seeds generated words from the prompt, so the same prompt yields the same answer.
fn stream_seed(prompt: &[u32], adapter: Option<&str>) -> u64 {
    let mut hasher = StableHasher::with_seed(0x6f75_7470_7574); // "output"
    hasher.write_bytes(adapter.unwrap_or("").as_bytes());
    for token in prompt {
        hasher.write_u32(*token);
    }
    hasher.finish()
}

fn unix_seconds() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|elapsed| elapsed.as_secs()).unwrap_or(0)
}

/// Renders an error for handlers that return `Result`.
pub fn answer(result: Result<Response<SimBody>, ApiError>) -> Response<SimBody> {
    result.unwrap_or_else(|error| error_response(&error))
}
