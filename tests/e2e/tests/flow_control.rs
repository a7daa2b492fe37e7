//! Flow control in a real Envoy: requests held as paused streams and released from the
//! plugin's tick or when a request ends; priority order, TTL answers, a client leaving
//! while it waits, fairness between tenants and between Envoy workers, priority across
//! workers, staleness policy.
//! (Scale from zero is in `flow_control_discovery.rs`.)

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use e2e::Cluster;
use launcher::http::{self, Reply};
use serde_json::{json, Value};

const SIM: [&str; 2] = ["--time-scale", "0"];

/// A cluster of `pods` pods (each answering after `latency_ms`) behind Envoy with
/// `concurrency` workers and flow control configured with `flow` over the defaults.
fn start(name: &str, pods: usize, concurrency: u32, latency_ms: u64, flow: Value) -> Cluster {
    let cluster = Cluster::start_ready_with(name, pods, &SIM, |options| {
        options.concurrency = concurrency;
        let mut flow_control = json!({"enabled": true, "max_inflight_per_pod": 1, "ttl_ms": 5000});
        if let (Some(base), Value::Object(extra)) = (flow_control.as_object_mut(), flow) {
            base.extend(extra);
        }
        options.filter_config["flow_control"] = flow_control;
        options.filter_config["fallback_destinations"] = json!(0);
    });
    for pod in &cluster.pods {
        pod.set_faults(&json!({"extra_latency_ms": latency_ms})).unwrap();
    }
    cluster
}

fn send(cluster: &Cluster, headers: &[(&str, &str)], prompt: &str) -> Reply {
    let body = json!({"model": "sim-model", "prompt": prompt, "max_tokens": 4}).to_string();
    http::post(&cluster.envoy.url("/v1/completions"), headers, &body, Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("request failed: {e}\n{}", cluster.envoy.log_tail(20)))
}

#[test]
fn held_requests_are_released_in_priority_order_when_the_pod_frees_up() {
    // One worker, so the one queue sees every request; one place at the pod, which the
    // blocker holds (its pod hangs) until the three others wait, sent in the reverse of their
    // priority order.
    let cluster = start("flow-priority", 1, 1, 300, json!({}));
    cluster.pods[0].set_faults(&json!({"hang": true})).unwrap();
    let finished = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        let run = |label: &'static str, priority: &'static str| {
            let (cluster, finished) = (&cluster, &finished);
            scope.spawn(move || {
                let reply = send(cluster, &[("x-gateway-inference-priority", priority)], label);
                assert_eq!(reply.status, 200, "{label}: {}", reply.body);
                finished.lock().unwrap().push(label);
            });
        };
        run("blocker", "0");
        cluster.wait_for_stat("wasm_epp_flow_dispatched_directly", 1.0);
        for (waiting, (label, priority)) in
            [("sheddable", "-1"), ("standard", "0"), ("critical", "2")].into_iter().enumerate()
        {
            run(label, priority);
            cluster.wait_for_stat("wasm_epp_flow_queued", waiting as f64 + 1.0);
        }
        cluster.pods[0].set_faults(&json!({"hang": false})).unwrap();
    });
    let order = finished.into_inner().unwrap();
    assert_eq!(order, ["blocker", "critical", "standard", "sheddable"], "released by priority, not arrival");
    assert_eq!(cluster.stat("wasm_epp_flow_released"), 3.0);
    assert_eq!(cluster.stat("wasm_epp_flow_wait_ms_count"), 3.0);
    assert_eq!(
        cluster.stat("wasm_epp_flow_band_entered{band=\"p0\"}"),
        cluster.stat("wasm_epp_flow_band_left{band=\"p0\"}"),
        "the queue is empty again"
    );
    let pod = cluster.pods[0].address().replace(['.', ':'], "_");
    let saturated = cluster.envoy.stat(&format!("wasm_epp_flow_pod_saturated{{pod=\"{pod}\"}}"));
    assert!(saturated.is_some(), "the detector's per-pod gauge is labelled by pod");
    let address = cluster.pods[0].address();
    assert!(cluster.envoy.stat(&format!("wasm_epp_picks{{pod=\"{address}\"}}")).is_some(), "picks keep their label");
    cluster.assert_plugin_healthy();
}

#[test]
fn a_request_past_its_ttl_gets_429_with_the_reason_and_sheddable_ones_expire_first() {
    let cluster = start("flow-ttl", 1, 1, 3000, json!({"ttl_ms": 1500, "sheddable_ttl_ms": 300}));
    std::thread::scope(|scope| {
        scope.spawn(|| assert_eq!(send(&cluster, &[], "blocker").status, 200));
        cluster.wait_for_stat("wasm_epp_flow_dispatched_directly", 1.0);
        let sheddable = scope.spawn(|| {
            let start = Instant::now();
            (send(&cluster, &[("x-gateway-inference-priority", "-1")], "sheddable"), start.elapsed())
        });
        let standard = scope.spawn(|| {
            let start = Instant::now();
            (send(&cluster, &[], "standard"), start.elapsed())
        });
        for (handle, ttl_ms, label) in [(sheddable, 300, "sheddable"), (standard, 1500, "standard")] {
            let (reply, took) = handle.join().unwrap();
            assert_eq!(reply.status, 429, "{label}: {}", reply.body);
            assert_eq!(reply.header("x-llm-d-request-dropped-reason"), Some("rejected-ttl-expired"));
            println!("{label}: 429 after {} ms (TTL {ttl_ms} ms)", took.as_millis());
            assert!(took >= Duration::from_millis(ttl_ms), "answered before its TTL: {took:?}");
        }
    });
    assert_eq!(cluster.stat("wasm_epp_flow_dropped{reason=\"ttl_expired\"}"), 2.0);
}

#[test]
fn a_request_ttl_header_cuts_its_wait_and_answers_report_how_long_they_waited() {
    // llm-d's headers: the request's own TTL (a Go duration) and the wait on the answer.
    let cluster = start("flow-ttl-header", 1, 1, 1500, json!({"ttl_ms": 5000}));
    std::thread::scope(|scope| {
        let sent = Instant::now();
        let blocker = scope.spawn(|| send(&cluster, &[], "blocker"));
        cluster.wait_for_stat("wasm_epp_flow_dispatched_directly", 1.0);
        // The patient request is sent this long after the blocker, so it waits the rest of
        // the blocker's 1.5 s.
        let head_start = sent.elapsed();
        let hurried = scope.spawn(|| {
            let start = Instant::now();
            (send(&cluster, &[("x-llm-d-inference-ttl", "300ms")], "hurried"), start.elapsed())
        });
        let patient = scope.spawn(|| send(&cluster, &[], "patient"));
        let blocker = blocker.join().unwrap();
        assert_eq!(blocker.status, 200, "{}", blocker.body);
        assert_eq!(blocker.header("x-llm-d-flow-queue-duration-ms"), Some("0"), "admitted at once");
        let (hurried, took) = hurried.join().unwrap();
        assert_eq!(hurried.status, 429, "its own 300 ms passed while the blocker ran 1.5 s: {}", hurried.body);
        assert_eq!(hurried.header("x-llm-d-request-dropped-reason"), Some("rejected-ttl-expired"));
        assert_eq!(hurried.header("x-llm-d-flow-queue-duration-ms"), None, "the gateway's own reply reports no wait");
        assert!(took >= Duration::from_millis(300), "answered before its TTL: {took:?}");
        let patient = patient.join().unwrap();
        assert_eq!(patient.status, 200, "{}", patient.body);
        let waited: u64 = patient.header("x-llm-d-flow-queue-duration-ms").and_then(|v| v.parse().ok()).unwrap();
        println!("hurried: 429 after {} ms; patient waited {waited} ms", took.as_millis());
        let behind = u128::from(waited) + head_start.as_millis();
        assert!(
            behind >= 1_300 && waited < 5_000,
            "waited behind the 1.5 s blocker (sent {head_start:?} after it), under the band's TTL: {waited}"
        );
    });
    assert_eq!(cluster.stat("wasm_epp_flow_dropped{reason=\"ttl_expired\"}"), 1.0);
}

#[test]
fn a_client_that_disconnects_while_waiting_leaves_the_queue_at_once() {
    // The blocker's pod hangs until the end, so it is busy however late the checks come.
    let cluster = start("flow-disconnect", 1, 1, 0, json!({}));
    cluster.pods[0].set_faults(&json!({"hang": true})).unwrap();
    std::thread::scope(|scope| {
        let blocker = scope.spawn(|| send(&cluster, &[], "blocker"));
        cluster.wait_for_stat("wasm_epp_flow_dispatched_directly", 1.0);
        let body = json!({"model": "sim-model", "prompt": "leaving", "max_tokens": 4}).to_string();
        let mut client = TcpStream::connect(("127.0.0.1", cluster.envoy.listen_port)).unwrap();
        let request = format!(
            "POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        client.write_all(request.as_bytes()).unwrap();
        assert!(
            launcher::wait_until(Duration::from_secs(2), || cluster.stat("wasm_epp_flow_queued") == 1.0),
            "the request never waited"
        );
        drop(client);
        // Well inside the 5 s TTL, whose expiry would count as ttl_expired instead.
        assert!(
            launcher::wait_until(Duration::from_secs(3), || {
                cluster.stat("wasm_epp_flow_dropped{reason=\"client_gone\"}") == 1.0
            }),
            "the abandoned request was not removed while the pod was still busy"
        );
        cluster.pods[0].set_faults(&json!({"hang": false})).unwrap();
        assert_eq!(blocker.join().unwrap().status, 200);
    });
    assert_eq!(cluster.envoy.stat("wasm_epp_flow_released"), Some(0.0), "nothing was sent for the client that left");
    cluster.assert_plugin_healthy();
}

#[test]
fn bodies_the_filter_does_not_read_whole_do_not_pass_the_queue() {
    // One place at the pod; bodies over 1 KiB are not read (they stream through Envoy).
    let cluster = Cluster::start("flow-unread", 1, &SIM, |options| {
        options.concurrency = 1;
        options.filter_config["max_body_bytes"] = json!(1024);
        options.filter_config["fallback_destinations"] = json!(0);
        options.filter_config["flow_control"] = json!({"enabled": true, "max_inflight_per_pod": 1, "ttl_ms": 5000});
    });
    assert!(cluster.envoy.wait_for_healthy_pods(1, Duration::from_secs(15)), "{}", cluster.envoy.log_tail(30));
    cluster.pods[0].set_faults(&json!({"extra_latency_ms": 1500})).unwrap();
    let padded = "padding ".repeat(300);
    std::thread::scope(|scope| {
        let blocker = scope.spawn(|| send(&cluster, &[], "blocker"));
        std::thread::sleep(Duration::from_millis(300));
        // A body the parse refuses was read whole: it waits its turn, then reaches the pod.
        let unreadable = scope.spawn(|| {
            let url = cluster.envoy.url("/v1/chat/completions");
            http::post(&url, &[], "{not json", Duration::from_secs(30)).unwrap()
        });
        std::thread::sleep(Duration::from_millis(200));
        // 2.4 KB: streamed unread, so it cannot wait, and it may not pass the waiting one.
        let large = send(&cluster, &[("x-gateway-inference-priority", "2")], &padded);
        assert_eq!(large.status, 429, "{}", large.body);
        assert_eq!(large.header("x-llm-d-request-dropped-reason"), Some("rejected-saturated"));
        assert_eq!(blocker.join().unwrap().status, 200);
        let unreadable = unreadable.join().unwrap();
        assert_ne!(unreadable.header("x-wasm-epp"), Some("local-reply"), "the pod answered it: {}", unreadable.body);
        let waited: u64 = unreadable.header("x-llm-d-flow-queue-duration-ms").and_then(|v| v.parse().ok()).unwrap();
        assert!(waited >= 1_000, "it waited behind the blocker: {waited} ms");
    });
    // With the pod free, the large body goes on at once.
    let large = send(&cluster, &[], &padded);
    assert_eq!(large.status, 200, "{}", large.body);
    assert_eq!(large.header("x-llm-d-flow-queue-duration-ms"), Some("0"));
    assert_eq!(cluster.stat("wasm_epp_flow_dropped{reason=\"capacity\"}"), 1.0);
    assert_eq!(cluster.stat("wasm_epp_flow_queued"), 1.0);
    cluster.assert_plugin_healthy();
}

/// Completed requests per tenant when tenant A runs `a` closed-loop clients and tenant B
/// runs `b`, for `seconds`.
fn closed_loop(cluster: &Cluster, a: usize, b: usize, seconds: u64) -> (usize, usize, usize) {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let counts = std::sync::Mutex::new((0usize, 0usize, 0usize));
    std::thread::scope(|scope| {
        for (tenant, clients) in [("a", a), ("b", b)] {
            for client in 0..clients {
                let counts = &counts;
                scope.spawn(move || {
                    let mut i = 0;
                    while Instant::now() < deadline {
                        i += 1;
                        let reply = send(
                            cluster,
                            &[("x-llm-d-inference-fairness-id", tenant)],
                            &format!("{tenant}{client} {i}"),
                        );
                        let mut counts = counts.lock().unwrap();
                        match (reply.status, tenant) {
                            (200, "a") => counts.0 += 1,
                            (200, _) => counts.1 += 1,
                            _ => counts.2 += 1,
                        }
                    }
                });
            }
        }
    });
    counts.into_inner().unwrap()
}

fn jain(values: &[f64]) -> f64 {
    let sum: f64 = values.iter().sum();
    let squares: f64 = values.iter().map(|v| v * v).sum();
    sum * sum / (values.len() as f64 * squares)
}

#[test]
fn backlogged_tenants_share_equally_though_one_sends_four_times_as_much() {
    let cluster = start("flow-tenants", 1, 1, 100, json!({"max_inflight_per_pod": 2}));
    let (a, b, failed) = closed_loop(&cluster, 12, 3, 5);
    let index = jain(&[a as f64, b as f64]);
    println!("tenants: a {a} completed (12 clients), b {b} (3 clients), {failed} failed; Jain's index {index:.3}");
    assert_eq!(failed, 0, "every request answered 200");
    assert!(index >= 0.9, "a {a} vs b {b}: Jain's index {index:.3}");
}

#[test]
fn two_workers_with_queues_do_not_starve_each_other() {
    // Two Envoy workers; each client opens a new connection per request, so the kernel
    // spreads them over both workers' queues.
    let cluster = start("flow-workers", 1, 2, 100, json!({"max_inflight_per_pod": 2}));
    let (a, b, failed) = closed_loop(&cluster, 8, 8, 5);
    assert_eq!(failed, 0);
    let w0 = cluster.stat("wasm_epp_flow_released_by_worker{worker=\"w0\"}");
    let w1 = cluster.stat("wasm_epp_flow_released_by_worker{worker=\"w1\"}");
    let released = w0 + w1;
    println!("workers: released w0 {w0}, w1 {w1}; completed a {a}, b {b}");
    assert!(released > 20.0, "requests waited and were released: {released}");
    // A starved worker's clients sit in its queue until the 5 s TTL, so its share of the
    // releases falls near 0 in this closed loop. A fair split is ~0.5; on a loaded 2-core
    // machine the kernel's connection spread and a descheduled worker thread have moved it
    // to 0.32 (35 of 108 on Envoy 1.36), so the bound sits between the two.
    assert!(w0.min(w1) / released >= 0.25, "both workers' queues are served: w0 {w0}, w1 {w1}");
}

/// Answers (200) and refusals per group of closed-loop clients, each group sending with its
/// headers, for `seconds`.
fn closed_loop_groups(cluster: &Cluster, groups: &[(&[(&str, &str)], usize)], seconds: u64) -> Vec<(usize, usize)> {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let counts = std::sync::Mutex::new(vec![(0usize, 0usize); groups.len()]);
    std::thread::scope(|scope| {
        for (group, (headers, clients)) in groups.iter().enumerate() {
            for client in 0..*clients {
                let counts = &counts;
                scope.spawn(move || {
                    let mut i = 0;
                    while Instant::now() < deadline {
                        i += 1;
                        let reply = send(cluster, headers, &format!("group {group} client {client} request {i}"));
                        let mut counts = counts.lock().unwrap();
                        if reply.status == 200 {
                            counts[group].0 += 1;
                        } else {
                            counts[group].1 += 1;
                        }
                    }
                });
            }
        }
    });
    counts.into_inner().unwrap()
}

#[test]
fn priority_holds_across_workers_critical_requests_waiting_on_one_go_before_sheddable_ones_on_the_other() {
    // Two Envoy workers, one pod of 2 places taking 100 ms a request. Three critical clients
    // keep about one critical request waiting; four sheddable clients keep sheddable ones
    // waiting. Connections spread over both workers, so the critical request waiting is
    // often on the other worker than the one whose request just ended. Held per worker, that
    // worker released its own sheddable one into the place instead (each worker keeping its
    // half of the pool); held across workers, it leaves the place to the critical request.
    let flow = json!({"max_inflight_per_pod": 2, "sheddable_ttl_ms": 1000});
    let cluster = start("flow-priority-workers", 1, 2, 100, flow);
    let critical: &[(&str, &str)] = &[("x-gateway-inference-priority", "2")];
    let sheddable: &[(&str, &str)] = &[("x-gateway-inference-priority", "-1")];
    let counts = closed_loop_groups(&cluster, &[(critical, 3), (sheddable, 4)], 5);
    let ((critical_ok, critical_failed), (sheddable_ok, sheddable_failed)) = (counts[0], counts[1]);
    let w0 = cluster.stat("wasm_epp_flow_released_by_worker{worker=\"w0\"}");
    let w1 = cluster.stat("wasm_epp_flow_released_by_worker{worker=\"w1\"}");
    println!(
        "priority across workers: critical {critical_ok} answered ({critical_failed} refused), \
         sheddable {sheddable_ok} answered ({sheddable_failed} refused); released w0 {w0}, w1 {w1}"
    );
    assert_eq!(critical_failed, 0, "no critical request refused");
    assert!(w0.min(w1) >= 5.0, "both workers held and released requests: w0 {w0}, w1 {w1}");
    let share = critical_ok as f64 / (critical_ok + sheddable_ok).max(1) as f64;
    assert!(share >= 0.85, "the pool went to the critical clients: {critical_ok} of {}", critical_ok + sheddable_ok);
}

#[test]
fn stale_metrics_count_as_saturated_only_when_configured() {
    for (policy, expected) in [("ignore", 200), ("saturated", 429)] {
        let cluster = Cluster::start(&format!("flow-stale-{policy}"), 1, &SIM, |options| {
            options.filter_config["flow_control"] =
                json!({"enabled": true, "stale_metrics": policy, "ttl_ms": 500, "max_inflight_per_pod": 4});
            if let Some(poller) = options.poller_config.as_mut() {
                poller["metrics_path"] = "/no-metrics-here".into();
            }
        });
        std::thread::sleep(Duration::from_millis(500));
        let reply = send(&cluster, &[], "no metrics");
        assert_eq!(reply.status, expected, "policy {policy}: {}", reply.body);
    }
}
