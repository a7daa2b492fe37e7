//! `POST /v1/audio/transcriptions` and `/v1/audio/translations`: vLLM's Whisper endpoints,
//! which take the audio file and their fields as a `multipart/form-data` form. The simulator
//! checks the form as vLLM does (a `file`, and a `model` this pod serves, else 404) and answers
//! at once with a placeholder text: it models no audio timing. The endpoints exist so a
//! gateway's routing of uploads by their form's `model` can be tested end to end.

use std::sync::Arc;

use bytes::Bytes;
use hyper::Response;
use serde_json::json;

use super::body::{json_response, SimBody};
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
    let (mut model, mut audio_bytes) = (None, None);
    while let Some(field) = form.next_field().await.map_err(invalid)? {
        match field.name() {
            Some("model") => model = Some(field.text().await.map_err(invalid)?),
            Some("file") => audio_bytes = Some(field.bytes().await.map_err(invalid)?.len()),
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
    let text = format!("(simulated transcription of {audio_bytes} bytes of audio)");
    Ok(json_response(200, &json!({"text": text, "usage": {"type": "duration", "seconds": 1}})))
}
