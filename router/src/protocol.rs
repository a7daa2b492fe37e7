//! The Endpoint Picker Protocol's request headers, as llm-d's gateways send them: the
//! objective (a priority by name), the session under its other names, and the subset hint.

use picker::address::PodAddress;
use picker::config::FilterConfig;
use picker::pod_table::MAX_PODS;
use wasm_epp_host::HeaderMap;

/// The request's priority: the priority header's integer, else the priority of the objective
/// an objective header names; `None` when neither says (the model's priority may apply).
pub fn header_priority(headers: &HeaderMap, config: &FilterConfig) -> Option<i64> {
    if let Some(priority) = headers.get_text(&config.priority_header).and_then(|v| v.trim().parse::<i64>().ok()) {
        return Some(priority);
    }
    let objective = config.models.objective_headers.iter().find_map(|name| headers.get_text(name))?;
    config.models.objectives.get(objective.trim()).copied()
}

/// The session id: the configured session header, else its aliases (`x-session-token`).
pub fn session_value<'h>(headers: &'h HeaderMap, config: &FilterConfig) -> Option<&'h [u8]> {
    let aliases = config.models.session_header_aliases.iter().map(String::as_str);
    std::iter::once(config.prefix.session_header.as_str()).chain(aliases).find_map(|name| headers.get(name))
}

/// The subset hint: the endpoints listed (`ip:port`, comma-separated), bounded by the pool's
/// own bound; entries that are not literal addresses are skipped. `None` without the header.
pub fn subset_hint(headers: &HeaderMap, config: &FilterConfig) -> Option<Vec<PodAddress>> {
    let name = config.models.subset_header.as_str();
    if name.is_empty() {
        return None;
    }
    let value = headers.get_text(name)?;
    Some(value.split(',').take(MAX_PODS).filter_map(|entry| PodAddress::parse(entry.trim()).ok()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        HeaderMap::from_pairs(pairs)
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
        let config = FilterConfig::default();
        let token = headers(&[("x-session-token", "abc")]);
        assert_eq!(session_value(&token, &config), Some(&b"abc"[..]));
        let hint = headers(&[("x-gateway-destination-endpoint-subset", "10.0.0.1:80, bad, 10.0.0.2:80")]);
        let subset = subset_hint(&hint, &config).unwrap();
        assert_eq!(subset.len(), 2);
        assert!(subset_hint(&headers(&[]), &config).is_none());
    }
}
