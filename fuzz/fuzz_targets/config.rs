//! Plugin configuration (`config::parse_json` then `validate()`) for the filter, the
//! singleton and Kubernetes discovery, on arbitrary JSON: never panics, and a configuration
//! that validates keeps every promise the data path relies on.

#![no_main]

use libfuzzer_sys::fuzz_target;
use picker::config::{parse_json, FilterConfig, PollerConfig};
use picker::discovery::{KubernetesConfig, PoolDiscovery, Progress};
use picker::pod_table::MAX_PODS;
use picker_fuzz::assert_canonical_address;

fuzz_target!(|data: &[u8]| {
    if let Ok(config) = parse_json::<FilterConfig>(data) {
        if let Ok(pool) = config.validate() {
            assert_pool(&pool.iter().map(|a| a.as_str()).collect::<Vec<_>>());
            let header = &config.destination_header;
            assert!(
                !header.is_empty() && header.bytes().all(|b| b.is_ascii_lowercase() || b == b'-' || b.is_ascii_digit())
            );
            for weight in [config.weights.queue, config.weights.kv_cache, config.weights.inflight] {
                assert!(weight.is_finite() && (0.0..=100.0).contains(&weight), "weight {weight}");
            }
        }
    }
    if let Ok(config) = parse_json::<PollerConfig>(data) {
        if let Ok(pool) = config.validate() {
            assert_pool(&pool.iter().map(|a| a.as_str()).collect::<Vec<_>>());
            assert!(config.metrics_path.starts_with('/'));
            assert!(config.unhealthy_after_failures >= 1);
            if let Some(kubernetes) = config.kubernetes {
                assert!(pool.is_empty(), "a discovered pool starts empty");
                check_discovery(kubernetes);
            }
        }
    }
    if let Ok(kubernetes) = parse_json::<KubernetesConfig>(data) {
        check_discovery(kubernetes);
    }
});

fn assert_pool(pool: &[&str]) {
    assert!(pool.len() <= MAX_PODS);
    for (i, address) in pool.iter().enumerate() {
        assert_canonical_address(address);
        assert!(!pool.get(..i).unwrap_or_default().contains(address), "{address} twice in a validated pool");
    }
}

/// A configuration that validates starts discovery, and its first request is a clean path:
/// nothing from the configuration can add a query parameter or a header line.
fn check_discovery(kubernetes: KubernetesConfig) {
    let valid = kubernetes.validate().is_ok();
    let Ok(mut discovery) = PoolDiscovery::new(kubernetes) else {
        assert!(!valid, "validate() accepted what PoolDiscovery::new refused");
        return;
    };
    match discovery.tick(0) {
        Progress::Fetch(request) => {
            let path = request.path;
            assert!(path.starts_with("/api/v1/namespaces/") || path.starts_with("/apis/"), "{path}");
            assert!(path.bytes().all(|b| b.is_ascii_graphic()), "path with a space or control byte: {path:?}");
            let parameters = path.split_once('?').map_or(0, |(_, query)| query.split('&').count());
            assert!(parameters <= 4, "{path}");
        }
        other => panic!("first tick of a valid discovery did not fetch: {other:?}"),
    }
}
