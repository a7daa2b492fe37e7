//! The docker-compose variant of the Envoy configuration, rendered from the same template
//! as the native one so the two cannot drift: a unit test fails when the committed
//! `envoy/compose/envoy.yaml` differs from a fresh render (`UPDATE_COMPOSE=1` rewrites it,
//! and `envoy/examples/two-pools.yaml` too).

use crate::envoy::EnvoyOptions;

/// Fixed addresses on the compose network (ORIGINAL_DST needs literal IPs).
pub const COMPOSE_PODS: [&str; 4] = ["172.28.0.11:8000", "172.28.0.12:8000", "172.28.0.13:8000", "172.28.0.14:8000"];

pub fn compose_options() -> EnvoyOptions {
    let pool: Vec<String> = COMPOSE_PODS.iter().map(|p| p.to_string()).collect();
    let mut options = EnvoyOptions::for_pool(&pool, 10000, 9901);
    options.listen_address = "0.0.0.0".into();
    // Inside the container admin must listen on every interface for Docker to forward it;
    // docker-compose.yaml publishes it on the host's 127.0.0.1 only.
    options.admin_address = "0.0.0.0".into();
    options.filter_wasm = "/etc/envoy/wasm_epp_filter.wasm".into();
    options.singleton_wasm = "/etc/envoy/wasm_epp_shared_state.wasm".into();
    options.access_log = Some("/dev/stdout".into());
    options
}

/// `envoy/examples/two-pools.yaml`: two pools of two local pods each behind one Envoy, routed
/// by an `x-pool` header (docs/deployment.md, "Several pools behind one Envoy").
pub fn two_pools_example_options() -> EnvoyOptions {
    let pods = |ports: [u16; 2]| ports.map(|port| format!("127.0.0.1:{port}")).to_vec();
    let pools = vec![
        crate::envoy_options::ServedPool::by_header("llama", &pods([8001, 8002]), "x-pool"),
        crate::envoy_options::ServedPool::by_header("qwen", &pods([8003, 8004]), "x-pool"),
    ];
    let mut options = EnvoyOptions::for_pools(pools, 10000, 9901);
    options.filter_wasm = "target/wasm32-wasip1/release/wasm_epp_filter.wasm".into();
    options.singleton_wasm = "target/wasm32-wasip1/release/wasm_epp_shared_state.wasm".into();
    options
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compose_config_is_rendered_from_the_native_template() {
        crate::render::assert_committed_render("envoy/compose/envoy.yaml", &compose_options());
    }

    #[test]
    fn the_two_pools_example_is_rendered_from_the_native_template() {
        crate::render::assert_committed_render("envoy/examples/two-pools.yaml", &two_pools_example_options());
    }

    #[test]
    fn no_singleton_render_drops_the_bootstrap_extension() {
        let template = std::fs::read_to_string(crate::paths::envoy_template()).unwrap();
        let mut options = compose_options();
        options.poller_config = None;
        let rendered = crate::envoy::render(&template, &options);
        assert!(!rendered.contains("bootstrap_extensions") && rendered.contains("envoy.filters.http.wasm"));
        assert!(!rendered.contains("{{"), "every placeholder filled");
    }
}
