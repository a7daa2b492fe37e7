//! Sustained streaming load: no errors, no request outside the pool, Envoy memory flat; and
//! with a pod killed and restored mid-run, only requests in flight on that pod fail.
//!
//! `LOAD_SECONDS` sets each phase's length (default 8 s in `make test`; `make soak` runs 60).

use std::io::Read;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use e2e::Cluster;

const CLIENTS: usize = 64;

fn phase_length() -> Duration {
    let seconds = std::env::var("LOAD_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(8);
    Duration::from_secs(seconds)
}

fn rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

#[derive(Default)]
struct Outcome {
    ok: AtomicUsize,
    failures: Mutex<Vec<(Option<String>, String)>>,
}

/// One streamed completion; `Err` carries the pod (if headers arrived) and the reason.
fn stream_once(url: &str, i: usize) -> Result<String, (Option<String>, String)> {
    let body = format!(r#"{{"model":"sim-model","prompt":"load {i} tell me a story","max_tokens":16,"stream":true}}"#);
    let response = ureq_agent().post(url).set("content-type", "application/json").send_string(&body);
    let response = match response {
        Ok(r) => r,
        Err(ureq::Error::Status(code, r)) => {
            return Err((r.header("x-served-by").map(String::from), format!("status {code}")))
        }
        Err(e) => return Err((None, e.to_string())),
    };
    let pod = response.header("x-served-by").map(String::from);
    let mut text = String::new();
    if let Err(e) = response.into_reader().take(1 << 20).read_to_string(&mut text) {
        return Err((pod, format!("body: {e}")));
    }
    if !text.trim_end().ends_with("data: [DONE]") {
        return Err((pod, "stream ended without [DONE]".into()));
    }
    pod.ok_or((None, "no x-served-by".into()))
}

fn ureq_agent() -> ureq::Agent {
    ureq::AgentBuilder::new().timeout(Duration::from_secs(30)).build()
}

/// Runs the clients until `stop`; returns the outcome.
fn drive(cluster: &Cluster, stop: &AtomicBool, outcome: &Outcome) {
    let url = cluster.envoy.url("/v1/completions");
    std::thread::scope(|scope| {
        for client in 0..CLIENTS {
            let url = &url;
            scope.spawn(move || {
                let mut i = client;
                while !stop.load(Ordering::Relaxed) {
                    match stream_once(url, i) {
                        Ok(pod) => {
                            assert!(cluster.pool().contains(&pod), "served by {pod}, outside the pool");
                            outcome.ok.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(failure) => outcome.failures.lock().unwrap().push(failure),
                    }
                    i += CLIENTS;
                }
            });
        }
    });
}

#[test]
fn sustained_streaming_load_is_clean_and_survives_a_pod_restart() {
    let cluster = Cluster::start_ready("load", 4, &["--time-scale", "0.05"]);
    let length = phase_length();

    // Phase 1: healthy pool.
    let stop = AtomicBool::new(false);
    let outcome = Outcome::default();
    let pid = cluster.envoy.pid();
    let mut rss_samples = Vec::new();
    std::thread::scope(|scope| {
        scope.spawn(|| drive(&cluster, &stop, &outcome));
        let started = Instant::now();
        while started.elapsed() < length {
            std::thread::sleep(Duration::from_millis(500));
            rss_samples.push(rss_kb(pid));
        }
        stop.store(true, Ordering::Relaxed);
    });
    let failures = outcome.failures.lock().unwrap().clone();
    let ok = outcome.ok.load(Ordering::Relaxed);
    eprintln!("MEASURED healthy phase: {ok} streams ok, {} failed, {CLIENTS} clients, {length:?}", failures.len());
    assert!(failures.is_empty(), "failures on a healthy pool: {:?}", &failures[..failures.len().min(5)]);
    assert!(ok > 100, "too few requests completed: {ok}");
    // Memory: after the first second of warm-up, RSS stays within 20%.
    let warm = rss_samples.get(2).copied().unwrap_or(0);
    let last = rss_samples.last().copied().unwrap_or(0);
    eprintln!("MEASURED envoy RSS: {warm} kB after warm-up, {last} kB at the end");
    assert!(last as f64 <= warm as f64 * 1.2, "Envoy RSS grew from {warm} kB to {last} kB");

    // Phase 2: kill one pod a third of the way in, restore it at two thirds.
    let victim = cluster.pods[0].address();
    let stop = AtomicBool::new(false);
    let outcome = Outcome::default();
    std::thread::scope(|scope| {
        scope.spawn(|| drive(&cluster, &stop, &outcome));
        std::thread::sleep(length / 3);
        cluster.pods[0].kill();
        std::thread::sleep(length / 3);
        cluster.pods[0].restart().unwrap();
        std::thread::sleep(length / 3);
        stop.store(true, Ordering::Relaxed);
    });
    let failures = outcome.failures.lock().unwrap().clone();
    let ok = outcome.ok.load(Ordering::Relaxed);
    eprintln!(
        "MEASURED kill/restore phase: {ok} streams ok, {} failed (pod {victim} killed with requests in flight)",
        failures.len()
    );
    assert!(failures.len() <= CLIENTS, "more failures than requests that can be in flight: {}", failures.len());
    for (pod, reason) in &failures {
        assert!(pod.is_none() || pod.as_deref() == Some(victim.as_str()), "a request on {pod:?} failed: {reason}");
    }
    let stats = cluster.pods[0].stats().unwrap();
    let served_after = stats["requests_finished"]["length"].as_u64().unwrap_or(0);
    eprintln!("MEASURED restored pod finished {served_after} requests after its restart");
    assert!(served_after > 0, "the restored pod is used again");
    cluster.assert_plugin_healthy();
}
