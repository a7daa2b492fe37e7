//! The fail-open warning tells of the pool's data, once per change: a model whose pods are all
//! down fails open alone, and requests alternating between it and a model still served do not
//! log a warning each (found by the e2e chaos test: 84 of Envoy's 245 log lines in 12 s).

// Test support functions unwrap too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use common::{Bench, COMPLETIONS};
use picker::address::PodAddress;
use picker::keys;
use picker::pod_table::{encode_version, PodState, PodTable};
use wasm_epp_host::warnings::logged_warnings;
use wasm_epp_host::{Host, SharedStore};

/// The fail-open warnings logged on this thread so far (the logger is installed on first use).
fn fail_open_warnings() -> usize {
    logged_warnings().iter().filter(|line| line.contains("no fresh pod data")).count()
}

/// `llama` on a healthy pod; `qwen` and its adapter on a pod the pool service found down.
fn publish_with_the_adapters_pod_down(bench: &Bench) {
    let now = bench.host.now_ms();
    let mut table = PodTable { version: 1, published_at_ms: now, poll_interval_ms: 100, ..PodTable::default() };
    for (address, model, adapters, healthy) in
        [("10.0.0.1:8000", "llama", vec![], true), ("10.0.0.2:8000", "qwen", vec!["sql-lora".to_owned()], false)]
    {
        let mut pod = PodState::unknown(&PodAddress::parse(address).unwrap());
        pod.healthy = healthy;
        pod.last_success_ms = now;
        pod.models = vec![model.to_owned()];
        pod.adapters = adapters;
        table.pods.push(pod);
    }
    bench.host.set(keys::POD_TABLE, &table.encode(), None).unwrap();
    bench.host.set(keys::POD_TABLE_VERSION, &encode_version(1), None).unwrap();
    bench.heartbeat();
}

fn body(model: &str) -> String {
    format!(r#"{{"model":"{model}","prompt":"hello","max_tokens":4}}"#)
}

fn chosen(bench: &Bench, model: &str) -> String {
    let destination = bench.complete(&COMPLETIONS, &body(model)).destination.unwrap_or_default();
    destination.split(',').next().unwrap_or_default().to_owned()
}

#[test]
fn a_model_without_a_usable_pod_fails_open_without_a_warning_per_request() {
    let bench = Bench::new("{}");
    let before = fail_open_warnings();
    publish_with_the_adapters_pod_down(&bench);
    for _ in 0..10 {
        assert_eq!(chosen(&bench, "sql-lora"), "10.0.0.2:8000", "failing open on its own pod");
        assert_eq!(chosen(&bench, "llama"), "10.0.0.1:8000");
    }
    assert_eq!(bench.stat("wasm_epp.fail_open"), 10, "each such pick still counted");
    assert_eq!(fail_open_warnings() - before, 0, "the pool has fresh data: nothing to warn of");

    // The pool's data goes stale (the pool service stopped scraping): told once.
    bench.later(6_000);
    for _ in 0..5 {
        chosen(&bench, "sql-lora");
        chosen(&bench, "llama");
    }
    assert_eq!(bench.stat("wasm_epp.fail_open"), 20);
    assert_eq!(fail_open_warnings() - before, 1, "one warning when the whole pool fails open");
}
