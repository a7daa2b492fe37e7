//! Writing a decision's destination list, and keeping Envoy's retries on it.
//!
//! Envoy's `override_host` policy gives each attempt the next address of the list; once the
//! list is used up, a retry goes to the cluster's fallback policy (least request over every
//! member: `override_host/load_balancer.cc`, `chooseHostInternal`). That balancer knows no
//! models, subsets, roles or stored responses. When every pool member may serve the request,
//! its pick is acceptable (a pod the filter passed over for load or for failing is worth a
//! last try); when some may not (another model or adapter, outside the request's subset, a
//! prefill-only pod, any pod but a stored response's), it may be one of those. Measured before
//! this rule: a model served by one pod that answered 500 had every request retried on a pod
//! of another model, and the client got that pod's 404 "model does not exist".
//!
//! So when the list is shorter than `fallback_destinations + 1` (the route's retries, which
//! the shipped configurations set equal) and fewer pods may serve the request than the pool
//! has, the filter caps the request's retries at the list with `x-envoy-max-retries`: Envoy's
//! router reads it after the client's copy was removed (the connection manager strips client
//! `x-envoy-*` headers), takes it over the route's `num_retries`, and does not send it
//! upstream.

use wasm_epp_host::{Host, HostResult};

/// Envoy's per-request override of the route's `num_retries`.
pub const MAX_RETRIES_HEADER: &str = "x-envoy-max-retries";

/// The retries to allow a list of `named` pods (the pick and its fallbacks) when `fallbacks`
/// were wanted, `may_serve` pods may take the request and the pool has `pool_size`: `None`
/// (the route's own) when the list is full or any pool member may serve it.
pub fn retries_cap(named: usize, fallbacks: usize, may_serve: usize, pool_size: usize) -> Option<u32> {
    let short = named <= fallbacks;
    let members_may_not_serve = may_serve < pool_size;
    (short && members_may_not_serve).then(|| u32::try_from(named.saturating_sub(1)).unwrap_or(u32::MAX))
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
        assert_eq!(retries_cap(3, 2, 3, 16), None);
        assert_eq!(
            retries_cap(1, 0, 1, 16),
            None,
            "no fallbacks wanted (ORIGINAL_DST): retries go to the same address"
        );
    }

    #[test]
    fn a_short_list_of_a_request_some_members_may_not_serve_caps_the_retries_at_its_runners_up() {
        assert_eq!(retries_cap(1, 2, 1, 3), Some(0), "a model on one pod of three");
        assert_eq!(retries_cap(2, 2, 2, 4), Some(1), "P/D: two decode pods of four");
        assert_eq!(retries_cap(1, 2, 2, 3), Some(0), "its model's other pod ejected, the third another model's");
    }

    #[test]
    fn a_short_list_of_a_request_any_member_may_serve_keeps_the_routes_retries() {
        // The balancer past the list picks a pod that may serve it (passed over, not wrong).
        assert_eq!(retries_cap(1, 2, 1, 1), None, "a pool of one pod");
        assert_eq!(retries_cap(1, 2, 2, 2), None, "a pool of two, one ejected");
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
