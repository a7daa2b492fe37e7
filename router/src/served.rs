//! The served endpoint: which pod actually answered (after Envoy's retries, which may differ
//! from the first pick), reported back to the client in a response header. Envoy's access log
//! can then print it too (`%RESP(x-gateway-destination-endpoint-served)%`, beside
//! `%UPSTREAM_HOST%`).

use wasm_epp_host::Host;

use crate::answer_headers::AnswerHeaders;

/// The header the shipped Envoy configurations have Envoy itself write on the route
/// (`response_headers_to_add`, `%UPSTREAM_REMOTE_ADDRESS%`, overwriting any the pod sent):
/// the inference extension's name for the pod that answered.
pub const ENVOY_SERVED_HEADER: &str = "x-gateway-destination-endpoint-served";

/// The pod that answered: Envoy's own header when the route writes it (one header value of
/// `headers`), else the `upstream.address` attribute (~5 µs per read in Envoy's V8, docs/performance.md).
///
/// `route_writes_header` false (the plugin names the pod itself, `models.served_endpoint_header`,
/// which is for Envoy configurations whose route cannot): the attribute alone. A header of
/// that name is then the pod's own, which nothing overwrites before the plugin reads it, and a
/// pod naming a neighbour in it had its failures, answers and response ids put on the
/// neighbour.
pub fn answering_pod(host: &dyn Host, headers: &AnswerHeaders, route_writes_header: bool) -> Option<Vec<u8>> {
    let header = route_writes_header.then(|| headers.get(ENVOY_SERVED_HEADER)).flatten();
    match header {
        Some(address) if !address.is_empty() => Some(address.into_owned()),
        _ => upstream_address(host),
    }
}

fn upstream_address(host: &dyn Host) -> Option<Vec<u8>> {
    host.property(&["upstream", "address"]).ok().flatten()
}

/// Longest upstream address copied into the header (an `ip:port` is at most 47 bytes).
const MAX_ADDRESS_BYTES: usize = 64;

/// Writes the upstream address Envoy connected to into `header`; nothing if the host does not
/// tell (a local reply has no upstream) or `header` is empty (reporting is off). `known`: the
/// address as [`answering_pod`] read it from the attribute already (one read, not two).
pub fn report_served_endpoint(host: &dyn Host, header: &str, known: Option<&[u8]>) {
    if header.is_empty() {
        return;
    }
    let address = match known {
        Some(address) => Ok(Some(address.to_vec())),
        None => host.property(&["upstream", "address"]),
    };
    match address {
        Ok(Some(address)) if !address.is_empty() && address.len() <= MAX_ADDRESS_BYTES => {
            if let Err(error) = host.set_response_header(header, &address) {
                log::warn!("wasm-epp: cannot set {header}: {error}");
            }
        }
        Ok(_) => {}
        Err(error) => log::debug!("wasm-epp: upstream address unknown: {error}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_epp_host::MockHost;

    #[test]
    fn the_answering_pod_is_reported() {
        let host = MockHost::new();
        host.properties.borrow_mut().insert("upstream\0address".into(), b"10.0.0.7:8000".to_vec());
        report_served_endpoint(&host, "x-served", None);
        assert_eq!(host.response_header("x-served").as_deref(), Some("10.0.0.7:8000"));
        report_served_endpoint(&MockHost::new(), "x-served", None);
    }

    #[test]
    fn the_answering_pod_is_envoys_header_when_the_route_writes_it() {
        let host = MockHost::new();
        host.properties.borrow_mut().insert("upstream\0address".into(), b"10.0.0.7:8000".to_vec());
        let pod = |host: &MockHost, lookups, route_writes| {
            answering_pod(host, &AnswerHeaders::read(host, lookups), route_writes)
        };
        for lookups in [1, 2] {
            host.set_response(&[], b"");
            assert_eq!(pod(&host, lookups, true).as_deref(), Some(&b"10.0.0.7:8000"[..]), "no header: the attribute");
            host.set_response(&[(ENVOY_SERVED_HEADER, "")], b"");
            assert_eq!(pod(&host, lookups, true).as_deref(), Some(&b"10.0.0.7:8000"[..]), "empty: the attribute");
            host.set_response(&[(ENVOY_SERVED_HEADER, "10.0.0.8:8000")], b"");
            assert_eq!(pod(&host, lookups, true).as_deref(), Some(&b"10.0.0.8:8000"[..]), "the header first");
            assert_eq!(pod(&MockHost::new(), lookups, true), None);
            assert_eq!(pod(&host, lookups, false).as_deref(), Some(&b"10.0.0.7:8000"[..]), "the pod's own: not read");
        }
    }
}
