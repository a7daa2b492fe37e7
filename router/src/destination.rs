//! Writing a decision's destination list, and keeping Envoy's retries on it.
//!
//! Envoy's `override_host` policy gives each attempt the next address of the list; once the
//! list is used up, a retry goes to the cluster's fallback policy (least request over every
//! member: `override_host/load_balancer.cc`, `chooseHostInternal`). When the list names every
//! pool member that costs nothing (the balancer tries one of them again). When it leaves
//! members out, the balancer's pod was not chosen: it may serve another model or adapter, be
//! outside the request's subset, be a prefill-only pod, hold no stored response, or be one
//! the filter passed over on purpose (ejected). Measured before this rule: a model served by
//! one pod that answered 500 had every request retried on a pod of another model, and the
//! client got that pod's 404 "model does not exist".
//!
//! So when the list is shorter than `fallback_destinations + 1` (the route's retries, which
//! the shipped configurations set equal) and leaves a pool member out, the filter caps the
//! request's retries at the list with `x-envoy-max-retries`: Envoy's router reads it after the
//! client's copy was removed (the connection manager strips client `x-envoy-*` headers), takes
//! it over the route's `num_retries`, and does not send it upstream.

use wasm_epp_host::{Host, HostResult};

/// Envoy's per-request override of the route's `num_retries`.
pub const MAX_RETRIES_HEADER: &str = "x-envoy-max-retries";

/// The retries to allow a list of `named` pods (the pick and its fallbacks) when `fallbacks`
/// were wanted and the pool has `pool_size` members: `None` (the route's own) when the list
/// is full or names every member.
pub fn retries_cap(named: usize, fallbacks: usize, pool_size: usize) -> Option<u32> {
    let short = named <= fallbacks;
    let leaves_members_out = named < pool_size;
    (short && leaves_members_out).then(|| u32::try_from(named.saturating_sub(1)).unwrap_or(u32::MAX))
}

/// Writes `destination` (`chosen,fallback,...`) into `header`, then the retries cap if any.
/// Only the destination's failure is returned: without the cap, a retry past the list goes
/// where it went before this rule.
pub fn write_destination(host: &dyn Host, header: &str, destination: &str, cap: Option<u32>) -> HostResult<()> {
    host.set_request_header(header, destination.as_bytes())?;
    if let Some(retries) = cap {
        if let Err(error) = host.set_request_header(MAX_RETRIES_HEADER, retries.to_string().as_bytes()) {
            log::warn!("wasm-epp: cannot cap retries at the destination list: {error}");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use wasm_epp_host::MockHost;

    use super::*;

    #[test]
    fn a_full_list_keeps_the_routes_retries() {
        assert_eq!(retries_cap(3, 2, 16), None);
        assert_eq!(retries_cap(1, 0, 16), None, "no fallbacks wanted (ORIGINAL_DST): retries go to the same address");
    }

    #[test]
    fn a_short_list_that_leaves_pool_members_out_caps_the_retries_at_its_runners_up() {
        assert_eq!(retries_cap(1, 2, 3), Some(0), "a model on one pod of three");
        assert_eq!(retries_cap(2, 2, 4), Some(1), "P/D: two decode pods of four");
    }

    #[test]
    fn a_list_naming_every_member_keeps_the_routes_retries() {
        // The balancer past the list can only try a named pod again.
        assert_eq!(retries_cap(1, 2, 1), None, "a pool of one pod");
        assert_eq!(retries_cap(2, 2, 2), None, "a pool of two");
    }

    #[test]
    fn the_cap_is_written_beside_the_destination() {
        let host = MockHost::new();
        write_destination(&host, "x-dest", "10.0.0.1:80", Some(0)).unwrap();
        assert_eq!(host.header("x-dest").as_deref(), Some("10.0.0.1:80"));
        assert_eq!(host.header(MAX_RETRIES_HEADER).as_deref(), Some("0"));
        let host = MockHost::new();
        write_destination(&host, "x-dest", "10.0.0.1:80,10.0.0.2:80,10.0.0.3:80", None).unwrap();
        assert_eq!(host.header(MAX_RETRIES_HEADER), None);
    }
}
