//! The Anthropic Messages API (`POST /v1/messages`, which vLLM serves to Claude Code and the
//! Anthropic SDKs) through a real Envoy: an agent's conversation, resent whole each turn
//! (`system`, then every message with its tool calls and results), keeps its pod, so the pods
//! find each turn's earlier prompt in their prefix cache; streams pass unchanged.

use e2e::{tally, Cluster};
use serde_json::{json, Value};

/// An agent's system prompt: ~3 KB, about 50 blocks of 64 bytes.
fn system(agent: usize) -> String {
    (0..400).map(|i| format!("c{agent}s{i}")).collect::<Vec<_>>().join(" ")
}

fn turn_body(agent: usize, messages: &[Value], stream: bool) -> String {
    json!({"model": "sim-model", "max_tokens": 8, "stream": stream,
           "system": [{"type": "text", "text": system(agent)}], "messages": messages})
    .to_string()
}

#[test]
fn an_agents_conversation_keeps_its_pod_and_hits_its_prefix_cache() {
    let cluster = Cluster::start_ready("messages-agents", 4, &["--time-scale", "0"]);
    let mut homes = Vec::new();
    for agent in 0..6 {
        let mut messages = vec![json!({"role": "user", "content": format!("task {agent}: fix the build")})];
        let mut pods = Vec::new();
        for turn in 0..6 {
            let reply = cluster.post("/v1/messages", &[], &turn_body(agent, &messages, turn % 2 == 1));
            assert_eq!(reply.status, 200, "{}", reply.body);
            pods.push(cluster.served_by_pool(&reply));
            // The agent's loop: the model's tool call, its result, on to the next step.
            messages.push(json!({"role": "assistant", "content": [
                {"type": "text", "text": format!("step {turn}")},
                {"type": "tool_use", "id": format!("t{turn}"), "name": "bash", "input": {"cmd": "make"}}]}));
            messages.push(json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": format!("t{turn}"), "content": format!("error {turn}")}]}));
            std::thread::sleep(std::time::Duration::from_millis(120));
        }
        assert!(pods.iter().all(|pod| *pod == pods[0]), "agent {agent} moved: {pods:?}");
        homes.push(pods[0].clone());
    }
    let spread = tally(homes.iter().map(String::as_str));
    assert!(spread.len() >= 2, "6 agents spread over the pool: {spread:?}");
    let (hits, queries) = (cluster.pods_stat("prefix_cache_hits"), cluster.pods_stat("prefix_cache_queries"));
    eprintln!("MEASURED messages API agents: pods' prefix cache hit {hits} of {queries} tokens; homes {spread:?}");
    assert!(hits * 10 >= queries * 7, "hits {hits} of {queries}");
}

#[test]
fn a_streamed_message_passes_unchanged_and_a_forged_destination_is_ignored() {
    let cluster = Cluster::start_ready("messages-stream", 2, &["--time-scale", "0"]);
    let messages = [json!({"role": "user", "content": "count to three"})];
    let forged = [("x-gateway-destination-endpoint", "127.0.0.1:9")];
    let reply = cluster.post("/v1/messages", &forged, &turn_body(0, &messages, true));
    assert_eq!(reply.status, 200, "{}", reply.body);
    cluster.served_by_pool(&reply);
    let kinds: Vec<&str> = reply.body.split("\n\n").filter_map(|e| e.lines().next()?.strip_prefix("event: ")).collect();
    assert_eq!(kinds.first(), Some(&"message_start"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"message_stop"), "{kinds:?}");
    assert_eq!(kinds.iter().filter(|k| **k == "content_block_delta").count(), 8, "{kinds:?}");
    assert!(reply.body.ends_with("data: [DONE]\n\n"));
    let broken = cluster.post("/v1/messages", &[], r#"{"model": "sim-model", "max_tokens": 4}"#);
    assert_eq!(broken.status, 400, "a pod's own answer to a body without messages: {}", broken.body);
    cluster.assert_plugin_healthy();
}
