//! The verdict on each request of the chaos test (tests/chaos.rs): whether its answer is one
//! the docs allow for what was sent (invariant 1) and came from a pod of its model
//! (invariant 2), given which pods failed on purpose and when the killed ones were down.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::{stream_has_error_event, Kind, Outcome};

/// How long after the killed pod is back its model's requests may still fail: the pool
/// service must scrape it healthy again (100 ms polls) and the workers read the table.
pub const BACK_IN_ROTATION: Duration = Duration::from_secs(3);

/// When the killed pods were down, as far as the clients could tell.
#[derive(Default)]
pub struct Outage {
    pub killed: Option<Instant>,
    pub back: Option<Instant>,
}

impl Outage {
    /// The request ran while the killed pods were down or not yet back in rotation.
    fn overlaps(&self, outcome: &Outcome) -> bool {
        let Some(killed) = self.killed else { return false };
        let back = self.back.map_or(outcome.ended, |back| back + BACK_IN_ROTATION);
        outcome.ended >= killed && outcome.started <= back
    }
}

/// What the judge knows of the pool: the models each pod serves, the faulty and the killed pods.
pub struct Pool {
    pub models: BTreeMap<String, Vec<&'static str>>,
    pub faulty: Vec<String>,
    pub killed: Vec<String>,
    pub outage: Outage,
}

impl Pool {
    fn serves(&self, pod: &str, model: &str) -> bool {
        self.models.get(pod).is_some_and(|models| models.contains(&model))
    }

    /// `model` lost a pod in the outage.
    fn lost_a_pod(&self, model: &str) -> bool {
        self.killed.iter().any(|pod| self.serves(pod, model))
    }

    /// `model` had no pod left in the outage.
    fn lost_every_pod(&self, model: &str) -> bool {
        self.models.keys().filter(|pod| self.serves(pod, model)).all(|pod| self.killed.contains(pod))
    }
}

/// Why an outcome breaks invariant 1 (a status the docs allow) or 2 (the right model's
/// pod); `None` when it is fine.
///
/// Allowed, beside 200 for a request vLLM serves: the pod's 400 for a body vLLM refuses
/// (routed by its model, or by load when no model can be read), the gateway's 404 for a
/// model no pod serves, flow control's 429 with its reason (TTL, a full queue, an eviction),
/// a faulty pod's 500 (the last of Envoy's attempts landed on it) and its streams' error
/// events; and in the outage (from the kill until `BACK_IN_ROTATION` after the restart), for
/// requests that may have gone to a killed pod (its model's, or a body routed by load): 502,
/// 503 and 504 with no answering pod or the killed one, a stream the killed pod cut, and for
/// a model whose every pod was killed, the gateway's 503 (`rejected-no-endpoints`) or 404
/// (no pod serves it any more). An upload is held to the same as a valid request, its 200
/// read for the transcription's text (it names no model). A client that stopped reading a
/// while is held to the same as one that read at once: its answer whole once it read on.
pub fn judge(outcome: &Outcome, pool: &Pool) -> Option<String> {
    let planned = &outcome.planned;
    let status = match (&planned.kind, &outcome.status) {
        (Kind::LeavesMidBody | Kind::LeavesWaiting, _) => return None,
        (_, Err(reason)) => return Some(format!("no answer: {reason}")),
        (_, Ok(status)) => *status,
    };
    let pod = outcome.pod.as_deref();
    let in_outage = pool.outage.overlaps(outcome);
    let on_killed = pod.is_some_and(|pod| pool.killed.iter().any(|killed| killed == pod));
    let by_load = planned.kind == Kind::BadJson;
    let outage_may_fail = in_outage && (pod.is_none() || on_killed) && (by_load || pool.lost_a_pod(&planned.model));
    let model_gone = in_outage && !by_load && pool.lost_every_pod(&planned.model);
    let from_faulty = pod.is_some_and(|pod| pool.faulty.iter().any(|faulty| faulty == pod));
    if let Some(why) = judge_flow_headers(outcome, status) {
        return Some(why);
    }
    match (&planned.kind, status) {
        (Kind::UnknownModel, 404) if outcome.local_reply => return None,
        (Kind::UnknownModel, _) => return Some("an unknown model gets the gateway's 404".into()),
        (_, 429) if outcome.dropped_reason.is_some() => return None,
        (_, 429) => return Some("429 without x-llm-d-request-dropped-reason".into()),
        (_, 502..=504) if outage_may_fail => return None,
        (_, 404 | 503) if model_gone && outcome.local_reply => return None,
        (_, 500) if from_faulty => return None,
        (Kind::BadJson | Kind::MissingPrompt, 400) => return None,
        (Kind::BadJson | Kind::MissingPrompt, _) => return Some(format!("{status}: a body vLLM refuses gets its 400")),
        (Kind::Valid { .. } | Kind::LeavesMidStream | Kind::StopsReading { .. } | Kind::Upload { .. }, 200) => {}
        (_, status) => return Some(format!("status {status} not allowed")),
    }
    let Some(pod) = pod else { return Some("200 without x-served-by".into()) };
    if !pool.models.contains_key(pod) {
        return Some(format!("answered by {pod}, not a pool member"));
    }
    if !pool.serves(pod, &planned.model) {
        return Some(format!("{} answered by {pod}, which serves {:?}", planned.model, pool.models.get(pod)));
    }
    if planned.reads_first_bytes_only() {
        return None;
    }
    if let Kind::Valid { stream: true, .. } | Kind::StopsReading { stream: true, .. } = planned.kind {
        // vLLM fails a stream after its headers: `200`, then an error event.
        if stream_has_error_event(&outcome.body) {
            return (!from_faulty).then(|| "a stream opened with an error event from a pod without faults".into());
        }
        if !outcome.whole {
            return (!(in_outage && on_killed)).then(|| "a stream cut short off the killed pods".into());
        }
    } else if !outcome.whole {
        return Some("an answer cut short".into());
    }
    if let Kind::Upload { .. } = planned.kind {
        // A transcription names no model: the pod serving it is the check.
        return (!outcome.body.contains("\"text\"")).then(|| "a transcription without its text".into());
    }
    let named = [format!("\"model\":\"{}\"", planned.model), format!("\"model\": \"{}\"", planned.model)];
    if !named.iter().any(|n| outcome.body.contains(n.as_str())) {
        return Some(format!("the answer does not name {}", planned.model));
    }
    None
}

/// The flow-control headers as documented: a refusal's reason is one of llm-d's values (and
/// ours, an eviction, only for a sheddable request); the time waited is on every answer
/// flow control let through to a pod, never on the gateway's own refusals nor on an upload
/// (another endpoint's request, not flow control's).
fn judge_flow_headers(outcome: &Outcome, status: u16) -> Option<String> {
    const REASONS: [&str; 4] =
        ["rejected-saturated", "rejected-ttl-expired", "evicted-for-higher-priority", "rejected-no-endpoints"];
    if let Some(reason) = outcome.dropped_reason.as_deref() {
        if !REASONS.contains(&reason) {
            return Some(format!("undocumented dropped reason {reason:?}"));
        }
        if reason == "evicted-for-higher-priority" && outcome.planned.priority() >= 0 {
            return Some("a request of priority 0 or more evicted".into());
        }
    }
    let queued = !matches!(outcome.planned.kind, Kind::Upload { .. });
    match (outcome.local_reply, outcome.queue_duration.as_deref()) {
        (_, Some(waited)) if !queued => Some(format!("an upload, not flow control's, says it waited {waited} ms")),
        (false, None) if !queued => None,
        (true, Some(waited)) => Some(format!("{status} from the gateway says it waited {waited} ms in the queue")),
        (false, None) if outcome.pod.is_some() => Some(format!("{status} from a pod without the time waited")),
        (false, Some(waited)) if waited.parse::<u64>().is_err() => Some(format!("time waited {waited:?}")),
        _ => None,
    }
}
