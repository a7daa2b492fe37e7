//! wasm-epp answers `GET /wasm-epp/healthz` itself (200, a small JSON body) while its VM
//! runs: the path the Kubernetes liveness probe uses (k8s/standalone/envoy.yaml). No pod
//! sees it. (Needs the filter's health path, added with the host seam rework.)

use std::time::Duration;

use e2e::Cluster;

#[test]
fn the_filter_answers_its_health_path_locally() {
    let cluster = Cluster::start("healthz", 2, &["--time-scale", "0"], |_| {});
    for _ in 0..10 {
        let reply = launcher::http::get(&cluster.envoy.url("/wasm-epp/healthz"), Duration::from_secs(10)).unwrap();
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert_eq!(reply.served_by(), None, "a pod answered the health path");
        let body: serde_json::Value =
            serde_json::from_str(&reply.body).unwrap_or_else(|e| panic!("{e}: {}", reply.body));
        assert!(body.is_object(), "{}", reply.body);
    }
}
