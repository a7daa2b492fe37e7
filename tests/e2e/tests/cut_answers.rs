//! A pod that answers 200 and then cuts every answer (its connection closes mid-body: a
//! crashing worker, a broken node) while its `/metrics` looks idle. Envoy cannot retry an
//! answer whose headers went out, so each request it gets fails at the client; Envoy's own
//! outlier detection would count the resets, but the `override_host` cluster follows the
//! filter's list whatever the hosts' health. The filter reads Envoy's response flags at the
//! end of an answer that did not end whole and takes the pod out of rotation like one that
//! answers 5xx.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use e2e::{Cluster, REQUEST_TIMEOUT};

/// The fake pod; `cut` counts the answers it cut.
struct CuttingPod {
    address: String,
    cut: Arc<AtomicU64>,
}

impl CuttingPod {
    fn start() -> Self {
        let cut = Arc::new(AtomicU64::new(0));
        let counter = cut.clone();
        let address = e2e::fake_pod::start(move |_, connection| {
            // Headers and the first piece of a chunked answer, then the connection closes.
            counter.fetch_add(1, Ordering::SeqCst);
            let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n";
            let _ = connection.writer.write_all(format!("{head}8\r\n{{\"id\":\"x\r\n").as_bytes());
            let _ = connection.writer.flush();
            None
        });
        Self { address, cut }
    }
}

#[test]
fn a_pod_that_cuts_its_answers_after_their_headers_is_taken_out_of_rotation() {
    let fake = CuttingPod::start();
    let cluster = Cluster::start("cut-answers", 1, &["--time-scale", "0"], |options| {
        e2e::add_to_pool(options, &fake.address);
        options.filter_config["outlier_detection"] = serde_json::json!({"consecutive_failures": 3});
    });
    assert!(cluster.envoy.wait_for_healthy_pods(2, Duration::from_secs(15)), "{}", cluster.envoy.log_tail(20));
    let mut failed = 0;
    let mut last = Vec::new();
    for i in 0..40 {
        let body = serde_json::json!({"model": "sim-model", "prompt": format!("request {i}"), "max_tokens": 4});
        let url = cluster.envoy.url("/v1/completions");
        let ok = launcher::http::post(&url, &[], &body.to_string(), REQUEST_TIMEOUT).is_ok_and(|r| r.status == 200);
        failed += usize::from(!ok);
        if i >= 30 {
            last.push(ok);
        }
    }
    let cut = fake.cut.load(Ordering::SeqCst);
    let flagged = cluster.envoy.stat("wasm_epp_answers_cut").unwrap_or(0.0);
    println!("40 requests: {failed} failed, the fake pod cut {cut}, the filter saw {flagged} cut answers");
    assert!(flagged >= 3.0, "the filter never saw a cut answer ({flagged}):\n{}", cluster.envoy.log_tail(30));
    assert!(cluster.envoy.log().contains("keeps cutting its answers"), "{}", cluster.envoy.log_tail(30));
    // Each worker ejects it after three in a row (the others take the ejection over).
    assert!(cut <= 12, "the fake pod kept getting requests: {cut} cut");
    assert!(last.iter().all(|ok| *ok), "requests still failing at the end: {last:?}");
    cluster.assert_plugin_healthy();
}
