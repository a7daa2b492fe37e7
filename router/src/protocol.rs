//! The Endpoint Picker Protocol's request headers, as llm-d's gateways send them: the
//! objective (a priority by name), the model to send the request as, the session under its
//! other names, and the subset hint
//! (from Envoy's dynamic metadata, where the protocol puts it, else from a header).
//!
//! Envoy gives dynamic metadata to Wasm as a property: the path `metadata`,
//! `filter_metadata`, namespace, key walks the `Metadata` message into its `Struct`, and the
//! value comes back serialized by its type: a string as its bytes, a list as the ABI's pair
//! map with each element as a name and an empty value (Envoy's `serializeValue`).

use picker::address::PodAddress;
use picker::config::FilterConfig;
use picker::pod_table::MAX_PODS;
use wasm_epp_host::{HeaderMap, Host};

/// The request's priority: the priority header's integer, else the priority of the objective
/// an objective header names; `None` when neither says (the model's priority may apply).
pub fn header_priority(headers: &HeaderMap, config: &FilterConfig) -> Option<i64> {
    if let Some(priority) = headers.get_text(&config.priority_header).and_then(|v| v.trim().parse::<i64>().ok()) {
        return Some(priority);
    }
    let objective = config.models.objective_headers.iter().find_map(|name| headers.get_text(name))?;
    config.models.objectives.get(objective.trim()).copied()
}

/// The model a gateway asked the request be sent as (`models.rewrite_headers`, llm-d's
/// `x-llm-d-model-name-rewrite`): the first header present, trimmed; none when it is empty or
/// longer than any model name a pod reports.
pub fn rewrite_target(headers: &HeaderMap, config: &FilterConfig) -> Option<String> {
    // The first name present decides, as for the fairness header: a value that is not text
    // there is no rewrite, whatever an alias says.
    let value = config.models.rewrite_headers.iter().find_map(|name| headers.get(name))?;
    let value = std::str::from_utf8(value).ok()?.trim();
    let fits = !value.is_empty() && value.len() <= picker::metrics_text::MAX_ADAPTER_NAME_BYTES;
    fits.then(|| value.to_owned())
}

/// The client's TTFT objective in ms (learning on): `learning.slo_header`, else its aliases
/// (llm-d's old `x-slo-ttft-ms`).
pub fn slo_ttft_ms(headers: &HeaderMap, config: &FilterConfig) -> Option<f64> {
    let learning = &config.learning;
    if !learning.enabled || learning.slo_header.is_empty() {
        return None;
    }
    let value = first_present(headers, &learning.slo_header, &learning.slo_header_aliases)?;
    std::str::from_utf8(value).ok()?.trim().parse::<f64>().ok().filter(|ms| ms.is_finite() && *ms > 0.0)
}

/// The session id: the configured session header, else its aliases (`x-session-token`).
pub fn session_value<'h>(headers: &'h HeaderMap, config: &FilterConfig) -> Option<&'h [u8]> {
    first_present(headers, &config.prefix.session_header, &config.models.session_header_aliases)
}

/// The value of `name`, else of the first of its `aliases` present. As llm-d reads its
/// headers, the first name present decides, whatever its value.
pub fn first_present<'h>(headers: &'h HeaderMap, name: &str, aliases: &[String]) -> Option<&'h [u8]> {
    std::iter::once(name).chain(aliases.iter().map(String::as_str)).find_map(|name| headers.get(name))
}

/// The subset hint: from Envoy's dynamic metadata when a filter before this one set it (the
/// protocol's place, out of clients' reach), else from the subset header. `None`: no hint.
/// A hint whose entries are all unreadable is an empty hint (503), never no hint: the gateway
/// meant to restrict the pick, so it must not widen to the whole pool.
/// Sorted, so the pick searches it rather than walking it once per pod.
pub fn subset_hint(host: &dyn Host, headers: &HeaderMap, config: &FilterConfig) -> Option<Vec<PodAddress>> {
    let mut subset = metadata_subset(host, config).or_else(|| header_subset(headers, config))?;
    subset.sort_unstable();
    Some(subset)
}

/// The hint in the configured metadata namespace and key, if present.
fn metadata_subset(host: &dyn Host, config: &FilterConfig) -> Option<Vec<PodAddress>> {
    let models = &config.models;
    if models.subset_metadata_namespace.is_empty() {
        return None;
    }
    let path = ["metadata", "filter_metadata", &models.subset_metadata_namespace, &models.subset_metadata_key];
    match host.property(&path) {
        Ok(Some(value)) => Some(parse_metadata_subset(&value)),
        Ok(None) => None,
        Err(error) => {
            log::warn!("wasm-epp: subset hint metadata unreadable, no pod allowed: {error}");
            Some(Vec::new())
        }
    }
}

/// A metadata value: a list (the ABI's pair map, elements as names) or one comma-separated
/// string. Text never parses as a pair map: its first four bytes, read as the map's count,
/// are far above any count the parser accepts.
pub fn parse_metadata_subset(value: &[u8]) -> Vec<PodAddress> {
    if let Some(list) = HeaderMap::parse(value) {
        return list
            .iter()
            .take(MAX_PODS)
            .filter_map(|(entry, _)| std::str::from_utf8(entry).ok())
            .filter_map(|entry| PodAddress::parse(entry.trim()).ok())
            .collect();
    }
    std::str::from_utf8(value).map_or_else(|_| Vec::new(), parse_list)
}

/// The hint in the subset header (`ip:port`, comma-separated), if present.
fn header_subset(headers: &HeaderMap, config: &FilterConfig) -> Option<Vec<PodAddress>> {
    let name = config.models.subset_header.as_str();
    if name.is_empty() {
        return None;
    }
    headers.get_text(name).map(parse_list)
}

/// Endpoints listed `ip:port`, comma-separated, bounded by the pool's own bound; entries
/// that are not literal addresses are skipped.
fn parse_list(value: &str) -> Vec<PodAddress> {
    value.split(',').take(MAX_PODS).filter_map(|entry| PodAddress::parse(entry.trim()).ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_epp_host::headers::serialize;
    use wasm_epp_host::MockHost;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        HeaderMap::from_pairs(pairs)
    }

    #[test]
    fn the_ttft_objective_is_read_under_its_old_name_too_with_learning_on() {
        let mut config = FilterConfig::default();
        let slo = |config: &FilterConfig, pairs: &[(&str, &str)]| slo_ttft_ms(&headers(pairs), config);
        assert_eq!(slo(&config, &[("x-llm-d-slo-ttft-ms", "500")]), None, "learning off: not read");
        config.learning.enabled = true;
        assert_eq!(slo(&config, &[("x-llm-d-slo-ttft-ms", " 500 ")]), Some(500.0));
        assert_eq!(slo(&config, &[("x-slo-ttft-ms", "800")]), Some(800.0));
        assert_eq!(slo(&config, &[("x-slo-ttft-ms", "800"), ("x-llm-d-slo-ttft-ms", "500")]), Some(500.0));
        for bad in ["soon", "NaN", "-5", "0", "inf"] {
            assert_eq!(slo(&config, &[("x-llm-d-slo-ttft-ms", bad)]), None, "{bad}");
        }
    }

    #[test]
    fn the_rewrite_target_is_the_first_rewrite_header_present_trimmed() {
        let config = FilterConfig::default();
        let target = |pairs: &[(&str, &str)]| rewrite_target(&headers(pairs), &config);
        assert_eq!(target(&[("x-gateway-model-name-rewrite", " b ")]).as_deref(), Some("b"));
        assert_eq!(
            target(&[("x-gateway-model-name-rewrite", "b"), ("x-llm-d-model-name-rewrite", "a")]).as_deref(),
            Some("a")
        );
        assert_eq!(target(&[("x-llm-d-model-name-rewrite", " ")]), None);
        assert_eq!(target(&[("x-llm-d-model-name-rewrite", &"m".repeat(300))]), None, "longer than any model name");
        assert_eq!(target(&[]), None);
    }

    #[test]
    fn priority_comes_from_the_header_or_the_objective() {
        let mut config = FilterConfig::default();
        config.models.objectives.insert("batch".into(), -1);
        let by_objective = headers(&[("x-llm-d-inference-objective", "batch")]);
        assert_eq!(header_priority(&by_objective, &config), Some(-1));
        let both = headers(&[("x-gateway-inference-objective", "batch"), ("x-gateway-inference-priority", "3")]);
        assert_eq!(header_priority(&both, &config), Some(3), "an explicit priority wins");
        assert_eq!(header_priority(&headers(&[]), &config), None);
    }

    #[test]
    fn session_aliases_and_subsets_are_read() {
        let config = metadata_config();
        let token = headers(&[("x-session-token", "abc")]);
        assert_eq!(session_value(&token, &config), Some(&b"abc"[..]));
        let host = MockHost::new();
        let hint = headers(&[("x-gateway-destination-endpoint-subset", "10.0.0.2:80, bad, 10.0.0.1:80")]);
        let subset = subset_hint(&host, &hint, &config).unwrap();
        assert_eq!(addresses(&subset), ["10.0.0.1:80", "10.0.0.2:80"], "sorted, for the pick's search");
        assert!(subset_hint(&host, &headers(&[]), &config).is_none());
    }

    const METADATA_PATH: &str =
        "metadata\0filter_metadata\0envoy.lb.subset_hint\0x-gateway-destination-endpoint-subset";

    fn with_metadata(value: &[u8]) -> MockHost {
        let host = MockHost::new();
        host.properties.borrow_mut().insert(METADATA_PATH.into(), value.to_vec());
        host
    }

    /// The defaults with the metadata hint read (off by default) from the protocol's namespace.
    fn metadata_config() -> FilterConfig {
        let mut config = FilterConfig::default();
        config.models.subset_metadata_namespace = "envoy.lb.subset_hint".into();
        config
    }

    fn addresses(list: &[PodAddress]) -> Vec<&str> {
        list.iter().map(PodAddress::as_str).collect()
    }

    #[test]
    fn the_metadata_hint_is_read_as_a_list_or_a_string_and_wins_over_the_header() {
        let config = metadata_config();
        let header = headers(&[("x-gateway-destination-endpoint-subset", "10.0.0.9:80")]);
        // A list, as Envoy serializes a `ListValue`: each element a name with an empty value.
        let list = with_metadata(&serialize(&[("10.0.0.1:80", ""), ("10.0.0.2:80", "")]));
        let subset = subset_hint(&list, &header, &config).unwrap();
        assert_eq!(addresses(&subset), ["10.0.0.1:80", "10.0.0.2:80"], "the metadata wins over the header");
        let text = with_metadata(b"10.0.0.3:80,10.0.0.4:80");
        assert_eq!(addresses(&subset_hint(&text, &headers(&[]), &config).unwrap()), ["10.0.0.3:80", "10.0.0.4:80"]);
        let mut off = metadata_config();
        off.models.subset_metadata_namespace.clear();
        assert_eq!(addresses(&subset_hint(&list, &header, &off).unwrap()), ["10.0.0.9:80"], "metadata off: header");
    }

    #[test]
    fn an_unreadable_metadata_hint_allows_no_pod_rather_than_every_pod() {
        let config = metadata_config();
        // A number (Envoy serializes a double as its 8 bytes) and an empty list.
        for value in [&1.5f64.to_le_bytes()[..], &serialize(&[])[..]] {
            let subset = subset_hint(&with_metadata(value), &headers(&[]), &config);
            assert_eq!(subset.as_deref(), Some(&[][..]), "{value:?}");
        }
        assert!(parse_metadata_subset(&[0xff, 0xfe]).is_empty());
    }
}
