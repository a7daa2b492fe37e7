//! The singleton's configuration: which pods, how to reach them, how often.

use serde::Deserialize;

use super::{check_pool_name, check_range, parse_pool};
use crate::address::PodAddress;
use crate::discovery::KubernetesConfig;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PollerConfig {
    /// The pods of the pool, as literal `ip:port`. Exactly one of `pool` and `kubernetes`.
    pub pool: Vec<String>,
    /// Discover the pool from the Kubernetes API instead (see `discovery::KubernetesConfig`).
    pub kubernetes: Option<KubernetesConfig>,
    /// The pool's name in the stats, as the filter's `pool_name` (empty: no label).
    pub pool_name: String,
    /// An ORIGINAL_DST cluster that follows `destination_header`, used to reach each pod.
    pub metrics_cluster: String,
    pub destination_header: String,
    pub metrics_path: String,
    pub poll_interval_ms: u64,
    pub timeout_ms: u64,
    /// Consecutive failed scrapes before a pod leaves the rotation.
    pub unhealthy_after_failures: u32,
    /// Scrape bodies larger than this are refused (a real vLLM scrape is ~20-60 KB).
    pub max_metrics_bytes: u64,
    /// Other gateway replicas to share routing decisions and load with (none by default).
    pub peers: Option<super::PeersConfig>,
    /// Prefill/decode roles of static pods by `ip:port` (`prefill`, `decode`, `both`); pods not
    /// named are `both`. A discovered pod's `llm-d.ai/role` label wins over this.
    pub roles: std::collections::BTreeMap<String, crate::role::PodRole>,
    /// Path listing a pod's models and adapters (vLLM's OpenAI server).
    pub models_path: String,
    /// How often each pod's model list is fetched; 0 = never (models then come from the
    /// metrics' labels alone). Slower than scrapes: adapters change rarely.
    pub models_interval_ms: u64,
    /// Model lists larger than this are refused (vLLM lists an adapter in ~450 bytes: 64
    /// adapters are ~30 KB, 1,024 ~460 KB, within the 1 MiB default).
    pub max_models_bytes: u64,
    /// Names kept in each of a pod's model and adapter lists (registered, running, waiting,
    /// resident, base models): a pod registering more is marked `names_cut`, and the names
    /// past it get no adapter-aware routing. Every name costs each worker its share of the
    /// table's decode and model index on every publish.
    pub max_names_per_pod: u32,
    /// The environment variable holding the key the pods' API wants (vLLM's `--api-key`),
    /// sent as `Authorization: Bearer <key>` on model-list fetches; empty: none is sent. A
    /// variable name, not the key: the plugin's JSON is in Envoy's config_dump, and Envoy
    /// hands the VM the variables its `vm_config.environment_variables` names.
    pub pods_api_key_env: String,
    /// Send that key on scrapes too. Off by default: vLLM leaves `/metrics` open (its key
    /// guards `/v1` paths only), and a key sent where none is needed is one more copy of it.
    pub pods_api_key_on_metrics: bool,
}

impl Default for PollerConfig {
    fn default() -> Self {
        Self {
            pool: Vec::new(),
            kubernetes: None,
            pool_name: String::new(),
            metrics_cluster: "wasm_epp_metrics".into(),
            destination_header: "x-gateway-destination-endpoint".into(),
            metrics_path: crate::metrics_text::filtered_metrics_path(),
            poll_interval_ms: 100,
            timeout_ms: 1_000,
            unhealthy_after_failures: 2,
            max_metrics_bytes: 4 * 1024 * 1024,
            peers: None,
            roles: std::collections::BTreeMap::new(),
            models_path: "/v1/models".into(),
            models_interval_ms: 5_000,
            max_models_bytes: 1024 * 1024,
            max_names_per_pod: crate::models::DEFAULT_NAMES_PER_POD as u32,
            pods_api_key_env: String::new(),
            pods_api_key_on_metrics: false,
        }
    }
}

impl PollerConfig {
    pub fn validate(&self) -> Result<Vec<PodAddress>, String> {
        check_pool_name(&self.pool_name)?;
        if self.metrics_cluster.is_empty() {
            return Err("metrics_cluster must name an Envoy cluster".into());
        }
        if !self.metrics_path.starts_with('/') {
            return Err(format!("metrics_path '{}' must start with '/'", self.metrics_path));
        }
        check_range("poll_interval_ms", self.poll_interval_ms, 10, 60_000)?;
        check_range("timeout_ms", self.timeout_ms, 10, 60_000)?;
        check_range("unhealthy_after_failures", u64::from(self.unhealthy_after_failures), 1, 100)?;
        check_range("max_metrics_bytes", self.max_metrics_bytes, 1024, 64 * 1024 * 1024)?;
        if let Some(peers) = &self.peers {
            peers.validate()?;
            peers.check_load_cadence(self.poll_interval_ms)?;
        }
        self.role_map()?;
        if !self.models_path.starts_with('/') {
            return Err(format!("models_path '{}' must start with '/'", self.models_path));
        }
        if self.models_interval_ms != 0 {
            check_range("models_interval_ms", self.models_interval_ms, self.poll_interval_ms, 3_600_000)?;
        }
        check_range("max_models_bytes", self.max_models_bytes, 1024, 16 * 1024 * 1024)?;
        check_range(
            "max_names_per_pod",
            u64::from(self.max_names_per_pod),
            1,
            crate::models::MAX_NAMES_PER_POD as u64,
        )?;
        self.check_pods_api_key()?;
        let pool = parse_pool(&self.pool)?;
        // The initial pool: the static one, or empty until the first list arrives.
        match (&self.kubernetes, pool.is_empty()) {
            (Some(kubernetes), true) => kubernetes.validate().map(|_| pool),
            (None, false) => Ok(pool),
            (Some(_), false) => Err("set one of pool and kubernetes, not both".into()),
            (None, true) => Err("the pool is empty: set pool (ip:port list) or kubernetes".into()),
        }
    }
}

impl PollerConfig {
    /// `max_names_per_pod` as a list length, never past [`crate::models::MAX_NAMES_PER_POD`]
    /// (a configuration built in code skips [`PollerConfig::validate`]).
    pub fn names_per_pod(&self) -> usize {
        usize::try_from(self.max_names_per_pod)
            .map_or(crate::models::MAX_NAMES_PER_POD, |n| n.min(crate::models::MAX_NAMES_PER_POD))
    }
}

/// Longest environment variable name accepted for `pods_api_key_env`.
const MAX_ENV_NAME_BYTES: usize = 256;

impl PollerConfig {
    /// `pods_api_key_env` names a variable (letters, digits, `_`, not starting with a digit);
    /// its value is read and checked when the pool service starts.
    fn check_pods_api_key(&self) -> Result<(), String> {
        let name = self.pods_api_key_env.as_str();
        if name.is_empty() {
            return match self.pods_api_key_on_metrics {
                true => Err("pods_api_key_on_metrics needs pods_api_key_env".into()),
                false => Ok(()),
            };
        }
        let word = name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !word || name.starts_with(|c: char| c.is_ascii_digit()) || name.len() > MAX_ENV_NAME_BYTES {
            return Err(format!(
                "pods_api_key_env '{name}' must be an environment variable's name (A-Z a-z 0-9 _, at most \
                 {MAX_ENV_NAME_BYTES} bytes), not the key"
            ));
        }
        Ok(())
    }

    /// The static roles, each address checked.
    pub fn role_map(&self) -> Result<crate::role::RoleMap, String> {
        if self.roles.len() > crate::pod_table::MAX_PODS {
            return Err(format!("roles names more than {} pods", crate::pod_table::MAX_PODS));
        }
        let entries = self
            .roles
            .iter()
            .map(|(address, role)| {
                PodAddress::parse(address).map(|address| (address, *role)).map_err(|e| format!("roles: {e}"))
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(crate::role::RoleMap::new(entries))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_json;

    #[test]
    fn validates_pool_and_bounds() {
        let ok: PollerConfig = parse_json(br#"{"pool": ["127.0.0.1:8001", "127.0.0.1:8002"]}"#).unwrap();
        assert_eq!(ok.validate().unwrap().len(), 2);
        let bad: PollerConfig = parse_json(br#"{"pool": ["localhost:8001"]}"#).unwrap();
        assert!(bad.validate().unwrap_err().contains("localhost"));
        let bad: PollerConfig = parse_json(br#"{"poll_interval_ms": 1}"#).unwrap();
        assert!(bad.validate().unwrap_err().contains("poll_interval_ms"));
    }

    #[test]
    fn names_per_pod_are_1_to_1024() {
        let config = |names: &str| {
            let json = format!(r#"{{"pool": ["10.0.0.1:80"]{names}}}"#);
            parse_json::<PollerConfig>(json.as_bytes()).unwrap()
        };
        assert_eq!(config("").names_per_pod(), 64, "the default");
        for ok in [1, 256, 1024] {
            let set = config(&format!(r#", "max_names_per_pod": {ok}"#));
            assert_eq!((set.validate().is_ok(), set.names_per_pod()), (true, ok as usize));
        }
        for bad in [0, 1025] {
            let error = config(&format!(r#", "max_names_per_pod": {bad}"#)).validate().unwrap_err();
            assert!(error.contains("max_names_per_pod"), "{error}");
        }
        assert!(parse_json::<PollerConfig>(br#"{"max_names_per_pod": -1}"#).is_err());
        let unchecked = PollerConfig { max_names_per_pod: u32::MAX, ..PollerConfig::default() };
        assert_eq!(unchecked.names_per_pod(), 1024, "never past the hard maximum");
    }

    #[test]
    fn peers_need_a_load_cadence_their_expiry_covers() {
        let config = |poll: u64, heartbeat: u64| {
            let json = format!(
                r#"{{"pool": ["10.0.0.1:80"], "poll_interval_ms": {poll},
                    "peers": {{"peers": ["10.0.0.9:8081"], "secret": "a-shared-secret-of-some-length",
                              "heartbeat_ms": {heartbeat}}}}}"#
            );
            parse_json::<PollerConfig>(json.as_bytes()).unwrap().validate()
        };
        assert!(config(100, 500).is_ok());
        assert!(config(100, 1_000).is_ok());
        assert!(config(100, 1_001).unwrap_err().contains("heartbeat_ms"));
        assert!(config(100, 30_000).unwrap_err().contains("heartbeat_ms"));
        // Sent on the ticks: 800 ms rounded up to ticks of 700 is every 1,400 ms.
        assert!(config(700, 800).unwrap_err().contains("every 1400 ms"));
        assert!(config(5_000, 500).unwrap_err().contains("poll_interval_ms"));
        let no_peers: PollerConfig = parse_json(br#"{"pool": ["10.0.0.1:80"], "poll_interval_ms": 5000}"#).unwrap();
        assert!(no_peers.validate().is_ok(), "a slow poll without peers is fine");
    }

    #[test]
    fn peers_come_from_a_list_or_kubernetes_not_both_nor_neither() {
        let config = |peers: &str| {
            let json = format!(
                r#"{{"pool": ["10.0.0.1:80"], "peers": {{"secret": "a-shared-secret-of-some-length"{peers}}}}}"#
            );
            parse_json::<PollerConfig>(json.as_bytes()).unwrap().validate()
        };
        let kubernetes = r#""kubernetes": {"namespace": "llm", "label_selector": "app=gw", "target_port": 8081}"#;
        assert!(config(r#", "peers": ["10.0.0.9:8081"]"#).is_ok());
        assert!(config(&format!(", {kubernetes}")).is_ok());
        assert!(config(&format!(r#", "peers": [], {kubernetes}"#)).is_ok(), "an empty list is no list");
        let both = config(&format!(r#", "peers": ["10.0.0.9:8081"], {kubernetes}"#)).unwrap_err();
        assert!(both.contains("not both"), "{both}");
        assert!(config("").unwrap_err().contains("no replica to share with"));
    }

    #[test]
    fn static_roles_are_checked_addresses() {
        let ok: PollerConfig =
            parse_json(br#"{"pool": ["10.0.0.1:80"], "roles": {"10.0.0.1:80": "prefill"}}"#).unwrap();
        let role = ok.role_map().unwrap().get(&PodAddress::parse("10.0.0.1:80").unwrap());
        assert_eq!(role, Some(crate::role::PodRole::Prefill));
        let bad: PollerConfig = parse_json(br#"{"pool": ["10.0.0.1:80"], "roles": {"pod-a:80": "decode"}}"#).unwrap();
        assert!(bad.validate().unwrap_err().contains("roles"));
        assert!(parse_json::<PollerConfig>(br#"{"roles": {"10.0.0.1:80": "leader"}}"#).is_err());
    }

    #[test]
    fn the_pods_api_key_is_named_by_an_environment_variable() {
        let config = |extra: &str| {
            let json = format!(r#"{{"pool": ["10.0.0.1:80"]{extra}}}"#);
            parse_json::<PollerConfig>(json.as_bytes()).unwrap().validate()
        };
        assert!(config("").is_ok(), "no key by default");
        assert!(config(r#", "pods_api_key_env": "VLLM_API_KEY""#).is_ok());
        assert!(config(r#", "pods_api_key_env": "VLLM_API_KEY", "pods_api_key_on_metrics": true"#).is_ok());
        assert!(config(r#", "pods_api_key_env": "sk-abc123""#).unwrap_err().contains("not the key"));
        assert!(config(r#", "pods_api_key_env": "1KEY""#).unwrap_err().contains("pods_api_key_env"));
        assert!(config(r#", "pods_api_key_on_metrics": true"#).unwrap_err().contains("needs pods_api_key_env"));
    }

    #[test]
    fn exactly_one_of_pool_and_kubernetes() {
        let kubernetes = r#""kubernetes": {"namespace": "llm", "label_selector": "app=vllm", "target_port": 8000}"#;
        let ok: PollerConfig = parse_json(format!("{{{kubernetes}}}").as_bytes()).unwrap();
        assert!(ok.validate().unwrap().is_empty(), "the pool starts empty and is discovered");
        let both: PollerConfig =
            parse_json(format!(r#"{{"pool": ["10.0.0.1:80"], {kubernetes}}}"#).as_bytes()).unwrap();
        assert!(both.validate().unwrap_err().contains("not both"));
        let neither: PollerConfig = parse_json(b"").unwrap();
        assert!(neither.validate().unwrap_err().contains("kubernetes"));
        let bad: PollerConfig = parse_json(br#"{"kubernetes": {"namespace": "llm"}}"#).unwrap();
        assert!(bad.validate().unwrap_err().contains("exactly one of label_selector"));
    }
}
