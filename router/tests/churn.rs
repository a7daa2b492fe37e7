//! Days of operation in a few seconds: pods replaced all day with new addresses, through the
//! worker's table refresh and tick. Whatever a worker keeps per pod must forget the pods that
//! left (once gone past the grace kept for a pod back in a moment), so its tables stay the
//! size of the pool and the pods that left lately, not of its history.

// Helpers outside #[test] functions read answers: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use common::{completion, Bench, COMPLETIONS};
use picker::departed::GRACE_MS;
use picker::pod_table::MAX_PODS;
use wasm_epp_host::metrics::MAX_LABELLED;

/// Pods in the pool at any time; each round replaces all of them with pods on new addresses.
const POOL: usize = 4;
/// Rounds of replacement: 10,000 pods come and go.
const ROUNDS: usize = 2_500;

fn address(i: usize) -> String {
    format!("10.{}.{}.{}:8000", i / 65_536, (i / 256) % 256, i % 256)
}

/// Publishes round `round`'s pool (pods waiting, so learning notes their queues) and ticks.
fn replace_pool(bench: &Bench, round: usize) {
    let addresses: Vec<String> = (0..POOL).map(|i| address(round * POOL + i)).collect();
    let pods: Vec<(&str, f64)> = addresses.iter().map(|a| (a.as_str(), 2.0)).collect();
    bench.publish(round as u64 + 1, &pods);
    bench.tick();
}

#[test]
fn learning_without_prefix_routing_forgets_departed_pods() {
    // Learning on, prefix routing off: a valid configuration (TTFT scoring by load alone).
    let bench = Bench::new(r#"{"prefix": {"enabled": false}, "learning": {"enabled": true}}"#);
    for round in 0..ROUNDS {
        replace_pool(&bench, round);
        // Gone past the grace: forgotten at the next tick, with no new table.
        bench.host.advance(GRACE_MS + 1);
        bench.tick();
        let remembered = bench.worker.learning.borrow().pods_remembered();
        // The departed pods' epochs and queues were kept until 1,024 filled the tables; pods
        // after that were never noted, so a restart of theirs went unnoticed.
        assert!(remembered <= POOL, "round {round}: the learner remembers {remembered} pods");
    }
}

#[test]
fn pods_leaving_faster_than_the_grace_keep_the_tables_within_the_pool_cap() {
    let bench = Bench::new(r#"{"learning": {"enabled": true}}"#);
    for round in 0..ROUNDS {
        // All within one grace: each round's pods are still kept when the next round leaves.
        replace_pool(&bench, round);
        let remembered = bench.worker.learning.borrow().pods_remembered();
        assert!(remembered <= MAX_PODS, "round {round}: the learner remembers {remembered} pods");
        let indexed = bench.worker.prefix.borrow().index().pod_count();
        assert!(indexed <= MAX_PODS, "round {round}: {indexed} pods indexed");
    }
    bench.host.advance(GRACE_MS + 1);
    bench.tick();
    assert!(bench.worker.learning.borrow().pods_remembered() <= POOL, "the departed pods are forgotten");
}

/// Pods that left in the rounds of the last grace (one round a second) and the pool.
const KEPT: usize = POOL * (GRACE_MS as usize / 1_000 + 2);

/// One request for `prompt`, answered as Envoy would after its retries: `broken` answers
/// 500 and the next choice in the header's list answers.
fn request(bench: &Bench, prompt: &str, broken: &str) {
    let (mut stream, answer) = bench.request(&COMPLETIONS, &completion(prompt));
    let choices: Vec<String> = answer.destination.unwrap().split(',').map(str::to_owned).collect();
    let served = choices.iter().find(|c| c.as_str() != broken).unwrap_or(&choices[0]).clone();
    let status = if served == broken { "500" } else { "200" };
    bench.host.set_response(&[(":status", status), ("x-gateway-destination-endpoint-served", &served)], b"");
    stream.on_response_headers(&bench.host, false);
    stream.on_log(&bench.host);
}

#[test]
fn a_day_of_rollouts_leaves_every_per_pod_table_the_size_of_the_pool() {
    let bench = Bench::new(
        r#"{"fallback_destinations": 1, "learning": {"enabled": true},
            "outlier_detection": {"consecutive_failures": 2, "base_ejection_ms": 1000}}"#,
    );
    let names = |bench: &Bench, family: &str| {
        bench.host.metric_names.borrow().iter().filter(|(n, _)| n.starts_with(family)).count()
    };
    let mut keys_early = 0;
    for round in 0..ROUNDS {
        replace_pool(&bench, round);
        // Each round's first pod fails every request it serves: ejected, then gone.
        let broken = address(round * POOL);
        for i in 0..6 {
            // Shared prefixes across rounds: the index learns them on every new pod.
            request(&bench, &format!("{} {i} {round}", "shared system prompt ".repeat(40)), &broken);
        }
        bench.host.advance(1_000);
        if round == 10 {
            keys_early = bench.host.store.key_count();
        }
        let prefix = bench.worker.prefix.borrow();
        assert!(prefix.index().pod_count() <= KEPT, "round {round}: {} pods indexed", prefix.index().pod_count());
        let outliers = bench.worker.outliers.borrow();
        assert!(outliers.ejected_now().len() <= KEPT && outliers.suspects() <= KEPT, "round {round}");
        assert!(bench.worker.learning.borrow().pods_remembered() <= KEPT, "round {round}");
    }
    bench.tick();
    assert_eq!(bench.host.store.key_count(), keys_early, "shared data: a fixed key set, none per pod");
    // Envoy keeps every stat: per-pod families stop at their bound and one fallback.
    assert!(names(&bench, "wasm_epp.picks.pod.") <= MAX_LABELLED + 1);
    assert!(names(&bench, "wasm_epp.pod_ejections.pod.") <= MAX_LABELLED + 1);
}

#[test]
fn five_thousand_adapters_loaded_and_unloaded_leave_only_the_loaded_ones_listed_and_bounded_stats() {
    let bench = Bench::new("{}");
    let list = [(":method", "GET"), (":path", "/v1/models")];
    for round in 0..2_500usize {
        // Two pods serving the base model; each round unloads the last adapters and loads two new.
        let (a, b) = (format!("lora-{}", 2 * round), format!("lora-{}", 2 * round + 1));
        let adapters = [a.as_str(), b.as_str()];
        let pods = [("10.0.0.1:8000", "base", &adapters[..1], 0.0), ("10.0.0.2:8000", "base", &adapters[1..], 0.0)];
        common::publish_models_as(&bench, &pods, round as u64 + 1);
        bench.tick();
        let routed = bench.complete(&COMPLETIONS, &format!(r#"{{"model":"{a}","prompt":"hi","max_tokens":1}}"#));
        assert_eq!(routed.destination.as_deref().and_then(|d| d.split(',').next()), Some("10.0.0.1:8000"), "{a}");
        let gone = bench.complete(&COMPLETIONS, &format!(r#"{{"model":"lora-{}","prompt":"hi"}}"#, 2 * round + 2));
        assert_eq!(gone.reply, Some(404), "round {round}: an adapter no pod serves (unloaded or not yet loaded)");
        if round % 250 == 0 {
            bench.complete(&list, "");
            let replies = bench.host.replies.borrow();
            let body: serde_json::Value = serde_json::from_slice(&replies.last().unwrap().body).unwrap();
            let ids: Vec<&str> = body["data"].as_array().unwrap().iter().map(|e| e["id"].as_str().unwrap()).collect();
            assert_eq!(ids, ["base", a.as_str(), b.as_str()], "round {round}: the loaded adapters alone");
        }
    }
    bench.tick();
    let names = bench.host.metric_names.borrow();
    let models = names.iter().filter(|(n, _)| n.starts_with("wasm_epp.model_requests.model.")).count();
    assert!(models <= MAX_LABELLED, "{models} model series");
    assert_eq!(bench.stat("wasm_epp.model_requests.model.other"), 2_500 - (MAX_LABELLED as u64 - 1));
}
