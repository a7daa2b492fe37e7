//! `make run`'s environment, read and checked (`RunSetup::from_env`).

use super::*;

/// The setup from these variables alone.
fn setup(vars: &[(&str, &str)]) -> Result<RunSetup, String> {
    RunSetup::from_env(|name| vars.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string()))
}

#[test]
fn nothing_set_is_four_simulated_pods_behind_one_envoy() {
    let run = setup(&[]).unwrap();
    assert_eq!(run.sim_ports, [8001, 8002, 8003, 8004]);
    assert_eq!(run.pool, ["127.0.0.1:8001", "127.0.0.1:8002", "127.0.0.1:8003", "127.0.0.1:8004"]);
    assert_eq!((run.listen_port, run.admin_port, run.replicas), (10_000, 9_901, 1));
    assert_eq!(run.pod_args(0), ["--responses-store"], "previous_response_id works as the README shows");
    let options = run.envoy_options();
    assert_eq!(options.pool, run.pool);
    assert_eq!(options.filter_config, serde_json::json!({ "pool": run.pool }));
}

#[test]
fn pools_take_the_pods_in_turn_and_each_pod_serves_its_pools_name() {
    let run = setup(&[("POOLS", "llama, qwen"), ("SIM_ARGS", "--preset large")]).unwrap();
    let pools = run.served_pools();
    assert_eq!(
        pools.iter().map(|p| p.pods.clone()).collect::<Vec<_>>(),
        [["127.0.0.1:8001", "127.0.0.1:8003"], ["127.0.0.1:8002", "127.0.0.1:8004"]]
    );
    assert_eq!(run.pod_args(3), ["--responses-store", "--preset", "large", "--model", "qwen"]);
    assert_eq!(run.envoy_options().pools.len(), 2);
    assert!(setup(&[("POOLS", "a,b,c"), ("POD_PORTS", "9001,9002")]).unwrap_err().contains("3 pools"));
    assert!(setup(&[("POOLS", "a,b"), ("REPLICAS", "2")]).unwrap_err().contains("one at a time"));
}

#[test]
fn pod_addresses_start_no_simulator_and_are_the_pool_as_the_plugin_writes_it() {
    let run = setup(&[("POD_ADDRESSES", "10.0.0.7:8000, [fd00:0::1]:8000 ,"), ("REPLICAS", "2")]).unwrap();
    assert!(run.pods_run_already() && run.sim_ports.is_empty() && run.sim_args.is_empty());
    assert_eq!(run.pool, ["10.0.0.7:8000", "[fd00::1]:8000"], "canonical, as the header will name them");
    let options = run.envoy_options();
    assert_eq!(options.poller_config, Some(serde_json::json!({ "pool": run.pool, "poll_interval_ms": 100 })));
    let template = std::fs::read_to_string(crate::paths::envoy_template()).unwrap();
    let rendered = crate::envoy::render(&template, &options);
    assert!(rendered.contains(r#"socket_address: { address: "fd00::1", port_value: 8000 }"#), "{rendered}");
    assert!(!setup(&[]).unwrap().pods_run_already());
}

#[test]
fn pod_addresses_that_the_plugin_would_refuse_or_that_clash_are_named_before_anything_starts() {
    let refused = |value: &str| setup(&[("POD_ADDRESSES", value)]).unwrap_err();
    assert!(refused("vllm-0:8000").contains("'vllm-0:8000' is not a literal ip:port"), "{}", refused("x"));
    assert!(refused("::1:8000").contains("[addr]:port"));
    assert!(refused("10.0.0.7:8000,10.0.0.7:8000").contains("listed twice"));
    assert!(refused("10.0.0.7:0").contains("port 0"));
    assert_eq!(refused(" , "), "POD_ADDRESSES: no address");
    for other in ["POD_PORTS", "SIM_ARGS", "POOLS"] {
        let both = setup(&[("POD_ADDRESSES", "10.0.0.7:8000"), (other, "a")]).unwrap_err();
        assert!(both.starts_with(&format!("{other} and POD_ADDRESSES: one or the other")), "{both}");
    }
    // Set but empty is not set.
    assert!(setup(&[("POD_ADDRESSES", "10.0.0.7:8000"), ("SIM_ARGS", "")]).is_ok());
    assert!(!setup(&[("POD_ADDRESSES", "")]).unwrap().pods_run_already());
}

#[test]
fn the_suggested_request_names_the_first_model_a_pod_lists() {
    let answer = r#"{"object":"list","data":[{"id":"Qwen/Qwen3-8B","object":"model"},{"id":"lora-a"}]}"#;
    assert_eq!(first_model(answer).as_deref(), Some("Qwen/Qwen3-8B"));
    assert_eq!(first_model(r#"{"data":[]}"#), None);
    assert_eq!(first_model(r#"{"error":{"message":"Unauthorized"}}"#), None);
}

#[test]
fn a_filter_configuration_to_start_with_goes_to_every_mode_and_is_checked_first() {
    let dir = crate::paths::run_dir("run-setup-filter-config").unwrap();
    let path = dir.join("learning.json");
    std::fs::write(&path, r#"{"learning": {"enabled": true}}"#).unwrap();
    let file = path.to_str().unwrap();
    let one = setup(&[("FILTER_CONFIG", file)]).unwrap().envoy_options();
    assert_eq!(one.filter_config["learning"]["enabled"], true);
    assert_eq!(one.filter_config["pool"].as_array().map(Vec::len), Some(4), "make run's pool");
    let pools = setup(&[("FILTER_CONFIG", file), ("POOLS", "a,b")]).unwrap().envoy_options();
    assert!(pools.pools.iter().all(|pool| pool.filter_config["learning"]["enabled"] == true));
    let replicas = setup(&[("FILTER_CONFIG", file), ("REPLICAS", "2")]).unwrap();
    let plan = crate::replicas::ReplicaPlan::new(&replicas.pool, 2, true).unwrap();
    let mut replica = plan.options(1).unwrap();
    replicas.configure(&mut replica);
    assert_eq!(replica.filter_config["learning"]["enabled"], true);

    std::fs::write(&path, r#"{"flow_control": {"enabled": true}, "comparison": {"baseline_share": 0.5}}"#).unwrap();
    let refused = setup(&[("FILTER_CONFIG", file)]).unwrap_err();
    assert_eq!(
        refused,
        format!(
            "FILTER_CONFIG {file}: the plugin would refuse it: invalid configuration: comparison and \
             flow_control cannot be on together"
        )
    );
    assert!(setup(&[("POOLS", "Not_A_Label")]).unwrap_err().starts_with("the plugin would refuse make run's"));
}

#[test]
fn pod_roles_go_to_each_simulator_and_the_singleton_and_turn_pd_on() {
    let run = setup(&[("POD_ROLES", "prefill, prefill,decode,prefill-decode")]).unwrap();
    assert_eq!(run.pod_args(0), ["--responses-store", "--role", "prefill"]);
    assert_eq!(run.pod_args(3), ["--responses-store", "--role", "both"], "llm-d's name for both");
    let options = run.envoy_options();
    let roles = &options.poller_config.as_ref().unwrap()["roles"];
    assert_eq!(roles["127.0.0.1:8002"], "prefill");
    assert_eq!(roles["127.0.0.1:8003"], "decode");
    assert_eq!(options.filter_config["pd"], serde_json::json!({}), "P/D with its defaults");
    let replicas = setup(&[("POD_ROLES", "prefill,decode,decode,decode"), ("REPLICAS", "2")]).unwrap();
    let plan = crate::replicas::ReplicaPlan::new(&replicas.pool, 2, true).unwrap();
    let mut replica = plan.options(0).unwrap();
    replicas.configure(&mut replica);
    let poller = replica.poller_config.unwrap();
    assert_eq!((poller["roles"]["127.0.0.1:8001"].clone(), poller["peers"].is_object()), ("prefill".into(), true));

    // A pd section of FILTER_CONFIG's stays; roles of running pods go to the singleton alone.
    let dir = crate::paths::run_dir("run-setup-roles").unwrap();
    let path = dir.join("pd.json");
    std::fs::write(&path, r#"{"pd": {"threshold_tokens": 256}}"#).unwrap();
    let running = [
        ("POD_ADDRESSES", "10.0.0.1:8000,10.0.0.2:8000"),
        ("POD_ROLES", "prefill,decode"),
        ("FILTER_CONFIG", path.to_str().unwrap()),
    ];
    let run = setup(&running).unwrap();
    assert!(run.pod_args(0).is_empty());
    let options = run.envoy_options();
    assert_eq!(options.filter_config["pd"]["threshold_tokens"], 256);
    assert_eq!(options.poller_config.unwrap()["roles"]["10.0.0.1:8000"], "prefill");
}

#[test]
fn pod_roles_that_cannot_make_a_pool_are_named() {
    let refused = |vars: &[(&str, &str)]| setup(vars).unwrap_err();
    assert_eq!(
        refused(&[("POD_ROLES", "prefill,decode")]),
        "POD_ROLES: 2 roles for 4 pods (one per pod, in the pods' order)"
    );
    assert!(refused(&[("POD_ROLES", "prefill,decode,decoder,decode")]).contains("'decoder' is not prefill"));
    assert!(refused(&[("POD_ROLES", "prefill"), ("POD_PORTS", "9001")]).contains("no decode (or both) pod"));
    assert!(refused(&[("POD_ROLES", "decode,decode"), ("POOLS", "a")]).starts_with("POOLS and POD_ROLES"));
    let dir = crate::paths::run_dir("run-setup-roles-comparison").unwrap();
    let path = dir.join("comparison.json");
    std::fs::write(&path, r#"{"comparison": {"baseline_share": 0.5}}"#).unwrap();
    let both = refused(&[("POD_ROLES", "prefill,decode,decode,decode"), ("FILTER_CONFIG", path.to_str().unwrap())]);
    assert!(both.ends_with("comparison and pd cannot be on together"), "{both}");
}

#[test]
fn a_value_that_is_no_port_or_number_is_named() {
    assert_eq!(setup(&[("POD_PORTS", "8001,80x2")]).unwrap_err(), "POD_PORTS: '80x2' is not a port");
    assert!(setup(&[("LISTEN_PORT", "70000")]).unwrap_err().starts_with("LISTEN_PORT"));
    assert!(setup(&[("REPLICAS", "many")]).unwrap_err().starts_with("REPLICAS"));
}
