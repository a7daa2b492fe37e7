//! Everything on at once: two base models and an adapter on five pods (pods that queue
//! past two sequences), flow control with small per-pod and queue bounds, priorities,
//! tenants, sessions and request TTLs, learning, outlier detection, two pods whose answers
//! sometimes fail (one the adapter's only pod), two pods killed (that one too) and brought
//! back, a pod that stalls for a while, and clients sending every kind of request (four
//! APIs, streams, `n` > 1, lax `"stream": "true"`, bodies vLLM refuses, an unknown model,
//! audio uploads routed by their form's model, clients leaving mid-body, while waiting and
//! mid-stream, clients that stop reading their answers a while and then read on or leave,
//! forged destinations). Each
//! feature has its own test; this one looks for what they break together, as invariants a
//! user would call a bug: a request left unanswered, a status the docs do not allow for what
//! was sent, an answer from a pod of another model, a forged address reached, a count or a
//! queue place never given back, a Wasm VM failure.
//!
//! A share of the clients speak HTTP/2 (cleartext, prior knowledge) to the same listener, as
//! the OpenAI SDKs with `http2=True`, gateways and sidecars do: each keeps one connection
//! with several requests on it at once, and leaves by resetting that one stream (RST_STREAM
//! CANCEL) mid-body, while waiting (queued by flow control or generating) and mid-stream,
//! while its connection and other streams go on; Envoy's HTTP/2 codec then ends the Wasm
//! filter's stream on its own, on a worker whose other streams share the connection. Their
//! requests are drawn and judged as the HTTP/1 clients' are, and each HTTP/2 client must
//! keep its connection (`chaos::h2`).
//!
//! `CHAOS_SECONDS` sets the traffic's length (default 12), `CHAOS_SEED` replays a run (the
//! seed is printed; it also picks which clients speak HTTP/2), `CHAOS_CLIENTS` the client
//! threads (16), `CHAOS_H2_SHARE` the share of them on HTTP/2 (0.25; 0 for none),
//! `CHAOS_H2_STREAMS` the requests at once on each HTTP/2 connection (3),
//! `CHAOS_STOP_READING` the percent of requests vLLM serves whose clients stop reading (5;
//! 0 replays a seed of a run from before they existed); `--nocapture`
//! shows the summary. The defaults keep the queue short of full; `CHAOS_H2_SHARE=1
//! CHAOS_H2_STREAMS=6` overloads the pool (a full queue, evictions, clients leaving evicted
//! requests), which is how an evicted request answered after its stream ended was found
//! (router/tests/flow_control.rs).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use e2e::chaos::judge::{judge, Outage, Pool};
use e2e::chaos::{self, Draw, Kind, Outcome};
use e2e::hostile::Canary;
use e2e::Cluster;
use serde_json::json;

/// Client threads, each sending one request after another (`CHAOS_CLIENTS` to change).
fn clients() -> usize {
    std::env::var("CHAOS_CLIENTS").ok().and_then(|s| s.parse().ok()).unwrap_or(16)
}

/// The share of client threads that speak HTTP/2 (`CHAOS_H2_SHARE`, 0 to 1).
fn h2_share() -> f64 {
    std::env::var("CHAOS_H2_SHARE").ok().and_then(|s| s.parse().ok()).unwrap_or(0.25)
}

/// Percent of the requests vLLM serves whose clients stop reading their answers a while
/// (`CHAOS_STOP_READING`, 0 for none).
fn mix() -> chaos::Mix {
    let stops_reading = std::env::var("CHAOS_STOP_READING").ok().and_then(|s| s.parse().ok()).unwrap_or(5);
    chaos::Mix { stops_reading }
}

/// Requests at once on each HTTP/2 client's connection (`CHAOS_H2_STREAMS`).
fn h2_streams() -> usize {
    std::env::var("CHAOS_H2_STREAMS").ok().and_then(|s| s.parse().ok()).unwrap_or(3).max(1)
}

/// A client's draw (stream 0 of an HTTP/2 client's connection too), and its connection's
/// other streams'.
fn draw(seed: u64, client: usize, stream: usize) -> Draw {
    let client = (client as u64).wrapping_mul(0x2545_F491_4F6C_DD1D);
    Draw::new(seed ^ client ^ (stream as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// The pods whose answers sometimes fail (whole answers 500, streams `200` with an error
/// event): one of `sim-model`'s three, and the adapter's only pod (which outlier detection
/// must not pass over for a pod without the adapter).
const FAULTY: [usize; 2] = [1, 4];
const FAULTS: &str = r#"{"fail_fraction": 0.3, "fail_in_stream": true}"#;
/// The pods killed a third of the way in and started again at two thirds: one of
/// `sim-model`'s three, and the only pod of the adapter.
const KILLED: [usize; 2] = [0, 4];
/// The pod that stops answering (holds every request) for a ninth of the run near the end.
const HUNG: usize = 2;
/// Bound on the wait for every count to come back to 0 once the clients stopped (and for the
/// faulty pods' last ejection, at most `max_ejection_ms`, to end: an ejected pod reads saturated).
const SETTLE: Duration = Duration::from_secs(20);
/// Envoy's `max_requests_per_connection` on the listener (envoy/envoy.yaml.template).
const MAX_REQUESTS_PER_CONNECTION: usize = 1000;
/// The models the clients ask for (`start_pool`'s).
const MODELS: [&str; 3] = ["sim-model", "qwen", "sql-lora"];
/// Flow-control bands the traffic uses: `x-gateway-inference-priority` -1, 0 (and none), 2.
const BANDS: [&str; 3] = ["n1", "p0", "p2"];

fn traffic_length() -> Duration {
    let seconds = std::env::var("CHAOS_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(12);
    Duration::from_secs(seconds)
}

fn seed() -> u64 {
    std::env::var("CHAOS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1)
    })
}

/// Pods 0-2 serve `sim-model` (the model `assert_plugin_healthy` asks for), 3 and 4 `qwen`,
/// 4 also the adapter `sql-lora`; the models each pod serves, by address.
fn start_pool() -> (Cluster, BTreeMap<String, Vec<&'static str>>) {
    let timing = ["--time-scale", "0.3", "--max-num-seqs", "2"];
    let base = timing.to_vec();
    let qwen = [&timing[..], &["--model", "qwen"]].concat();
    let qwen_lora = [&timing[..], &["--model", "qwen", "--lora-adapters", "sql-lora"]].concat();
    let args = [base.clone(), base.clone(), base, qwen, qwen_lora];
    let cluster = Cluster::start_mixed("chaos", &args, |options| {
        // Four workers: more decisions crossing between workers' in-flight counts, ejections
        // and queues than the default two.
        options.concurrency = 4;
        // Small bounds, so requests wait, expire, are refused and evicted.
        options.filter_config["flow_control"] = json!({
            "enabled": true, "max_inflight_per_pod": 3, "ttl_ms": 4000, "sheddable_ttl_ms": 300,
            "max_queued_requests": 10, "max_band_requests": 6});
        options.filter_config["learning"] = json!({"enabled": true});
        options.filter_config["outlier_detection"] =
            json!({"consecutive_failures": 3, "base_ejection_ms": 1000, "max_ejection_ms": 4000});
    });
    let served: Vec<Vec<&'static str>> =
        vec![vec!["sim-model"], vec!["sim-model"], vec!["sim-model"], vec!["qwen"], vec!["qwen", "sql-lora"]];
    let models = cluster.pool().into_iter().zip(served).collect();
    // The adapter is listed after the first /v1/models round; until then it would be a 404.
    let listed = launcher::wait_until(Duration::from_secs(15), || {
        launcher::http::get(&cluster.envoy.url("/v1/models"), Duration::from_secs(5))
            .is_ok_and(|reply| reply.body.contains("\"sql-lora\""))
    });
    assert!(listed, "the gateway never listed the adapter");
    std::thread::sleep(e2e::TABLE_REACHES_WORKERS);
    for i in FAULTY {
        cluster.pods[i].set_faults(&serde_json::from_str(FAULTS).unwrap()).unwrap();
    }
    (cluster, models)
}

fn label(outcome: &Outcome) -> String {
    let status = match &outcome.status {
        Ok(status) => status.to_string(),
        Err(_) if matches!(outcome.planned.kind, Kind::LeavesMidBody | Kind::LeavesWaiting) => "left".into(),
        Err(_) => "none".into(),
    };
    let kind = match &outcome.planned.kind {
        Kind::Valid { api, stream } => format!("{api:?}{}", if *stream { " stream" } else { "" }),
        Kind::StopsReading { stream, resumes, .. } => format!(
            "StopsReading{}{}",
            if *stream { " stream" } else { "" },
            if *resumes { " resumes" } else { " leaves" }
        ),
        Kind::Upload { file_first } => format!("Upload{}", if *file_first { " file first" } else { "" }),
        other => format!("{other:?}"),
    };
    let protocol = if outcome.http2 { "h2" } else { "h1" };
    format!("{kind:<22} {protocol} {status}")
}

/// Everything the plugin and the pods hold for requests is given back: in-flight gauges,
/// the queue's bands, the pods' running and waiting requests; and flow control reads room
/// again. Returns what is still held.
fn still_held(cluster: &Cluster) -> Vec<String> {
    let mut held = Vec::new();
    for pod in cluster.pool() {
        let inflight = cluster.envoy.stat(&format!("wasm_epp_pod_inflight{{pod=\"{pod}\"}}"));
        if inflight != Some(0.0) {
            held.push(format!("plugin in flight to {pod}: {inflight:?}"));
        }
    }
    // Flow control's saturation gauges: an idle pool has room (router/tests/flow_gauges.rs).
    let pool_saturated = cluster.envoy.stat("wasm_epp_flow_pool_saturated");
    if pool_saturated.is_some_and(|value| value != 0.0) {
        held.push(format!("the pool reads saturated: {pool_saturated:?}"));
    }
    for pod in cluster.pool() {
        let label: String = pod.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
        let saturated = cluster.envoy.stat(&format!("wasm_epp_flow_pod_saturated{{pod=\"{label}\"}}"));
        if saturated.is_some_and(|value| value != 0.0) {
            held.push(format!("pod {pod} reads saturated"));
        }
    }
    for band in BANDS {
        let entered = cluster.stat(&format!("wasm_epp_flow_band_entered{{band=\"{band}\"}}"));
        let left = cluster.stat(&format!("wasm_epp_flow_band_left{{band=\"{band}\"}}"));
        if entered != left {
            held.push(format!("band {band}: {entered} entered, {left} left"));
        }
    }
    for pod in &cluster.pods {
        let stats = pod.stats().unwrap_or_default();
        let (running, waiting) = (stats["running"].as_u64(), stats["waiting"].as_u64());
        if running != Some(0) || waiting != Some(0) {
            held.push(format!("pod {}: running {running:?}, waiting {waiting:?}", pod.address()));
        }
    }
    held
}

#[test]
fn mixed_traffic_with_every_feature_on_keeps_every_invariant() {
    let seed = seed();
    let length = traffic_length();
    let clients = clients();
    let (http2, streams) = (chaos::h2::chosen(seed, clients, h2_share()), h2_streams());
    let h2_clients: Vec<usize> = (0..clients).filter(|&client| http2[client]).collect();
    println!("chaos: seed {seed} (CHAOS_SEED={seed} replays it), {length:?} of traffic, {clients} clients");
    println!("chaos: clients {h2_clients:?} speak HTTP/2, {streams} requests at once on each one's connection");
    let mix = mix();
    println!("chaos: {mix:?}");
    let (cluster, models) = start_pool();
    let canary = Canary::start();
    let pool = cluster.pool();
    let (faulty, killed) = (FAULTY.map(|i| pool[i].clone()).to_vec(), KILLED.map(|i| pool[i].clone()).to_vec());
    let port = cluster.envoy.listen_port;
    // Outside the pool (the canary counts any connection), or a pod, maybe of another model:
    // a 200 from a pod lacking the request's model would show it followed.
    let forged: Vec<String> = [canary.address.clone(), pool[0].clone(), pool[4].clone()].into();
    let stop = AtomicBool::new(false);
    let outcomes = Mutex::new(Vec::new());
    let outage = Mutex::new(Outage::default());
    std::thread::scope(|scope| {
        for (client, &speaks_h2) in http2.iter().enumerate() {
            let (stop, outcomes, forged, mix) = (&stop, &outcomes, &forged, mix);
            if speaks_h2 {
                scope.spawn(move || {
                    let draws = (0..streams).map(|stream| draw(seed, client, stream)).collect();
                    let plan = |draw: &mut Draw, index| chaos::plan(draw, client, index, &MODELS, forged, mix);
                    chaos::h2::run(port, draws, plan, stop, |outcome| outcomes.lock().unwrap().push(outcome));
                });
                continue;
            }
            scope.spawn(move || {
                let mut draw = draw(seed, client, 0);
                let mut index = 0;
                while !stop.load(Ordering::Relaxed) {
                    let planned = chaos::plan(&mut draw, client, index, &MODELS, forged, mix);
                    let outcome = chaos::send(port, planned);
                    outcomes.lock().unwrap().push(outcome);
                    index += 1;
                }
            });
        }
        std::thread::sleep(length / 3);
        outage.lock().unwrap().killed = Some(Instant::now());
        KILLED.iter().for_each(|&i| cluster.pods[i].kill());
        std::thread::sleep(length / 3);
        for i in KILLED {
            cluster.pods[i].restart().unwrap();
            if FAULTY.contains(&i) {
                cluster.pods[i].set_faults(&serde_json::from_str(FAULTS).unwrap()).unwrap();
            }
        }
        outage.lock().unwrap().back = Some(Instant::now());
        // Then a pod stops answering for a while (a stalled engine): its requests wait.
        std::thread::sleep(length / 9);
        cluster.pods[HUNG].set_faults(&json!({"hang": true})).unwrap();
        std::thread::sleep(length / 9);
        cluster.pods[HUNG].set_faults(&json!({"hang": false})).unwrap();
        std::thread::sleep(length / 9);
        stop.store(true, Ordering::Relaxed);
    });
    let outcomes = outcomes.into_inner().unwrap();
    let pool = Pool { models, faulty, killed, outage: outage.into_inner().unwrap() };

    let mut summary: BTreeMap<String, usize> = BTreeMap::new();
    for outcome in &outcomes {
        *summary.entry(label(outcome)).or_default() += 1;
    }
    println!("chaos: {} requests by kind and status:", outcomes.len());
    for (label, count) in &summary {
        println!("  {label:<32} {count}");
    }
    let mut failures: BTreeMap<String, usize> = BTreeMap::new();
    for outcome in outcomes.iter().filter(|o| o.status.as_ref().is_ok_and(|status| *status >= 500)) {
        let status = outcome.status.as_ref().map_or(0, |status| *status);
        let by = if outcome.local_reply { "the gateway".to_owned() } else { format!("{:?}", outcome.pod) };
        let reason = outcome.dropped_reason.as_deref().unwrap_or("-");
        *failures.entry(format!("{status} {} by {by} ({reason})", outcome.planned.model)).or_default() += 1;
    }
    println!("chaos: 5xx answers by model, who answered and why:");
    for (failure, count) in &failures {
        println!("  {failure:<60} {count}");
    }
    let stat = |name: &str| cluster.stat(name);
    println!(
        "chaos: flow control queued {}, released {}, dropped ttl {} capacity {} evicted {} client_gone {}; ejections of the faulty pods {}, streams failed {}, attempts failed {}",
        stat("wasm_epp_flow_queued"),
        stat("wasm_epp_flow_released"),
        stat("wasm_epp_flow_dropped{reason=\"ttl_expired\"}"),
        stat("wasm_epp_flow_dropped{reason=\"capacity\"}"),
        stat("wasm_epp_flow_dropped{reason=\"evicted\"}"),
        stat("wasm_epp_flow_dropped{reason=\"client_gone\"}"),
        pool.faulty.iter().map(|pod| stat(&format!("wasm_epp_pod_ejections{{pod=\"{pod}\"}}"))).sum::<f64>(),
        stat("wasm_epp_streams_failed"),
        stat("wasm_epp_pod_attempts_failed"),
    );
    let h2_requests = outcomes.iter().filter(|o| o.http2).count();
    let h2_left_mid_body = outcomes.iter().filter(|o| o.http2 && o.planned.kind == Kind::LeavesMidBody).count();
    let connections = stat("envoy_http_downstream_cx_http2_total{envoy_http_conn_manager_prefix=\"inference\"}");
    let resets = stat("envoy_http2_rx_reset");
    println!(
        "chaos: HTTP/2: {h2_requests} requests on {connections} connections, {resets} streams reset by their clients"
    );
    // 1 and 2: an allowed answer to every request, each 200 from a pod of its model.
    let broken: Vec<String> = outcomes
        .iter()
        .filter_map(|o| judge(o, &pool).map(|why| (o, why)))
        .map(|(o, why)| {
            format!(
                "{why}: {}{:?} {:?} pod {:?} headers {:?} body {:.300}",
                if o.http2 { "HTTP/2 " } else { "" },
                o.planned.kind,
                o.status,
                o.pod,
                o.planned.headers,
                o.body
            )
        })
        .collect();
    assert!(
        broken.is_empty(),
        "seed {seed}: {} requests broke an invariant, the first:\n{}",
        broken.len(),
        broken[..broken.len().min(8)].join("\n")
    );
    // The HTTP/2 clients kept their connections while their streams were reset: Envoy closes
    // one only after max_requests_per_connection streams (a close under a client's other
    // streams would also fail their answers, above).
    let allowed = h2_clients.len() + h2_requests / MAX_REQUESTS_PER_CONNECTION;
    assert!(connections as usize <= allowed, "seed {seed}: {connections} HTTP/2 connections for {h2_clients:?}");
    // Not an invariant: the HTTP/2 clients did reset streams (each mid-body leave resets one
    // still sending; one leaving while waiting may find its stream already ended).
    assert!(resets as usize >= h2_left_mid_body, "seed {seed}: {resets} resets for {h2_left_mid_body} leaves mid-body");
    // Not an invariant, a check that the traffic did its work: every API answered, streamed
    // and not (how many depends on the clients: flow control sheds the excess).
    let answered: std::collections::BTreeSet<&Kind> =
        outcomes.iter().filter(|o| o.status == Ok(200)).map(|o| &o.planned.kind).collect();
    assert!(answered.len() >= 9, "seed {seed}: some kinds of request never answered 200: {summary:?}");
    let last_outage_failure = outcomes
        .iter()
        .filter(|o| o.status.as_ref().is_ok_and(|status| *status >= 502))
        .filter_map(|o| o.ended.checked_duration_since(pool.outage.back?))
        .max();
    println!("chaos: the last 502-504 ended {last_outage_failure:?} after the killed pods were back");
    // 2, for every answer: no pod was sent a model it does not serve (a pod's 404 would say so).
    assert_eq!(cluster.pods_stat("model_not_found"), 0, "seed {seed}: a pod got a request for a model it lacks");
    // 3: the forged destination was never honoured.
    assert_eq!(canary.hits(), 0, "seed {seed}: a client's forged destination was reached");
    // 4: once the clients stopped, nothing is held.
    let mut held = still_held(&cluster);
    let settled = launcher::wait_until(SETTLE, || {
        held = still_held(&cluster);
        held.is_empty()
    });
    if !settled {
        // What the plugin says of each pod, to tell a leak from a pod still out of rotation.
        let stats = launcher::http::get(&cluster.envoy.admin_url("/stats/prometheus"), Duration::from_secs(5));
        let body = stats.map(|reply| reply.body).unwrap_or_default();
        let per_pod = body.lines().filter(|l| l.starts_with("wasm_epp_pod_") || l.starts_with("wasm_epp_flow_pod"));
        println!("pool {:?}\n{}", cluster.pool(), per_pod.collect::<Vec<_>>().join("\n"));
    }
    assert!(
        settled,
        "seed {seed}: still held {SETTLE:?} after the traffic stopped: {held:?}\n{}",
        cluster.envoy.log_tail(20)
    );
    // The pool's data stayed fresh (three pods always up): the plugin's fail-open warning is
    // for the whole pool, not for the adapter left without its pod (router/tests/fail_open_log.rs).
    let warned = cluster.envoy.log().matches("no fresh pod data").count();
    assert_eq!(warned, 0, "seed {seed}: the log warned {warned} times that the pool has no fresh data");
    // 5: no VM failed, and ordinary requests route.
    e2e::hostile::assert_vm_never_failed(&cluster);
    cluster.assert_plugin_healthy();
}
