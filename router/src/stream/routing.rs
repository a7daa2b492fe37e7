//! Routing a request once its body is read (or not read): the pick, the destination and
//! prefill headers it writes, and the local answers when no pod can take it.

use picker::request::{Endpoint, InferenceRequest};
use wasm_epp_host::Host;

use super::{RequestStream, Step};
use crate::decision::{decide, NoPodReason, Outcome, Prompt};
use crate::destination::write_destination;
use crate::disaggregate::write_prefiller;
use crate::profile::{self, Phase};
use crate::reply::{send_dropped, send_model_not_found, DroppedReason};
use crate::response::Observation;
use crate::response_ids::ResponseIdWatch;

impl RequestStream {
    /// A Responses API request continuing a stored response goes where that response came
    /// from: its id is the session (over any session header: the state is on that pod); and
    /// this answer's own id will be noted the same way ([`crate::response_ids`]).
    pub(super) fn follow_response_id(&mut self, host: &dyn Host, request: &InferenceRequest<'_>) {
        if self.endpoint != Endpoint::Responses || !crate::response_ids::following(&self.worker) {
            return;
        }
        if let Some(previous) = request.previous_response_id.as_deref() {
            self.session = Some(crate::response_ids::follow(&self.worker, host, previous));
            self.session_pinned = true;
        }
        self.response_id = Some(ResponseIdWatch::default());
    }

    /// Decides, then acts: sets the header and continues, or answers locally.
    pub(super) fn route(&mut self, host: &dyn Host, request: Option<&InferenceRequest<'_>>) -> Step {
        self.route_as(host, request, None)
    }

    /// Routes a parsed request as the model it names, or as its rewrite `target` (the body's
    /// `model` replaced once the pod is chosen).
    pub(super) fn route_model(
        &mut self,
        host: &dyn Host,
        request: &InferenceRequest<'_>,
        body: &[u8],
        target: Option<String>,
    ) -> Step {
        let step = self.route_sent_as(host, request, target.as_deref());
        if let (Some(target), Some(_)) = (&target, &self.routed_to) {
            crate::rewrite::replace_model(&self.worker, host, body, target);
        }
        step
    }

    /// Routes a request as the model it names, or as `target`, to pods serving that model;
    /// the model's priority applies when no header set one. The caller replaces the model
    /// the request names once it is routed (`routed_to`).
    pub(super) fn route_sent_as(
        &mut self,
        host: &dyn Host,
        request: &InferenceRequest<'_>,
        target: Option<&str>,
    ) -> Step {
        let models = &self.worker.config.models;
        let model = target.or(request.model.as_deref());
        if self.priority.is_none() {
            self.sheddable = model.and_then(|m| models.priorities.get(m)).is_some_and(|&p| p < 0);
        }
        self.route_as(host, Some(request), model)
    }

    fn route_as(&mut self, host: &dyn Host, request: Option<&InferenceRequest<'_>>, model: Option<&str>) -> Step {
        self.finish_buffering();
        self.decided = true;
        let model = model.or_else(|| request.and_then(|r| r.model.as_deref()));
        // With flow control, the queue decides who is shed (by TTL and eviction), not the pick.
        let sheddable = self.sheddable && !self.worker.config.flow_control.enabled;
        let prompt = Prompt {
            request,
            endpoint: self.endpoint,
            session: self.session,
            session_pinned: self.session_pinned,
            sheddable,
            model,
            subset: self.subset.as_deref(),
            slo_ttft_ms: self.slo_ttft_ms,
            weight: self.weight,
            band: self.flow_band,
        };
        let started_us = host.now_us();
        let deciding = profile::span(host, Phase::Decide);
        let outcome = decide(&self.worker, host, &prompt);
        deciding.end();
        let stats = &self.worker.stats;
        stats.decisions.observe_us(&stats.metrics, host.now_us().saturating_sub(started_us));
        match outcome {
            Outcome::Routed {
                address,
                destination,
                explain,
                prefiller,
                dispatch,
                compared,
                retries_cap,
                disownable,
            } => {
                self.explain = explain;
                self.disowned_model = model.filter(|_| disownable).map(str::to_owned);
                self.compared = compared;
                self.prefilling_at = write_prefiller(&self.worker, host, prefiller);
                self.observed = dispatch.map(|dispatch| Observation::start(&self.worker, dispatch));
                let header = &self.worker.config.destination_header;
                let written = write_destination(host, header, &destination, retries_cap);
                if let Err(error) = written {
                    log::error!("wasm-epp: cannot set destination header: {error}");
                    // Answered first: the release below may hand the freed place to a held
                    // request, which makes that stream the one later calls act on.
                    let step = self.no_pod(host, NoPodReason::HeaderRefused);
                    // Counted as in flight by the decision: release it now.
                    self.routed_to = Some(address);
                    self.on_log(host);
                    return step;
                }
                self.routed_to = Some(address);
                self.destination = Some(destination);
                Step::Continue
            }
            Outcome::Shed => {
                send_dropped(
                    host,
                    429,
                    DroppedReason::RejectedSaturated,
                    "rate_limit_exceeded",
                    "wasm-epp: every inference pod is saturated; sheddable request refused",
                );
                Step::Pause
            }
            Outcome::NoPod(why) => self.no_pod(host, why),
            Outcome::UnknownModel => {
                self.worker.stats.increment(self.worker.stats.model_unknown);
                send_model_not_found(host, model.unwrap_or_default());
                Step::Pause
            }
        }
    }

    fn no_pod(&self, host: &dyn Host, why: NoPodReason) -> Step {
        self.worker.stats.increment(self.worker.stats.no_pod);
        send_dropped(
            host,
            503,
            DroppedReason::RejectedNoEndpoints,
            "service_unavailable",
            &format!("wasm-epp: no inference pod available ({})", why.describe()),
        );
        Step::Pause
    }
}
