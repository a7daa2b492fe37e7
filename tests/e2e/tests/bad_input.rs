//! Bodies that are not what the filter expects still get a clear answer from a pool member
//! (or a 400 from the filter when configured so), never a hang or a dead VM.

use e2e::Cluster;

/// Path, extra headers, body.
type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, String);

#[test]
fn malformed_bodies_are_routed_and_the_vm_survives() {
    let cluster = Cluster::start_ready("bad-input", 2, &["--time-scale", "0"]);
    let deep = format!("{{\"prompt\":{}{}}}", "[".repeat(10_000), "]".repeat(10_000));
    let cases: Vec<Case<'_>> = vec![
        ("/v1/completions", vec![], "{\"model\": \"sim-model\", \"prompt\": ".into()),
        ("/v1/completions", vec![], String::new()),
        ("/v1/completions", vec![("content-type", "text/plain")], "just words".into()),
        ("/v1/chat/completions", vec![], r#"{"model":"sim-model","messages":"not a list"}"#.into()),
        ("/v1/completions", vec![], r#"{"model":7,"prompt":{"a":1}}"#.into()),
        ("/v1/completions", vec![], deep),
        ("/v1/no-such-endpoint", vec![], "{}".into()),
    ];
    for (path, headers, body) in &cases {
        let reply = cluster.post(path, headers, body);
        assert!(reply.status < 500, "{path} {body:.40}: {} {}", reply.status, reply.body);
        cluster.served_by_pool(&reply);
    }
    assert!(cluster.envoy.stat("wasm_epp_body_invalid").unwrap_or(0.0) >= 4.0);
    cluster.assert_plugin_healthy();
}

#[test]
fn reject_policy_answers_400_in_openai_shape_without_a_pod() {
    let cluster = Cluster::start("reject", 2, &["--time-scale", "0"], |options| {
        options.filter_config["invalid_body"] = "reject".into();
    });
    let reply = cluster.post("/v1/completions", &[], "{not json");
    assert_eq!(reply.status, 400);
    assert_eq!(reply.header("x-wasm-epp"), Some("local-reply"));
    assert_eq!(reply.served_by(), None, "no pod saw it");
    let error: serde_json::Value = serde_json::from_str(&reply.body).unwrap();
    assert_eq!(error["error"]["type"], "invalid_request_error");
    cluster.assert_plugin_healthy();
}
