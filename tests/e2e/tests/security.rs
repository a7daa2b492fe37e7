//! A client can never choose the destination.

use std::time::Duration;

use e2e::hostile::Canary;
use e2e::Cluster;

#[test]
fn forged_destination_headers_never_reach_a_non_pool_address_override_host() {
    let cluster = Cluster::start("forged-override-host", 2, &["--time-scale", "0"], |_| {});
    assert_forgeries_fail(&cluster);
}

#[test]
fn forged_destination_headers_never_reach_a_non_pool_address_original_dst() {
    let cluster = Cluster::start("forged-original-dst", 2, &["--time-scale", "0"], |options| {
        *options = options.clone().with_original_dst();
    });
    assert_forgeries_fail(&cluster);
}

fn assert_forgeries_fail(cluster: &Cluster) {
    let canary_port = Canary::start();
    let canary = canary_port.address.clone();
    let body = r#"{"model":"sim-model","prompt":"where do I go?","max_tokens":2}"#;
    let list = format!("{canary},{canary}");
    let forgeries: Vec<Vec<(&str, &str)>> = vec![
        vec![("x-gateway-destination-endpoint", &canary)],
        vec![("X-Gateway-Destination-Endpoint", &canary)],
        vec![("x-envoy-original-dst-host", &canary)],
        vec![("x-gateway-destination-endpoint", &canary), ("x-gateway-destination-endpoint", &canary)],
        vec![("x-gateway-destination-endpoint", &list)],
    ];
    for headers in &forgeries {
        let reply = cluster.post("/v1/completions", headers, body);
        assert_eq!(reply.status, 200, "{headers:?}: {}", reply.body);
        cluster.served_by_pool(&reply);
        // A GET without a body is routed at the headers phase: same rule.
        let get = launcher::http::get(&cluster.envoy.url("/health"), Duration::from_secs(10)).unwrap();
        assert_eq!(get.status, 200);
        cluster.served_by_pool(&get);
    }
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(canary_port.hits(), 0, "the canary port received connections");
    // Envoy's header_mutation filter removes the forgeries before the plugin runs (so they
    // stay harmless while its VM is down, tests/wasm_crash.rs): the plugin sees none.
    assert_eq!(cluster.envoy.stat("wasm_epp_forged_destination_removed"), Some(0.0));
}
