//! The simulator's own control endpoints under `/sim/` (JSON in, JSON out).
//!
//! - `GET /sim/faults` → the current faults; `POST /sim/faults` with a partial object → the
//!   faults after the update (400 and no change if any key is wrong); `DELETE /sim/faults` →
//!   all faults cleared.
//! - `POST /sim/restart` → empties the cache, resets counters and histograms, fails in-flight
//!   requests, keeps the port, the faults and the flag-given adapters.
//! - `GET /sim/stats` → this pod's counters (see `Pod::stats_json`).

use bytes::Bytes;
use hyper::{Method, Response};
use serde_json::{json, Value};

use super::body::{json_response, SimBody};
use crate::api::errors::ApiError;
use crate::faults::Faults;
use crate::pod::Pod;

/// Handles `/sim/faults` for every method (405 for the others).
pub fn faults(pod: &Pod, method: &Method, body: &Bytes) -> Result<Response<SimBody>, ApiError> {
    let updated = match *method {
        Method::GET => pod.faults(),
        Method::POST => {
            let update: Value = if body.is_empty() {
                json!({})
            } else {
                serde_json::from_slice(body).map_err(|error| ApiError::bad_request(error.to_string()))?
            };
            pod.update_faults(|faults| faults.apply_update(&update)).map_err(ApiError::bad_request)?
        }
        Method::DELETE => pod
            .update_faults(|faults| {
                *faults = Faults::default();
                Ok(())
            })
            .map_err(ApiError::bad_request)?,
        _ => return Err(ApiError::method_not_allowed()),
    };
    Ok(json_response(200, &updated.to_json()))
}

/// Handles `POST /sim/restart`.
pub fn restart(pod: &Pod) -> Response<SimBody> {
    pod.restart();
    json_response(200, &json!({"restarted": pod.served_by()}))
}

/// Handles `GET /sim/stats`.
pub fn stats(pod: &Pod) -> Response<SimBody> {
    json_response(200, &pod.stats_json())
}
