//! Learning from responses (issue 14) in a real Envoy: a burst of long prompts spreads by
//! tokens in flight (completions, and agents' Responses API streams), a slow pod is avoided
//! once its answers show it, and a pod whose answers report fewer cached tokens than predicted
//! loses index capacity.

use std::time::Duration;

use e2e::{tally, Cluster};
use launcher::envoy::EnvoyOptions;

/// Learning on with `fields` besides, every stream that asks for `usage` read for it (the
/// chunk budget, which reads a sample of them, has its own test below).
fn learning_on_with(options: &mut EnvoyOptions, fields: serde_json::Value) {
    let mut learning = serde_json::json!({"enabled": true, "usage_chunks_per_stream": READ_ALL});
    if let (Some(learning), Some(fields)) = (learning.as_object_mut(), fields.as_object()) {
        learning.extend(fields.clone());
    }
    if let Some(config) = options.filter_config.as_object_mut() {
        config.insert("learning".into(), learning);
        config.insert("fallback_destinations".into(), serde_json::json!(0));
    }
}

fn learning_on(options: &mut EnvoyOptions) {
    learning_on_with(options, serde_json::json!({}));
}

/// A chunk budget per stream no test stream exhausts.
const READ_ALL: f64 = 100_000.0;

fn start(name: &str, pods: usize, sim_args: &[&str]) -> Cluster {
    let cluster = Cluster::start(name, pods, sim_args, learning_on);
    assert!(
        cluster.envoy.wait_for_healthy_pods(pods as u64, Duration::from_secs(15)),
        "{}",
        cluster.envoy.log_tail(30)
    );
    cluster
}

fn streamed(prompt: &str, max_tokens: u32) -> String {
    serde_json::json!({
        "model": "sim-model", "prompt": prompt, "max_tokens": max_tokens,
        "stream": true, "stream_options": {"include_usage": true},
    })
    .to_string()
}

/// `words` simulator tokens of text starting with `tag` (no two tags share a prefix block).
fn text(tag: &str, words: usize) -> String {
    format!("{tag} {}", vec!["abcd"; words].join(" "))
}

/// Waits until Envoy's stats reach the plugin's counter `name` (flushed on its tick).
fn stat_at_least(cluster: &Cluster, name: &str, value: f64) -> f64 {
    let mut seen = 0.0;
    launcher::wait_until(Duration::from_secs(5), || {
        seen = cluster.envoy.stat(name).unwrap_or(0.0);
        seen >= value
    });
    seen
}

/// Two long prompts 50 ms apart, then (300 ms later, while they prefill) four short ones 50 ms
/// apart, on `path`, every pod taking 1.5 s to its first token so all are in flight at once;
/// `body` makes a request of `words` tokens tagged `tag`. Which pod served each, long or not.
/// The long prompts are not sent at the same instant: two decisions made in the same
/// microseconds on two workers are blind to each other (docs/design.md, "In flight"), and with
/// four idle pods they then collide one time in four whatever is learned; what is tested here
/// is that a pick's tokens in flight count for every later decision.
fn burst(cluster: &Cluster, path: &str, body: impl Fn(&str, usize) -> String) -> Vec<(bool, String)> {
    for pod in &cluster.pods {
        pod.set_faults(&serde_json::json!({"extra_latency_ms": 1500})).unwrap();
    }
    std::thread::scope(|scope| {
        let mut handles = Vec::new();
        let mut send = |long: bool, body: String| {
            handles.push(scope.spawn(move || (long, cluster.served_by_pool(&cluster.post(path, &[], &body)))));
        };
        for i in 0..2 {
            send(true, body(&format!("long{i}"), 6_000));
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(Duration::from_millis(250));
        for i in 0..4 {
            send(false, body(&format!("short{i}"), 20));
            std::thread::sleep(Duration::from_millis(50));
        }
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// The two long prompts went to two pods, and at most one short request queued behind them.
/// Counting requests alone, two of the four short ones tie with the long prompts' pods;
/// counting tokens, a pod prefilling 6,000 tokens is never the least loaded for a short one.
fn assert_spread(served: &[(bool, String)]) {
    let long_pods: Vec<&String> = served.iter().filter(|(long, _)| *long).map(|(_, pod)| pod).collect();
    assert_ne!(long_pods[0], long_pods[1], "the two long prompts went to one pod: {served:?}");
    let short_on_long = served.iter().filter(|(long, pod)| !long && long_pods.contains(&pod)).count();
    assert!(short_on_long <= 1, "short requests queued behind the long prompts: {served:?}");
}

#[test]
fn a_burst_of_long_prompts_spreads_and_short_ones_avoid_them() {
    let cluster = start("learn-burst", 4, &["--time-scale", "0"]);
    assert_spread(&burst(&cluster, "/v1/completions", |tag, words| streamed(&text(tag, words), 4)));
}

/// The pool service's per-pod gauge shows a long prompt's uncached tokens while its pod has
/// not answered, and none once it has: what token load weighs the pod by, for a dashboard.
#[test]
fn a_pods_prompt_tokens_in_flight_show_until_it_answers() {
    let cluster = start("learn-token-gauge", 1, &["--time-scale", "0"]);
    let pod = cluster.pods[0].address();
    let gauge = format!("wasm_epp_pod_prompt_tokens_in_flight{{pod=\"{pod}\"}}");
    cluster.pods[0].set_faults(&serde_json::json!({"extra_latency_ms": 3000})).unwrap();
    std::thread::scope(|scope| {
        let answer = scope.spawn(|| cluster.post("/v1/completions", &[], &streamed(&text("gauge", 6_000), 4)));
        let mut seen = 0.0;
        let shown = launcher::wait_until(Duration::from_millis(2_500), || {
            seen = cluster.stat(&gauge);
            seen >= 1_000.0
        });
        assert!(shown, "{gauge} read {seen} while a 6,000-token prompt waited for its first token");
        assert_eq!(answer.join().unwrap().status, 200);
    });
    let released = launcher::wait_until(Duration::from_secs(5), || cluster.stat(&gauge) == 0.0);
    assert!(released, "{gauge} still reads {} after the answer", cluster.stat(&gauge));
}

/// An agent's streamed Responses API turn with `words` tokens of instructions.
fn agent_turn(tag: &str, words: usize) -> String {
    serde_json::json!({
        "model": "sim-model", "instructions": text(tag, words), "input": "next step",
        "max_output_tokens": 4, "stream": true,
    })
    .to_string()
}

#[test]
fn agents_long_responses_prompts_spread_and_their_streams_teach_the_model() {
    // A Responses stream sends `response.created` at once and its first token 1.5 s later:
    // the prompt's tokens must count as in flight until that first output event.
    let cluster = start("learn-agents", 4, &["--time-scale", "0"]);
    assert_spread(&burst(&cluster, "/v1/responses", agent_turn));
    // Each stream's first output event was a TTFT sample and its `response.completed` gave usage.
    assert!(stat_at_least(&cluster, "wasm_epp_learning_ttft_samples", 6.0) >= 6.0);
    assert!(stat_at_least(&cluster, "wasm_epp_learning_cached_reports", 6.0) >= 6.0);
    assert_eq!(cluster.envoy.stat("wasm_epp_learning_usage_reports"), Some(6.0));
}

#[test]
fn a_slow_pod_is_avoided_once_its_answers_show_it() {
    let cluster = start("learn-slow", 4, &["--time-scale", "0"]);
    let slow = cluster.pods[0].address();
    cluster.pods[0].set_faults(&serde_json::json!({"extra_latency_ms": 400})).unwrap();
    let mut late = Vec::new();
    for i in 0..48 {
        let reply = cluster.post("/v1/completions", &[], &streamed(&text(&format!("q{i}"), 200), 4));
        let pod = cluster.served_by_pool(&reply);
        if i >= 24 {
            late.push(pod);
        }
    }
    let counts = tally(late.iter().map(String::as_str));
    assert_eq!(counts.get(&slow), None, "the slow pod still got requests after 24 answers: {counts:?}");
    assert!(stat_at_least(&cluster, "wasm_epp_learning_ttft_samples", 48.0) >= 48.0);
    // Each request comes on its own connection, so both workers served some (all 48 on one
    // has odds of 2^-47) and each read what the other learned, through V8's shared data.
    let read = stat_at_least(&cluster, "wasm_epp_learning_models_read", 1.0);
    assert!(read >= 1.0, "no worker read another's learned models: {read}");
}

/// Cached-token prediction error (sum of |predicted − reported|) per round of the eviction
/// scenario below, with the index correction on or off.
fn eviction_errors(correct_index: bool) -> Vec<f64> {
    // One pod of 128 blocks of 16 tokens; 4 prompts of 512 tokens (32 blocks each) sent round
    // and round fill it exactly as the index counts them, but the answers' tokens take blocks
    // too, so the pod evicts what the index still lists. The reported cached tokens teach it.
    let cluster = Cluster::start(
        if correct_index { "learn-evict" } else { "learn-evict-off" },
        1,
        &["--time-scale", "0", "--num-gpu-blocks", "128", "--max-model-len", "1024"],
        |options| {
            learning_on_with(options, serde_json::json!({"correct_index": correct_index}));
            // One worker: each worker learns from the answers it proxies, so with two the
            // answers split between two corrections at random and the rounds' errors with
            // them (a run of 2 once corrected later than the 6 rounds allow).
            options.concurrency = 1;
        },
    );
    assert!(cluster.envoy.wait_for_healthy_pods(1, Duration::from_secs(15)), "{}", cluster.envoy.log_tail(30));
    let prompts: Vec<String> = (0..4).map(|i| text(&format!("doc{i}"), 511)).collect();
    let mut errors = Vec::new();
    let mut before = 0.0;
    for round in 1..=ROUNDS {
        for prompt in &prompts {
            let reply = cluster.post("/v1/completions", &[], &streamed(prompt, 64));
            assert_eq!(reply.status, 200, "{}", reply.body);
        }
        // Every answer's usage is observed. vLLM leaves prompt_tokens_details out on a miss: from
        // a pod that has reported a hit, that is read as none cached; before its first hit (round
        // 1's first touches) it teaches nothing, so not every answer is a cached-token report.
        let reports = stat_at_least(&cluster, "wasm_epp_learning_usage_reports", 4.0 * round as f64);
        assert!(reports >= 4.0 * round as f64, "usage not observed: {reports}");
        let error = cluster.envoy.stat("wasm_epp_learning_cached_tokens_error").unwrap_or(0.0);
        errors.push(error - before);
        before = error;
    }
    errors
}

const ROUNDS: usize = 6;

#[test]
fn an_evicting_pods_index_is_corrected_towards_what_it_reports() {
    let (on, off) = (eviction_errors(true), eviction_errors(false));
    eprintln!("cached-token prediction error per round: corrected {on:?}, uncorrected {off:?}");
    let later = |errors: &[f64]| errors[2..].iter().sum::<f64>();
    assert!(later(&off) > 0.0, "the pod never evicted what the index listed: {off:?}");
    assert!(later(&on) < later(&off), "correction did not help: {on:?} vs {off:?}");
}

#[test]
fn a_busy_pod_has_only_a_few_streams_read_for_usage_and_every_answer_passes_whole() {
    // Real-time steps (~15 ms a token): twelve 32-token streams overlap on the one pod.
    let cluster = Cluster::start("learn-readers", 1, &[], |options| {
        learning_on_with(options, serde_json::json!({"usage_streams_per_pod": 2}));
    });
    assert!(cluster.envoy.wait_for_healthy_pods(1, Duration::from_secs(15)), "{}", cluster.envoy.log_tail(30));
    const STREAMS: usize = 12;
    let replies: Vec<_> = std::thread::scope(|scope| {
        let cluster = &cluster;
        let handles: Vec<_> = (0..STREAMS)
            .map(|i| {
                let body = streamed(&text(&format!("busy{i}"), 40), 32);
                scope.spawn(move || cluster.post("/v1/completions", &[], &body))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for reply in &replies {
        assert_eq!(reply.status, 200, "{}", reply.body);
        // Read or not, the client gets every event, the usage event included.
        assert!(
            reply.body.contains("\"completion_tokens\":32") && reply.body.ends_with("data: [DONE]\n\n"),
            "{}",
            reply.body
        );
    }
    let not_read = stat_at_least(&cluster, "wasm_epp_learning_usage_streams_not_read", 1.0);
    let reports = cluster.envoy.stat("wasm_epp_learning_usage_reports").unwrap_or(0.0);
    assert!(not_read >= 1.0, "no stream was left unread with 12 at once and 2 slots per worker");
    assert_eq!(reports + not_read, STREAMS as f64, "each stream is either read to its usage or counted unread");
    let chunks = cluster.envoy.stat("wasm_epp_learning_chunks_read").unwrap_or(0.0);
    assert!(chunks < (STREAMS * 32) as f64, "every chunk was copied: {chunks}");
}

#[test]
fn with_a_chunk_budget_per_stream_a_sample_of_the_streams_is_read_and_every_answer_passes_whole() {
    // Sequential 16-token streams with usage, in real-time steps (~15 ms a token, so each
    // event is a chunk of its own): the default share per stream (2 chunks), without the time
    // share (which at this low rate would read them all), reads the first stream each worker
    // sees and then about one in nine.
    let cluster = Cluster::start("learn-budget", 2, &[], |options| {
        if let Some(config) = options.filter_config.as_object_mut() {
            let learning = serde_json::json!({"enabled": true, "usage_chunks_per_second": 0});
            config.insert("learning".into(), learning);
        }
    });
    assert!(cluster.envoy.wait_for_healthy_pods(2, Duration::from_secs(15)), "{}", cluster.envoy.log_tail(30));
    const STREAMS: usize = 16;
    const TOKENS: usize = 16;
    for i in 0..STREAMS {
        let reply = cluster.post("/v1/completions", &[], &streamed(&text(&format!("sample{i}"), 40), TOKENS as u32));
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert!(
            reply.body.contains(&format!("\"completion_tokens\":{TOKENS}")) && reply.body.ends_with("data: [DONE]\n\n"),
            "{}",
            reply.body
        );
    }
    let samples = stat_at_least(&cluster, "wasm_epp_learning_ttft_samples", STREAMS as f64);
    assert_eq!(samples, STREAMS as f64, "every stream's first token is a TTFT sample");
    let stat = |name: &str| cluster.envoy.stat(name).unwrap_or(0.0);
    let (reports, not_read) = ("wasm_epp_learning_usage_reports", "wasm_epp_learning_usage_streams_not_read");
    launcher::wait_until(Duration::from_secs(5), || stat(reports) + stat(not_read) >= STREAMS as f64);
    let (reports, not_read) = (stat(reports), stat(not_read));
    assert!(reports >= 1.0 && not_read >= 1.0, "{reports} streams read, {not_read} not");
    assert_eq!(reports + not_read, STREAMS as f64, "each stream is either read to its usage or counted unread");
    // Every stream's first chunk, then per worker 2 chunks a stream and one stream's overdraw
    // (its tokens, the usage event and `[DONE]`).
    let chunks = stat("wasm_epp_learning_chunks_read");
    let bound = (STREAMS + 2 * STREAMS + 2 * (TOKENS + 2)) as f64;
    println!("{reports} streams read for usage, {not_read} not, {chunks} chunks copied, at most {bound}");
    assert!(chunks <= bound, "{chunks} chunks read, the budget allows {bound} (all: {})", STREAMS * (TOKENS + 2));
}

#[test]
fn past_the_watch_budget_answers_are_sampled_and_every_answer_passes_whole() {
    // Whole answers, one at a time, on one worker: a quarter of an answer watched each (no
    // time share, which at this rate would watch them all). The budget starts with 64
    // answers' share saved (16), spent over the first 22 answers; then one in four is watched.
    let cluster = Cluster::start("learn-watch", 2, &[], |options| {
        options.concurrency = 1;
        if let Some(config) = options.filter_config.as_object_mut() {
            let learning = serde_json::json!({"enabled": true, "watch_share": 0.25, "watch_per_second": 0});
            config.insert("learning".into(), learning);
        }
    });
    assert!(cluster.envoy.wait_for_healthy_pods(2, Duration::from_secs(15)), "{}", cluster.envoy.log_tail(30));
    const ANSWERS: usize = 120;
    for i in 0..ANSWERS {
        let body = serde_json::json!({"model": "sim-model", "prompt": text(&format!("watch{i}"), 20), "max_tokens": 2});
        let reply = cluster.post("/v1/completions", &[], &body.to_string());
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert!(reply.body.contains("\"completion_tokens\":2"), "{}", reply.body);
    }
    let stat = |name: &str| cluster.envoy.stat(name).unwrap_or(0.0);
    let (watched, not_watched) = ("wasm_epp_learning_usage_reports", "wasm_epp_learning_answers_not_watched");
    launcher::wait_until(Duration::from_secs(5), || stat(watched) + stat(not_watched) >= ANSWERS as f64);
    let (watched, not_watched) = (stat(watched), stat(not_watched));
    println!("{watched} answers watched (a usage report each), {not_watched} not");
    assert_eq!(watched + not_watched, ANSWERS as f64, "each answer is either watched to its usage or counted");
    // The first 22, then the 25th, 29th, ... 117th.
    assert_eq!(watched, (22 + (117 - 25) / 4 + 1) as f64, "answers watched of {ANSWERS}");
    assert_eq!(stat("wasm_epp_learning_first_bytes"), ANSWERS as f64, "every answer's first byte is noted");
}
