//! Replicas that find each other in Kubernetes: each replica's pool service lists the
//! gateway's own pods by label from a fake API server (the bearer token injected by Envoy),
//! and posts its decisions to their peer listeners on the shared `target_port`. Each
//! replica's peer listener binds its own loopback address (127.0.41.N) on one port, as
//! gateway pods share a containerPort.

use e2e::replicas::{least_recent, prompt, ReplicaCluster};
use launcher::fake_kube::envoy::{kubernetes_overlay, start_kube_envoy, write_token_sds, TokenDir};
use launcher::fake_kube::{FakeKube, FakePod};
use serde_json::json;

const BLOCK: u8 = 41;
const REPLICAS: usize = 2;

#[test]
fn replicas_found_by_label_selector_share_their_decisions() {
    // Pods and plan only; the replicas start below with the Kubernetes overlay.
    let mut cluster = ReplicaCluster::start("replicas-kube", 4, REPLICAS, 0, true, least_recent);
    let peer_port = launcher::free_port().unwrap();
    let kube = FakeKube::start("llm").unwrap();
    kube.update(|state| {
        for index in 0..REPLICAS {
            let ip = format!("127.0.{BLOCK}.{}", index + 1);
            state.put_pod(FakePod::ready(&format!("gateway-{index}"), &ip, &[("app", "wasm-epp")]));
        }
        // Not a gateway pod: never a peer.
        state.put_pod(FakePod::ready("vllm-0", &format!("127.0.{BLOCK}.99"), &[("app", "vllm")]));
    });
    let tokens = TokenDir::create(&cluster.dir.join("serviceaccount"), "token-1").unwrap();
    let sds = cluster.dir.join("kubernetes-token-sds.yaml");
    write_token_sds(&sds, &tokens.token_path()).unwrap();
    let overlay = kubernetes_overlay(kube.port(), &sds, tokens.dir());
    for index in 0..REPLICAS {
        let mut options = cluster.plan.options(index).unwrap();
        least_recent(&mut options);
        if let Some(peering) = options.peering.as_mut() {
            peering.listen_address = format!("127.0.{BLOCK}.{}", index + 1);
            peering.port = peer_port;
        }
        let discovery = json!({
            "namespace": "llm", "label_selector": "app=wasm-epp", "target_port": peer_port,
            "relist_interval_ms": 200, "timeout_ms": 500
        });
        let section = options.poller_config.as_mut().and_then(|c| c.get_mut("peers")).unwrap();
        section["kubernetes"] = discovery;
        section["peers"] = json!([]);
        let folder = cluster.dir.join(format!("replica-{index}"));
        std::fs::create_dir_all(&folder).unwrap();
        let envoy = start_kube_envoy(&options, &overlay, &folder).unwrap_or_else(|e| panic!("replica {index}: {e}"));
        assert!(envoy.wait_for_healthy_pods(4, e2e::replicas::SETTLE), "{}", envoy.log_tail(30));
        cluster.replicas[index] = Some(envoy);
    }
    // Each hears the other (its own messages, sent to itself, are recognised and ignored).
    cluster.wait_stat(0, "wasm_epp_peers_live", 1.0);
    cluster.wait_stat(1, "wasm_epp_peers_live", 1.0);
    let groups = 6;
    let homes: Vec<String> = (0..groups).map(|g| cluster.served_via(0, &prompt(200 + g, 0))).collect();
    cluster.wait_stat(1, "wasm_epp_peer_events_received", groups as f64);
    for (group, home) in homes.iter().enumerate() {
        assert_eq!(&cluster.served_via(1, &prompt(200 + group, 1)), home, "group {group}");
    }
    // The singleton's API calls carried the token Envoy injected.
    let listed = kube
        .requests()
        .iter()
        .filter(|r| r.path.contains("wasm-epp") && r.authorization.as_deref() == Some("Bearer token-1"))
        .count();
    assert!(listed >= REPLICAS, "the gateway pods were listed {listed} times with the token");
    cluster.assert_plugins_healthy();
}
