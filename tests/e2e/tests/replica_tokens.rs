//! Token load across gateway replicas (learning on): a long prompt sent through one replica
//! weighs its pod in the other replica's decisions before any scrape shows it, as it does in
//! the sending replica's own (tests/learning.rs, the burst test).

use std::time::Duration;

use e2e::replicas::ReplicaCluster;
use launcher::envoy::EnvoyOptions;
use launcher::http;

fn learning_on(options: &mut EnvoyOptions) {
    if let Some(config) = options.filter_config.as_object_mut() {
        config.insert("learning".into(), serde_json::json!({"enabled": true}));
        config.insert("fallback_destinations".into(), serde_json::json!(0));
    }
}

/// A streamed completion of `words` simulator tokens tagged `tag` (no two tags share a block).
fn streamed(tag: &str, words: usize) -> String {
    let prompt = format!("{tag} {}", vec!["abcd"; words].join(" "));
    serde_json::json!({"model": "sim-model", "prompt": prompt, "max_tokens": 4, "stream": true}).to_string()
}

/// Replica 0 sends two long prompts (to two pods); once its peer message has reached
/// replica 1, replica 1 sends six short ones 50 ms apart, every pod taking 3 s to its first
/// token so all are in flight at once. Counting requests alone, replica 1 sees the long
/// prompts' pods as it sees the pods of its own first short requests, and sends some of the
/// rest behind the long prompts; counting the peer's tokens, it keeps them off those pods.
#[test]
fn a_long_prompt_through_one_replica_keeps_the_others_short_requests_off_its_pod() {
    let cluster = ReplicaCluster::start("replica-tokens", 4, 2, 2, true, learning_on);
    for pod in &cluster.pods {
        pod.set_faults(&serde_json::json!({"extra_latency_ms": 3000})).unwrap();
    }
    let send = |replica: usize, body: String| {
        let envoy = cluster.replica(replica);
        let reply = http::post(&envoy.url("/v1/completions"), &[], &body, e2e::REQUEST_TIMEOUT)
            .unwrap_or_else(|e| panic!("replica {replica}: {e}"));
        assert_eq!(reply.status, 200, "replica {replica}: {}", reply.body);
        reply.served_by().unwrap_or_default().to_string()
    };
    let (long, short) = std::thread::scope(|scope| {
        let mut long = Vec::new();
        for i in 0..2 {
            long.push(scope.spawn(move || send(0, streamed(&format!("long{i}"), 6_000))));
            std::thread::sleep(Duration::from_millis(50));
        }
        // A's decisions go out within a send interval (50 ms), its load with them; replica 1's
        // pool service publishes it on its next tick and the workers read it on theirs.
        std::thread::sleep(Duration::from_millis(700));
        let mut short = Vec::new();
        for i in 0..6 {
            short.push(scope.spawn(move || send(1, streamed(&format!("short{i}"), 20))));
            std::thread::sleep(Duration::from_millis(50));
        }
        let join = |handles: Vec<std::thread::ScopedJoinHandle<'_, String>>| -> Vec<String> {
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        };
        (join(long), join(short))
    });
    assert_ne!(long[0], long[1], "replica 0 sent both long prompts to one pod: {long:?}");
    let behind_long = short.iter().filter(|pod| long.contains(pod)).count();
    eprintln!("MEASURED long prompts on {long:?}; short requests through the other replica on {short:?}");
    assert!(behind_long <= 1, "{behind_long} of 6 short requests queued behind the other replica's long prompts");
    cluster.assert_plugins_healthy();
}
