//! The Responses API (`POST /v1/responses`, what the OpenAI SDKs' `responses.create` and agents
//! such as Codex call) through a real Envoy: an agent's conversations, resent whole each turn
//! (`instructions`, then every earlier item), stick to one pod each, so the pods find each
//! turn's earlier prompt in their prefix cache; streams pass unchanged.

use e2e::{tally, Cluster};
use serde_json::{json, Value};

/// An agent's system prompt: ~3 KB, about 50 blocks of 64 bytes.
fn instructions(agent: usize) -> String {
    (0..400).map(|i| format!("a{agent}r{i}")).collect::<Vec<_>>().join(" ")
}

fn turn_body(agent: usize, items: &[Value], stream: bool) -> String {
    json!({"model": "sim-model", "instructions": instructions(agent), "input": items,
           "max_output_tokens": 8, "stream": stream})
    .to_string()
}

#[test]
fn an_agents_conversation_sticks_to_one_pod_and_hits_its_prefix_cache() {
    let cluster = Cluster::start_ready("responses-agents", 4, &["--time-scale", "0"]);
    let mut homes = Vec::new();
    for agent in 0..6 {
        let mut items = vec![json!({"role": "user", "content": format!("task {agent}: list the files")})];
        let mut pods = Vec::new();
        for turn in 0..6 {
            let reply = cluster.post("/v1/responses", &[], &turn_body(agent, &items, false));
            assert_eq!(reply.status, 200, "{}", reply.body);
            pods.push(cluster.served_by_pool(&reply));
            let answer: Value = serde_json::from_str(&reply.body).unwrap();
            assert_eq!(answer["object"], "response");
            let text = answer["output"][0]["content"][0]["text"].as_str().unwrap_or_default().to_owned();
            assert!(!text.is_empty(), "{}", reply.body);
            // The agent's loop: the reply, a tool call and its output, the next instruction.
            items.push(
                json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}),
            );
            items
                .push(json!({"type": "function_call", "call_id": format!("c{turn}"), "name": "ls", "arguments": "{}"}));
            items.push(json!({"type": "function_call_output", "call_id": format!("c{turn}"), "output": "a.txt b.txt"}));
            items.push(json!({"role": "user", "content": format!("now step {turn}")}));
            // Let the other Envoy worker learn the pick (a few sync intervals).
            std::thread::sleep(std::time::Duration::from_millis(120));
        }
        assert!(pods.iter().all(|pod| *pod == pods[0]), "agent {agent} moved: {pods:?}");
        homes.push(pods[0].clone());
    }
    let spread = tally(homes.iter().map(String::as_str));
    assert!(spread.len() >= 2, "6 agents spread over the pool: {spread:?}");
    let (hits, queries) = (cluster.pods_stat("prefix_cache_hits"), cluster.pods_stat("prefix_cache_queries"));
    eprintln!("MEASURED responses API agents: pods' prefix cache hit {hits} of {queries} tokens; homes {spread:?}");
    // Each agent's first turn is cold; the other five find nearly all of their prompt cached.
    assert!(hits * 10 >= queries * 7, "hits {hits} of {queries}");
    assert_eq!(cluster.pods_stat("model_not_found"), 0);
}

#[test]
fn a_streamed_response_passes_unchanged_and_a_forged_destination_is_ignored() {
    let cluster = Cluster::start_ready("responses-stream", 2, &["--time-scale", "0"]);
    let items = [json!({"role": "user", "content": "count to three"})];
    let forged = [("x-gateway-destination-endpoint", "127.0.0.1:9")];
    let reply = cluster.post("/v1/responses", &forged, &turn_body(0, &items, true));
    assert_eq!(reply.status, 200, "{}", reply.body);
    cluster.served_by_pool(&reply);
    let events: Vec<&str> = reply.body.split("\n\n").filter(|e| !e.is_empty()).collect();
    let kinds: Vec<&str> = events.iter().filter_map(|e| e.lines().next()?.strip_prefix("event: ")).collect();
    assert_eq!(kinds.first(), Some(&"response.created"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"response.completed"), "{kinds:?}");
    assert_eq!(kinds.iter().filter(|k| **k == "response.output_text.delta").count(), 8, "{kinds:?}");
    let broken = cluster.post("/v1/responses", &[], r#"{"model": "sim-model"}"#);
    assert_eq!(broken.status, 400, "a pod's own answer to a body without input: {}", broken.body);
    cluster.assert_plugin_healthy();
}

/// The id of a Responses answer, whole or streamed (its `response.completed` event).
fn response_id(body: &str) -> String {
    let whole = serde_json::from_str::<Value>(body).ok();
    let last_event = || {
        body.split("\n\n")
            .filter_map(|event| event.split_once("data: ").map(|(_, data)| data))
            .filter_map(|data| serde_json::from_str::<Value>(data).ok())
            .find(|event| event["type"] == "response.completed")
            .map(|event| event["response"].clone())
    };
    let response = whole.or_else(last_event).unwrap_or_default();
    response["id"].as_str().unwrap_or_else(|| panic!("no response id in {body}")).to_owned()
}

/// vLLM with its response store (`VLLM_ENABLE_RESPONSES_API_STORE=1`) keeps each response in
/// the memory of the pod that answered; `previous_response_id` on another pod is a 404.
#[test]
fn conversations_continued_by_previous_response_id_reach_the_pod_that_stored_them() {
    let cluster = Cluster::start_ready("responses-store", 4, &["--time-scale", "0", "--responses-store"]);
    for conversation in 0..4 {
        let mut previous: Option<String> = None;
        let mut pods = Vec::new();
        for turn in 0..8 {
            let mut body = json!({"model": "sim-model", "input": format!("conversation {conversation}, turn {turn}"),
                                  "max_output_tokens": 4, "stream": turn % 2 == 1});
            if let (Some(id), Some(object)) = (&previous, body.as_object_mut()) {
                object.insert("previous_response_id".into(), json!(id));
            }
            let reply = cluster.post("/v1/responses", &[], &body.to_string());
            assert_eq!(reply.status, 200, "conversation {conversation}, turn {turn}: {}", reply.body);
            pods.push(cluster.served_by_pool(&reply));
            // The next turn goes at once, as an agent's does, on a new connection: either Envoy
            // worker takes it, before the prefix ring could tell the other one (the shared slot
            // does). Without the slot, 10 of 28 turns got a 404 in one such run.
            previous = Some(response_id(&reply.body));
        }
        assert!(pods.iter().all(|pod| *pod == pods[0]), "conversation {conversation} moved: {pods:?}");
        // Retrieving the last response (as a background request is polled), at once and on new
        // connections: only its pod has it. Routed by load, all 12 got a 404 in one run.
        let id = previous.unwrap_or_default();
        for _ in 0..3 {
            let url = cluster.envoy.url(&format!("/v1/responses/{id}"));
            let stored = launcher::http::get(&url, std::time::Duration::from_secs(10)).unwrap();
            assert_eq!(stored.status, 200, "GET {id}: {}", stored.body);
            assert_eq!(cluster.served_by_pool(&stored), pods[0]);
            let object: Value = serde_json::from_str(&stored.body).unwrap();
            assert_eq!(object["id"].as_str(), Some(id.as_str()));
        }
    }
    assert_eq!(cluster.pods_stat("responses_not_found"), 0, "no turn nor retrieval reached a pod without its response");
    assert_eq!(cluster.envoy.stat("wasm_epp_response_ids_noted"), Some(32.0));
    assert_eq!(cluster.envoy.stat("wasm_epp_response_ids_followed"), Some(28.0 + 12.0));
}
