//! Renders `envoy/envoy.yaml.template` (and `envoy/filter-ecds.yaml.template`) for one setup.
//!
//! The template is plain YAML with `{{NAME}}` placeholders and `# BEGIN name` / `# END name`
//! sections (not nested) that a setup keeps or drops. The sections that make up one pool (its
//! singleton, filter, route and cluster) are written once per pool, each copy with that
//! pool's values: one pool by default, named ones where one Envoy serves several
//! ([`EnvoyOptions::pools`], docs/deployment.md "Several pools behind one Envoy"). A line
//! holding nothing but a placeholder that renders empty is left out, so options that one pool
//! does not need leave no trace in its configuration.

use crate::envoy_options::{ClusterMode, EnvoyOptions, Peering, ServedPool};

/// Sections written once per pool.
const PER_POOL: [&str; 7] =
    ["singleton_entry", "inline_filter", "pool_route", "override_host", "original_dst", "peer_route", "peer_filter"];

/// The HTTP filter's name with one pool (Envoy's own name for the Wasm filter).
const SINGLE_POOL_FILTER_NAME: &str = "envoy.filters.http.wasm";

/// The inference listener's `per_connection_buffer_limit_bytes` in the template: also the
/// most Envoy reads from a connection before it hands the bytes on.
pub const LISTENER_BUFFER_BYTES: u64 = 16 << 20;

/// What one read may bring past [`LISTENER_BUFFER_BYTES`]: Envoy checks the limit after each
/// read of the socket (at most 128 KiB each), with room to spare.
pub(crate) const READ_PAST_LIMIT_BYTES: u64 = 1 << 20;

/// A pool route's `request_body_buffer_limit` for a filter that reads bodies up to
/// `max_body_bytes`. While the filter buffers a body, Envoy adds each read of the connection
/// to the buffer before the filter sees it, and answers 413 if that passes the stream's
/// limit: so the limit holds the most the filter buffers plus one whole read.
pub fn request_body_buffer_limit(max_body_bytes: u64) -> u64 {
    max_body_bytes.saturating_add(LISTENER_BUFFER_BYTES).saturating_add(READ_PAST_LIMIT_BYTES)
}

/// The `max_body_bytes` of a filter configuration (the plugin's default when unset).
pub(crate) fn max_body_bytes(filter_config: &serde_json::Value) -> u64 {
    let default = picker::config::FilterConfig::default().max_body_bytes;
    filter_config.get("max_body_bytes").and_then(serde_json::Value::as_u64).unwrap_or(default)
}

/// Returns the name of a `# BEGIN name` / `# END name` marker line.
fn marker<'a>(line: &'a str, kind: &str) -> Option<&'a str> {
    line.trim().strip_prefix("# ")?.strip_prefix(kind)?.strip_prefix(' ')
}

/// Fills the template's placeholders, drops the sections this setup does not use and writes
/// the per-pool sections once per pool.
pub fn render(template: &str, options: &EnvoyOptions) -> String {
    let pools = pool_values(options);
    // Placeholders outside the per-pool sections (the ECDS filter file has no sections)
    // take the first pool's values; the envoy template has none there.
    let first_pool = pools.first().map(|values| &values[..]).unwrap_or(&[]);
    let section_on = |name: &str| match name {
        "singleton" | "singleton_entry" => options.poller_config.is_some() || !options.pools.is_empty(),
        "override_host" => options.cluster_mode == ClusterMode::OverrideHost,
        "original_dst" => options.cluster_mode == ClusterMode::OriginalDst,
        "peers" | "peer_route" | "peer_filter" => options.peering.is_some(),
        "inline_filter" => options.live_filter_dir.is_none(),
        "live_filter" => options.live_filter_dir.is_some(),
        "filters_before_plugin" => !options.filters_before_plugin.is_empty(),
        "access_log" => options.access_log.is_some(),
        _ => true,
    };
    let mut kept = String::with_capacity(template.len());
    let mut section: Option<(&str, Vec<&str>)> = None;
    for line in template.lines() {
        if let Some(name) = marker(line, "BEGIN") {
            section = Some((name, Vec::new()));
            continue;
        }
        if marker(line, "END").is_some() {
            if let Some((name, lines)) = section.take().filter(|(name, _)| section_on(name)) {
                if PER_POOL.contains(&name) {
                    for values in &pools {
                        push_lines(&mut kept, &lines, values);
                    }
                } else {
                    push_lines(&mut kept, &lines, first_pool);
                }
            }
            continue;
        }
        match section.as_mut() {
            Some((_, lines)) => lines.push(line),
            None => push_lines(&mut kept, &[line], first_pool),
        }
    }
    fill_globals(kept, options)
}

/// Appends `lines` with `values` filled in; a line that held only a placeholder and
/// renders empty is left out.
fn push_lines(out: &mut String, lines: &[&str], values: &[(&str, String)]) {
    for line in lines {
        let mut filled = line.to_string();
        for (name, value) in values {
            filled = filled.replace(name, value);
        }
        let only_placeholder = line.trim().starts_with("{{") && line.trim().ends_with("}}");
        if only_placeholder && filled.trim().is_empty() {
            continue;
        }
        out.push_str(&filled);
        out.push('\n');
    }
}

/// Each pool's placeholder values, in the order its sections are written.
fn pool_values(options: &EnvoyOptions) -> Vec<Vec<(&'static str, String)>> {
    if options.pools.is_empty() {
        let single = ServedPool {
            name: String::new(),
            pods: options.pool.clone(),
            route_match: serde_json::json!({ "prefix": "/" }),
            filter_config: options.filter_config.clone(),
            poller_config: options.poller_config.clone().unwrap_or_default(),
        };
        return vec![values_of(&single, false, options.peering.as_ref())];
    }
    options.pools.iter().map(|pool| values_of(pool, true, options.peering.as_ref())).collect()
}

fn values_of(pool: &ServedPool, several: bool, peering: Option<&Peering>) -> Vec<(&'static str, String)> {
    let suffix = if several { format!("-{}", pool.name) } else { String::new() };
    let named = |base: &str| if several { format!("{base}{suffix}") } else { SINGLE_POOL_FILTER_NAME.to_string() };
    let (filter_name, peer_filter_name) = (named("wasm-epp"), named("wasm-epp-peer"));
    let endpoints: Vec<String> = pool
        .pods
        .iter()
        .filter_map(|address| address.rsplit_once(':'))
        .map(|(host, port)| {
            let host = host.trim_start_matches('[').trim_end_matches(']');
            format!("              - endpoint: {{ address: {{ socket_address: {{ address: \"{host}\", port_value: {port} }} }} }}")
        })
        .collect();
    let poller = if pool.poller_config.is_null() { String::new() } else { pool.poller_config.to_string() };
    // The peer listener: each pool's receiver (its own vm_id) under its own path.
    let peer_path = pool.peer_path(several);
    let peer_match = match several {
        true => serde_json::json!({ "path_separated_prefix": peer_path }),
        false => serde_json::json!({ "prefix": "/" }),
    };
    let receiver_name = if several { pool.name.as_str() } else { "" };
    let peer_filter_config =
        peering.map(|p| p.receiver_config(&peer_path, receiver_name).to_string()).unwrap_or_default();
    // With several pools each filter is off unless its pool's route turns it on.
    let disabled = if several { "disabled: true   # on only where its pool's route enables it" } else { "" };
    vec![
        ("{{POOL_SUFFIX}}", suffix),
        ("{{HTTP_FILTER_NAME}}", filter_name.clone()),
        ("{{FILTER_DISABLED}}", disabled.to_string()),
        ("{{ROUTE_ENABLES_FILTER}}", enabled_on_route(several, &filter_name)),
        ("{{ROUTE_MATCH}}", route_match_yaml(&pool.route_match)),
        ("{{REQUEST_BODY_BUFFER_LIMIT}}", request_body_buffer_limit(max_body_bytes(&pool.filter_config)).to_string()),
        ("{{POOL_ENDPOINTS}}", endpoints.join("\n")),
        ("{{FILTER_CONFIG}}", pool.filter_config.to_string()),
        ("{{POLLER_CONFIG}}", poller),
        ("{{PEER_ROUTE_MATCH}}", route_match_yaml(&peer_match)),
        ("{{PEER_ROUTE_ENABLES_FILTER}}", enabled_on_route(several, &peer_filter_name)),
        ("{{PEER_HTTP_FILTER_NAME}}", peer_filter_name),
        ("{{PEER_FILTER_CONFIG}}", peer_filter_config),
    ]
}

/// The route's line that turns `filter` on (with several pools; none with one). Envoy refuses
/// a per-route FilterConfig without `config`; an empty one turns the filter on.
fn enabled_on_route(several: bool, filter: &str) -> String {
    if !several {
        return String::new();
    }
    format!(
        "typed_per_filter_config: {{ {filter}: {{ \"@type\": type.googleapis.com/envoy.config.route.v3.FilterConfig, config: {{}} }} }}"
    )
}

/// The route's `match` on one line: `{ prefix: "/" }` as the template always wrote it,
/// anything else as JSON (which is YAML).
fn route_match_yaml(route_match: &serde_json::Value) -> String {
    if *route_match == serde_json::json!({ "prefix": "/" }) {
        return "{ prefix: \"/\" }".to_string();
    }
    route_match.to_string()
}

/// The placeholders every pool shares.
fn fill_globals(text: String, options: &EnvoyOptions) -> String {
    let peering = options.peering.as_ref();
    let peer_address = peering.map(|p| p.listen_address.clone()).unwrap_or_default();
    let peer_port = peering.map(|p| p.port.to_string()).unwrap_or_default();
    // JSON is YAML: each filter fits on one list line.
    let filters_before: Vec<String> =
        options.filters_before_plugin.iter().map(|filter| format!("                  - {filter}")).collect();
    text.replace("{{FILTERS_BEFORE_PLUGIN}}", &filters_before.join("\n"))
        .replace("{{NUM_RETRIES}}", &pool_route_retries(options.cluster_mode).to_string())
        .replace("{{PER_TRY_IDLE_TIMEOUT}}", &options.per_try_idle_timeout)
        .replace("{{ROUTE_IDLE_TIMEOUT}}", &options.route_idle_timeout)
        .replace("{{ADMIN_ADDRESS}}", &options.admin_address)
        .replace("{{ADMIN_PORT}}", &options.admin_port.to_string())
        .replace("{{LISTEN_ADDRESS}}", &options.listen_address)
        .replace("{{LISTEN_PORT}}", &options.listen_port.to_string())
        .replace("{{FILTER_WASM}}", &options.filter_wasm.display().to_string())
        .replace("{{SINGLETON_WASM}}", &options.singleton_wasm.display().to_string())
        .replace("{{PEER_ADDRESS}}", &peer_address)
        .replace("{{PEER_PORT}}", &peer_port)
        .replace("{{FAILURE_POLICY}}", &options.failure_policy)
        .replace("{{DESTINATION_HEADER}}", &options.destination_header)
        .replace("{{REQUEST_TIMEOUT}}", &options.request_timeout)
        .replace(
            "{{ACCESS_LOG_PATH}}",
            &options.access_log.as_ref().map(|p| p.display().to_string()).unwrap_or_default(),
        )
        .replace("{{MAX_HEAP_BYTES}}", &options.max_heap_bytes.to_string())
        .replace("{{MAX_CONNECTIONS}}", &options.max_connections.to_string())
        .replace("{{ASYNC_RESPONSE_LIMIT_BYTES}}", &options.async_response_limit_bytes.to_string())
        .replace(
            "{{LIVE_FILTER_DIR}}",
            &options.live_filter_dir.as_ref().map(|d| d.display().to_string()).unwrap_or_default(),
        )
}

/// The pool route's `num_retries`. With override_host a retry takes the filter's next
/// choice: the filter's default `fallback_destinations`. An ORIGINAL_DST cluster follows the
/// one address the filter wrote (with `fallback_destinations: 0`), so a retry would go to
/// the same pod: a dead one would cost three connection attempts instead of one.
pub(crate) fn pool_route_retries(mode: ClusterMode) -> u32 {
    match mode {
        ClusterMode::OverrideHost => 2,
        ClusterMode::OriginalDst => 0,
    }
}

/// Fails unless the committed file at `path` (from the workspace root) is a fresh render of
/// the template for `options`; `UPDATE_COMPOSE=1` rewrites it first.
#[cfg(test)]
pub(crate) fn assert_committed_render(path: &str, options: &EnvoyOptions) {
    let template = std::fs::read_to_string(crate::paths::envoy_template()).expect("the template");
    let header = "# GENERATED from envoy/envoy.yaml.template by the launcher crate; do not edit.\n";
    let expected = format!("{header}{}", render(&template, options));
    let path = crate::paths::workspace_root().join(path);
    if std::env::var_os("UPDATE_COMPOSE").is_some() {
        std::fs::write(&path, &expected).expect("writable");
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(committed == expected, "{} is out of step: run UPDATE_COMPOSE=1 cargo test -p launcher", path.display());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envoy_options::{ServedPool, SERVED_ENDPOINT_HEADER};

    fn template() -> String {
        std::fs::read_to_string(crate::paths::envoy_template()).expect("the template")
    }

    #[test]
    fn one_pool_renders_no_trace_of_several() {
        let pods = ["127.0.0.1:8001".to_string()];
        let rendered = render(&template(), &EnvoyOptions::for_pool(&pods, 10_000, 9_901));
        assert!(!rendered.contains("{{"), "a placeholder left: {rendered}");
        for absent in ["disabled: true", "typed_per_filter_config", "pool-", "wasm-epp-singleton-"] {
            assert!(!rendered.contains(absent), "{absent}");
        }
        assert_eq!(rendered.matches("vm_id: wasm-epp ").count() + rendered.matches("vm_id: wasm-epp\n").count(), 2);
        assert!(rendered.contains("- match: { prefix: \"/\" }") && rendered.contains("cluster: pool\n"));
    }

    #[test]
    fn every_pool_route_names_the_pod_that_answered_in_the_header_make_run_points_to() {
        let pods = ["127.0.0.1:8001".to_string()];
        let written = format!("- header: {{ key: {SERVED_ENDPOINT_HEADER}, value: \"%UPSTREAM_REMOTE_ADDRESS%\" }}");
        let one = render(&template(), &EnvoyOptions::for_pool(&pods, 10_000, 9_901));
        assert_eq!(one.matches(&written).count(), 1, "{one}");
        let pools = ["alpha", "beta"].map(|name| ServedPool::by_header(name, &pods, "x-pool"));
        let several = render(&template(), &EnvoyOptions::for_pools(pools.to_vec(), 10_000, 9_901));
        assert_eq!(several.matches(&written).count(), 2, "one per pool route");
    }

    #[test]
    fn each_pool_route_buffers_its_filters_largest_body_and_one_whole_read() {
        let template = template();
        let listener = format!("per_connection_buffer_limit_bytes: {LISTENER_BUFFER_BYTES}\n");
        assert_eq!(template.matches(&listener).count(), 1, "the inference listener reads this much at once");
        let pods = ["127.0.0.1:8001".to_string()];
        let one = render(&template, &EnvoyOptions::for_pool(&pods, 10_000, 9_901));
        assert!(one.contains("request_body_buffer_limit: 22020096\n"), "4 MiB + 16 MiB + 1 MiB: {one}");
        let mut alpha = ServedPool::by_header("alpha", &pods, "x-pool");
        alpha.filter_config["max_body_bytes"] = (64u64 << 20).into();
        let beta = ServedPool::by_header("beta", &pods, "x-pool");
        let several = render(&template, &EnvoyOptions::for_pools(vec![alpha, beta], 10_000, 9_901));
        let limits: Vec<&str> =
            several.lines().filter_map(|l| l.trim().strip_prefix("request_body_buffer_limit: ")).collect();
        assert_eq!(limits, ["84934656", "22020096"], "each pool route from its own filter's max_body_bytes");
    }

    #[test]
    fn an_original_dst_pool_is_not_retried_on_the_address_that_failed() {
        let pods = ["127.0.0.1:8001".to_string()];
        let override_host = EnvoyOptions::for_pool(&pods, 10_000, 9_901);
        let rendered = render(&template(), &override_host);
        assert!(rendered.contains("num_retries: 2\n"), "one retry per fallback the filter writes");
        let original_dst = render(&template(), &override_host.with_original_dst());
        assert!(original_dst.contains("type: ORIGINAL_DST") && original_dst.contains(r#""fallback_destinations":0"#));
        assert!(
            original_dst.contains("num_retries: 0\n") && !original_dst.contains("num_retries: 2"),
            "{original_dst}"
        );
    }

    #[test]
    fn several_pools_each_get_a_singleton_filter_route_and_cluster() {
        let alpha = ServedPool::by_header("alpha", &["127.0.0.1:8001".to_string()], "x-pool");
        let beta = ServedPool::by_header("beta", &["127.0.0.1:8002".to_string()], "x-pool");
        let rendered = render(&template(), &EnvoyOptions::for_pools(vec![alpha, beta], 10_000, 9_901));
        assert!(!rendered.contains("{{"), "a placeholder left: {rendered}");
        for name in ["alpha", "beta"] {
            assert_eq!(rendered.matches(&format!("vm_id: wasm-epp-{name}")).count(), 2, "filter and singleton");
            assert_eq!(rendered.matches(&format!("- name: pool-{name}\n")).count(), 1, "its cluster");
            assert_eq!(rendered.matches(&format!("cluster: pool-{name}\n")).count(), 1, "its route");
            assert!(rendered.contains(&format!("typed_per_filter_config: {{ wasm-epp-{name}: ")));
            assert!(rendered.contains(&format!(r#""pool_name":"{name}""#)));
        }
        assert_eq!(rendered.matches("disabled: true").count(), 2);
        assert!(rendered.contains(r#""exact":"alpha""#) && !rendered.contains("- match: { prefix: \"/\" }"));
    }
}
