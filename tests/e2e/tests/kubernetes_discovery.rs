//! Kubernetes discovery end to end: the real Envoy, the singleton listing pods from a fake
//! API server, simulated vLLM pods on distinct loopback addresses sharing one port (as a
//! pool's pods share a containerPort), and the bearer token injected by Envoy from a
//! watched service-account directory.
//!
//! Each test uses its own 127.0.N.0/24 block, so tests running side by side never share
//! an address.

use std::path::PathBuf;
use std::time::Duration;

use launcher::envoy::Envoy;
use launcher::envoy::{EnvoyOptions, ServedPool};
use launcher::fake_kube::envoy::{
    kubernetes_overlay, kubernetes_plain_overlay, start_kube_envoy, write_token_sds, TokenDir,
};
use launcher::fake_kube::{FakeKube, FakePod, Outage};
use launcher::http::{self, Reply};
use launcher::pods::Pod;
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(15);
const SIM_ARGS: [&str; 2] = ["--time-scale", "0"];

/// How Envoy reaches the API server.
#[derive(Clone, Copy, PartialEq)]
enum ApiAccess {
    /// The manifests' way: Envoy injects the bearer token it reads from the watched folder.
    InjectedToken,
    /// docs/deployment.md's fallback for Envoys without it: a plain cluster to a local
    /// `kubectl proxy`, which adds the credentials (the fake server stands in for both).
    KubectlProxy,
}

struct KubeSetup {
    kube: FakeKube,
    pods: Vec<Pod>,
    envoy: Envoy,
    tokens: TokenDir,
    port: u16,
    block: u8,
    dir: PathBuf,
}

impl KubeSetup {
    /// `pods` simulated pods on 127.0.`block`.1.. (all listed Ready with `app=vllm` unless
    /// `prepare` changes the fake cluster), and Envoy discovering them with `discovery`
    /// merged over a label-selector configuration.
    fn start(name: &str, block: u8, pods: usize, discovery: Value, prepare: impl FnOnce(&FakeKube)) -> Self {
        Self::start_with(name, block, pods, discovery, prepare, ApiAccess::InjectedToken)
    }

    fn start_with(
        name: &str,
        block: u8,
        pods: usize,
        discovery: Value,
        prepare: impl FnOnce(&FakeKube),
        access: ApiAccess,
    ) -> Self {
        let dir = launcher::paths::run_dir(name).unwrap();
        let port = launcher::free_port().unwrap();
        let pods: Vec<Pod> =
            (1..=pods).map(|i| Pod::start_on(&format!("127.0.{block}.{i}"), port, &SIM_ARGS, &dir).unwrap()).collect();
        let kube = FakeKube::start("llm").unwrap();
        kube.update(|state| {
            for (i, pod) in pods.iter().enumerate() {
                state.put_pod(FakePod::ready(&format!("vllm-{}", i + 1), &pod.host, &[("app", "vllm")]));
            }
        });
        prepare(&kube);
        let tokens = TokenDir::create(&dir.join("serviceaccount"), "token-1").unwrap();
        let sds = dir.join("kubernetes-token-sds.yaml");
        write_token_sds(&sds, &tokens.token_path()).unwrap();

        let mut kubernetes = json!({
            "namespace": "llm", "label_selector": "app=vllm", "target_port": port,
            "relist_interval_ms": 200, "timeout_ms": 500
        });
        if let (Some(base), Value::Object(extra)) = (kubernetes.as_object_mut(), discovery) {
            base.extend(extra);
        }
        let listen = launcher::free_port().unwrap();
        let admin = launcher::free_port().unwrap();
        let mut options = EnvoyOptions::for_pool(&[], listen, admin).with_original_dst();
        options.poller_config = Some(json!({ "kubernetes": kubernetes, "poll_interval_ms": 100 }));
        let overlay = match access {
            ApiAccess::InjectedToken => kubernetes_overlay(kube.port(), &sds, tokens.dir()),
            ApiAccess::KubectlProxy => kubernetes_plain_overlay(kube.port()),
        };
        let envoy = start_kube_envoy(&options, &overlay, &dir).unwrap_or_else(|e| panic!("envoy: {e}"));
        Self { kube, pods, envoy, tokens, port, block, dir }
    }

    fn address(&self, host: u8) -> String {
        format!("127.0.{}.{host}:{}", self.block, self.port)
    }

    fn stat(&self, name: &str) -> f64 {
        self.envoy.stat(name).unwrap_or(0.0)
    }

    fn wait_for(&self, what: &str, check: impl FnMut() -> bool) {
        assert!(launcher::wait_until(WAIT, check), "timed out waiting for {what}:\n{}", self.envoy.log_tail(30));
    }

    /// Waits until the published table has `total` pods, `healthy` of them scraped.
    fn wait_for_pool(&self, total: u64, healthy: u64) {
        self.wait_for(&format!("{total} pods, {healthy} healthy"), || {
            self.stat("wasm_epp_pods_total") == total as f64 && self.stat("wasm_epp_pods_healthy") == healthy as f64
        });
    }

    fn complete(&self, prompt: &str) -> Reply {
        let body = json!({"model": "sim-model", "prompt": prompt, "max_tokens": 4}).to_string();
        http::post(&self.envoy.url("/v1/completions"), &[], &body, Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("request failed: {e}\n{}", self.envoy.log_tail(20)))
    }

    /// Sends `count` requests and returns who served each (all must succeed).
    fn served(&self, count: usize, tag: &str) -> Vec<String> {
        (0..count)
            .map(|i| {
                let reply = self.complete(&format!("{tag} {i}"));
                assert_eq!(reply.status, 200, "{tag} {i}: {}", reply.body);
                reply.served_by().unwrap_or_default().to_string()
            })
            .collect()
    }

    fn log_count(&self, needle: &str) -> usize {
        self.envoy.log().matches(needle).count()
    }
}

#[test]
fn follows_pods_turning_ready_terminating_and_moving() {
    let setup = KubeSetup::start("kube-follow", 21, 3, json!({}), |kube| {
        kube.update(|state| state.update_pod("vllm-3", |pod| pod.ready = false));
    });
    setup.wait_for_pool(2, 2);
    let served = setup.served(20, "two ready");
    assert!(served.iter().all(|pod| *pod == setup.address(1) || *pod == setup.address(2)), "{served:?}");

    setup.kube.update(|state| state.update_pod("vllm-3", |pod| pod.ready = true));
    setup.wait_for_pool(3, 3);
    let served = setup.served(60, "three ready");
    assert!(served.contains(&setup.address(3)), "the pod that turned Ready gets traffic: {served:?}");

    // Terminating pods stay Ready while they drain; they must get no new requests.
    setup.kube.update(|state| state.update_pod("vllm-1", |pod| pod.terminating = true));
    setup.wait_for_pool(2, 2);
    let served = setup.served(30, "one terminating");
    assert!(!served.contains(&setup.address(1)), "{served:?}");

    // vllm-2 is rescheduled: same name, new IP.
    let moved = Pod::start_on(&format!("127.0.{}.9", setup.block), setup.port, &SIM_ARGS, &setup.dir).unwrap();
    setup.pods[1].kill();
    setup.kube.update(|state| state.update_pod("vllm-2", |pod| pod.ip = moved.host.clone()));
    setup.wait_for("the moved pod to join", || setup.log_count(&format!("joined {}", setup.address(9))) > 0);
    // Stats are flushed on the singleton's tick, so a gauge read just after the join may
    // still be the old pool's: wait for two more successful scrapes (the new pod's included).
    let scrapes = setup.stat("wasm_epp_poll_success");
    setup.wait_for("the moved pod to be scraped", || {
        setup.stat("wasm_epp_poll_success") >= scrapes + 4.0 && setup.stat("wasm_epp_pods_healthy") == 2.0
    });
    let served = setup.served(40, "moved");
    assert!(served.contains(&setup.address(9)) && !served.contains(&setup.address(2)), "{served:?}");

    setup.kube.update(|state| state.delete_pod("vllm-3"));
    setup.wait_for_pool(1, 1);
    assert!(setup.served(10, "one left").iter().all(|pod| *pod == setup.address(9)));
    assert_eq!(setup.stat("wasm_epp_discovery_failure"), 0.0);
    assert!(setup.stat("wasm_epp_discovery_pool_changes") >= 5.0);
}

#[test]
fn pages_through_the_list_restarts_on_410_and_skips_unchanged_snapshots() {
    let setup = KubeSetup::start("kube-pages", 22, 3, json!({"page_size": 500}), |kube| {
        kube.update(|state| state.page_size_cap = Some(1));
    });
    setup.wait_for_pool(3, 3);
    let continued = || setup.kube.requests().iter().filter(|r| r.path.contains("continue=")).count();
    assert!(continued() >= 2, "three pods, one per page");

    // Nothing changes: each relist reads one page and stops (same resourceVersion).
    let lists = setup.stat("wasm_epp_discovery_success");
    let before = continued();
    setup.wait_for("five more lists", || setup.stat("wasm_epp_discovery_success") >= lists + 5.0);
    assert_eq!(continued(), before, "an unchanged snapshot is not paged through again");

    // A change, and the next continued page finds its snapshot compacted: 410, restart.
    setup.kube.update(|state| {
        state.put_pod(FakePod::ready("vllm-4", "127.0.22.200", &[("app", "vllm")]));
        state.expire_next_continue = true;
    });
    setup.wait_for("the fourth pod", || setup.stat("wasm_epp_pods_total") == 4.0);
    assert!(setup.kube.requests().iter().any(|r| r.status == 410), "a 410 was served");
    assert_eq!(setup.stat("wasm_epp_discovery_failure"), 0.0, "a restarted list is not a failure");
    // Pods in other phases and with other labels are never listed as members.
    setup.kube.update(|state| {
        state.put_pod(FakePod::ready("other-app", "127.0.22.201", &[("app", "other")]));
        let mut pending = FakePod::ready("pending", "127.0.22.202", &[("app", "vllm")]);
        pending.phase = "Pending";
        state.put_pod(pending);
    });
    let lists = setup.stat("wasm_epp_discovery_success");
    setup.wait_for("two more lists", || setup.stat("wasm_epp_discovery_success") >= lists + 2.0);
    assert_eq!(setup.stat("wasm_epp_pods_total"), 4.0);
}

#[test]
fn the_token_comes_from_a_watched_file_and_rotates() {
    let mut setup = KubeSetup::start("kube-token", 23, 2, json!({}), |kube| {
        kube.update(|state| state.required_token = Some("token-1".into()));
    });
    setup.wait_for_pool(2, 2);
    let seen = setup.kube.requests();
    assert!(seen.iter().all(|r| r.authorization.as_deref() == Some("Bearer token-1")), "{:?}", seen.first());

    // The API server moves on to a new token before Envoy has it: lists fail, the pool stays.
    setup.kube.update(|state| state.required_token = Some("token-2".into()));
    setup.wait_for("401s", || setup.stat("wasm_epp_discovery_failure") >= 2.0);
    assert_eq!(setup.stat("wasm_epp_discovery_failing"), 1.0);
    assert_eq!(setup.served(10, "during 401").len(), 10, "the last known pool still serves");

    // The kubelet rotates the projected token: Envoy re-reads it, no restart, no plugin change.
    setup.tokens.rotate("token-2").unwrap();
    setup.wait_for("discovery to recover", || setup.stat("wasm_epp_discovery_failing") == 0.0);
    assert!(setup
        .kube
        .requests()
        .iter()
        .any(|r| r.authorization.as_deref() == Some("Bearer token-2") && r.status == 200));
    assert_eq!(setup.log_count("kubernetes discovery failing"), 1, "logged once, not per tick");
    assert_eq!(setup.log_count("kubernetes discovery working again"), 1);
}

/// The fallback runs on every Envoy the filter does (1.36 refuses the injector's
/// `header_value_prefix`; `make compat-smoke` runs this test there): the pool is listed
/// through a cluster with no upstream filters, and Envoy adds no credentials of its own.
#[test]
fn a_plain_api_cluster_as_behind_kubectl_proxy_lists_the_pool() {
    let setup = KubeSetup::start_with("kube-plain", 28, 2, json!({}), |_| {}, ApiAccess::KubectlProxy);
    setup.wait_for_pool(2, 2);
    let served = setup.served(20, "through the proxy");
    assert!(served.iter().all(|pod| *pod == setup.address(1) || *pod == setup.address(2)), "{served:?}");
    let seen = setup.kube.requests();
    assert!(!seen.is_empty() && seen.iter().all(|r| r.authorization.is_none()), "{:?}", seen.first());
}

#[test]
fn a_token_the_api_server_refuses_means_no_pool_and_a_clear_503() {
    let setup = KubeSetup::start("kube-401", 24, 1, json!({}), |kube| {
        kube.update(|state| state.required_token = Some("not-what-envoy-has".into()));
    });
    setup.wait_for("failures", || setup.stat("wasm_epp_discovery_failure") >= 5.0);
    assert_eq!(setup.stat("wasm_epp_discovery_pods"), 0.0);
    let reply = setup.complete("nobody home");
    assert_eq!(reply.status, 503, "{}", reply.body);
    assert!(setup.envoy.log().contains("401 Unauthorized"));
    assert_eq!(setup.log_count("kubernetes discovery failing"), 1, "one line for many failed lists");
}

#[test]
fn an_api_server_outage_keeps_the_last_known_pool() {
    let setup = KubeSetup::start("kube-outage", 25, 2, json!({}), |_| {});
    setup.wait_for_pool(2, 2);
    let outages = [
        Outage::Status(503),
        Outage::Garbage,
        Outage::Status(403),
        Outage::Hang(Duration::from_secs(3)),
        Outage::Close,
    ];
    for (i, outage) in outages.into_iter().enumerate() {
        let failures = setup.stat("wasm_epp_discovery_failure");
        setup.kube.update(|state| state.outage = Some(outage.clone()));
        setup.wait_for(&format!("{outage:?} to be noticed"), || {
            setup.stat("wasm_epp_discovery_failure") >= failures + 2.0
        });
        assert_eq!(setup.stat("wasm_epp_pods_total"), 2.0, "{outage:?}: the pool is kept");
        let served = setup.served(10, &format!("outage {i}"));
        assert!(served.iter().all(|pod| *pod == setup.address(1) || *pod == setup.address(2)));
    }
    // Each kind of failure is one log line; so is the recovery.
    assert_eq!(setup.log_count("kubernetes discovery failing"), 5, "{}", setup.envoy.log_tail(30));
    let third = Pod::start_on("127.0.25.3", setup.port, &SIM_ARGS, &setup.dir).unwrap();
    setup.kube.update(|state| {
        state.outage = None;
        state.put_pod(FakePod::ready("vllm-3", &third.host, &[("app", "vllm")]));
    });
    setup.wait_for_pool(3, 3);
    assert_eq!(setup.stat("wasm_epp_discovery_failing"), 0.0);
}

#[test]
fn an_inference_pool_names_the_selector_and_the_port() {
    let setup = KubeSetup::start(
        "kube-inference-pool",
        26,
        2,
        json!({"label_selector": null, "target_port": null, "inference_pool": "qwen-pool"}),
        |kube| {
            kube.update(|state| {
                state.update_pod("vllm-2", |pod| {
                    pod.labels.insert("pool".into(), "qwen".into());
                });
                state.put_pod(FakePod::ready("unrelated", "127.0.26.50", &[("app", "vllm")]));
            });
        },
    );
    setup.wait_for("404s for the missing pool", || setup.stat("wasm_epp_discovery_failure") >= 2.0);
    assert!(setup.envoy.log().contains("404 Not Found"));
    let pool = json!({
        "apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
        "metadata": {"name": "qwen-pool", "namespace": "llm"},
        "spec": {"selector": {"matchLabels": {"app": "vllm", "pool": "qwen"}},
                 "targetPorts": [{"number": setup.port}],
                 "endpointPickerRef": {"name": "unused-epp", "portNumber": 9002}}
    });
    setup.kube.update(|state| state.put_inference_pool("inference.networking.k8s.io/v1", "qwen-pool", pool));
    setup.wait_for_pool(1, 1);
    assert!(setup.served(10, "pool").iter().all(|pod| *pod == setup.address(2)));
}

#[test]
fn a_joining_pod_gets_no_traffic_until_it_is_scraped() {
    let setup = KubeSetup::start("kube-joining", 27, 3, json!({}), |kube| {
        kube.update(|state| state.update_pod("vllm-3", |pod| pod.ready = false));
    });
    setup.wait_for_pool(2, 2);
    // vllm-3 turns Ready in Kubernetes, but its /metrics fails: listed, never scraped.
    setup.pods[2].set_faults(&json!({"metrics_fail": true})).unwrap();
    setup.kube.update(|state| state.update_pod("vllm-3", |pod| pod.ready = true));
    setup.wait_for("the third pod in the table", || setup.stat("wasm_epp_pods_total") == 3.0);
    let served = setup.served(40, "joining");
    assert!(!served.contains(&setup.address(3)), "an unscraped pod got traffic while others were healthy");
    assert_eq!(setup.stat("wasm_epp_pods_healthy"), 2.0);
    setup.pods[2].clear_faults().unwrap();
    setup.wait_for_pool(3, 3);
    assert!(setup.served(60, "scraped").contains(&setup.address(3)));
}

/// A pod whose readiness probe times out for a moment under load (NotReady, then Ready again)
/// is the same engine, its KV cache warm: back in the pool, its prompts go back to it.
#[test]
fn a_pod_not_ready_for_a_moment_keeps_its_prefix_affinity() {
    let setup = KubeSetup::start("kube-flap", 30, 3, json!({}), |_| {});
    setup.wait_for_pool(3, 3);
    let shared = (0..300).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" ");
    let prompt = |n: usize| format!("{shared} question {n}");
    let home = setup.complete(&prompt(0)).served_by().unwrap_or_default().to_string();
    let host = (1..=3).find(|&h| setup.address(h) == home).unwrap_or_else(|| panic!("served by {home}"));
    std::thread::sleep(e2e::TABLE_REACHES_WORKERS); // the other worker learns the decision
    let affinity = || setup.stat("wasm_epp_affinity_picks");
    let before = affinity();
    assert_eq!(setup.complete(&prompt(1)).served_by(), Some(home.as_str()));
    assert_eq!(affinity(), before + 1.0, "warm before it turns NotReady");
    let name = format!("vllm-{host}");
    setup.kube.update(|state| state.update_pod(&name, |pod| pod.ready = false));
    setup.wait_for_pool(2, 2);
    std::thread::sleep(e2e::TABLE_REACHES_WORKERS); // every worker ticks with it gone
    assert!(!setup.served(6, "away").contains(&home), "routed to a pod out of the pool");
    setup.kube.update(|state| state.update_pod(&name, |pod| pod.ready = true));
    setup.wait_for_pool(3, 3);
    std::thread::sleep(e2e::TABLE_REACHES_WORKERS);
    let before = affinity();
    assert_eq!(setup.complete(&prompt(2)).served_by(), Some(home.as_str()), "the prompt left its warm pod");
    assert_eq!(affinity(), before + 1.0, "picked for its cache, not by chance");
    assert_eq!(setup.stat("wasm_epp_pod_caches_dropped"), 0.0, "its epoch stood");
}

/// Several pools behind one Envoy in Kubernetes (the Helm chart's `pools`): each pool's
/// singleton lists its own selector from the same API server, and each route's requests go
/// to that pool's pods only.
#[test]
fn two_pools_each_discover_their_own_pods() {
    let (block, port) = (29, launcher::free_port().unwrap());
    let dir = launcher::paths::run_dir("kube-two-pools").unwrap();
    let pods: Vec<Pod> =
        (1..=4).map(|i| Pod::start_on(&format!("127.0.{block}.{i}"), port, &SIM_ARGS, &dir).unwrap()).collect();
    let kube = FakeKube::start("llm").unwrap();
    kube.update(|state| {
        for (i, pod) in pods.iter().enumerate() {
            let app = if i < 2 { "vllm-alpha" } else { "vllm-beta" };
            state.put_pod(FakePod::ready(&format!("vllm-{}", i + 1), &pod.host, &[("app", app)]));
        }
    });
    let tokens = TokenDir::create(&dir.join("serviceaccount"), "token-1").unwrap();
    let sds = dir.join("kubernetes-token-sds.yaml");
    write_token_sds(&sds, &tokens.token_path()).unwrap();
    let pool = |name: &str| {
        let kubernetes = json!({
            "namespace": "llm", "label_selector": format!("app=vllm-{name}"), "target_port": port,
            "relist_interval_ms": 200, "timeout_ms": 500
        });
        let route = json!({ "prefix": "/", "headers": [{ "name": "x-pool", "string_match": { "exact": name } }] });
        let filter = json!({ "fallback_destinations": 0 });
        ServedPool::new(name, &[], route, filter, json!({ "kubernetes": kubernetes, "poll_interval_ms": 100 }))
    };
    let (listen, admin) = (launcher::free_port().unwrap(), launcher::free_port().unwrap());
    let mut options = EnvoyOptions::for_pools(vec![pool("alpha"), pool("beta")], listen, admin);
    options.cluster_mode = launcher::envoy::ClusterMode::OriginalDst;
    let envoy = start_kube_envoy(&options, &kubernetes_overlay(kube.port(), &sds, tokens.dir()), &dir)
        .unwrap_or_else(|e| panic!("envoy: {e}"));
    let healthy = |name: &str| envoy.stat(&format!("wasm_epp_pods_healthy{{pool=\"{name}\"}}")).unwrap_or(0.0);
    assert!(
        launcher::wait_until(WAIT, || healthy("alpha") == 2.0 && healthy("beta") == 2.0),
        "each pool's singleton should list and scrape its own 2 pods:\n{}",
        envoy.log_tail(30)
    );
    for (name, hosts) in [("alpha", [1, 2]), ("beta", [3, 4])] {
        let members: Vec<String> = hosts.iter().map(|h| format!("127.0.{block}.{h}:{port}")).collect();
        for i in 0..10 {
            let body = json!({"model": "sim-model", "prompt": format!("{name} {i}"), "max_tokens": 4}).to_string();
            let reply = http::post(&envoy.url("/v1/completions"), &[("x-pool", name)], &body, Duration::from_secs(30))
                .unwrap_or_else(|e| panic!("request failed: {e}"));
            assert_eq!(reply.status, 200, "{}", reply.body);
            let pod = reply.served_by().unwrap_or_default();
            assert!(members.iter().any(|m| m == pod), "{name} request {i} served by {pod}, not one of {members:?}");
        }
        assert_eq!(envoy.stat(&format!("wasm_epp_discovery_pods{{pool=\"{name}\"}}")), Some(2.0), "{name}");
    }
    drop(kube);
}
