//! A pod (or a broken proxy before it) that answers every inference request `200` with an
//! HTML page while its `/metrics` looks idle. Envoy passes the page on (a `200` is no retry),
//! and the client's OpenAI SDK fails on it. Counted a success, the pod looked like one that
//! answers fast and kept drawing requests; the filter reads the answer's `content-type` and
//! takes the pod out of rotation like one that answers 5xx.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use e2e::{Cluster, REQUEST_TIMEOUT};

const PAGE: &str = "<html><body><h1>Welcome to nginx!</h1></body></html>";

#[test]
fn a_pod_answering_200_with_an_html_page_is_taken_out_of_rotation() {
    let pages = Arc::new(AtomicU64::new(0));
    let counter = pages.clone();
    let fake = e2e::fake_pod::start(move |_, _| {
        counter.fetch_add(1, Ordering::SeqCst);
        Some(e2e::fake_pod::whole("text/html; charset=utf-8", PAGE))
    });
    let cluster = Cluster::start("foreign-answers", 1, &["--time-scale", "0"], |options| {
        e2e::add_to_pool(options, &fake);
        options.filter_config["outlier_detection"] = serde_json::json!({"consecutive_failures": 3});
    });
    assert!(cluster.envoy.wait_for_healthy_pods(2, Duration::from_secs(15)), "{}", cluster.envoy.log_tail(20));
    let mut last = Vec::new();
    for i in 0..40 {
        let body = serde_json::json!({"model": "sim-model", "prompt": format!("request {i}"), "max_tokens": 4});
        let url = cluster.envoy.url("/v1/completions");
        let reply = launcher::http::post(&url, &[], &body.to_string(), REQUEST_TIMEOUT);
        let answered = reply.is_ok_and(|r| r.status == 200 && r.body.trim_start().starts_with('{'));
        if i >= 30 {
            last.push(answered);
        }
    }
    let pages = pages.load(Ordering::SeqCst);
    let foreign = cluster.envoy.stat("wasm_epp_answers_foreign").unwrap_or(0.0);
    println!("40 requests: the fake pod answered {pages} pages, the filter saw {foreign} foreign answers");
    assert!(foreign >= 3.0, "the filter never judged a page ({foreign}):\n{}", cluster.envoy.log_tail(30));
    assert!(cluster.envoy.log().contains("keeps failing requests"), "{}", cluster.envoy.log_tail(30));
    // Each worker ejects it after three in a row (the others take the ejection over).
    assert!(pages <= 12, "the fake pod kept getting requests: {pages} pages");
    assert!(last.iter().all(|ok| *ok), "pages still answered at the end: {last:?}");
    cluster.assert_plugin_healthy();
}
