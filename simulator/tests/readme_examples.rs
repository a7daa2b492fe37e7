//! The README's `/sim/` examples are what a pod serves: `GET /sim/faults` on a new pod is the
//! documented document exactly, and `GET /sim/stats` has the documented fields, no more, no less.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

mod common;

use common::{completion_body, start_pod, stats};
use serde_json::Value;
use vllm_sim::SimClient;

const README: &str = include_str!("../README.md");

/// The fenced `json` block whose first line starts with `start`.
fn block(start: &str) -> Value {
    let mut lines = README.lines();
    while let Some(line) = lines.next() {
        if line.trim() != "```json" {
            continue;
        }
        let body: Vec<&str> = lines.by_ref().take_while(|l| l.trim() != "```").collect();
        if body.first().is_some_and(|first| first.starts_with(start)) {
            return serde_json::from_str(&body.join("\n")).expect("the README block is JSON");
        }
    }
    panic!("no json block starting {start} in the README");
}

/// Every object key path in `value` (`steps.last_duration_ms`), but not below `endpoints`,
/// whose keys are the paths the pod was asked for.
fn key_paths(value: &Value, prefix: &str, paths: &mut Vec<String>) {
    if let Value::Object(object) = value {
        for (key, inner) in object {
            let path = format!("{prefix}{key}");
            if path != "endpoints" {
                key_paths(inner, &format!("{path}."), paths);
            }
            paths.push(path);
        }
    }
    paths.sort();
}

#[tokio::test]
async fn sim_faults_and_stats_are_as_the_readme_shows() {
    let pod = start_pod(|_| {}).await;
    let client = SimClient::new();
    let base = pod.base_url();

    let (status, faults) = client.get_text(&format!("{base}/sim/faults")).await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(serde_json::from_str::<Value>(&faults).unwrap(), block(r#"{"extra_latency_ms""#));

    let (status, _) =
        client.post_json(&format!("{base}/v1/completions"), &completion_body("Hello there", 2)).await.unwrap();
    assert_eq!(status, 200);
    let (mut served, mut documented) = (Vec::new(), Vec::new());
    key_paths(&stats(&client, &pod).await, "", &mut served);
    key_paths(&block(r#"{"served_by""#), "", &mut documented);
    assert_eq!(served, documented, "GET /sim/stats (left) and the README's example (right)");
    pod.shutdown().await;
}
