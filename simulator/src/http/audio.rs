//! `POST /v1/audio/transcriptions` and `/v1/audio/translations`: vLLM's Whisper endpoints,
//! which take the audio file and their fields as a `multipart/form-data` form. The simulator
//! checks the form as vLLM does (a `file`, and a `model` this pod serves, else 404) and answers
//! at once with a placeholder text: it models no audio timing. The endpoints exist so a
//! gateway's routing of uploads by their form's `model` can be tested end to end. A form with
//! `stream=true` is answered as vLLM streams a transcription (`text/event-stream`, one
//! `transcription.chunk` event, `[DONE]`), and the pod's injected failures (`fail_fraction`)
//! apply: with `fail_in_stream`, a stream fails as vLLM's does, `200` then its error as the
//! first event (speech_to_text.py, `_speech_to_text_stream_generator`).

use std::sync::Arc;

use bytes::Bytes;
use hyper::Response;
use serde_json::json;

use super::body::{full_response, json_response, SimBody};
use crate::api::errors::ApiError;
use crate::pod::Pod;

/// Reads the form (parsed by `multer`, independently of the gateway's own reading) and
/// answers vLLM's `TranscriptionResponse` shape.
pub async fn transcription(
    pod: &Arc<Pod>,
    content_type: Option<&str>,
    body: Bytes,
) -> Result<Response<SimBody>, ApiError> {
    let boundary = content_type
        .and_then(|value| multer::parse_boundary(value).ok())
        .ok_or_else(|| ApiError::bad_request("The request body must be multipart/form-data."))?;
    let chunks = futures_util::stream::once(async move { Ok::<Bytes, std::convert::Infallible>(body) });
    let mut form = multer::Multipart::new(chunks, boundary);
    let invalid = |error: multer::Error| ApiError::bad_request(format!("Invalid form: {error}"));
    let (mut model, mut audio_bytes, mut stream) = (None, None, false);
    while let Some(field) = form.next_field().await.map_err(invalid)? {
        match field.name() {
            Some("model") => model = Some(field.text().await.map_err(invalid)?),
            Some("file") => audio_bytes = Some(field.bytes().await.map_err(invalid)?.len()),
            // (A form field is text: pydantic reads "true", "1", "yes" as true.)
            Some("stream") => stream = matches!(field.text().await.map_err(invalid)?.trim(), "true" | "1" | "yes"),
            _ => {}
        }
    }
    let audio_bytes = audio_bytes.ok_or_else(|| ApiError::bad_param("file", "Field 'file' is required."))?;
    {
        let mut state = pod.lock();
        if let Err(error) = state.lora.resolve(model.as_deref()) {
            // Counted as for the other endpoints: a benchmark reads how many reached the wrong pod.
            state.model_not_found += 1;
            return Err(error);
        }
    }
    let faults = pod.faults();
    if faults.fail_fraction > 0.0 && pod.fault_draw() < faults.fail_fraction {
        let error = ApiError::new(faults.fail_status, "Injected failure (fault injection).");
        if stream && faults.fail_in_stream {
            return Ok(event_stream(&[error.to_json()]));
        }
        return Err(error);
    }
    let text = format!("(simulated transcription of {audio_bytes} bytes of audio)");
    if stream {
        let model = model.unwrap_or_else(|| pod.config().model.clone());
        let chunk = json!({"id": "trsc-sim", "object": "transcription.chunk", "created": 0, "model": model,
                           "choices": [{"delta": {"content": text}, "finish_reason": "stop", "stop_reason": null}]});
        return Ok(event_stream(&[chunk]));
    }
    Ok(json_response(200, &json!({"text": text, "usage": {"type": "duration", "seconds": 1}})))
}

/// A `200` stream of `events`, then `[DONE]` (vLLM ends a failed stream with it too), sent whole:
/// the simulator models no audio timing.
fn event_stream(events: &[serde_json::Value]) -> Response<SimBody> {
    let mut body: String = events.iter().map(|event| format!("data: {event}\n\n")).collect();
    body.push_str("data: [DONE]\n\n");
    full_response(200, "text/event-stream; charset=utf-8", body)
}
