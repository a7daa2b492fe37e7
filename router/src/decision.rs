//! The decision for one request, from everything the worker knows.
//!
//! Reads the worker's pod table (refreshed on the tick), hashes the prompt with the pool's
//! block size, asks `picker::route::choose` with the in-flight counts, then records the
//! pick: in the prefix index and the in-flight counts (at once, for this worker; on the
//! next tick, for the others). No shared-data access per request once the worker has a table.

use picker::address::PodAddress;
use picker::learn::{prompt_size, Dispatch, PromptSize};
use picker::prefix::hash_prompt;
use picker::request::{Endpoint, InferenceRequest};
use picker::route::{choose, LearningQuery, PrefixQuery, Route, RoutingView};
use wasm_epp_host::Host;

use crate::worker::Worker;

/// What the filter should do with the request.
#[derive(Debug, PartialEq)]
pub enum Outcome {
    /// Send it to `address`; `destination` is the header value (with fallbacks). With
    /// learning on, `dispatch` is what the answer will be compared with.
    Routed { address: PodAddress, destination: String, dispatch: Option<Dispatch> },
    /// Answer 429: the request is sheddable and every pod is saturated.
    Shed,
    /// Answer 503: there is no pod to send it to.
    NoPod(NoPodReason),
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
}

impl NoPodReason {
    pub fn describe(self) -> &'static str {
        match self {
            Self::EmptyPool => "no pod in the pool",
            Self::DataExpired => "pod data expired: the pool service has not run for fail_open_max_age_ms",
            Self::Busy => "worker state busy",
            Self::HeaderRefused => "destination header refused",
        }
    }
}

/// The prompt as far as routing reads it.
pub struct Prompt<'a> {
    pub request: Option<&'a InferenceRequest<'a>>,
    pub endpoint: Endpoint,
    pub session: Option<u64>,
    pub sheddable: bool,
    /// The client's TTFT objective (learning's SLO header), in ms.
    pub slo_ttft_ms: Option<f64>,
}

pub fn decide(worker: &Worker, host: &dyn Host, prompt: &Prompt<'_>) -> Outcome {
    let now = host.now_ms();
    let Ok(mut cache) = worker.table.try_borrow_mut() else { return Outcome::NoPod(NoPodReason::Busy) };
    // The tick keeps the table fresh; only a worker that has none yet looks per request.
    if cache.table().is_none() {
        worker.refresh_table(&mut cache, host);
    }
    // Fail open is bounded in time: a table the pool service stopped refreshing long ago no
    // longer says who is in the pool.
    let expired =
        cache.service_seen_ms().is_some_and(|seen| now.saturating_sub(seen) > worker.config.fail_open_max_age_ms);
    let table = if expired { None } else { cache.table() };
    let prefix_config = &worker.config.prefix;
    let mut hashes = Vec::new();
    let params = prefix_config.hash_params(table.and_then(|t| t.common_block_size()));
    if let (true, Some(request)) = (prefix_config.enabled, prompt.request) {
        if hash_prompt(request, prompt.endpoint, &params, &mut hashes).is_err() {
            worker.stats.increment(worker.stats.prompt_unhashable);
        }
    }
    let Ok(mut inflight) = worker.inflight.try_borrow_mut() else { return Outcome::NoPod(NoPodReason::Busy) };
    inflight.refresh_others(host, now);
    let inflight_of = |pod: &str| inflight.count(pod);
    let Ok(mut prefix) = worker.prefix.try_borrow_mut() else { return Outcome::NoPod(NoPodReason::Busy) };
    let last_picked = |pod: &str| prefix.last_picked(pod);
    let query = prefix_config.enabled.then(|| PrefixQuery {
        index: prefix.index(),
        hashes: &hashes,
        session_pod: prompt.session.and_then(|key| prefix.session_pod(key)),
        last_picked: &last_picked,
    });
    let learning = worker.config.learning.enabled.then(|| worker.learning.try_borrow().ok()).flatten();
    let size = match prompt.request {
        Some(request) => prompt_size(request, prompt.endpoint, params.bytes_per_token),
        None => PromptSize::default(),
    };
    let tokens_of = |pod: &str| inflight.tokens(pod);
    let view = RoutingView {
        table,
        fallback_pool: &worker.fallback_pool,
        inflight: &inflight_of,
        prefix: query,
        now_ms: now,
        stale_after_ms: worker.config.stale_after_ms,
        learning: learning.as_ref().map(|learner| LearningQuery {
            models: &learner.models,
            prompt_tokens: learner.text_ratio.corrected(size),
            tokens_per_block: learner.text_ratio.tokens_per_block(size, params.block_tokens),
            hashed_blocks: hashes.len(),
            tokens_in_flight: &tokens_of,
            slo_ttft_ms: prompt.slo_ttft_ms,
        }),
    };
    let route = match worker.random.try_borrow_mut() {
        Ok(mut random) => choose(&view, &worker.policy, &mut random).ok(),
        Err(_) => return Outcome::NoPod(NoPodReason::Busy),
    };
    if expired {
        worker.stats.increment(worker.stats.fail_open_expired);
    }
    drop(learning);
    let Some(Route { address, epoch, fallbacks, fail_open, pool_saturated, prefix_match, affinity, predicted, .. }) =
        route
    else {
        return Outcome::NoPod(if expired { NoPodReason::DataExpired } else { NoPodReason::EmptyPool });
    };
    worker.note_fail_open(fail_open || expired);
    if prompt.sheddable && pool_saturated {
        worker.stats.increment(worker.stats.shed);
        return Outcome::Shed;
    }
    if prefix_config.enabled {
        let kv_blocks =
            table.and_then(|t| t.capacity_blocks(address.as_str())).unwrap_or(prefix_config.default_capacity_blocks);
        let capacity = worker.index_capacity(address.as_str(), kv_blocks);
        prefix.record_pick(address.as_str(), epoch, &hashes, prompt.session, capacity);
    }
    drop(prefix);
    drop(cache);
    inflight.started(address.as_str(), now);
    let dispatch = predicted.map(|p| {
        inflight.add_tokens(address.as_str(), p.uncached_tokens);
        Dispatch {
            prompt: size,
            predicted_cached_tokens: p.cached_tokens,
            indexed_tokens: p.indexed_tokens,
            uncached_tokens: p.uncached_tokens,
            load: p.load,
            sent_ms: now,
            streamed: prompt.request.and_then(|r| r.stream).unwrap_or(false),
        }
    });
    inflight.publish_now(host, now);
    worker.stats.count_pick(&address, fail_open || expired, affinity, prefix_match > 0.0);
    let destination = destination_value(&address, &fallbacks);
    Outcome::Routed { address, destination, dispatch }
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
