//! No way around the picker: HTTP/2 requests with trailers are routed by the filter, a
//! custom `destination_header` is removed from clients (with the default one) before the
//! filter runs, and a client claiming to be internal cannot set Envoy's retry or timeout.

use std::time::Duration;

use e2e::h2::post_with_trailers;
use e2e::hostile::{completion_request, raw_exchange, Canary};
use e2e::Cluster;

const TIMEOUT: Duration = Duration::from_secs(20);
const CUSTOM_HEADER: &str = "x-wasm-epp-pod";

/// Needs the filter to decide in `on_http_request_trailers` too: a body that ends with
/// trailers never has `end_of_stream` set in the body callback.
#[test]
fn http2_requests_with_trailers_are_routed_by_the_filter() {
    // ORIGINAL_DST: a request reaches a pod only if the filter wrote a destination.
    let cluster = Cluster::start("h2-trailers", 2, &["--time-scale", "0"], |options| {
        *options = options.clone().with_original_dst();
    });
    let canary = Canary::start();
    for _ in 0..10 {
        let forged = [("x-gateway-destination-endpoint", canary.address.as_str())];
        let (status, served) = post_with_trailers(cluster.envoy.listen_port, &forged, &forged);
        assert_eq!(status, 200);
        let pod = served.unwrap_or_else(|| panic!("no x-served-by"));
        assert!(cluster.pool().contains(&pod), "served by {pod}");
    }
    assert_eq!(canary.hits(), 0, "a forged header or trailer reached the canary");
    assert!(cluster.envoy.stat("wasm_epp_requests_routed").unwrap_or(0.0) >= 10.0);
}

fn forged(canary: &str) -> Vec<u8> {
    [CUSTOM_HEADER, "x-gateway-destination-endpoint", "x-envoy-original-dst-host", "x-prefiller-host-port"]
        .iter()
        .map(|name| format!("{name}: {canary}\r\n"))
        .collect::<String>()
        .into_bytes()
}

#[test]
fn a_custom_destination_header_and_the_default_one_are_removed_from_clients() {
    for original_dst in [false, true] {
        let cluster = Cluster::start(&format!("custom-header-{original_dst}"), 2, &["--time-scale", "0"], |options| {
            if original_dst {
                *options = options.clone().with_original_dst();
            }
            *options = options.clone().with_destination_header(CUSTOM_HEADER);
        });
        let canary = Canary::start();
        for i in 0..10 {
            let reply = raw_exchange(
                cluster.envoy.listen_port,
                &completion_request(&forged(&canary.address), &format!("c{i}")),
                TIMEOUT,
            )
            .unwrap();
            assert_eq!(reply.status, 200, "{reply:?}");
            assert!(
                reply.header("x-served-by").is_some_and(|pod| cluster.pool().iter().any(|p| p == pod)),
                "{reply:?}"
            );
        }
        assert_eq!(canary.hits(), 0, "original_dst={original_dst}: the canary was reached");
    }
}

#[test]
fn a_custom_destination_header_is_harmless_with_the_vm_down_under_fail_open() {
    let cluster = Cluster::start("custom-header-crashed", 2, &["--time-scale", "0"], |options| {
        *options = options.clone().with_original_dst().with_destination_header(CUSTOM_HEADER);
        options.poller_config = None;
        options.filter_wasm = launcher::paths::crash_filter_wasm();
        options.failure_policy = "FAIL_OPEN".into();
    });
    let canary = Canary::start();
    for _ in 0..12 {
        raw_exchange(cluster.envoy.listen_port, &completion_request(b"x-test-crash: 1\r\n", "boom"), TIMEOUT).unwrap();
    }
    for i in 0..20 {
        raw_exchange(
            cluster.envoy.listen_port,
            &completion_request(&forged(&canary.address), &format!("d{i}")),
            TIMEOUT,
        )
        .unwrap();
    }
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(canary.hits(), 0, "with the VM down, a client header reached the canary");
}

/// Retries counted by the `pool` cluster so far.
fn pool_retries(cluster: &Cluster) -> f64 {
    cluster.envoy.stat(r#"envoy_cluster_upstream_rq_retry{envoy_cluster_name="pool"}"#).unwrap_or(0.0)
}

/// Claims of being internal, in the forms a client might try.
const INTERNAL_CLAIMS: [&str; 3] = ["x-forwarded-for: 127.0.0.1\r\n", "x-forwarded-for: 10.0.0.7, 127.0.0.1\r\n", ""];

/// Control (by hand): with `internal_address_config` naming 127.0.0.0/8 this test fails
/// (the client's 1 ms timeout answers 504), so it does see honoured x-envoy-* headers.
#[test]
fn client_x_envoy_retry_and_timeout_headers_have_no_effect() {
    let cluster = Cluster::start_ready("x-envoy-headers", 2, &["--time-scale", "0"]);
    // Every pod is slow: a client timeout of 1 ms, if honoured, would answer 504.
    for pod in &cluster.pods {
        pod.set_faults(&serde_json::json!({"extra_latency_ms": 300})).unwrap();
    }
    for claim in INTERNAL_CLAIMS {
        let headers =
            format!("{claim}x-envoy-upstream-rq-timeout-ms: 1\r\nx-envoy-upstream-rq-per-try-timeout-ms: 1\r\n");
        let reply =
            raw_exchange(cluster.envoy.listen_port, &completion_request(headers.as_bytes(), "slow"), TIMEOUT).unwrap();
        assert_eq!(reply.status, 200, "{claim:?}: the client's timeout was honoured: {reply:?}");
    }
    // Every pod fails: the route retries twice; a client's retry headers must change nothing.
    for pod in &cluster.pods {
        pod.set_faults(&serde_json::json!({"extra_latency_ms": 0, "fail_fraction": 1.0, "fail_status": 503})).unwrap();
    }
    let mut retries_per_request = Vec::new();
    for headers in ["", "x-envoy-max-retries: 0\r\n", "x-envoy-retry-on: 5xx,reset\r\nx-envoy-max-retries: 10\r\n"] {
        for claim in INTERNAL_CLAIMS {
            let before = pool_retries(&cluster);
            let all = format!("{claim}{headers}");
            let reply =
                raw_exchange(cluster.envoy.listen_port, &completion_request(all.as_bytes(), "fail"), TIMEOUT).unwrap();
            assert!(reply.status >= 500, "{reply:?}");
            std::thread::sleep(Duration::from_millis(200));
            retries_per_request.push((all, pool_retries(&cluster) - before));
        }
    }
    println!("retries per request: {retries_per_request:?}");
    let baseline = retries_per_request[0].1;
    assert!(baseline >= 1.0, "the route's own retries did not run");
    for (headers, retries) in &retries_per_request {
        assert_eq!(*retries, baseline, "{headers:?} changed the retries");
    }
}
