//! A pool chosen by a path prefix that the route removes after the plugin ran
//! (`prefix_rewrite`): `path_prefix` makes the plugin read the path as the pod will.

// Helpers outside #[test] functions read replies: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use common::{publish_models, Bench};

const POOL: [(&str, &str, &[&str], f64); 2] =
    [("10.0.0.1:8000", "llama", &[], 0.0), ("10.0.0.2:8000", "llama", &[], 0.0)];

fn post(path: &'static str) -> [(&'static str, &'static str); 3] {
    [(":method", "POST"), (":path", path), ("content-type", "application/json")]
}

fn get(path: &'static str) -> [(&'static str, &'static str); 2] {
    [(":method", "GET"), (":path", path)]
}

/// A chat long enough to fill many prefix blocks.
fn chat() -> String {
    let long = "You are a careful assistant. ".repeat(200);
    format!(
        r#"{{"model":"llama","messages":[{{"role":"system","content":"{long}"}},{{"role":"user","content":"hi"}}]}}"#
    )
}

#[test]
fn endpoints_behind_the_prefix_are_read_as_the_pod_will_see_them() {
    let bench = Bench::new(r#"{"path_prefix": "/llama"}"#);
    publish_models(&bench, &POOL);
    bench.tick();
    // The same conversation twice: the second finds the first's prefix (a chat endpoint).
    let path = post("/llama/v1/chat/completions");
    let first = bench.complete(&path, &chat());
    let second = bench.complete(&path, &chat());
    let pod = |d: Option<String>| d.unwrap().split(',').next().unwrap().to_owned();
    assert_eq!(pod(first.destination), pod(second.destination));
    assert_eq!(bench.stat("wasm_epp.prefix_matched_picks"), 1, "hashed as a chat, not as another endpoint");
    // The paths the gateway answers itself.
    assert_eq!(bench.complete(&get("/llama/v1/models"), "").reply, Some(200));
    assert_eq!(bench.complete(&get("/llama/wasm-epp/healthz"), "").reply, Some(200));
    assert_eq!((bench.stat("wasm_epp.model_lists_answered"), bench.stat("wasm_epp.health_probes")), (1, 1));
    // A path without the prefix (a route that does not rewrite) is read as it comes; a longer
    // first segment is not the prefix.
    bench.complete(&post("/v1/chat/completions"), &chat());
    assert_eq!(bench.stat("wasm_epp.prefix_matched_picks"), 2);
    bench.complete(&post("/llamas/v1/chat/completions"), &chat());
    assert_eq!(bench.stat("wasm_epp.prefix_matched_picks"), 2, "not a chat endpoint");
}

#[test]
fn without_the_setting_a_prefixed_path_is_another_endpoint() {
    let bench = Bench::new("{}");
    publish_models(&bench, &POOL);
    bench.tick();
    bench.complete(&post("/llama/v1/chat/completions"), &chat());
    bench.complete(&post("/llama/v1/chat/completions"), &chat());
    assert_eq!(bench.stat("wasm_epp.prefix_matched_picks"), 0);
    assert!(bench.complete(&get("/llama/v1/models"), "").destination.is_some(), "sent to a pod");
}
