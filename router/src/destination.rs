//! Writing a decision's destination list, and keeping Envoy's retries on it.
//!
//! Envoy's `override_host` policy gives each attempt the next address of the list; once the
//! list is used up, a retry goes to the cluster's fallback policy (least request over every
//! member: `override_host/load_balancer.cc`, `chooseHostInternal`). That pod was not chosen:
//! it may serve another model or adapter, be outside the request's subset, be a prefill-only
//! pod, or be one the filter left out on purpose (ejected, a suspect). Measured before this
//! rule: a model served by one pod that answered 500 had every request retried on a pod of
//! another model, and the client got that pod's 404 "model does not exist".
//!
//! So when the list names fewer pods than `fallback_destinations + 1` (the route's retries,
//! which the shipped configurations set equal), the filter caps the request's retries at the
//! list with `x-envoy-max-retries`: Envoy's router reads it after the client's copy was
//! removed (the connection manager strips client `x-envoy-*` headers), takes it over the
//! route's `num_retries`, and does not send it upstream. A full list writes nothing.

use wasm_epp_host::{Host, HostResult};

/// Envoy's per-request override of the route's `num_retries`.
pub const MAX_RETRIES_HEADER: &str = "x-envoy-max-retries";

/// Writes `destination` (`chosen,fallback,...`) into `header`, then caps the retries at the
/// list when it is shorter than `fallbacks` runners-up. Only the destination's failure is
/// returned: without the cap, a retry past the list goes where it went before this rule.
pub fn write_destination(host: &dyn Host, header: &str, destination: &str, fallbacks: u32) -> HostResult<()> {
    host.set_request_header(header, destination.as_bytes())?;
    if let Some(retries) = retries_within(destination, fallbacks) {
        if let Err(error) = host.set_request_header(MAX_RETRIES_HEADER, retries.to_string().as_bytes()) {
            log::warn!("wasm-epp: cannot cap retries at the destination list: {error}");
        }
    }
    Ok(())
}

/// The retries that stay on the list's pods, when that is fewer than `fallbacks`.
fn retries_within(destination: &str, fallbacks: u32) -> Option<u32> {
    let runners_up = u32::try_from(destination.bytes().filter(|&b| b == b',').count()).unwrap_or(u32::MAX);
    (runners_up < fallbacks).then_some(runners_up)
}

#[cfg(test)]
mod tests {
    use wasm_epp_host::MockHost;

    use super::*;

    #[test]
    fn a_full_list_leaves_the_routes_retries_alone() {
        let host = MockHost::new();
        write_destination(&host, "x-dest", "10.0.0.1:80,10.0.0.2:80,10.0.0.3:80", 2).unwrap();
        assert_eq!(host.header("x-dest").as_deref(), Some("10.0.0.1:80,10.0.0.2:80,10.0.0.3:80"));
        assert_eq!(host.header(MAX_RETRIES_HEADER), None);
    }

    #[test]
    fn a_short_list_caps_the_retries_at_its_runners_up() {
        let host = MockHost::new();
        write_destination(&host, "x-dest", "10.0.0.1:80", 2).unwrap();
        assert_eq!(host.header(MAX_RETRIES_HEADER).as_deref(), Some("0"));
        write_destination(&host, "x-dest", "10.0.0.1:80,10.0.0.2:80", 2).unwrap();
        assert_eq!(host.header(MAX_RETRIES_HEADER).as_deref(), Some("1"));
    }

    #[test]
    fn no_fallbacks_configured_writes_no_cap() {
        // ORIGINAL_DST pools: one address, retries go to it again whatever the count.
        let host = MockHost::new();
        write_destination(&host, "x-dest", "10.0.0.1:80", 0).unwrap();
        assert_eq!(host.header(MAX_RETRIES_HEADER), None);
    }
}
