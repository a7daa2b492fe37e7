//! Many models and LoRA adapters in one pool, and the Endpoint Picker Protocol's headers,
//! through a real Envoy: model filtering, adapter affinity, weighted rewrites, the subset hint,
//! the dropped-reason header and the served endpoint.

use std::time::Duration;

use e2e::{tally, Cluster};

/// Pod 0 serves `llama`; pods 1 and 2 serve `qwen` with adapters (pod 2 has one more).
fn mixed_pool(name: &str, adjust: impl FnOnce(&mut launcher::envoy::EnvoyOptions)) -> Cluster {
    let fast = ["--time-scale", "0"];
    let llama = [&fast[..], &["--model", "llama"]].concat();
    let qwen = [&fast[..], &["--model", "qwen", "--lora-adapters", "sql-lora,chat-lora", "--max-loras", "2"]].concat();
    let qwen_more =
        [&fast[..], &["--model", "qwen", "--lora-adapters", "sql-lora,chat-lora,legal-lora", "--max-loras", "2"]]
            .concat();
    let cluster = Cluster::start_mixed(name, &[llama, qwen, qwen_more], adjust);
    // Base models come with the first scrape; adapter lists with the first /v1/models round,
    // later on a loaded machine: until then a request for an adapter is answered 404. The
    // gateway's own list shows when its table has them all.
    let listed = || -> Vec<String> {
        let reply = launcher::http::get(&cluster.envoy.url("/v1/models"), Duration::from_secs(10)).ok();
        let list: serde_json::Value = reply.and_then(|r| serde_json::from_str(&r.body).ok()).unwrap_or_default();
        let models = list["data"].as_array().cloned().unwrap_or_default();
        models.iter().filter_map(|m| m["id"].as_str().map(str::to_owned)).collect()
    };
    let every = ["llama", "qwen", "sql-lora", "chat-lora", "legal-lora"];
    let complete = launcher::wait_until(Duration::from_secs(15), || {
        let ids = listed();
        every.iter().all(|model| ids.iter().any(|id| id == model))
    });
    assert!(complete, "the gateway lists {:?}, not every model of the pool", listed());
    std::thread::sleep(e2e::TABLE_REACHES_WORKERS); // the other worker's table too
    cluster
}

/// A pod registering more adapters than the gateway's lists keep (64 per pod) serves the rest
/// too: a request for one of those reaches it (not the gateway's 404), and a name no pod
/// serves is still answered 404, by that pod.
#[test]
fn an_adapter_past_a_pods_listed_bound_is_served_not_refused_as_unknown() {
    let adapters = (0..100).map(|i| format!("tenant-{i}")).collect::<Vec<_>>().join(",");
    let many = vec!["--time-scale", "0", "--model", "qwen", "--max-loras", "4", "--lora-adapters", &adapters];
    let llama = vec!["--time-scale", "0", "--model", "llama"];
    let cluster = Cluster::start_mixed("models-many-adapters", &[llama, many], |_| {});
    let pods = cluster.pool();
    // The adapter lists come with the first /v1/models round: wait until a listed one routes.
    let listed =
        launcher::wait_until(Duration::from_secs(15), || cluster.complete_model("tenant-3", "warm", &[]).status == 200);
    assert!(listed, "{}", cluster.envoy.log_tail(20));
    std::thread::sleep(e2e::TABLE_REACHES_WORKERS);
    for i in [3, 63, 64, 90, 99] {
        let model = format!("tenant-{i}");
        let reply = cluster.complete_model(&model, &format!("t {i}"), &[]);
        assert_eq!((reply.status, cluster.served_by_pool(&reply)), (200, pods[1].clone()), "{model}: {}", reply.body);
    }
    let unknown = cluster.complete_model("gpt-9", "x", &[]);
    assert_eq!(unknown.status, 404, "{}", unknown.body);
    assert_eq!(unknown.header("x-wasm-epp"), None, "answered by the pod whose list was cut");
    assert_eq!(cluster.served_by_pool(&unknown), pods[1]);
    let llama = cluster.complete_model("llama", "l", &[]);
    assert_eq!((llama.status, cluster.served_by_pool(&llama)), (200, pods[0].clone()), "listed names as before");
}

/// The ids of the gateway's `GET /v1/models` (empty if it does not answer a list).
fn gateway_model_ids(cluster: &Cluster) -> Vec<String> {
    let reply = launcher::http::get(&cluster.envoy.url("/v1/models"), Duration::from_secs(10)).ok();
    let list: serde_json::Value = reply.and_then(|r| serde_json::from_str(&r.body).ok()).unwrap_or_default();
    let models = list["data"].as_array().cloned().unwrap_or_default();
    models.iter().filter_map(|m| m["id"].as_str().map(str::to_owned)).collect()
}

/// Two pods of one base model registering different sets of 100 adapters (`alpha-000`... on
/// pod 0, `beta-000`... on pod 1: the simulator lists them sorted, so #64..#99 of each set are
/// the ones past the default bound), the pool service keeping `max_names_per_pod` names (its
/// default without). Returns the cluster, each adapter with the pod that registered it, once
/// the first model-list round is in the table.
fn two_tenant_sets(name: &str, max_names_per_pod: Option<u32>) -> (Cluster, Vec<(String, String)>) {
    let set = |prefix: &str| (0..100).map(|i| format!("{prefix}-{i:03}")).collect::<Vec<_>>();
    let (alpha, beta) = (set("alpha").join(","), set("beta").join(","));
    let pod = |adapters| vec!["--time-scale", "0", "--model", "qwen", "--max-loras", "4", "--lora-adapters", adapters];
    let cluster = Cluster::start_mixed(name, &[pod(&alpha), pod(&beta)], |options| {
        if let (Some(poller), Some(names)) = (options.poller_config.as_mut(), max_names_per_pod) {
            poller["max_names_per_pod"] = names.into();
        }
    });
    let pods = cluster.pool();
    let owned =
        |prefix, pod: &String| set(prefix).into_iter().map(|adapter| (adapter, pod.clone())).collect::<Vec<_>>();
    let adapters: Vec<(String, String)> = [owned("alpha", &pods[0]), owned("beta", &pods[1])].concat();
    // Wait until the last name each pod's list keeps routes to it.
    let last = max_names_per_pod.unwrap_or(64).min(100) - 1;
    let listed = launcher::wait_until(Duration::from_secs(15), || {
        adapters.iter().filter(|(adapter, _)| adapter.ends_with(&format!("-{last:03}"))).all(|(adapter, owner)| {
            let reply = cluster.complete_model(adapter, "warm", &[]);
            reply.status == 200 && reply.served_by() == Some(owner)
        })
    });
    assert!(listed, "{}", cluster.envoy.log_tail(20));
    std::thread::sleep(Duration::from_millis(500) + e2e::TABLE_REACHES_WORKERS);
    (cluster, adapters)
}

/// Each adapter asked for once: how many reached the pod that registered it, and the rest.
fn route_every_adapter(cluster: &Cluster, adapters: &[(String, String)]) -> (usize, Vec<String>) {
    let mut misrouted = Vec::new();
    for (adapter, owner) in adapters {
        let reply = cluster.complete_model(adapter, &format!("for {adapter}"), &[]);
        let served = reply.served_by().unwrap_or("the gateway").to_owned();
        if (reply.status, &served) != (200, owner) {
            misrouted.push(format!("{adapter} → {} from {served}", reply.status));
        }
    }
    (adapters.len() - misrouted.len(), misrouted)
}

/// Pods registering more adapters than the default bound, each a different set: with
/// `max_names_per_pod` 256 every adapter (#64..#99 too) reaches the pod that registered it and
/// the gateway lists them all. The default bound's figures are printed beside them (some go to
/// the other pod, which answers 404; the list is one pod's): the before-figure, not asserted.
#[test]
fn two_pods_with_different_sets_of_100_adapters_each_get_their_own_with_max_names_per_pod_256() {
    let (cluster, adapters) = two_tenant_sets("models-tenant-sets-default", None);
    let (right, misrouted) = route_every_adapter(&cluster, &adapters);
    let listed = gateway_model_ids(&cluster);
    eprintln!(
        "default bound (64): {right} of {} adapters reached the pod that registered them; {} did not \
         (e.g. {:?}); the gateway's GET /v1/models listed {} ids",
        adapters.len(),
        misrouted.len(),
        misrouted.iter().take(3).collect::<Vec<_>>(),
        listed.len()
    );
    drop(cluster);

    let (cluster, adapters) = two_tenant_sets("models-tenant-sets-256", Some(256));
    let (right, misrouted) = route_every_adapter(&cluster, &adapters);
    eprintln!("max_names_per_pod 256: {right} of {} adapters reached the pod that registered them", adapters.len());
    assert!(misrouted.is_empty(), "{} misrouted: {misrouted:?}", misrouted.len());
    let listed = gateway_model_ids(&cluster);
    let missing: Vec<&String> =
        adapters.iter().map(|(adapter, _)| adapter).filter(|adapter| !listed.contains(adapter)).collect();
    assert!(missing.is_empty(), "the gateway's list lacks {missing:?}");
    assert_eq!(listed.len(), adapters.len() + 1, "every adapter and the base model, once: {listed:?}");
    let unknown = cluster.complete_model("gamma-000", "x", &[]);
    assert_eq!(
        (unknown.status, unknown.header("x-wasm-epp")),
        (404, Some("local-reply")),
        "lists whole: the gateway's 404"
    );
}

#[test]
fn requests_reach_only_pods_serving_their_model_and_unknown_models_get_404_from_the_gateway() {
    let cluster = mixed_pool("models-filter", |_| {});
    let pods = cluster.pool();
    for i in 0..20 {
        let llama = cluster.complete_model("llama", &format!("l {i}"), &[]);
        assert_eq!((llama.status, cluster.served_by_pool(&llama)), (200, pods[0].clone()), "{}", llama.body);
        let legal = cluster.complete_model("legal-lora", &format!("g {i}"), &[]);
        assert_eq!((legal.status, cluster.served_by_pool(&legal)), (200, pods[2].clone()), "{}", legal.body);
        let qwen = cluster.complete_model("qwen", &format!("q {i}"), &[]);
        assert_ne!(cluster.served_by_pool(&qwen), pods[0], "qwen never goes to the llama pod");
    }
    let unknown = cluster.complete_model("gpt-9", "x", &[]);
    assert_eq!(unknown.status, 404, "{}", unknown.body);
    assert_eq!(unknown.header("x-wasm-epp"), Some("local-reply"), "answered by the gateway, not a pod");
    assert!(unknown.body.contains("The model `gpt-9` does not exist."), "{}", unknown.body);
    assert_eq!(cluster.pods_stat("model_not_found"), 0, "no pod ever saw a model it does not serve");
    // Counted by model, the name a Prometheus label (the bootstrap's `model` tag rule).
    for model in ["llama", "legal-lora", "qwen"] {
        let series = format!("wasm_epp_model_requests{{model=\"{model}\"}}");
        launcher::wait_until(Duration::from_secs(2), || cluster.envoy.stat(&series) == Some(20.0));
        assert_eq!(cluster.envoy.stat(&series), Some(20.0), "{series}");
    }
}

#[test]
fn the_gateway_lists_every_model_and_adapter_of_the_pool_the_same_on_every_call() {
    let cluster = mixed_pool("models-list", |options| {
        options.filter_config["models"] = serde_json::json!({"rewrites": [{"model": "assistant", "targets": [
            {"model": "sql-lora", "weight": 1}]}]});
    });
    let answered_before = cluster.envoy.stat("wasm_epp_model_lists_answered").unwrap_or(0.0);
    // Routed to a pod, each call would list that pod's models only: llama, or qwen with two or
    // three adapters. The gateway lists the pool's, bases first, each adapter with its base.
    let expected = serde_json::json!([
        ["assistant", null],
        ["llama", null],
        ["qwen", null],
        ["chat-lora", "qwen"],
        ["legal-lora", "qwen"],
        ["sql-lora", "qwen"]
    ]);
    for _ in 0..12 {
        let reply = launcher::http::get(&cluster.envoy.url("/v1/models"), Duration::from_secs(10)).unwrap();
        assert_eq!((reply.status, reply.header("x-wasm-epp")), (200, Some("local-reply")), "{}", reply.body);
        let list: serde_json::Value = serde_json::from_str(&reply.body).unwrap();
        let listed: Vec<_> =
            list["data"].as_array().unwrap().iter().map(|m| serde_json::json!([m["id"], m["parent"]])).collect();
        assert_eq!(serde_json::Value::from(listed), expected, "{}", reply.body);
    }
    assert_eq!(cluster.envoy.stat("wasm_epp_requests_routed"), Some(0.0), "no pod was asked");
    let answered = || cluster.envoy.stat("wasm_epp_model_lists_answered").unwrap_or(0.0) - answered_before;
    launcher::wait_until(Duration::from_secs(2), || answered() == 12.0);
    assert_eq!(answered(), 12.0);
}

#[test]
fn a_gateway_rewrite_header_sends_the_request_as_its_model() {
    let cluster = mixed_pool("models-rewrite-header", |_| {});
    let pods = cluster.pool();
    for header in ["x-llm-d-model-name-rewrite", "x-gateway-model-name-rewrite"] {
        let reply = cluster.complete_model("qwen", "rewrite me", &[(header, "legal-lora")]);
        assert_eq!((reply.status, cluster.served_by_pool(&reply)), (200, pods[2].clone()), "{header}: {}", reply.body);
        let answer: serde_json::Value = serde_json::from_str(&reply.body).unwrap();
        assert_eq!(answer["model"], "legal-lora", "{header}: the pod got the header's model in the body");
    }
    assert_eq!(cluster.pods_stat("model_not_found"), 0);
}

#[test]
fn adapter_requests_stick_to_the_pod_holding_the_adapter() {
    let args: Vec<&str> =
        vec!["--time-scale", "0", "--lora-adapters", "a,b,c,d,e,f,g,h", "--max-loras", "2", "--lora-load-ms", "50"];
    let cluster = Cluster::start_mixed("models-affinity", &[args.clone(), args.clone(), args.clone(), args], |_| {});
    let first = cluster.complete_model("a", "first", &[]);
    assert_eq!(first.status, 200, "{}", first.body);
    let holder = cluster.served_by_pool(&first);
    // The next scrape (100 ms) shows `a` resident on its pod.
    std::thread::sleep(Duration::from_millis(500));
    let served: Vec<String> =
        (0..30).map(|i| cluster.served_by_pool(&cluster.complete_model("a", &format!("again {i}"), &[]))).collect();
    let counts = tally(served.iter().map(String::as_str));
    assert_eq!(counts.get(&holder), Some(&30), "all on the pod holding the adapter: {counts:?}");
    assert_eq!(cluster.pods_stat("lora_adapter_loads"), 1, "loaded once in the whole pool");
}

#[test]
fn a_rewritten_model_is_split_by_weight_within_five_percent() {
    let cluster = mixed_pool("models-rewrite", |options| {
        options.filter_config["models"] = serde_json::json!({"rewrites": [{"model": "assistant", "targets": [
            {"model": "sql-lora", "weight": 70}, {"model": "chat-lora", "weight": 30}]}]});
    });
    let mut answered_as = std::collections::BTreeMap::new();
    for i in 0..1000 {
        let reply = cluster.complete_model("assistant", &format!("split {i}"), &[]);
        assert_eq!(reply.status, 200, "{}", reply.body);
        let body: serde_json::Value = serde_json::from_str(&reply.body).unwrap();
        *answered_as.entry(body["model"].as_str().unwrap_or_default().to_owned()).or_insert(0) += 1;
    }
    let sql = answered_as.get("sql-lora").copied().unwrap_or(0);
    println!("rewrite split over 1,000 requests: {answered_as:?}");
    assert_eq!(answered_as.values().sum::<i32>(), 1000, "every answer names a target: {answered_as:?}");
    assert!((650..=750).contains(&sql), "70 % ± 5 % to sql-lora: {answered_as:?}");
    assert_eq!(cluster.pods_stat("model_not_found"), 0);
}

/// A gateway filter before the plugin (after the one removing clients' destination headers)
/// that writes the subset hint header from a test header, as a gateway would from its own view
/// of the pool.
fn subset_header_gateway() -> serde_json::Value {
    let lua = r#"
function envoy_on_request(handle)
  local hint = handle:headers():get("x-test-gateway-subset")
  if hint ~= nil then handle:headers():replace("x-gateway-destination-endpoint-subset", hint) end
end
"#;
    serde_json::json!({"name": "envoy.filters.http.lua", "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua",
        "default_source_code": {"inline_string": lua}}})
}

#[test]
fn the_subset_hint_limits_the_pick_and_an_empty_subset_is_refused_with_its_reason() {
    let cluster = mixed_pool("models-subset", |options| options.filters_before_plugin.push(subset_header_gateway()));
    let pods = cluster.pool();
    let subset = [("x-test-gateway-subset", pods[2].as_str())];
    for i in 0..10 {
        let reply = cluster.complete_model("qwen", &format!("s {i}"), &subset);
        assert_eq!(cluster.served_by_pool(&reply), pods[2]);
    }
    let outside = [("x-test-gateway-subset", "10.255.255.1:8000")];
    let refused = cluster.complete_model("qwen", "none", &outside);
    assert_eq!(refused.status, 503, "{}", refused.body);
    assert_eq!(refused.header("x-llm-d-request-dropped-reason"), Some("rejected-no-endpoints"));
    // A client's own hint is removed before the plugin: it cannot choose its pod.
    let forged = [("x-gateway-destination-endpoint-subset", pods[2].as_str())];
    let served: Vec<String> =
        (0..20).map(|i| cluster.served_by_pool(&cluster.complete_model("qwen", &format!("f {i}"), &forged))).collect();
    assert!(served.contains(&pods[1]), "the client's hint was followed: {served:?}");
}

#[test]
fn a_sheddable_objective_is_refused_with_rejected_saturated_when_the_pool_is_saturated() {
    let cluster = mixed_pool("models-dropped", |options| {
        options.filter_config["models"] = serde_json::json!({"objectives": {"batch": -1}});
    });
    cluster.pods[0].set_faults(&serde_json::json!({"report": {"waiting": 500}})).unwrap();
    e2e::wait_for_pod_gauge(&cluster.envoy, "waiting", &cluster.pods[0].address(), 500.0);
    let refused = cluster.complete_model("llama", "later", &[("x-llm-d-inference-objective", "batch")]);
    assert_eq!(refused.status, 429, "{}", refused.body);
    assert_eq!(refused.header("x-llm-d-request-dropped-reason"), Some("rejected-saturated"));
    let normal = cluster.complete_model("llama", "now", &[]);
    assert_eq!(normal.status, 200, "no objective: served anyway");
}

#[test]
fn the_answering_pod_is_reported_in_the_served_endpoint_header() {
    let cluster = mixed_pool("models-served", |_| {});
    for i in 0..10 {
        let reply = cluster.complete_model("qwen", &format!("who {i}"), &[]);
        let served = reply.header("x-gateway-destination-endpoint-served");
        assert_eq!(served, reply.served_by(), "the header names the pod that answered");
    }
}

/// A Lua filter before the plugin sets the subset hint where the Endpoint Picker Protocol
/// puts it, Envoy's dynamic metadata (namespace `envoy.lb.subset_hint`, a list of `ip:port`),
/// from a test header, as a gateway would from its own view of the pool; from
/// `x-test-subset-metadata-text` as one comma-separated string instead.
fn subset_metadata_filter() -> serde_json::Value {
    let lua = r#"
local namespace, key = "envoy.lb.subset_hint", "x-gateway-destination-endpoint-subset"
function envoy_on_request(handle)
  local text = handle:headers():get("x-test-subset-metadata-text")
  if text ~= nil then
    handle:streamInfo():dynamicMetadata():set(namespace, key, text)
  end
  local hint = handle:headers():get("x-test-subset-metadata")
  if hint == nil then return end
  local list = {}
  for entry in string.gmatch(hint, "[^,]+") do table.insert(list, entry) end
  handle:streamInfo():dynamicMetadata():set(namespace, key, list)
end
"#;
    serde_json::json!({"name": "envoy.filters.http.lua", "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua",
        "default_source_code": {"inline_string": lua}}})
}

#[test]
fn the_subset_hint_in_envoy_metadata_limits_the_pick_and_wins_over_the_header() {
    let cluster = mixed_pool("models-subset-metadata", |options| {
        options.filters_before_plugin.push(subset_header_gateway());
        options.filters_before_plugin.push(subset_metadata_filter());
        options.filter_config["models"] = serde_json::json!({"subset_metadata_namespace": "envoy.lb.subset_hint"});
    });
    let pods = cluster.pool();
    let both = format!("{},{}", pods[1], pods[2]);
    for i in 0..10 {
        let only_two = [("x-test-subset-metadata", pods[2].as_str())];
        assert_eq!(cluster.served_by_pool(&cluster.complete_model("qwen", &format!("m {i}"), &only_two)), pods[2]);
        let against_header =
            [("x-test-subset-metadata", pods[1].as_str()), ("x-test-gateway-subset", pods[2].as_str())];
        let reply = cluster.complete_model("qwen", &format!("h {i}"), &against_header);
        assert_eq!(cluster.served_by_pool(&reply), pods[1], "the metadata wins over the header");
        let listed = [("x-test-subset-metadata", both.as_str())];
        assert_ne!(cluster.served_by_pool(&cluster.complete_model("qwen", &format!("b {i}"), &listed)), pods[0]);
        let text = [("x-test-subset-metadata-text", pods[1].as_str())];
        assert_eq!(cluster.served_by_pool(&cluster.complete_model("qwen", &format!("t {i}"), &text)), pods[1]);
    }
    let outside = [("x-test-subset-metadata", "10.255.255.1:8000")];
    let refused = cluster.complete_model("qwen", "none", &outside);
    assert_eq!(refused.status, 503, "{}", refused.body);
    assert_eq!(refused.header("x-llm-d-request-dropped-reason"), Some("rejected-no-endpoints"));
}

#[test]
fn a_request_held_by_flow_control_is_rewritten_and_kept_in_its_subset_when_released() {
    let cluster = mixed_pool("models-flow", |options| {
        // One worker (one queue), one request in flight per pod: three fill the pool.
        options.concurrency = 1;
        options.filters_before_plugin.push(subset_metadata_filter());
        options.filter_config["fallback_destinations"] = serde_json::json!(0);
        options.filter_config["flow_control"] =
            serde_json::json!({"enabled": true, "max_inflight_per_pod": 1, "ttl_ms": 10000});
        options.filter_config["models"] = serde_json::json!({"rewrites": [{"model": "legal-assistant",
            "targets": [{"model": "legal-lora", "weight": 1}]}], "subset_metadata_namespace": "envoy.lb.subset_hint"});
    });
    let pods = cluster.pool();
    for pod in &cluster.pods {
        // The blockers hang at their pods until both others wait: a fixed pause and latency let
        // late blockers on a loaded machine leave the queue empty.
        pod.set_faults(&serde_json::json!({"hang": true})).unwrap();
    }
    let (cluster, pods) = (&cluster, &pods);
    let flow_stat = |name: &str, count: f64| {
        let series = format!("wasm_epp_flow_{name}");
        let reached = launcher::wait_until(Duration::from_secs(10), || cluster.envoy.stat(&series) >= Some(count));
        assert!(reached, "{series} never reached {count}: {:?}", cluster.envoy.stat(&series));
    };
    let (rewritten, hinted) = std::thread::scope(|scope| {
        for (i, pod) in pods.iter().enumerate() {
            let model = if i == 0 { "llama" } else { "qwen" };
            scope.spawn(move || cluster.complete_model(model, "blocker", &[("x-test-subset-metadata", pod)]));
        }
        flow_stat("dispatched_directly", 3.0);
        let rewritten = scope.spawn(|| cluster.complete_model("legal-assistant", "waits", &[]));
        let hinted = scope.spawn(|| cluster.complete_model("qwen", "waits", &[("x-test-subset-metadata", &pods[1])]));
        flow_stat("queued", 2.0);
        for pod in &cluster.pods {
            pod.set_faults(&serde_json::json!({"hang": false})).unwrap();
        }
        (rewritten.join().unwrap(), hinted.join().unwrap())
    });
    assert!(cluster.envoy.stat("wasm_epp_flow_released").unwrap_or(0.0) >= 2.0, "both waited in the queue");
    // Only the blockers went on at once (late blockers once waited instead, and the requests
    // under test were never held: the count of releases alone did not tell).
    assert_eq!(cluster.envoy.stat("wasm_epp_flow_dispatched_directly"), Some(3.0), "the requests under test were held");
    assert_eq!(rewritten.status, 200, "{}", rewritten.body);
    let body: serde_json::Value = serde_json::from_str(&rewritten.body).unwrap();
    assert_eq!(body["model"], "legal-lora", "the pod was asked for the rewrite target");
    assert_eq!(cluster.served_by_pool(&rewritten), pods[2], "the only pod with legal-lora");
    assert_eq!((hinted.status, cluster.served_by_pool(&hinted)), (200, pods[1].clone()), "its hint");
    assert_eq!(cluster.pods_stat("model_not_found"), 0);
}

/// Endpoints beside the two the picker reads prompts from (`/tokenize`, the render endpoints,
/// and in vLLM embeddings, the Responses API, scoring...) also name a `model`: a JSON body's
/// `model` keeps them on pods serving it, as for completions.
#[test]
fn other_json_endpoints_reach_only_pods_serving_their_model() {
    let cluster = mixed_pool("models-other-endpoints", |_| {});
    let pods = cluster.pool();
    for i in 0..20 {
        let body = serde_json::json!({"model": "llama", "prompt": format!("count me {i}")}).to_string();
        let tokenized = cluster.post("/tokenize", &[], &body);
        assert_eq!(
            (tokenized.status, cluster.served_by_pool(&tokenized)),
            (200, pods[0].clone()),
            "{}",
            tokenized.body
        );
        let legal = serde_json::json!({"model": "legal-lora", "prompt": format!("render {i}")}).to_string();
        let rendered = cluster.post("/v1/completions/render", &[], &legal);
        assert_eq!((rendered.status, cluster.served_by_pool(&rendered)), (200, pods[2].clone()), "{}", rendered.body);
    }
    let unknown = cluster.post("/tokenize", &[], r#"{"model": "gpt-9", "prompt": "x"}"#);
    assert_eq!(unknown.status, 404, "{}", unknown.body);
    assert_eq!(unknown.header("x-wasm-epp"), Some("local-reply"), "answered by the gateway, not a pod");
    assert_eq!(cluster.pods_stat("model_not_found"), 0, "no pod ever saw a model it does not serve");
}

#[test]
fn retries_stay_on_the_pods_the_filter_named() {
    // Once the filter's list is used up, Envoy retries on the cluster's fallback policy, which
    // knows no models nor subsets: before the filter capped the retries at its list, every
    // request below was retried on a pod of another model and answered its 404.
    let cluster = mixed_pool("models-retries", |options| options.filters_before_plugin.push(subset_header_gateway()));
    let pods = cluster.pool();
    let fail = serde_json::json!({"fail_fraction": 1.0, "fail_status": 500});
    cluster.pods[0].set_faults(&fail).unwrap();
    for i in 0..8 {
        let llama = cluster.complete_model("llama", &format!("only pod {i}"), &[]);
        assert_eq!((llama.status, cluster.served_by_pool(&llama)), (500, pods[0].clone()), "{}", llama.body);
        assert!(llama.body.contains("Injected failure"), "the pod's own answer: {}", llama.body);
    }
    // Both qwen pods failing: each request tries both, then gets the last one's 500.
    cluster.pods[1].set_faults(&fail).unwrap();
    cluster.pods[2].set_faults(&fail).unwrap();
    let retries = || cluster.envoy.stat("envoy_cluster_upstream_rq_retry{envoy_cluster_name=\"pool\"}").unwrap_or(0.0);
    let retried_before = retries();
    for i in 0..8 {
        let qwen = cluster.complete_model("qwen", &format!("two pods {i}"), &[]);
        assert_eq!(qwen.status, 500, "{}", qwen.body);
        assert_ne!(cluster.served_by_pool(&qwen), pods[0], "qwen never goes to the llama pod");
    }
    let retried = retries();
    assert!(retried > retried_before, "the second qwen pod was tried ({retried_before} -> {retried} retries)");
    // A subset of one failing pod: the pod's answer, not another member's.
    let subset = [("x-test-gateway-subset", pods[2].as_str())];
    let hinted = cluster.complete_model("qwen", "subset", &subset);
    assert_eq!((hinted.status, cluster.served_by_pool(&hinted)), (500, pods[2].clone()), "{}", hinted.body);
    assert_eq!(cluster.pods_stat("model_not_found"), 0, "no pod ever saw a model it does not serve");
}
