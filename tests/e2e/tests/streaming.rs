//! Server-sent events pass through Envoy and the filter intact.

use e2e::Cluster;

#[test]
fn streamed_completions_arrive_whole() {
    let cluster = Cluster::start_ready("stream", 2, &["--time-scale", "0"]);
    for (path, body) in [
        ("/v1/completions", r#"{"model":"sim-model","prompt":"count with me","max_tokens":12,"stream":true}"#),
        (
            "/v1/chat/completions",
            r#"{"model":"sim-model","messages":[{"role":"user","content":"hi"}],"max_tokens":12,"stream":true}"#,
        ),
        // `stream` as vLLM's pydantic models read a flag (lax mode): a stream all the same.
        (
            "/v1/chat/completions",
            r#"{"model":"sim-model","messages":[{"role":"user","content":"hey"}],"max_tokens":12.0,"stream":"true"}"#,
        ),
    ] {
        let reply = cluster.post(path, &[], body);
        assert_eq!(reply.status, 200, "{}", reply.body);
        cluster.served_by_pool(&reply);
        let events: Vec<&str> = reply.body.lines().filter(|l| l.starts_with("data: ")).collect();
        assert_eq!(events.last(), Some(&"data: [DONE]"), "{}", reply.body);
        let chunks = &events[..events.len() - 1];
        assert!(chunks.len() >= 12, "one chunk per token at least: {}", chunks.len());
        for chunk in chunks {
            let json: serde_json::Value = serde_json::from_str(&chunk["data: ".len()..]).unwrap();
            assert!(json["choices"].is_array() || json["usage"].is_object(), "{chunk}");
        }
    }
    assert_eq!(cluster.stat("wasm_epp_body_routed_by_model"), 0.0, "every body read whole, the lax one too");
    assert_eq!(cluster.stat("wasm_epp_body_invalid"), 0.0);
}
