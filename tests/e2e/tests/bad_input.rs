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
        // The Responses API: a prompt of the wrong type, a cut body, a deep input, odd text.
        ("/v1/responses", vec![], r#"{"model":"sim-model","input":7}"#.into()),
        ("/v1/responses", vec![], r#"{"model":"sim-model","instructions":{"a":1},"input":"x"}"#.into()),
        ("/v1/responses", vec![], "{\"model\": \"sim-model\", \"input\": [".into()),
        ("/v1/responses", vec![], format!("{{\"input\":{}{}}}", "[".repeat(10_000), "]".repeat(10_000))),
        ("/v1/responses", vec![], "{\"model\":\"sim-model\",\"input\":\"\\ud800 \u{0} \u{202e}\"}".into()),
    ];
    for (path, headers, body) in &cases {
        let reply = cluster.post(path, headers, body);
        assert!(reply.status < 500, "{path} {body:.40}: {} {}", reply.status, reply.body);
        cluster.served_by_pool(&reply);
    }
    assert!(cluster.envoy.stat("wasm_epp_body_invalid").unwrap_or(0.0) >= 8.0);
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

#[test]
fn huge_odd_and_foreign_requests_get_clear_answers() {
    let cluster = Cluster::start_ready("odd-requests", 2, &["--time-scale", "0"]);
    let url = cluster.envoy.url("/v1/completions");
    let timeout = std::time::Duration::from_secs(60);

    // 100 MB: over max_body_bytes, so routed by load at once and streamed, never buffered whole.
    let huge = format!("{{\"model\":\"sim-model\",\"prompt\":\"{}\"}}", "a ".repeat(50 * 1024 * 1024));
    let reply = launcher::http::post(&url, &[], &huge, timeout).unwrap();
    assert!(reply.status < 500, "100 MB body: {} {:.200}", reply.status, reply.body);
    cluster.served_by_pool(&reply);
    assert!(cluster.envoy.stat("wasm_epp_body_over_limit").unwrap_or(0.0) >= 1.0);

    // Invalid UTF-8 and gzip are not JSON to the filter: routed by load.
    let reply = launcher::http::post_bytes(
        &url,
        &[("content-type", "application/json")],
        b"{\"prompt\":\"\xff\xfe\"}",
        timeout,
    )
    .unwrap();
    cluster.served_by_pool(&reply);
    let gzip = [0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0x03, 0x00];
    let reply = launcher::http::post_bytes(&url, &[("content-encoding", "gzip")], &gzip, timeout).unwrap();
    cluster.served_by_pool(&reply);

    // 100,000 messages (about 3 MB) parse and route.
    let messages: Vec<String> = (0..100_000).map(|i| format!("{{\"role\":\"user\",\"content\":\"m{i}\"}}")).collect();
    let body = format!("{{\"model\":\"sim-model\",\"max_tokens\":1,\"messages\":[{}]}}", messages.join(","));
    let reply = cluster.post("/v1/chat/completions", &[], &body);
    cluster.served_by_pool(&reply);

    // Other methods, with and without a body.
    for (method, body) in [("PUT", Some("{\"prompt\":\"x\"}")), ("DELETE", None), ("GET", None), ("PATCH", Some("{}"))]
    {
        let reply = launcher::http::request(method, &url, body, timeout).unwrap();
        assert!(reply.status < 500, "{method}: {} {}", reply.status, reply.body);
        cluster.served_by_pool(&reply);
    }
    cluster.assert_plugin_healthy();
}

#[test]
fn http2_and_http10_clients_are_routed() {
    let cluster = Cluster::start_ready("protocols", 2, &["--time-scale", "0"]);
    let url = cluster.envoy.url("/v1/completions");
    let body = r#"{"model":"sim-model","prompt":"which protocol?","max_tokens":2}"#;
    for flag in ["--http2-prior-knowledge", "--http1.0", "--http1.1"] {
        let output = std::process::Command::new("curl")
            .args(["-s", "-i", "--max-time", "20", flag, "-H", "content-type: application/json", "--data", body, &url])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&output.stdout).to_lowercase();
        assert!(text.contains(" 200"), "{flag}: {text}");
        let served = text.lines().find_map(|l| l.strip_prefix("x-served-by: ")).map(str::trim).unwrap_or("");
        assert!(cluster.pool().iter().any(|p| p == served), "{flag}: served by '{served}'");
    }
}

#[test]
fn a_client_that_disconnects_mid_body_leaves_nothing_behind() {
    use std::io::Write;
    let cluster = Cluster::start_ready("disconnect", 2, &["--time-scale", "0"]);
    for _ in 0..20 {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", cluster.envoy.listen_port)).unwrap();
        let head = "POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 5000\r\n\r\n";
        stream.write_all(head.as_bytes()).unwrap();
        stream.write_all(b"{\"model\":\"sim-model\",\"prompt\":\"half").unwrap();
        drop(stream);
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(cluster.envoy.stat("wasm_epp_requests_routed"), Some(0.0), "nothing was routed");
    cluster.assert_plugin_healthy();
}
