//! One feature of wasm-epp's shipped Envoy configuration left out of a rendered
//! configuration, to price each feature alone (issue 17, round three: the body-reading filter
//! in the shipped template, less one feature at a time).

/// A feature of `envoy/envoy.yaml.template` that the bisection can leave out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feature {
    /// The overload manager (heap and connection monitors, buffer accounting).
    Overload,
    /// The header_mutation filter stripping client destination headers.
    HeaderMutation,
    /// The route's retry policy (previous_hosts predicate, retries to the fallbacks).
    Retries,
    /// Only the retry policy's previous_hosts predicate and its reselection attempts.
    PreviousHosts,
    /// Envoy writing `x-gateway-destination-endpoint-served` (`response_headers_to_add`).
    ServedHeader,
    /// The stats tag rules for the plugin's labelled stats.
    StatsTags,
    /// The connection manager's request, header and idle timeouts.
    Timeouts,
    /// `use_remote_address`, `xff_num_trusted_hops`, `internal_address_config`.
    RemoteAddress,
    /// The OpenAI-shaped local replies.
    LocalReply,
}

impl Feature {
    pub const ALL: [Feature; 9] = [
        Feature::Overload,
        Feature::HeaderMutation,
        Feature::Retries,
        Feature::PreviousHosts,
        Feature::ServedHeader,
        Feature::StatsTags,
        Feature::Timeouts,
        Feature::RemoteAddress,
        Feature::LocalReply,
    ];

    /// The lines that open what is left out: each is dropped with every more indented line
    /// after it (its YAML block).
    fn openings(self) -> &'static [&'static str] {
        match self {
            Feature::Overload => &["overload_manager:"],
            Feature::HeaderMutation => &["- name: envoy.filters.http.header_mutation"],
            Feature::Retries => &["retry_policy:"],
            Feature::PreviousHosts => &["retry_host_predicate:", "host_selection_retry_max_attempts:"],
            Feature::ServedHeader => &["response_headers_to_add:"],
            Feature::StatsTags => &["stats_config:"],
            Feature::Timeouts => &["request_timeout:", "request_headers_timeout:", "stream_idle_timeout:"],
            Feature::RemoteAddress => &["use_remote_address:", "xff_num_trusted_hops:", "internal_address_config:"],
            Feature::LocalReply => &["local_reply_config:"],
        }
    }
}

fn indent(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// `config` without `feature`'s blocks.
pub fn without(config: &str, feature: Feature) -> String {
    let mut kept = String::with_capacity(config.len());
    // The indent of the block being dropped, while inside one.
    let mut dropping: Option<usize> = None;
    for line in config.lines() {
        if let Some(depth) = dropping {
            if line.trim().is_empty() || indent(line) > depth {
                continue;
            }
            dropping = None;
        }
        let text = line.trim_start();
        if feature.openings().iter().any(|opening| text.starts_with(opening)) {
            dropping = Some(indent(line));
            continue;
        }
        kept.push_str(line);
        kept.push('\n');
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = "\
overload_manager:
  refresh_interval: 0.25s
  actions:
    - name: x

static_resources:
  filters:
    - name: envoy.filters.http.header_mutation
      typed_config:
        mutations: []
    - name: envoy.filters.http.router
  route:
    cluster: pool
    retry_policy:
      num_retries: 2
    timeout: 600s
";

    #[test]
    fn a_feature_goes_with_its_block_and_nothing_else() {
        let cut = without(CONFIG, Feature::Overload);
        assert!(cut.starts_with("static_resources:") && cut.contains("header_mutation"), "{cut}");
        let cut = without(CONFIG, Feature::HeaderMutation);
        assert!(!cut.contains("mutations") && cut.contains("- name: envoy.filters.http.router"), "{cut}");
        let cut = without(CONFIG, Feature::Retries);
        assert!(!cut.contains("num_retries") && cut.contains("    timeout: 600s"), "{cut}");
        assert_eq!(without(CONFIG, Feature::LocalReply), CONFIG);
    }
}
