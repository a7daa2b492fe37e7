//! Prefill/decode disaggregation on the request path: the second pick.
//!
//! `decision::decide` picks the destination among the decode pods (with the decode weights)
//! whenever the table has pods of both roles; then [`prefill_pick`] asks whether that pod
//! probably lacks at least `threshold_tokens` of the prompt and, if so, picks a prefill pod
//! among the prefill pods with the prefill weights. For the stream, [`write_prefiller`] puts
//! the prefill pod's `ip:port` into `prefiller_header` for the decode pod's sidecar and
//! [`crate::prefill_hold`] ends its in-flight count and its uncached tokens in flight (the
//! prefill pod's work, not the decode pod's) when the decode pod answers or the prefill's
//! estimated end comes, whichever is first.

use std::cell::RefCell;

use picker::address::PodAddress;
use picker::config::{PdConfig, UnknownModelPolicy};
use picker::disaggregation::{
    least_prefill_work, prefill_pod_backed_up, share_skipping_prefill, uncached_tokens, PrefillWork, RoleSplit,
    RoleTables,
};
use picker::random::TieBreaker;
use picker::route::{choose, eligible_positions, ModelQuery, NoRoute, RoutingView};
use picker::saturation::SaturationLimits;
use picker::scheduler::Policy;
use wasm_epp_host::Host;

use crate::prefill_hold::{release_prefill, Prefill, PrefillHold};
use crate::worker::Worker;

/// The compiled `pd` section: its two policies and the worker's role split of the table.
pub struct PdRouting {
    pub config: PdConfig,
    /// The destination's policy: the filter's, with the decode weights.
    pub decode_policy: Policy,
    /// The prefill pod's policy: the prefill weights, runners-up only to compare their work
    /// (the sidecar takes one address; if it fails, the decode pod prefills itself) and no hard
    /// prefix affinity: a prefill pod admits every prompt at once (chunked), so its queue never
    /// fills and "sticky until saturated" would pin each shared prefix to the first pod that
    /// computed it for good, however busy. The prefix scorer still prefers it; load can
    /// outweigh it, and then the other prefill pod learns the prefix too. For the same reason
    /// no queue is full: its requests in flight past those running are mostly prompts already
    /// prefilled, waiting for their decode pods' answers, and the least-work rule weighs their
    /// tokens (a filter leaving such a pod out kept it from the comparison).
    pub prefill_policy: Policy,
    pub tables: RefCell<RoleTables>,
}

impl PdRouting {
    pub fn new(config: &PdConfig, policy: &Policy) -> Self {
        Self {
            decode_policy: Policy { weights: config.decode_weights.clone(), ..policy.clone() },
            prefill_policy: Policy {
                weights: config.prefill_weights.clone(),
                fallbacks: PREFILL_PODS_COMPARED - 1,
                affinity_threshold: 0.0,
                saturation: SaturationLimits { queue_threshold: f64::INFINITY, ..policy.saturation.clone() },
                ..policy.clone()
            },
            config: config.clone(),
            tables: RefCell::new(RoleTables::default()),
        }
    }

    /// The decode pick's policy for this prompt: prefix affinity only to decode pods holding
    /// enough of it to skip the prefill hop. A decode pod holding less gets the prompt's KV
    /// from a prefill pod anyway, its cache saving only part of a transfer (milliseconds), so
    /// sticking to it would pin a shared prefix's requests to one decode pod (and through
    /// the prefill pick's prefix scores, to one pair) while the other idles.
    pub fn decode_policy_for(&self, prompt_tokens: u64, hashed_blocks: usize, block_tokens: usize) -> Policy {
        let configured = self.decode_policy.affinity_threshold;
        let skipping = share_skipping_prefill(prompt_tokens, hashed_blocks, block_tokens, self.config.threshold_tokens);
        let affinity_threshold = if configured > 0.0 { configured.max(skipping) } else { 0.0 };
        Policy { affinity_threshold, ..self.decode_policy.clone() }
    }
}

/// Whether the request's model is served by prefill pods alone: one lists it, and no decode
/// (or both-role) pod serves it or may (as the prefill pick reads a cut pod, a name a pod of
/// the other role lists is that pod's). llm-d's prefill pods are whole vLLM servers (kv_role
/// `kv_both`): such a request is served there, aggregated, rather than answered 404. One map
/// lookup for a model a decode pod lists; the decode pods' eligibility only for a name a
/// prefill pod lists and they do not.
pub fn served_on_prefill_pods_only(roles: &RoleSplit<'_>, query: &ModelQuery<'_>) -> bool {
    let Some(model) = query.model else { return false };
    if roles.decode_models.knows(model) || !roles.prefill_models.knows(model) {
        return false;
    }
    let decode = ModelQuery { index: Some(roles.decode_models), named_elsewhere: true, ..*query };
    matches!(eligible_positions(roles.decode, &decode), Err(NoRoute::UnknownModel))
}

/// What the decider needs to know about the chosen decode pod and the prompt.
pub struct DecodeChoice {
    /// The prompt's tokens as estimated from the body (`picker::learn::prompt_size`, before
    /// the learned correction: the unit its blocks are cut in).
    pub prompt_tokens: u64,
    /// The decode pod's matched share of the prompt's hashed blocks.
    pub prefix_match: f64,
    pub hashed_blocks: usize,
    pub block_tokens: usize,
}

/// Most prefill pods the pick compares by work (the scorers' best and their runners-up the
/// filters kept). 8 missed the least busy pod whenever the scorers ranked it lower (a queue
/// scraped before its prompts ended, say). Each pod compared costs about 0.15-0.2 µs (its
/// prefix match, tokens in flight, epoch, its place in the ranking): measured on a 32 KB
/// prompt (`decision_pd` in bench/cost, one run on a busy 2-core machine), comparing all of
/// 64 prefill pods instead of 8 took the decision from ~32 to ~40 µs, all of 256 from ~53 to
/// ~107 µs, 32 of 256 ~58 µs. So every pod of a pool of up to 32 prefill pods (llm-d's run
/// a handful), the scorers' best 32 in a larger one.
const PREFILL_PODS_COMPARED: usize = 32;

/// The chosen prefill pod and the prompt's tokens it computes (counted in flight on it).
#[derive(Debug, Clone, PartialEq)]
pub struct PrefillChoice {
    pub address: PodAddress,
    pub epoch: u32,
    /// Its position in the prefill table (its model index's name for it), if found.
    pub table_index: Option<usize>,
    pub uncached_tokens: u32,
    /// What it computes before the prompt's KV is ready: what the prefill's end is estimated by.
    pub work: PrefillWork,
    /// It lists not the request's adapter, and loads it into a free slot ([`adapter_slots`]).
    pub loads_adapter: bool,
}

/// Why the decode pod prefills a request itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalPrefill {
    /// It lacks fewer than `threshold_tokens` of the prompt (or there is no prompt).
    Cached,
    /// Every prefill pod has more than `max_prefill_tokens_ahead` uncached tokens in flight.
    PrefillBackedUp,
    /// No prefill pod has fresh data.
    NoPrefillPod,
}

/// The prefill pod for this request, or why the decode pod should prefill itself. The
/// scorers (prefill weights) filter and rank the prefill pods; among their best and
/// runners-up, the one with the least uncached work before this prompt's KV is ready wins
/// (`picker::disaggregation::least_prefill_work`): its uncached tokens in flight plus the
/// prompt's tokens it lacks.
pub fn prefill_pick(
    pd: &PdRouting,
    decode: &DecodeChoice,
    view: RoutingView<'_>,
    roles: RoleSplit<'_>,
    tokens_in_flight: &dyn Fn(&str) -> u32,
    random: &mut TieBreaker,
) -> Result<PrefillChoice, LocalPrefill> {
    let prompt_tokens = decode.prompt_tokens;
    let lacking = uncached_tokens(prompt_tokens, decode.hashed_blocks, decode.prefix_match, decode.block_tokens);
    if prompt_tokens == 0 || lacking < pd.config.threshold_tokens {
        return Err(LocalPrefill::Cached);
    }
    let query = view.prefix.as_ref().map(|q| (q.index, q.hashes));
    let prefill_table = roles.prefill;
    // A model a decode pod lists and no prefill pod does is the decode pods' (a prefill pod
    // whose lists were cut would most likely answer the sidecar's call 404, a round trip
    // before the decode pod prefills anyway): as the decode pick, cut pods get only names no
    // pod lists.
    let named_elsewhere = view.models.model.is_some_and(|model| roles.decode_models.knows(model));
    let mut models = ModelQuery { index: Some(roles.prefill_models), named_elsewhere, ..view.models };
    // By load, though, an adapter no prefill pod lists may be loaded where a slot is free:
    // else its prompts are prefilled on their decode pods for good, and no prefill pod ever
    // comes to list it.
    let slots = match view.models.model {
        Some(model) if named_elsewhere && models.unknown_model == UnknownModelPolicy::RouteByLoad => {
            adapter_slots(&roles, model, view.models.subset)
        }
        _ => Vec::new(),
    };
    let loads_adapter = !slots.is_empty();
    if loads_adapter {
        models = ModelQuery { model: None, subset: Some(&slots), ..models };
    }
    let view = RoutingView { table: Some(prefill_table), fallback_pool: &[], models, ..view };
    let route = choose(&view, &pd.prefill_policy, random).map_err(|_| LocalPrefill::NoPrefillPod)?;
    // A prefill pod with no fresh data is a guess; a decode pod prefilling itself is not.
    if route.fail_open {
        return Err(LocalPrefill::NoPrefillPod);
    }
    let epoch_of = |address: &PodAddress| {
        roles.prefill_position(address).and_then(|i| prefill_table.pods.get(i)).map_or(0, |pod| pod.epoch)
    };
    // Only runners-up the scheduler's filters kept: one they left out would, say, evict an
    // adapter to load this one, which the prompts of the adapter evicted pay again.
    let ranked: Vec<(&str, u32)> = std::iter::once(&route.address)
        .chain(route.fallbacks.iter().take(route.fallbacks_in_field))
        .take(PREFILL_PODS_COMPARED)
        .map(|address| (address.as_str(), epoch_of(address)))
        .collect();
    // One pass over the index for all of them, each search starting from the last pod's match.
    let mut matched = Vec::new();
    if let Some((index, hashes)) = query {
        index.matched_blocks_each(hashes, &ranked, &mut matched);
    }
    let work: Vec<PrefillWork> = ranked
        .iter()
        .enumerate()
        .map(|(i, &(address, _))| {
            let matched = matched.get(i).copied().unwrap_or(0);
            let share = if decode.hashed_blocks > 0 { matched as f64 / decode.hashed_blocks as f64 } else { 0.0 };
            PrefillWork {
                tokens_ahead: u64::from(tokens_in_flight(address)),
                uncached_tokens: uncached_tokens(prompt_tokens, decode.hashed_blocks, share, decode.block_tokens),
            }
        })
        .collect();
    let best = least_prefill_work(&work).unwrap_or(0);
    let address = best.checked_sub(1).map_or(Some(&route.address), |runner_up| route.fallbacks.get(runner_up));
    let (Some(address), Some(&(_, epoch)), Some(chosen)) = (address, ranked.get(best), work.get(best)) else {
        return Err(LocalPrefill::NoPrefillPod);
    };
    if prefill_pod_backed_up(*chosen, pd.config.max_prefill_tokens_ahead) {
        return Err(LocalPrefill::PrefillBackedUp);
    }
    Ok(PrefillChoice {
        address: address.clone(),
        epoch,
        table_index: roles.prefill_position(address),
        uncached_tokens: u32::try_from(chosen.uncached_tokens).unwrap_or(u32::MAX),
        work: *chosen,
        loads_adapter,
    })
}

/// The prefill pods that may load adapter `adapter`, which decode pods list and no prefill pod
/// does, without evicting another: serving its base model, with a free adapter slot
/// (`max_lora` reported, more than the adapters on it), in the gateway's `subset` if it sent
/// one. Only under `route_by_load`, where a pod is presumed to load a name it does not list;
/// where no slot is free, none (a swap would evict an adapter another prompt is using, so the
/// decode pod prefills it). Its base model is the one base model the decode pods listing it
/// as an adapter serve; where they name more than one, none (see [`adapter_base`]).
fn adapter_slots(roles: &RoleSplit<'_>, adapter: &str, subset: Option<&[PodAddress]>) -> Vec<PodAddress> {
    if roles.prefill_models.knows(adapter) {
        return Vec::new();
    }
    let Some(base) = adapter_base(roles, adapter) else { return Vec::new() };
    let serves_base = |pod: &picker::pod_table::PodState| pod.models.iter().any(|m| m == base);
    let in_subset = |pod: &picker::pod_table::PodState| subset.is_none_or(|s| s.contains(&pod.address));
    let has_slot =
        |i: usize| u32::try_from(i).ok().and_then(|i| roles.prefill_models.free_slots(i)).is_some_and(|f| f > 0);
    (roles.prefill.pods.iter().enumerate())
        .filter(|&(i, pod)| serves_base(pod) && in_subset(pod) && has_slot(i))
        .map(|(_, pod)| pod.address.clone())
        .collect()
}

/// The base model of adapter `adapter` as the decode pods listing it tell it: the one base
/// model they serve, or `None` when they name several (or none). vLLM's `/v1/models` names
/// each adapter's base (its `parent`), but the pod table keeps only the names, and a pod's
/// first model is not its adapters' base where it serves several (or two pods hold
/// same-named adapters of different bases): loaded on the wrong base, the prompt fails, so an
/// ambiguous adapter stays with its decode pod. (Names of one model served under several
/// `--served-model-name`s count as several: the names cannot tell them from two models.)
fn adapter_base<'t>(roles: &RoleSplit<'t>, adapter: &str) -> Option<&'t str> {
    let lists = |pod: &picker::pod_table::PodState| pod.adapter_lists().iter().any(|l| l.iter().any(|n| n == adapter));
    let listing = roles.decode_models.servers(adapter).unwrap_or_default();
    let mut base: Option<&'t str> = None;
    let pods = listing.iter().filter_map(|&(i, _)| roles.decode.pods.get(i as usize)).filter(|pod| lists(pod));
    for model in pods.flat_map(|pod| pod.models.iter().map(String::as_str)) {
        match base {
            Some(known) if known != model => return None,
            _ => base = Some(model),
        }
    }
    base
}

/// Names the prefill pod for the decode pod's sidecar and returns its hold (timed to the
/// prefill's estimated end, see [`crate::prefill_hold`]); if the header is refused, the decode
/// pod prefills itself (only the split is lost).
pub fn write_prefiller(worker: &Worker, host: &dyn Host, prefill: Option<Prefill>) -> Option<PrefillHold> {
    let (Some(pd), Some(chosen)) = (&worker.pd, &prefill) else { return prefill.map(PrefillHold::Untimed) };
    if let Err(error) = host.set_request_header(&pd.config.prefiller_header, chosen.address.as_str().as_bytes()) {
        log::warn!("wasm-epp: cannot set {}: {error}", pd.config.prefiller_header);
        let mut held = prefill.map(PrefillHold::Untimed);
        release_prefill(worker, host, &mut held);
        return None;
    }
    prefill.map(|prefill| crate::prefill_hold::hold(worker, prefill))
}
