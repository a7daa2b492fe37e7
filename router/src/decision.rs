//! The decision for one request, from everything the worker knows.
//!
//! Reads the worker's pod table (refreshed on the tick), hashes the prompt with the pool's
//! block size, asks `picker::route::choose` with the in-flight counts, then records the
//! pick: in the prefix index and the in-flight counts (at once, for this worker; on the
//! next tick, for the others). No shared-data access per request once the worker has a table.

use picker::address::PodAddress;
use picker::config::TtftScore;
use picker::disaggregation::prefill_duration_ms;
use picker::inflight::WorkerInflight;
use picker::learn::{prompt_size, Dispatch, Load, PromptSize};
use picker::outliers::Outliers;
use picker::pod_table::PodTable;
use picker::prefix::hash::MAX_BLOCKS;
use picker::prefix::hash_prompt_as;
use picker::request::{Endpoint, InferenceRequest};
use picker::route::explain::candidate_scores;
use picker::route::{
    choose_at, choose_compared, Comparison, LearningQuery, ModelQuery, NoRoute, PrefixQuery, Route, RoutingView,
    TableOrder,
};
use wasm_epp_host::Host;

use crate::comparison_stats::Compared;
use crate::decision_header::describe;
use crate::decision_stats::PickReason;
use crate::disaggregate::{prefill_pick, served_on_prefill_pods_only, DecodeChoice, LocalPrefill};
use crate::prefill_hold::Prefill;
use crate::profile::{self, Phase};
use crate::stats::OTHER_MODEL;
use crate::worker::Worker;

/// What the filter should do with the request.
// One is made per request and moved once, into the stream: boxing `Routed`'s learning record
// would cost an allocation per request to spare copying the few bytes it passes the lint's
// 200 by.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, PartialEq)]
pub enum Outcome {
    /// Send it to `address`; `destination` is the header value (with fallbacks); `explain`
    /// the decision header's value when `debug_decision_header` is on; `prefiller` the
    /// prefill pod when the request is disaggregated (counted in flight until the decode pod
    /// answers or the prefill's estimated end); with learning on, `dispatch` is what the
    /// answer will be compared with; `compared` its arm when the comparison is on.
    Routed {
        address: PodAddress,
        destination: String,
        explain: Option<String>,
        prefiller: Option<Prefill>,
        dispatch: Option<Dispatch>,
        /// The comparison's arm that routed it, when it is compared.
        compared: Option<Compared>,
        /// Envoy's retries capped at the list (see [`crate::destination::retries_cap`]).
        retries_cap: Option<u32>,
        /// A pod's 404 to its model would disown it ([`crate::disowned`]): the model is
        /// listed, another pod may serve it, and the answer's status is read.
        disownable: bool,
    },
    /// Answer 429: the request is sheddable and every pod is saturated.
    Shed,
    /// Answer 503: there is no pod to send it to.
    NoPod(NoPodReason),
    /// Answer 404: no pod serves the request's model.
    UnknownModel,
}

/// Why there is no pod; each is a different operator problem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoPodReason {
    /// Neither a table nor a static pool names any pod.
    EmptyPool,
    /// The pool service stopped long ago and there is no static pool to fall back on.
    DataExpired,
    /// Worker state was borrowed re-entrantly (cannot happen on one thread; never panic).
    Busy,
    /// The host refused the destination header.
    HeaderRefused,
    /// The gateway's subset hint names no pod of the pool (or none serving the model).
    SubsetEmpty,
}

impl NoPodReason {
    pub fn describe(self) -> &'static str {
        match self {
            Self::EmptyPool => "no pod in the pool",
            Self::DataExpired => "pod data expired: the pool service has not run for fail_open_max_age_ms",
            Self::Busy => "worker state busy",
            Self::HeaderRefused => "destination header refused",
            Self::SubsetEmpty => "no pool member in the endpoint subset",
        }
    }
}

/// The prompt as far as routing reads it.
pub struct Prompt<'a> {
    pub request: Option<&'a InferenceRequest<'a>>,
    pub endpoint: Endpoint,
    pub session: Option<u64>,
    /// The session is a stored response's id: only its pod can answer (see
    /// [`picker::route::PrefixQuery::session_pinned`]).
    pub session_pinned: bool,
    pub sheddable: bool,
    /// The model to serve (the body's, or its rewrite target).
    pub model: Option<&'a str>,
    /// The gateway's subset hint, if it sent one.
    pub subset: Option<&'a [PodAddress]>,
    /// The client's TTFT objective (learning's SLO header), in ms.
    pub slo_ttft_ms: Option<f64>,
    /// The sequences it takes in the pod's batch (its `n`, see
    /// `picker::request::InferenceRequest::sequences`; 1 for a body not read): what its pick
    /// counts in flight, on its pod, and what its stream releases at its end.
    pub weight: u32,
    /// The flow-control band it was admitted in (`None`: not flow control's, or it is off).
    /// Below `reserved_min_priority` a pod's `reserved_per_pod` places are not its own: routing
    /// reads a pod as full when its open places are (see [`crate::flow::routing_bound`]).
    pub band: Option<i32>,
}

pub fn decide(worker: &Worker, host: &dyn Host, prompt: &Prompt<'_>) -> Outcome {
    let now = host.now_ms();
    let Ok(mut cache) = worker.table.try_borrow_mut() else { return Outcome::NoPod(NoPodReason::Busy) };
    // Fail open is bounded in time: an expired table no longer says who is in the pool.
    let expired = worker.table_expired_for_request(&mut cache, host, now);
    // The comparison: a stored response's session must reach its pod whatever the arm, and
    // only prompts the picker reads are compared.
    let comparing = worker
        .comparison
        .as_ref()
        .filter(|_| prompt.request.is_some() && prompt.endpoint.generates() && !prompt.session_pinned);
    if comparing.is_some() {
        cache.ready_split(worker.config.comparison.baseline_share);
    }
    let table = if expired { None } else { cache.table() };
    // The pods Envoy's own balancer would retry on past the filter's list.
    // (An empty table routes on the fallback pool, as `picker::route::choose_at` does.)
    let pool_size = table.filter(|t| !t.pods.is_empty()).map_or(worker.fallback_pool.len(), |t| t.pods.len());
    let prefix_config = &worker.config.prefix;
    let params = prefix_config.hash_params(table.and(cache.block_size()));
    let block_tokens = params.block_tokens;
    let mut hashes = Vec::new();
    // Assistant replies' places, for learning's cached-token prediction (no allocation for a
    // prompt without replies).
    let mut replies = Vec::new();
    if let (true, Some(request)) = (prefix_config.enabled, prompt.request) {
        // Room for every block at once: growing by doubling cost 7 allocations for 256.
        hashes.reserve_exact(params.max_blocks.clamp(1, MAX_BLOCKS));
        let _span = profile::span(host, Phase::Hash);
        // Seeded with the model it is sent as (a rewrite's target), as the engine caches it.
        if hash_prompt_as(request, prompt.model, prompt.endpoint, &params, &mut hashes, &mut replies).is_err() {
            worker.stats.increment(worker.stats.prompt_unhashable);
        }
    }
    // P/D: with pods of both roles, destinations are decode pods, picked by the decode weights.
    let mut role_tables = worker.pd.as_ref().and_then(|pd| pd.tables.try_borrow_mut().ok());
    let split = match (role_tables.as_deref_mut(), table) {
        (Some(tables), Some(table)) => tables.split(table, &|role_table| cache.model_index_of(role_table)),
        _ => None,
    };
    // Positions in the role tables are not the full table's (the model index's notes).
    let split_routed = split.is_some();
    // The prompt's tokens as the body says (media parts at an allowance), before learning's
    // correction: the unit its blocks are cut in.
    let size = match prompt.request {
        Some(request) => prompt_size(request, prompt.endpoint, params.bytes_per_token),
        None => PromptSize::default(),
    };
    // Only completions and chat are split (as llm-d's sidecar does; another endpoint's body was
    // read for `model` alone, or is computed on its decode pod alone).
    let split_endpoint = prompt.endpoint.answers_like_completions();
    // A model only prefill pods list is served whole on one of them, by the filter's policy:
    // no decode pod to split it for (the gateway's 404 else).
    let on_prefill_pods = split.as_ref().is_some_and(|roles| {
        let query = ModelQuery {
            model: prompt.model,
            unknown_model: worker.config.models.unknown_model,
            subset: prompt.subset,
            index: None,
            named_elsewhere: false,
            disowned: &[],
        };
        served_on_prefill_pods_only(roles, &query)
    });
    let decode_policy;
    let (route_table, policy) = match (&split, &worker.pd) {
        (Some(roles), Some(_)) if on_prefill_pods => (Some(roles.prefill), &worker.policy),
        (Some(roles), Some(pd)) => {
            // Only a request that may be split weighs its stickiness against the prefill hop it
            // would skip; another (Responses, Messages) is computed on its decode pod alone, and
            // keeps the configured threshold: a long prompt must stay with the pod holding it.
            decode_policy = if split_endpoint {
                pd.decode_policy_for(u64::from(size.tokens), hashes.len(), block_tokens)
            } else {
                pd.decode_policy.clone()
            };
            (Some(roles.decode), &decode_policy)
        }
        _ => (table, &worker.policy),
    };
    let Ok(mut inflight) = worker.inflight.try_borrow_mut() else { return Outcome::NoPod(NoPodReason::Busy) };
    // While decisions are linearized, the decision counter's version comes before the read.
    inflight.begin_decision(host, now);
    let reading = profile::span(host, Phase::InflightRead);
    // The other workers' counts of the routed table's pods are kept by table position (built
    // once per table version), so `choose` reads each pod's without a lookup of its address.
    // A P/D split routes on a decode table of other positions: counted by address.
    let in_order = route_table.filter(|_| split.is_none());
    match in_order {
        Some(table) => inflight.refresh_others_in_order(host, now, table),
        None => inflight.refresh_others(host, now),
    }
    reading.end();
    let full_at = crate::flow::routing_bound(&worker.config.flow_control, prompt.band);
    let weight = prompt.weight.max(1);
    let inflight_of = |pod: &str| crate::flow::routing_inflight(inflight.count(pod), full_at, weight);
    let inflight_at = |position: usize, pod: &str| {
        let count = match in_order {
            Some(_) => inflight.count_at(position, pod),
            None => inflight.count(pod),
        };
        crate::flow::routing_inflight(count, full_at, weight)
    };
    let Ok(mut prefix) = worker.prefix.try_borrow_mut() else { return Outcome::NoPod(NoPodReason::Busy) };
    // Likewise the prefix index's ids of the table's pods (looked up again only when the table
    // or the index's pods change).
    if let (Some(table), true) = (in_order, prefix_config.enabled) {
        prefix.index_ids_in_order(table);
    }
    let last_picked = |pod: &str| prefix.last_picked(pod);
    let session_pod = prompt.session.and_then(|key| prefix.session_pod(key));
    let query = prefix_config.enabled.then(|| PrefixQuery {
        index: prefix.index(),
        hashes: &hashes,
        session_pod,
        session_pinned: prompt.session_pinned,
        last_picked: &last_picked,
        reuse: prefix.reuse(),
    });
    let learning = worker.config.learning.enabled.then(|| worker.learning.try_borrow().ok()).flatten();
    let tokens_of = |pod: &str| inflight.tokens(pod);
    // Pods that failed this worker's recent requests (nothing to pass over if it is busy).
    let mut outliers = worker.outliers.try_borrow_mut();
    let epoch_of = |pod: &str| route_table.and_then(|t| t.epoch_of(pod));
    if let Ok(outliers) = outliers.as_mut() {
        outliers.ejected(now, &epoch_of);
    }
    let outliers = outliers.as_deref().ok();
    // Pods whose 404 disowned the request's model on this worker (none to look up, the
    // common case, costs one length check).
    let disowned = match (prompt.model, worker.disowned.try_borrow_mut()) {
        (Some(model), Ok(mut disowned)) if !disowned.is_empty() => disowned.pods_for(model, now, &epoch_of),
        _ => Vec::new(),
    };
    let ejected = outliers.map_or(&[][..], Outliers::ejected_now);
    // Pods that failed since their last success are a retry target of last resort: ask for as
    // many more runners-up as there are, and put them last after the pick.
    let suspects = outliers.map_or(0, Outliers::suspects);
    let wanted_fallbacks = policy.fallbacks;
    let widened;
    let policy = if suspects == 0 {
        policy
    } else {
        widened =
            picker::scheduler::Policy { fallbacks: policy.fallbacks.saturating_add(suspects.min(8)), ..policy.clone() };
        &widened
    };
    let view = RoutingView {
        table: route_table,
        fallback_pool: &worker.fallback_pool,
        inflight: &inflight_of,
        prefix: query,
        now_ms: now,
        stale_after_ms: worker.config.stale_after_ms,
        ejected,
        models: ModelQuery {
            model: prompt.model,
            unknown_model: worker.config.models.unknown_model,
            subset: prompt.subset,
            // A role table's positions are not the full table's: its own index.
            index: Some(split.map_or(cache.models(), |roles| match on_prefill_pods {
                true => roles.prefill_models,
                false => roles.decode_models,
            })),
            named_elsewhere: false,
            disowned: &disowned,
        },
        learning: learning.as_ref().map(|learner| {
            let typical_ttft_ms = learner.models.typical_ms().unwrap_or(0.0);
            // `lead` scores on the pool's mean TTFT; 0 scores in proportion.
            let lead_scale = match worker.config.learning.ttft_score {
                TtftScore::Lead => typical_ttft_ms,
                TtftScore::Proportional => 0.0,
            };
            LearningQuery {
                models: &learner.models,
                prompt_tokens: learner.text_ratio.corrected(size),
                tokens_per_block: learner.text_ratio.tokens_per_block(size, params.block_tokens),
                hashed_blocks: hashes.len(),
                tail_cached_share: learner.tail_share.value(),
                tokens_in_flight: &tokens_of,
                slo_ttft_ms: prompt.slo_ttft_ms,
                replies: &replies,
                ttft_scale_ms: lead_scale,
                ttft_margin_ms: lead_scale * worker.config.learning.lead_margin,
                typical_ttft_ms,
            }
        }),
    };
    let Ok(mut random) = worker.random.try_borrow_mut() else { return Outcome::NoPod(NoPodReason::Busy) };
    let choosing = profile::span(host, Phase::Choose);
    let order = TableOrder { inflight_at: &inflight_at, index_ids: in_order.and_then(|table| prefix.index_ids(table)) };
    let comparison = comparing.zip(cache.split()).map(|(comparing, split)| Comparison {
        split,
        baseline: &comparing.baseline,
        key: prompt.session.or_else(|| prompt.request.and_then(picker::comparison::conversation_key)),
    });
    let (chosen, arm) = match &comparison {
        Some(comparison) => match choose_compared(&view, &order, policy, comparison, &mut random) {
            Ok((route, arm)) => (Ok(route), arm),
            Err(no_route) => (Err(no_route), None),
        },
        None => (choose_at(&view, &order, policy, &mut random), None),
    };
    choosing.end();
    let route = match chosen {
        Ok(route) => Some(route),
        Err(NoRoute::EmptyPool) => None,
        Err(NoRoute::UnknownModel) => return Outcome::UnknownModel,
        Err(NoRoute::SubsetEmpty) => return Outcome::NoPod(NoPodReason::SubsetEmpty),
    };
    if expired {
        worker.stats.increment(worker.stats.fail_open_expired);
    }
    let Some(Route {
        mut address,
        mut epoch,
        mut fallbacks,
        fail_open,
        pool_saturated,
        prefix_match,
        affinity,
        mut table_index,
        predicted,
        may_serve,
        ..
    }) = route
    else {
        return Outcome::NoPod(if expired { NoPodReason::DataExpired } else { NoPodReason::EmptyPool });
    };
    if suspects > 0 {
        // Pods not known to fail first, in rank order; suspects only fill what they leave:
        // past the list Envoy would retry on a balancer that knows no models
        // (`crate::destination`), and a pool failing now and then needs its retries.
        let (mut sound, suspected): (Vec<PodAddress>, Vec<PodAddress>) =
            fallbacks.into_iter().partition(|pod| !outliers.is_some_and(|o| o.is_suspect(pod.as_str())));
        sound.extend(suspected);
        sound.truncate(wanted_fallbacks);
        fallbacks = sound;
    }
    // The log tells of the pool's data, not of this request's pods: a model whose pods are all
    // down fails open alone (counted), and judged per request the state would flip, and log,
    // at every request alternating between it and a model still served.
    let pool_fails_open = expired
        || (fail_open
            && !table.is_some_and(|t| t.pods.iter().any(|pod| pod.usable_at(now, worker.config.stale_after_ms))));
    worker.note_fail_open(pool_fails_open);
    // A compared request is not shed by the pick: the baseline, as Envoy's balancers, cannot
    // shed, and shedding in one arm only would take its worst moments out of its figures.
    if prompt.sheddable && pool_saturated && arm.is_none() {
        worker.stats.increment(worker.stats.shed);
        worker.stats.decisions.count_reason(&worker.stats.metrics, PickReason::Shed);
        return Outcome::Shed;
    }
    let reason = match (fail_open || expired, affinity) {
        (true, _) => PickReason::FailOpen,
        (false, true) if session_pod.is_some_and(|(pod, _)| pod == address.as_str()) => PickReason::Session,
        (false, true) => PickReason::Affinity,
        (false, false) => PickReason::Load,
    };
    let mut explain = worker.config.debug_decision_header.then(|| {
        // The weights the pick used (under P/D, the decode weights).
        let candidates = candidate_scores(&view, policy);
        // The worker's in-flight slot tells the workers of one Envoy apart (they share the
        // configured VM id).
        let decider = inflight.slot().map_or_else(|| "unknown".to_string(), |slot| format!("slot-{slot}"));
        let mut value = describe(&address, reason, prefix_match, &candidates, &decider, host.now_us());
        if let Some(arm) = arm {
            value.push_str("; arm=");
            value.push_str(arm.label());
        }
        // Pods this worker passed over for failing requests (outlier detection).
        if !view.ejected.is_empty() {
            value.push_str("; ejected=");
            value.push_str(&view.ejected.iter().map(PodAddress::as_str).collect::<Vec<_>>().join(","));
        }
        value
    });
    let splittable = prompt.request.filter(|_| split_endpoint);
    let prefill = match (&split, &worker.pd, splittable) {
        _ if on_prefill_pods => {
            worker.stats.increment(worker.stats.pd_served_on_prefill_pods);
            if let Some(explain) = explain.as_mut() {
                explain.push_str("; pd=served_on_prefill_pod");
            }
            None
        }
        (Some(roles), Some(pd), Some(_)) => {
            let decode = DecodeChoice {
                prompt_tokens: u64::from(size.tokens),
                prefix_match,
                hashed_blocks: hashes.len(),
                block_tokens,
            };
            let prefill = prefill_pick(pd, &decode, view, *roles, &tokens_of, &mut random);
            let counter = match prefill {
                Ok(_) => worker.stats.pd_disaggregated,
                Err(LocalPrefill::PrefillBackedUp) => worker.stats.pd_prefill_backed_up,
                Err(LocalPrefill::Cached | LocalPrefill::NoPrefillPod) => worker.stats.pd_decode_only,
            };
            worker.stats.increment(counter);
            // The second pick is the decision's too: which pod prefills, or why the decode pod does.
            if let Some(explain) = explain.as_mut() {
                explain.push_str("; prefill=");
                explain.push_str(match &prefill {
                    Ok(chosen) => chosen.address.as_str(),
                    Err(LocalPrefill::Cached) => "local:cached",
                    Err(LocalPrefill::PrefillBackedUp) => "local:backed_up",
                    Err(LocalPrefill::NoPrefillPod) => "local:no_prefill_pod",
                });
            }
            prefill.ok()
        }
        _ => None,
    };
    drop(random);
    // When the prefill pod is estimated to have the prompt's KV ready: the learned TTFT model's
    // time for the work it has before then (learning on; a prefill pod never answers through
    // the proxy, so the pool's fit), else the configured cost.
    let prefill_ms = match (&prefill, &worker.pd) {
        (Some(chosen), Some(pd)) => {
            let load = Load { tokens: chosen.work.total() as f64, requests: 0.0 };
            let learned = learning.as_ref().map(|learner| learner.models.predict(chosen.address.as_str(), load));
            prefill_duration_ms(chosen.work, learned, &pd.config)
        }
        _ => 0,
    };
    // A pick that takes the pod's last free batch slot (learned from its scrapes) makes the
    // next decisions linearized: two crossing ones would leave a request waiting for a slot.
    // (A request of `n` choices takes `n` slots.)
    let batch_of = |pod: &str| learning.as_ref().and_then(|learner| learner.models.batch_size(pod));
    let last_slot = batch_of(address.as_str())
        .is_some_and(|size| f64::from(inflight.count(address.as_str())) + f64::from(weight) >= size);
    if last_slot {
        inflight.note_last_slot_taken(now);
    }
    // While decisions are linearized: what the other workers had on the pick and its
    // runners-up when it was made, to tell afterwards whether a crossing decision took it.
    let seen: Vec<u32> = match inflight.linearized() {
        true => std::iter::once(&address).chain(&fallbacks).map(|pod| inflight.others_count(pod.as_str())).collect(),
        false => Vec::new(),
    };
    // The pick is counted and published before anything else is done with it: the other
    // workers read these counts per decision, and one deciding meanwhile cannot see this
    // pick (two requests in the same millisecond on two workers can take one free slot).
    // Recording the prompt in the prefix index, the longest step after the choice, comes
    // after, so the blind window is the choice alone.
    inflight.started(address.as_str(), weight, now);
    if let Some(prefill) = &prefill {
        // The prefill pod computes the prompt once for all of its choices, each of which it
        // ends after one token: one place there (released when the decode pod answers or the
        // prefill's estimated end comes, see `crate::prefill_hold`).
        inflight.started(prefill.address.as_str(), 1, now);
        inflight.add_tokens(prefill.address.as_str(), prefill.uncached_tokens);
    }
    // A split request is not learned from: its first token is two pods' work and the hop, and
    // the decode pod reports the transferred blocks as cached. Its prompt tokens are the
    // prefill pod's load (above), not the decode pod's.
    // Nor is another endpoint's (embeddings, tokenize, ...): its body was read for `model` alone.
    // Nor is a body routed unread (too large, over the buffer cap, not JSON): whether its
    // answer streams is unknown, and a stream taken for a whole answer would be read in full.
    let predicted = predicted.filter(|_| prefill.is_none() && prompt.endpoint.generates() && prompt.request.is_some());
    let responses_api = prompt.endpoint == Endpoint::Responses;
    let details_only_on_hits = matches!(prompt.endpoint, Endpoint::Completions | Endpoint::ChatCompletions);
    let dispatch = predicted.map(|p| {
        inflight.add_tokens(address.as_str(), p.uncached_tokens);
        Dispatch {
            prompt: size,
            predicted_cached_tokens: p.cached_tokens,
            indexed_tokens: p.indexed_tokens,
            matched_blocks: p.matched_blocks,
            hashed_blocks: p.hashed_blocks,
            // The last block the pod was matched on names the prefix it is predicted to hold.
            prefix_key: (p.matched_blocks as usize).checked_sub(1).and_then(|last| hashes.get(last)).copied(),
            block_tokens: u32::try_from(block_tokens).unwrap_or(u32::MAX),
            uncached_tokens: p.uncached_tokens,
            load: p.load,
            sent_ms: now,
            streamed: prompt.request.and_then(|r| r.stream).unwrap_or(false),
            usage_expected: prompt.endpoint.always_reports_usage()
                || prompt.request.is_some_and(|r| !r.stream.unwrap_or(false) || r.includes_usage()),
            responses_api,
            details_only_on_hits,
            cached_report_unrelated: prompt.request.is_some_and(|r| !r.cached_tokens_speak_for_the_prompt()),
        }
    });
    let publishing = profile::span(host, Phase::InflightPublish);
    inflight.publish_now(host, now);
    publishing.end();
    let mut dispatch = dispatch;
    // Only a pick by load gives way: one by affinity (a prefix or session the pod holds) is
    // meant to join the other requests there, and its runner-up would prefill it cold.
    let by_load = reason == PickReason::Load;
    let picked = Picked { chosen: &address, fallbacks: fallbacks.as_slice(), seen: seen.as_slice(), weight };
    if let Some(runner_up) = give_way(&mut inflight, host, now, picked, route_table, by_load.then_some(&batch_of)) {
        // Another worker's crossing decision took this pod first: the runner-up instead. Not
        // learned from (its prediction was the first pick's), its prompt tokens not counted.
        inflight.finished(address.as_str(), weight, now);
        if let Some(dispatch) = dispatch.take() {
            inflight.release_tokens(address.as_str(), dispatch.uncached_tokens);
        }
        let RunnerUp { address: next, epoch: next_epoch, table_index: next_index } = runner_up;
        inflight.started(next.as_str(), weight, now);
        inflight.publish_now(host, now);
        fallbacks.retain(|pod| *pod != next);
        let first = std::mem::replace(&mut address, next);
        explain = explain.map(|explain| {
            // The header starts with the pod: name the one taken, and the one given up.
            let rest = explain.strip_prefix(&format!("pod={first}")).unwrap_or(&explain);
            format!("pod={address}; yielded_from={first}{rest}")
        });
        fallbacks.insert(0, first);
        epoch = next_epoch;
        table_index = next_index;
        worker.stats.increment(worker.stats.inflight_picks_yielded);
    }
    drop(inflight);
    if prefix_config.enabled && !hashes.is_empty() {
        prefix.note_prompt(prefix_match > 0.0 || affinity);
    }
    if prefix_config.enabled {
        let _span = profile::span(host, Phase::Record);
        let capacity_of = |pod: &PodAddress| {
            let kv_blocks =
                table.and_then(|t| t.capacity_blocks(pod.as_str())).unwrap_or(prefix_config.default_capacity_blocks);
            worker.index_capacity(pod.as_str(), kv_blocks)
        };
        prefix.record_pick(address.as_str(), epoch, &hashes, prompt.session, capacity_of(&address));
        // The prefill pod computed and cached the prompt too (no session: it never decodes it).
        if let Some(prefill) = &prefill {
            prefix.record_pick(prefill.address.as_str(), prefill.epoch, &hashes, None, capacity_of(&prefill.address));
        }
    }
    if let (Some(model), Some(pod)) = (prompt.model, table_index) {
        match role_tables.as_deref_mut().filter(|_| split_routed) {
            Some(tables) => {
                cache.note_demand(model, now);
                match on_prefill_pods {
                    true => tables.note_prefilled(model, pod),
                    false => tables.note_routed(model, pod),
                }
                // The prompt's adapter loads on its prefill pod too.
                match prefill.as_ref().map(|p| (p.table_index, p.loads_adapter)) {
                    Some((Some(prefill_pod), true)) => tables.note_adapter_loading(model, prefill_pod),
                    Some((Some(prefill_pod), false)) => tables.note_prefilled(model, prefill_pod),
                    _ => {}
                }
            }
            None => cache.note_routed(model, pod, now),
        }
    }
    // Counted by model only for names the pool's pods report: the body's `model` is the
    // client's to choose, so a pool whose pods name nothing must not grow a series per name.
    let listed = prompt.model.is_some_and(|model| cache.models().knows(model));
    let model_label = prompt.model.map(|model| if listed { model } else { OTHER_MODEL });
    // Its answer may disown the model ([`crate::disowned`]) where its status is read (outlier
    // detection's) and another pod may serve it.
    let disownable = listed && may_serve > 1 && worker.config.outlier_detection.enabled;
    drop(prefix);
    drop(role_tables);
    drop(cache);
    let prefiller = prefill.map(|prefill| Prefill {
        ends_by_ms: now.saturating_add(prefill_ms),
        address: prefill.address,
        uncached_tokens: prefill.uncached_tokens,
    });
    worker.stats.count_pick(&address, reason, affinity, prefix_match > 0.0);
    if let Some(model) = model_label {
        worker.stats.count_model(model);
    }
    if let (Some(comparing), Some(arm)) = (&worker.comparison, arm) {
        comparing.stats.arm(arm).routed(&worker.stats.metrics);
    }
    let compared = arm.map(|arm| Compared {
        arm,
        routed_ms: now,
        awaiting_first_byte: prompt.request.and_then(|r| r.stream).unwrap_or(false),
        answered: false,
    });
    let destination = destination_value(&address, &fallbacks);
    let retries_cap = crate::destination::retries_cap(1 + fallbacks.len(), wanted_fallbacks, may_serve, pool_size);
    Outcome::Routed { address, destination, explain, prefiller, dispatch, compared, retries_cap, disownable }
}

/// After a linearized pick's publish (see `WorkerInflight::confirm_decision`, which this
/// completes whatever the outcome): if another worker's crossing decision took the chosen pod
/// first, and the pick may give way (`batch_of`: given for picks by load, the pods' learned
/// batch sizes), the first runner-up the other workers did not add to either since the
/// choice, with its epoch. Two picks of a pod known to have a slot for both cost nothing: then,
/// and when no runner-up has slots left for the request's sequences, the pick stands.
fn give_way(
    inflight: &mut WorkerInflight,
    host: &dyn Host,
    now_ms: u64,
    picked: Picked<'_>,
    table: Option<&PodTable>,
    batch_of: Option<BatchOf<'_>>,
) -> Option<RunnerUp> {
    let Picked { chosen, fallbacks, seen, weight } = picked;
    let (&chosen_seen, fallbacks_seen) = seen.split_first()?;
    let crossed = !inflight.confirm_decision(host, now_ms, chosen.as_str(), chosen_seen);
    let batch_of = batch_of.filter(|_| crossed)?;
    // Whether `pod` has a slot for its requests in flight plus `more` (None: batch unknown).
    let fits = |pod: &PodAddress, more: u32| {
        batch_of(pod.as_str()).map(|size| f64::from(inflight.count(pod.as_str()).saturating_add(more)) <= size)
    };
    if fits(chosen, 0) == Some(true) {
        return None;
    }
    let (next, _) = fallbacks
        .iter()
        .zip(fallbacks_seen)
        .find(|(pod, &seen)| inflight.others_count(pod.as_str()) <= seen && fits(pod, weight) != Some(false))?;
    let position = table.and_then(|t| t.pods.iter().position(|p| p.address.as_str() == next.as_str()));
    let epoch = table.zip(position).and_then(|(t, i)| t.pods.get(i)).map_or(0, |p| p.epoch);
    Some(RunnerUp { address: next.clone(), epoch, table_index: position })
}

/// A linearized pick, for [`give_way`]: the chosen pod, its runners-up, the other workers'
/// counts of each at the choice, and the sequences the request weighs.
struct Picked<'a> {
    chosen: &'a PodAddress,
    fallbacks: &'a [PodAddress],
    seen: &'a [u32],
    weight: u32,
}

/// A pod's learned batch size (`None` while unknown).
type BatchOf<'a> = &'a dyn Fn(&str) -> Option<f64>;

/// The pod a pick gives way to: its address, epoch and position in the routed table.
struct RunnerUp {
    address: PodAddress,
    epoch: u32,
    table_index: Option<usize>,
}

/// `chosen[,fallback...]`: override_host tries them in order on retries.
fn destination_value(chosen: &PodAddress, fallbacks: &[PodAddress]) -> String {
    let mut value = String::with_capacity(24 * (1 + fallbacks.len()));
    value.push_str(chosen.as_str());
    for fallback in fallbacks {
        value.push(',');
        value.push_str(fallback.as_str());
    }
    value
}
