//! Everything on at once: two base models and an adapter on five pods (pods that queue
//! past two sequences), flow control with small per-pod and queue bounds, priorities,
//! tenants, sessions and request TTLs, learning, outlier detection, two pods whose answers
//! sometimes fail (one the adapter's only pod), two pods killed (that one too) and brought
//! back, a pod that stalls for a while, and clients sending every kind of request (four
//! APIs, streams, `n` > 1, lax `"stream": "true"`, bodies vLLM refuses, an unknown model,
//! clients leaving mid-body, while waiting and mid-stream, forged destinations). Each
//! feature has its own test; this one looks for what they break together, as invariants a
//! user would call a bug: a request left unanswered, a status the docs do not allow for what
//! was sent, an answer from a pod of another model, a forged address reached, a count or a
//! queue place never given back, a Wasm VM failure.
//!
//! `CHAOS_SECONDS` sets the traffic's length (default 12), `CHAOS_SEED` replays a run (the
//! seed is printed), `CHAOS_CLIENTS` the client threads (16); `--nocapture` shows the
//! summary.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use e2e::chaos::{self, Draw, Kind, Outcome};
use e2e::hostile::Canary;
use e2e::Cluster;
use serde_json::json;

/// Client threads, each sending one request after another (`CHAOS_CLIENTS` to change).
fn clients() -> usize {
    std::env::var("CHAOS_CLIENTS").ok().and_then(|s| s.parse().ok()).unwrap_or(16)
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
/// How long after the killed pod is back its model's requests may still fail: the pool
/// service must scrape it healthy again (100 ms polls) and the workers read the table.
const BACK_IN_ROTATION: Duration = Duration::from_secs(3);
/// Bound on the wait for every count to come back to 0 once the clients stopped (and for the
/// faulty pods' last ejection, at most `max_ejection_ms`, to end: an ejected pod reads saturated).
const SETTLE: Duration = Duration::from_secs(20);
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
        options.filter_config["flow_control"] = json!({"enabled": true, "max_inflight_per_pod": 3, "ttl_ms": 4000, "sheddable_ttl_ms": 300,
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

/// When the killed pods were down, as far as the clients could tell.
#[derive(Default)]
struct Outage {
    killed: Option<Instant>,
    back: Option<Instant>,
}

impl Outage {
    /// The request ran while the killed pods were down or not yet back in rotation.
    fn overlaps(&self, outcome: &Outcome) -> bool {
        let Some(killed) = self.killed else { return false };
        let back = self.back.map_or(outcome.ended, |back| back + BACK_IN_ROTATION);
        outcome.ended >= killed && outcome.started <= back
    }
}

/// What the judge knows of the pool: the models each pod serves, the faulty and the killed pods.
struct Pool {
    models: BTreeMap<String, Vec<&'static str>>,
    faulty: Vec<String>,
    killed: Vec<String>,
    outage: Outage,
}

impl Pool {
    fn serves(&self, pod: &str, model: &str) -> bool {
        self.models.get(pod).is_some_and(|models| models.contains(&model))
    }

    /// `model` lost a pod in the outage.
    fn lost_a_pod(&self, model: &str) -> bool {
        self.killed.iter().any(|pod| self.serves(pod, model))
    }

    /// `model` had no pod left in the outage.
    fn lost_every_pod(&self, model: &str) -> bool {
        self.models.keys().filter(|pod| self.serves(pod, model)).all(|pod| self.killed.contains(pod))
    }
}

/// Why an outcome breaks invariant 1 (a status the docs allow) or 2 (the right model's
/// pod); `None` when it is fine.
///
/// Allowed, beside 200 for a request vLLM serves: the pod's 400 for a body vLLM refuses
/// (routed by its model, or by load when no model can be read), the gateway's 404 for a
/// model no pod serves, flow control's 429 with its reason (TTL, a full queue, an eviction),
/// a faulty pod's 500 (the last of Envoy's attempts landed on it) and its streams' error
/// events; and in the outage (from the kill until `BACK_IN_ROTATION` after the restart), for
/// requests that may have gone to a killed pod (its model's, or a body routed by load): 502,
/// 503 and 504 with no answering pod or the killed one, a stream the killed pod cut, and for
/// a model whose every pod was killed, the gateway's 503 (`rejected-no-endpoints`) or 404
/// (no pod serves it any more).
fn judge(outcome: &Outcome, pool: &Pool) -> Option<String> {
    let planned = &outcome.planned;
    let status = match (&planned.kind, &outcome.status) {
        (Kind::LeavesMidBody | Kind::LeavesWaiting, _) => return None,
        (_, Err(reason)) => return Some(format!("no answer: {reason}")),
        (_, Ok(status)) => *status,
    };
    let pod = outcome.pod.as_deref();
    let in_outage = pool.outage.overlaps(outcome);
    let on_killed = pod.is_some_and(|pod| pool.killed.iter().any(|killed| killed == pod));
    let by_load = planned.kind == Kind::BadJson;
    let outage_may_fail = in_outage && (pod.is_none() || on_killed) && (by_load || pool.lost_a_pod(&planned.model));
    let model_gone = in_outage && !by_load && pool.lost_every_pod(&planned.model);
    let from_faulty = pod.is_some_and(|pod| pool.faulty.iter().any(|faulty| faulty == pod));
    if let Some(why) = judge_flow_headers(outcome, status) {
        return Some(why);
    }
    match (&planned.kind, status) {
        (Kind::UnknownModel, 404) if outcome.local_reply => return None,
        (Kind::UnknownModel, _) => return Some("an unknown model gets the gateway's 404".into()),
        (_, 429) if outcome.dropped_reason.is_some() => return None,
        (_, 429) => return Some("429 without x-llm-d-request-dropped-reason".into()),
        (_, 502..=504) if outage_may_fail => return None,
        (_, 404 | 503) if model_gone && outcome.local_reply => return None,
        (_, 500) if from_faulty => return None,
        (Kind::BadJson | Kind::MissingPrompt, 400) => return None,
        (Kind::BadJson | Kind::MissingPrompt, _) => return Some(format!("{status}: a body vLLM refuses gets its 400")),
        (Kind::Valid { .. } | Kind::LeavesMidStream, 200) => {}
        (_, status) => return Some(format!("status {status} not allowed")),
    }
    let Some(pod) = pod else { return Some("200 without x-served-by".into()) };
    if !pool.models.contains_key(pod) {
        return Some(format!("answered by {pod}, not a pool member"));
    }
    if !pool.serves(pod, &planned.model) {
        return Some(format!("{} answered by {pod}, which serves {:?}", planned.model, pool.models.get(pod)));
    }
    if planned.kind == Kind::LeavesMidStream {
        return None;
    }
    if let Kind::Valid { stream: true, .. } = planned.kind {
        // vLLM fails a stream after its headers: `200`, then an error event.
        if chaos::stream_has_error_event(&outcome.body) {
            return (!from_faulty).then(|| "a stream opened with an error event from a pod without faults".into());
        }
        if !outcome.whole {
            return (!(in_outage && on_killed)).then(|| "a stream cut short off the killed pods".into());
        }
    } else if !outcome.whole {
        return Some("an answer cut short".into());
    }
    let named = [format!("\"model\":\"{}\"", planned.model), format!("\"model\": \"{}\"", planned.model)];
    if !named.iter().any(|n| outcome.body.contains(n.as_str())) {
        return Some(format!("the answer does not name {}", planned.model));
    }
    None
}

/// The flow-control headers as documented: a refusal's reason is one of llm-d's values (and
/// ours, an eviction, only for a sheddable request); the time waited is on every answer
/// flow control let through to a pod, never on the gateway's own refusals.
fn judge_flow_headers(outcome: &Outcome, status: u16) -> Option<String> {
    const REASONS: [&str; 4] =
        ["rejected-saturated", "rejected-ttl-expired", "evicted-for-higher-priority", "rejected-no-endpoints"];
    if let Some(reason) = outcome.dropped_reason.as_deref() {
        if !REASONS.contains(&reason) {
            return Some(format!("undocumented dropped reason {reason:?}"));
        }
        if reason == "evicted-for-higher-priority" && outcome.planned.priority() >= 0 {
            return Some("a request of priority 0 or more evicted".into());
        }
    }
    match (outcome.local_reply, outcome.queue_duration.as_deref()) {
        (true, Some(waited)) => Some(format!("{status} from the gateway says it waited {waited} ms in the queue")),
        (false, None) if outcome.pod.is_some() => Some(format!("{status} from a pod without the time waited")),
        (false, Some(waited)) if waited.parse::<u64>().is_err() => Some(format!("time waited {waited:?}")),
        _ => None,
    }
}

fn label(outcome: &Outcome) -> String {
    let status = match &outcome.status {
        Ok(status) => status.to_string(),
        Err(_) if matches!(outcome.planned.kind, Kind::LeavesMidBody | Kind::LeavesWaiting) => "left".into(),
        Err(_) => "none".into(),
    };
    let kind = match &outcome.planned.kind {
        Kind::Valid { api, stream } => format!("{api:?}{}", if *stream { " stream" } else { "" }),
        other => format!("{other:?}"),
    };
    format!("{kind:<22} {status}")
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
    println!("chaos: seed {seed} (CHAOS_SEED={seed} replays it), {length:?} of traffic, {clients} clients");
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
        for client in 0..clients {
            let (stop, outcomes, forged) = (&stop, &outcomes, &forged);
            scope.spawn(move || {
                let mut draw = Draw::new(seed ^ (client as u64).wrapping_mul(0x2545_F491_4F6C_DD1D));
                let mut index = 0;
                while !stop.load(Ordering::Relaxed) {
                    let planned = chaos::plan(&mut draw, client, index, &["sim-model", "qwen", "sql-lora"], forged);
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
        println!("  {label:<28} {count}");
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
    // 1 and 2: an allowed answer to every request, each 200 from a pod of its model.
    let broken: Vec<String> = outcomes
        .iter()
        .filter_map(|o| judge(o, &pool).map(|why| (o, why)))
        .map(|(o, why)| {
            format!(
                "{why}: {:?} {:?} pod {:?} headers {:?} body {:.300}",
                o.planned.kind, o.status, o.pod, o.planned.headers, o.body
            )
        })
        .collect();
    assert!(
        broken.is_empty(),
        "seed {seed}: {} requests broke an invariant, the first:\n{}",
        broken.len(),
        broken[..broken.len().min(8)].join("\n")
    );
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
