//! What differs between one local Envoy and another: the values `envoy/envoy.yaml.template`
//! is rendered with, and the shipped defaults of its bounds and failure policy.

use std::path::PathBuf;

use crate::render::{LISTENER_BUFFER_BYTES, READ_PAST_LIMIT_BYTES};

/// How the `pool` cluster follows the filter's choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClusterMode {
    /// A STATIC cluster of the pool with the override_host policy (the default).
    OverrideHost,
    /// An ORIGINAL_DST cluster that connects to whatever the header names.
    OriginalDst,
}

/// Everything that differs between one local Envoy and another.
#[derive(Debug, Clone)]
pub struct EnvoyOptions {
    pub admin_address: String,
    pub cluster_mode: ClusterMode,
    /// The pool's pods, for the override_host cluster's endpoints.
    pub pool: Vec<String>,
    /// Several pools behind this one Envoy, each with its own singleton, filter, cluster
    /// and route ([`EnvoyOptions::for_pools`]); empty (the default) serves the one pool of
    /// `pool`, `filter_config` and `poller_config`.
    pub pools: Vec<ServedPool>,
    pub listen_address: String,
    pub listen_port: u16,
    pub admin_port: u16,
    /// The filter's JSON configuration (see docs/configuration.md).
    pub filter_config: serde_json::Value,
    /// The singleton's JSON configuration; `None` runs Envoy without the singleton.
    pub poller_config: Option<serde_json::Value>,
    /// Envoy duration string for the route's `per_try_idle_timeout` (`0s` = off).
    pub per_try_idle_timeout: String,
    /// Envoy duration string for the pool routes' stream idle timeout (`idle_timeout`):
    /// a stream with no byte either way this long is ended (flags `SI`).
    pub route_idle_timeout: String,
    /// Worker threads; 2 exercises the cross-worker paths on every machine.
    pub concurrency: u32,
    pub filter_wasm: PathBuf,
    pub singleton_wasm: PathBuf,
    /// The filter's `failure_policy` (`FAIL_RELOAD`, `FAIL_CLOSED`, `FAIL_OPEN`).
    pub failure_policy: String,
    /// The header the filter writes and the `pool` cluster follows (the filter's
    /// `destination_header`; set both with [`EnvoyOptions::with_destination_header`]).
    pub destination_header: String,
    /// Envoy duration string: the whole request must arrive within it.
    pub request_timeout: String,
    /// The overload manager's fixed heap size (its actions trigger at 85-98 % of it).
    pub max_heap_bytes: u64,
    /// Downstream connections open at once, over all listeners.
    pub max_connections: u64,
    /// `http.async_response_buffer_limit`: the most a scrape's answer may buffer in Envoy.
    pub async_response_limit_bytes: u64,
    /// The internal peer listener and cluster of a replica that shares its decisions
    /// (docs/design.md, "Several gateway replicas"); `None` leaves them out.
    pub peering: Option<Peering>,
    /// The filter's configuration from this watched folder (ECDS) instead of inline, so it
    /// can be replaced while Envoy runs (`crate::live_config`).
    pub live_filter_dir: Option<PathBuf>,
    /// HTTP filters run before the plugin on the inference listener, each an Envoy
    /// `HttpFilter` as JSON (e.g. a Lua filter setting the dynamic metadata a gateway would).
    pub filters_before_plugin: Vec<serde_json::Value>,
    /// More command-line arguments for Envoy (e.g. `--drain-strategy immediate`, as the
    /// Kubernetes manifests run it).
    pub extra_args: Vec<String>,
    /// Where Envoy writes a JSON line per inference request (the template's `access_log`
    /// section; `/dev/stdout` in a container): none for tests and benchmarks, a file for
    /// `make run`, stdout for compose.
    pub access_log: Option<PathBuf>,
}

/// One of several pools served by one Envoy (docs/deployment.md, "Several pools behind one
/// Envoy"): its filter and singleton share `vm_id` `wasm-epp-<name>`, its cluster is
/// `pool-<name>`, and its route (first match wins, in the order given) runs its filter alone.
#[derive(Debug, Clone)]
pub struct ServedPool {
    /// A DNS label: the stats' `pool` label and part of every name above.
    pub name: String,
    /// The pool's pods, for its cluster's endpoints.
    pub pods: Vec<String>,
    /// The route's `match` (Envoy's RouteMatch as JSON), e.g. a header the client sets.
    pub route_match: serde_json::Value,
    pub filter_config: serde_json::Value,
    pub poller_config: serde_json::Value,
}

impl ServedPool {
    /// Where this pool's peer messages go on the peer listener: the default path with one
    /// pool, `<default>/<name>` with several (each pool's receiver has its own route).
    pub fn peer_path(&self, several: bool) -> String {
        if several {
            format!("{DEFAULT_PEER_PATH}/{}", self.name)
        } else {
            DEFAULT_PEER_PATH.to_string()
        }
    }

    /// The pool `name` of `pods` on the route matching `route_match`, its filter and
    /// singleton configured with `filter_config` and `poller_config` (JSON objects), each
    /// told the pool's name (`pool_name`) for its stats.
    pub fn new(
        name: &str,
        pods: &[String],
        route_match: serde_json::Value,
        filter_config: serde_json::Value,
        poller_config: serde_json::Value,
    ) -> Self {
        let named = |mut config: serde_json::Value| {
            if let Some(fields) = config.as_object_mut() {
                fields.insert("pool_name".into(), name.into());
            }
            config
        };
        Self {
            name: name.to_string(),
            pods: pods.to_vec(),
            route_match,
            filter_config: named(filter_config),
            poller_config: named(poller_config),
        }
    }

    /// A pool of static pods whose route matches requests carrying `header: name`.
    pub fn by_header(name: &str, pods: &[String], header: &str) -> Self {
        let route_match = serde_json::json!({
            "prefix": "/",
            "headers": [{ "name": header, "string_match": { "exact": name } }]
        });
        let filter = serde_json::json!({ "pool": pods });
        Self::new(name, pods, route_match, filter, serde_json::json!({ "pool": pods, "poll_interval_ms": 100 }))
    }
}

/// One replica's side of peering: where its peer listener listens and what it shares.
#[derive(Debug, Clone)]
pub struct Peering {
    pub listen_address: String,
    pub port: u16,
    /// Shared by every replica (at least 16 visible ASCII characters).
    pub secret: String,
    /// The other replicas' peer listeners (`ip:port`); this one may be listed too.
    pub peers: Vec<String>,
}

impl Peering {
    /// The `peer_receiver` filter configuration of the peer listener, taking messages posted
    /// to `path` for the pool named `pool_name` (empty with one pool: no stats label).
    pub fn receiver_config(&self, path: &str, pool_name: &str) -> serde_json::Value {
        let mut config = serde_json::json!({ "peer_receiver": { "secret": self.secret, "path": path } });
        if let Some(fields) = config.as_object_mut().filter(|_| !pool_name.is_empty()) {
            fields.insert("pool_name".into(), pool_name.into());
        }
        config
    }

    /// The singleton's `peers` section, posting to `path` on every peer.
    pub fn singleton_section(&self, path: &str) -> serde_json::Value {
        serde_json::json!({ "peers": self.peers, "secret": self.secret, "path": path })
    }
}

/// Where peer messages are posted (the plugin's default `peer_receiver.path`).
pub const DEFAULT_PEER_PATH: &str = "/wasm-epp/v1/peer";

/// The shipped bounds (docs/configuration.md, "Resource bounds").
pub const DEFAULT_REQUEST_TIMEOUT: &str = "60s";
/// The pool routes' `timeout` (600 s) plus `request_timeout`: the idle timer never fires
/// before the route's timeout on a non-streamed answer, which sends nothing until it is done.
pub const DEFAULT_ROUTE_IDLE_TIMEOUT: &str = "660s";
/// 1 GiB of Envoy heap (buffers, headers, connections) before overload actions start.
pub const DEFAULT_MAX_HEAP_BYTES: u64 = 1 << 30;
/// Enough for 256 slow clients many times over; each costs tens of KB when idle.
pub const DEFAULT_MAX_CONNECTIONS: u64 = 10_000;
/// The singleton's default `max_metrics_bytes` (4 MiB): a larger /metrics answer is cut
/// by Envoy while it streams in, not after it has been buffered whole.
pub const DEFAULT_ASYNC_RESPONSE_LIMIT_BYTES: u64 = 4 << 20;
/// The failure policy the shipped configurations use (docs/configuration.md).
pub const DEFAULT_FAILURE_POLICY: &str = "FAIL_RELOAD";
/// The filter's default `destination_header`.
pub const DEFAULT_DESTINATION_HEADER: &str = "x-gateway-destination-endpoint";

impl EnvoyOptions {
    /// Whether this Envoy's inference listener serves a filter of `config` as the filter
    /// means: it takes every body the filter buffers ([`listener_takes_bodies_of`]), and its
    /// `request_timeout`, which runs while flow control holds a request, outlasts the queue's
    /// TTLs (else Envoy answers 408 before the TTL's 429). The reason, naming the field, if not.
    pub fn serves_filter(&self, config: &serde_json::Value) -> Result<(), String> {
        listener_takes_bodies_of(config)?;
        // The pool route retries on the filter's list: past its end Envoy's fallback policy
        // picks any pod, of any model (configuration.md, the route's retries).
        let retries = crate::render::pool_route_retries(self.cluster_mode);
        let fallbacks = config.get("fallback_destinations").and_then(serde_json::Value::as_u64).unwrap_or(2);
        if fallbacks < u64::from(retries) {
            return Err(format!(
                "fallback_destinations = {fallbacks}: the pool route here retries {retries} times \
                 (envoy/envoy.yaml.template), so retries past the filter's list would go to any pod, of any \
                 model (a 404 from another model's pod); keep it at least {retries}"
            ));
        }
        let flow = &config["flow_control"];
        let Some(timeout_ms) = picker::go_duration::positive_duration_ms(&self.request_timeout) else { return Ok(()) };
        if flow["enabled"].as_bool() != Some(true) {
            return Ok(());
        }
        for (field, default) in [("ttl_ms", 30_000), ("sheddable_ttl_ms", 5_000)] {
            let ttl = flow[field].as_u64().unwrap_or(default);
            if ttl >= timeout_ms {
                return Err(format!(
                    "flow_control.{field} = {ttl}: Envoy's request_timeout here is {} and runs while a request \
                     waits, so it would answer 408 first; keep the TTL below it",
                    self.request_timeout
                ));
            }
        }
        Ok(())
    }
}

/// Whether the template's listener takes every body a filter of `config` buffers; the reason
/// (naming `max_body_bytes`) when it does not.
pub fn listener_takes_bodies_of(config: &serde_json::Value) -> Result<(), String> {
    let Some(max_body_bytes) = config.get("max_body_bytes").and_then(serde_json::Value::as_u64) else {
        return Ok(()); // the plugin's 4 MiB, or a value the plugin refuses with its own words
    };
    // A body the filter buffers (up to max_body_bytes, and the read that carries it past)
    // must fit the listener's buffer, which is the stream's before Envoy 1.37.
    let most = LISTENER_BUFFER_BYTES - READ_PAST_LIMIT_BYTES;
    if max_body_bytes > most {
        return Err(format!(
            "max_body_bytes = {max_body_bytes}: Envoy's inference listener here buffers {LISTENER_BUFFER_BYTES} bytes \
             per connection (envoy/envoy.yaml.template), so bodies past it would be answered 413 instead of routed; \
             at most {most}"
        ));
    }
    Ok(())
}
/// The response header naming the pod that answered (after any retry), which every pool
/// route of the template has Envoy write (the inference extension's name for it). Real vLLM
/// pods send no header of their own; the simulator's `x-served-by` says the same.
pub const SERVED_ENDPOINT_HEADER: &str = "x-gateway-destination-endpoint-served";

impl EnvoyOptions {
    /// A setup where both the filter and the singleton know `pool` statically.
    pub fn for_pool(pool: &[String], listen_port: u16, admin_port: u16) -> Self {
        Self {
            admin_address: "127.0.0.1".into(),
            cluster_mode: ClusterMode::OverrideHost,
            pool: pool.to_vec(),
            pools: Vec::new(),
            listen_address: "127.0.0.1".into(),
            listen_port,
            admin_port,
            filter_config: serde_json::json!({ "pool": pool }),
            poller_config: Some(serde_json::json!({ "pool": pool, "poll_interval_ms": 100 })),
            concurrency: 2,
            per_try_idle_timeout: "0s".into(),
            route_idle_timeout: DEFAULT_ROUTE_IDLE_TIMEOUT.into(),
            filter_wasm: crate::paths::filter_wasm(),
            singleton_wasm: crate::paths::singleton_wasm(),
            failure_policy: DEFAULT_FAILURE_POLICY.into(),
            destination_header: DEFAULT_DESTINATION_HEADER.into(),
            request_timeout: DEFAULT_REQUEST_TIMEOUT.into(),
            max_heap_bytes: DEFAULT_MAX_HEAP_BYTES,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            async_response_limit_bytes: DEFAULT_ASYNC_RESPONSE_LIMIT_BYTES,
            peering: None,
            live_filter_dir: None,
            filters_before_plugin: Vec::new(),
            extra_args: Vec::new(),
            access_log: None,
        }
    }

    /// Several pools behind one Envoy, routed by their routes' matches. With peering
    /// ([`EnvoyOptions::with_peering`]) each pool shares with the same pool of the other
    /// replicas under its own path; the live (ECDS) filter is for one pool only.
    pub fn for_pools(pools: Vec<ServedPool>, listen_port: u16, admin_port: u16) -> Self {
        Self {
            pools,
            filter_config: serde_json::Value::Null,
            poller_config: None,
            ..Self::for_pool(&[], listen_port, admin_port)
        }
    }

    /// Adds the peer listener and cluster and the singleton's `peers` section.
    pub fn with_peering(mut self, peering: Peering) -> Self {
        if let Some(poller) = self.poller_config.as_mut().and_then(|c| c.as_object_mut()) {
            poller.insert("peers".into(), peering.singleton_section(DEFAULT_PEER_PATH));
        }
        for pool in &mut self.pools {
            let section = peering.singleton_section(&pool.peer_path(true));
            if let Some(poller) = pool.poller_config.as_object_mut() {
                poller.insert("peers".into(), section);
            }
        }
        self.peering = Some(peering);
        self
    }

    /// The filter writes `header` and the `pool` cluster follows it; client copies of it
    /// and of the default header are removed before the filter runs.
    pub fn with_destination_header(mut self, header: &str) -> Self {
        self.destination_header = header.to_string();
        if let Some(config) = self.filter_config.as_object_mut() {
            config.insert("destination_header".into(), header.into());
        }
        self
    }

    /// Switches to the ORIGINAL_DST cluster, which follows one address only.
    pub fn with_original_dst(mut self) -> Self {
        self.cluster_mode = ClusterMode::OriginalDst;
        if let Some(config) = self.filter_config.as_object_mut() {
            config.insert("fallback_destinations".into(), 0.into());
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listener_bound_is_the_template_s() {
        let template = std::fs::read_to_string(crate::paths::envoy_template()).unwrap();
        let inference = template.split("- name: inference").nth(1).unwrap();
        let limit = inference.split("per_connection_buffer_limit_bytes:").nth(1).unwrap();
        assert_eq!(limit.split_whitespace().next(), Some(LISTENER_BUFFER_BYTES.to_string().as_str()));
        assert!(listener_takes_bodies_of(&serde_json::json!({"max_body_bytes": 15 << 20})).is_ok());
        assert!(listener_takes_bodies_of(&serde_json::json!({"max_body_bytes": (15 << 20) + 1})).is_err());
        assert!(listener_takes_bodies_of(&serde_json::json!({})).is_ok(), "the plugin's 4 MiB");
    }

    #[test]
    fn a_queue_ttl_must_end_before_the_request_timeout() {
        let options = EnvoyOptions::for_pool(&["127.0.0.1:8001".to_string()], 10_000, 9_901);
        let flow = |flow: serde_json::Value| serde_json::json!({ "flow_control": flow });
        assert!(options.serves_filter(&flow(serde_json::json!({"enabled": true}))).is_ok(), "30 s and 5 s");
        let long = options.serves_filter(&flow(serde_json::json!({"enabled": true, "ttl_ms": 90_000})));
        assert!(long.unwrap_err().contains("flow_control.ttl_ms = 90000"));
        let off = flow(serde_json::json!({"enabled": false, "ttl_ms": 90_000}));
        assert!(options.serves_filter(&off).is_ok(), "nothing waits with flow control off");
    }

    #[test]
    fn the_filter_lists_as_many_fallbacks_as_the_route_retries() {
        let pods = ["127.0.0.1:8001".to_string()];
        let override_host = EnvoyOptions::for_pool(&pods, 10_000, 9_901);
        let none = serde_json::json!({"fallback_destinations": 0});
        assert!(override_host.serves_filter(&none).unwrap_err().contains("fallback_destinations = 0"));
        assert!(override_host.serves_filter(&serde_json::json!({"fallback_destinations": 4})).is_ok());
        assert!(override_host.serves_filter(&serde_json::json!({})).is_ok(), "the plugin's 2");
        let original_dst = EnvoyOptions::for_pool(&pods, 10_000, 9_901).with_original_dst();
        assert!(original_dst.serves_filter(&none).is_ok(), "one address, no retries");
    }
}
