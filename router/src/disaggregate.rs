//! Prefill/decode disaggregation on the request path: the second pick.
//!
//! `decision::decide` picks the destination among the decode pods (with the decode weights)
//! whenever the table has pods of both roles; then [`prefill_pick`] asks whether that pod
//! probably lacks at least `threshold_tokens` of the prompt and, if so, picks a prefill pod
//! among the prefill pods with the prefill weights. The stream writes the prefill pod's
//! `ip:port` into `prefiller_header` for the decode pod's sidecar.

use std::cell::RefCell;

use picker::config::{PdConfig, PrefixConfig};
use picker::disaggregation::{estimated_prompt_tokens, uncached_tokens, RoleTables};
use picker::pod_table::PodTable;
use picker::random::TieBreaker;
use picker::request::InferenceRequest;
use picker::route::{choose, Route, RoutingView};
use picker::scheduler::Policy;

/// The compiled `pd` section: its two policies and the worker's role split of the table.
pub struct PdRouting {
    pub config: PdConfig,
    /// The destination's policy: the filter's, with the decode weights.
    pub decode_policy: Policy,
    /// The prefill pod's policy: the prefill weights, no fallbacks (the sidecar takes one
    /// address; if it fails, the decode pod prefills itself).
    pub prefill_policy: Policy,
    pub tables: RefCell<RoleTables>,
}

impl PdRouting {
    pub fn new(config: &PdConfig, policy: &Policy) -> Self {
        Self {
            decode_policy: Policy { weights: config.decode_weights.clone(), ..policy.clone() },
            prefill_policy: Policy { weights: config.prefill_weights.clone(), fallbacks: 0, ..policy.clone() },
            config: config.clone(),
            tables: RefCell::new(RoleTables::default()),
        }
    }
}

/// What the decider needs to know about the chosen decode pod and the prompt.
pub struct DecodeChoice<'a> {
    pub request: &'a InferenceRequest<'a>,
    /// The decode pod's matched share of the prompt's hashed blocks.
    pub prefix_match: f64,
    pub hashed_blocks: usize,
    pub block_tokens: usize,
}

/// The prefill pod for this request, or `None` when the decode pod should prefill itself.
pub fn prefill_pick(
    pd: &PdRouting,
    prefix: &PrefixConfig,
    decode: &DecodeChoice<'_>,
    view: RoutingView<'_>,
    prefill_table: &PodTable,
    random: &mut TieBreaker,
) -> Option<Route> {
    let prompt_tokens = estimated_prompt_tokens(decode.request, prefix.bytes_per_token);
    let lacking = uncached_tokens(prompt_tokens, decode.hashed_blocks, decode.prefix_match, decode.block_tokens);
    if prompt_tokens == 0 || lacking < pd.config.threshold_tokens {
        return None;
    }
    let view = RoutingView { table: Some(prefill_table), fallback_pool: &[], ..view };
    let route = choose(&view, &pd.prefill_policy, random).ok()?;
    // A prefill pod with no fresh data is a guess; a decode pod prefilling itself is not.
    (!route.fail_open).then_some(route)
}
