//! The filter's stats, counted in Wasm memory and flushed on the tick (see
//! `wasm_epp_host::metrics`). Names are `wasm_epp.*` (`wasm_epp_*` in Prometheus).

use picker::address::PodAddress;
use wasm_epp_host::{Counter, Gauge, Metrics};

use crate::decision_stats::{DecisionStats, PickReason};

/// Per-pod pick counters: `wasm_epp.picks.pod.<ip:port>` -> `wasm_epp_picks{pod="<ip:port>"}`.
const PICKS_FAMILY: &str = "wasm_epp.picks.pod";
/// Pods taken out of rotation for failing requests: `wasm_epp_pod_ejections{pod="<ip:port>"}`.
const EJECTIONS_FAMILY: &str = "wasm_epp.pod_ejections.pod";
/// Routed requests by the model they were sent as (the `model` tag rule of the bootstrap).
const MODELS_FAMILY: &str = "wasm_epp.model_requests.model";
/// The label of requests for a model no pod of the table names.
pub const OTHER_MODEL: &str = "other";
/// The `pod` label of picks and ejections of pods past the families' bound
/// ([`wasm_epp_host::metrics::MAX_LABELLED`] addresses over the VM's lifetime: Envoy keeps a
/// stat until it restarts, so a label is never given back), counted, not dropped.
pub const OTHER_POD: &str = "other";

pub struct Stats {
    pub metrics: Metrics,
    pub routed: Counter,
    pub fail_open: Counter,
    pub fail_open_expired: Counter,
    pub affinity: Counter,
    pub prefix_matched: Counter,
    pub no_pod: Counter,
    pub shed: Counter,
    pub body_invalid: Counter,
    /// Of the bodies that did not parse, those read for their model alone and routed by it.
    pub body_routed_by_model: Counter,
    /// `multipart/form-data` uploads routed by their form's `model`.
    pub upload_routed_by_model: Counter,
    /// Of those, uploads whose model has a rewrite but whose form's value cannot be replaced
    /// by the target (see `picker::request::FormModel::replaceable_by`): sent as they came.
    pub upload_not_rewritten: Counter,
    /// Uploads refused (400) for a form naming `model` again after the one they were routed by.
    pub upload_model_conflict: Counter,
    pub body_rejected: Counter,
    pub body_over_limit: Counter,
    pub buffer_cap_reached: Counter,
    pub header_read_failed: Counter,
    pub prompt_unhashable: Counter,
    pub response_ids_noted: Counter,
    pub response_ids_followed: Counter,
    pub forged_destination: Counter,
    pub inflight_update_failed: Counter,
    /// Picks given up because another worker's crossing decision took the same pod first
    /// (decisions are linearized during a worker's first seconds of serving).
    pub inflight_picks_yielded: Counter,
    pub table_decode_failed: Counter,
    pub prefix_events_sent: Counter,
    pub prefix_events_learned: Counter,
    pub prefix_send_failed: Counter,
    pub prefix_send_skipped: Counter,
    pub prefix_ring_lost: Counter,
    pub health_probes: Counter,
    pub peer_accepted: Counter,
    pub peer_refused: Counter,
    pub peer_snapshots: Counter,
    /// Picks by reason and the decision-time histogram.
    pub decisions: DecisionStats,
    /// P/D: requests given a prefill pod, requests a decode pod prefills itself (it lacks
    /// little of the prompt, or no prefill pod has fresh data), and those it prefills itself
    /// because every prefill pod has too many tokens ahead (`pd.max_prefill_tokens_ahead`).
    pub pd_disaggregated: Counter,
    pub pd_decode_only: Counter,
    pub pd_prefill_backed_up: Counter,
    /// P/D: requests for a model only prefill pods list, served whole on one of them
    /// (`crate::disaggregate::served_on_prefill_pods_only`) instead of the gateway's 404.
    pub pd_served_on_prefill_pods: Counter,
    /// How split requests' holds on their prefill pods ended ([`crate::prefill_hold`]): at the
    /// prefill's estimated end (the tick), or first by the request (its answer's headers, its
    /// end, a header that could not be written); and holds left untimed because the worker's
    /// timers were full (ended by the request alone). Streamed answers mostly ended by the
    /// estimate say it is too short; whole ones mostly ended by the request, too long.
    pub pd_prefill_holds_ended_by_estimate: Counter,
    pub pd_prefill_holds_ended_by_request: Counter,
    pub pd_prefill_holds_untimed: Counter,
    /// Requests answered 404: no pod serves their model.
    pub model_unknown: Counter,
    /// Requests whose model was rewritten to a weighted target.
    pub model_rewritten: Counter,
    /// `GET /v1/models` answered by the gateway with the pool's models.
    pub model_lists_answered: Counter,
    /// Of those, lists past `picker::models::listing::MAX_LIST_BYTES`, some names left out.
    pub model_lists_cut: Counter,
    /// Attempts on a pod judged failed: a 5xx answer, one of a foreign content type, or one
    /// Envoy retried on another pod.
    pub pod_attempts_failed: Counter,
    /// Of those, answers the pod cut after its headers (a reset mid-stream).
    pub answers_cut: Counter,
    /// Of those, streams that opened with a server's error event after their `200`.
    pub streams_failed: Counter,
    /// Of those, 2xx answers of a content type no answer of their endpoint has
    /// ([`crate::answer_type`]).
    pub answers_foreign: Counter,
    /// 404s of the engine's "model does not exist" from a pod listing the model: the name is
    /// kept from that pod for a while ([`crate::disowned`]).
    pub models_disowned: Counter,
    /// Ejections this worker took over from another worker of its Envoy.
    pub pod_ejections_adopted: Counter,
    /// Answers a watcher would read that came compressed (`gzip`, `deflate`) and were
    /// inflated as they passed ([`crate::answer_encoding`]).
    pub answers_inflated: Counter,
    /// Answers a watcher would read whose bytes it could not: an encoding not inflated (`br`,
    /// `zstd`, unknown), or compressed bytes that stopped inflating (corrupt, past the bound).
    /// Nothing is learned from them, and a stream's opening is not judged.
    pub answers_encoded_unread: Counter,
    /// How long ago the pool service last wrote its heartbeat, as of this worker's last tick:
    /// the singleton's own gauges are set when it publishes, so they stop where they were
    /// when it dies; this one grows. Every worker of an Envoy sets the same stat to about
    /// the same value (Envoy keeps the last).
    pub service_heartbeat_age_ms: Gauge,
}

impl Stats {
    pub fn define() -> Self {
        let metrics = Metrics::new();
        let c = |name: &str| metrics.announced_counter(name);
        let stats = Self {
            routed: c("wasm_epp.requests_routed"),
            fail_open: c("wasm_epp.fail_open"),
            fail_open_expired: c("wasm_epp.fail_open_expired"),
            affinity: c("wasm_epp.affinity_picks"),
            prefix_matched: c("wasm_epp.prefix_matched_picks"),
            no_pod: c("wasm_epp.no_pod"),
            shed: c("wasm_epp.shed"),
            body_invalid: c("wasm_epp.body_invalid"),
            body_routed_by_model: c("wasm_epp.body_routed_by_model"),
            upload_routed_by_model: c("wasm_epp.upload_routed_by_model"),
            upload_not_rewritten: c("wasm_epp.upload_not_rewritten"),
            upload_model_conflict: c("wasm_epp.upload_model_conflict"),
            body_rejected: c("wasm_epp.body_rejected"),
            body_over_limit: c("wasm_epp.body_over_limit"),
            buffer_cap_reached: c("wasm_epp.buffer_cap_reached"),
            header_read_failed: c("wasm_epp.header_read_failed"),
            prompt_unhashable: c("wasm_epp.prompt_unhashable"),
            response_ids_noted: c("wasm_epp.response_ids_noted"),
            response_ids_followed: c("wasm_epp.response_ids_followed"),
            forged_destination: c("wasm_epp.forged_destination_removed"),
            inflight_update_failed: c("wasm_epp.inflight_update_failed"),
            inflight_picks_yielded: c("wasm_epp.inflight_picks_yielded"),
            table_decode_failed: c("wasm_epp.table_decode_failed"),
            prefix_events_sent: c("wasm_epp.prefix_events_sent"),
            prefix_events_learned: c("wasm_epp.prefix_events_learned"),
            prefix_send_failed: c("wasm_epp.prefix_send_failed"),
            prefix_send_skipped: c("wasm_epp.prefix_send_skipped"),
            prefix_ring_lost: c("wasm_epp.prefix_ring_segments_lost"),
            health_probes: c("wasm_epp.health_probes"),
            peer_accepted: c("wasm_epp.peer_requests_accepted"),
            peer_refused: c("wasm_epp.peer_requests_refused"),
            peer_snapshots: c("wasm_epp.peer_snapshots_served"),
            decisions: DecisionStats::define(&metrics),
            pd_disaggregated: c("wasm_epp.pd_disaggregated"),
            pd_decode_only: c("wasm_epp.pd_decode_only"),
            pd_prefill_backed_up: c("wasm_epp.pd_prefill_backed_up"),
            pd_served_on_prefill_pods: c("wasm_epp.pd_served_on_prefill_pods"),
            pd_prefill_holds_ended_by_estimate: c("wasm_epp.pd_prefill_holds_ended_by_estimate"),
            pd_prefill_holds_ended_by_request: c("wasm_epp.pd_prefill_holds_ended_by_request"),
            pd_prefill_holds_untimed: c("wasm_epp.pd_prefill_holds_untimed"),
            model_unknown: c("wasm_epp.model_unknown"),
            model_rewritten: c("wasm_epp.model_rewritten"),
            model_lists_answered: c("wasm_epp.model_lists_answered"),
            model_lists_cut: c("wasm_epp.model_lists_cut"),
            pod_attempts_failed: c("wasm_epp.pod_attempts_failed"),
            answers_cut: c("wasm_epp.answers_cut"),
            streams_failed: c("wasm_epp.streams_failed"),
            answers_foreign: c("wasm_epp.answers_foreign"),
            models_disowned: c("wasm_epp.models_disowned"),
            pod_ejections_adopted: c("wasm_epp.pod_ejections_adopted"),
            answers_inflated: c("wasm_epp.answers_inflated"),
            answers_encoded_unread: c("wasm_epp.answers_encoded_unread"),
            service_heartbeat_age_ms: metrics.gauge("wasm_epp.service_heartbeat_age_ms"),
            metrics,
        };
        // Defined first, so it has its place in the family whatever comes later, and shown
        // at 0 from the start.
        stats.metrics.announce_labelled(MODELS_FAMILY, OTHER_MODEL);
        stats
    }

    pub fn increment(&self, counter: Counter) {
        self.metrics.increment(counter);
    }

    pub fn add(&self, counter: Counter, by: u64) {
        self.metrics.add(counter, by);
    }

    /// A request routed as `model` (a name the pool's pods report, or [`OTHER_MODEL`]). A name
    /// with bytes a label should not hold (spaces, controls, non-ASCII) has them as `_`.
    /// Past [`wasm_epp_host::metrics::MAX_LABELLED`] names less `other`'s own place (adapters
    /// churning for the VM's lifetime), the rest count as [`OTHER_MODEL`], whose series exists
    /// from the start.
    pub fn count_model(&self, model: &str) {
        let visible = |b: u8| b.is_ascii_graphic();
        if model.bytes().all(visible) {
            self.metrics.add_labelled_or(MODELS_FAMILY, model, OTHER_MODEL, 1);
        } else {
            let label: String = model.chars().map(|c| if c.is_ascii_graphic() { c } else { '_' }).collect();
            self.metrics.add_labelled_or(MODELS_FAMILY, &label, OTHER_MODEL, 1);
        }
    }

    pub fn count_pick(&self, pod: &PodAddress, reason: PickReason, affinity: bool, prefix_matched: bool) {
        self.increment(self.routed);
        self.decisions.count_reason(&self.metrics, reason);
        let fail_open = reason == PickReason::FailOpen;
        for (happened, counter) in
            [(fail_open, self.fail_open), (affinity, self.affinity), (prefix_matched, self.prefix_matched)]
        {
            if happened {
                self.increment(counter);
            }
        }
        self.metrics.add_labelled_or(PICKS_FAMILY, pod.as_str(), OTHER_POD, 1);
    }

    /// `pod` was taken out of rotation by this worker.
    pub fn ejected(&self, pod: &PodAddress) {
        self.metrics.add_labelled_or(EJECTIONS_FAMILY, pod.as_str(), OTHER_POD, 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_labels_keep_visible_ascii_and_mark_the_rest() {
        let stats = Stats::define();
        stats.count_model("meta-llama/Llama-3.1-8B-Instruct");
        stats.count_model("my model\u{e9}");
        assert_eq!(stats.metrics.pending("wasm_epp.model_requests.model.meta-llama/Llama-3.1-8B-Instruct"), 1);
        assert_eq!(stats.metrics.pending("wasm_epp.model_requests.model.my_model_"), 1);
    }

    #[test]
    fn picks_and_ejections_of_pods_past_the_bound_count_as_other() {
        let stats = Stats::define();
        let pods: Vec<PodAddress> = (0..1_100)
            .map(|n| PodAddress::parse(&format!("10.0.{}.{}:8000", n / 256, n % 256)))
            .collect::<Result<_, _>>()
            .unwrap_or_default();
        assert_eq!(pods.len(), 1_100);
        for pod in &pods {
            stats.count_pick(pod, PickReason::Load, false, false);
            stats.ejected(pod);
        }
        let last = pods.last().map(PodAddress::as_str).unwrap_or_default();
        assert_eq!(stats.metrics.pending(&format!("{PICKS_FAMILY}.{last}")), 0, "past the bound: no label of its own");
        let past = 1_100 - wasm_epp_host::metrics::MAX_LABELLED as u64;
        assert_eq!(stats.metrics.pending(&format!("{PICKS_FAMILY}.{OTHER_POD}")), past, "the 1,100th pick is counted");
        assert_eq!(stats.metrics.pending(&format!("{EJECTIONS_FAMILY}.{OTHER_POD}")), past);
        assert_eq!(stats.metrics.pending("wasm_epp.requests_routed"), 1_100);
    }
}
