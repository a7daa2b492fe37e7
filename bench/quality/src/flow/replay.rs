//! Sending the load: calibration (idle TTFT, capacity) and the open-loop replay, sampling
//! Envoy's memory meanwhile.

use std::time::{Duration, Instant};

use super::client::{send, Http, Outcome};
use super::load::{self, Class};
use super::summary::p;
use super::{MAX_NUM_SEQS, PODS};

/// Requests measured one at a time for the idle TTFT.
const IDLE_REQUESTS: usize = 20;
/// How long the closed loop runs to measure capacity.
const CAPACITY_SECONDS: u64 = 15;

/// Idle TTFT p99 (one request at a time) and capacity (completed requests per second with
/// every engine slot of the pool busy).
pub async fn calibrate(http: &Http, url: &str, timeout: Duration) -> (f64, f64) {
    let mut idle = Vec::new();
    for i in 0..IDLE_REQUESTS {
        let outcome = send(http, url, Class::Critical, load::body(1_000_000 + i as u64), timeout, 0).await;
        idle.extend(outcome.ttft_ms);
    }
    let deadline = Instant::now() + Duration::from_secs(CAPACITY_SECONDS);
    let mut clients = Vec::new();
    for client in 0..PODS * MAX_NUM_SEQS {
        let (http, url) = (http.clone(), url.to_string());
        clients.push(tokio::spawn(async move {
            let mut done = 0u64;
            let mut i = 0u64;
            while Instant::now() < deadline {
                i += 1;
                let body = load::body(2_000_000 + client as u64 * 100_000 + i);
                if send(&http, &url, Class::Critical, body, timeout, 0).await.status == 200 {
                    done += 1;
                }
            }
            done
        }));
    }
    let mut completed = 0;
    for client in clients {
        completed += client.await.unwrap_or(0);
    }
    (p(&idle, 0.99).unwrap_or(0.0), completed as f64 / CAPACITY_SECONDS as f64)
}

/// RSS samples of Envoy while the load runs, to show what waiting requests cost it.
const RSS_SAMPLE_EVERY: Duration = Duration::from_millis(500);

/// [`replay`], sampling the peak resident memory of the process `pid` meanwhile.
pub async fn replay_sampling(
    http: &Http,
    url: &str,
    arrivals: &[load::Arrival],
    timeout: Duration,
    pid: Option<u32>,
) -> (Vec<Outcome>, Option<u64>) {
    let replay = replay(http, url, arrivals, timeout);
    tokio::pin!(replay);
    let mut peak: Option<u64> = None;
    let mut tick = tokio::time::interval(RSS_SAMPLE_EVERY);
    loop {
        tokio::select! {
            outcomes = &mut replay => return (outcomes, peak),
            _ = tick.tick() => {
                if let Some(rss) = pid.and_then(|pid| launcher::proc_stats::rss_bytes(pid).ok()) {
                    peak = Some(peak.map_or(rss, |p| p.max(rss)));
                }
            }
        }
    }
}

/// Sends every arrival at its time (open loop: nothing waits for earlier answers).
async fn replay(http: &Http, url: &str, arrivals: &[load::Arrival], timeout: Duration) -> Vec<Outcome> {
    let start = tokio::time::Instant::now();
    let mut tasks = Vec::with_capacity(arrivals.len());
    for arrival in arrivals {
        tokio::time::sleep_until(start + Duration::from_millis(arrival.at_ms)).await;
        let (http, url, body, class) = (http.clone(), url.to_string(), arrival.body.clone(), arrival.class);
        let at = arrival.at_ms;
        tasks.push(tokio::spawn(async move { send(&http, &url, class, body, timeout, at).await }));
    }
    let mut outcomes = Vec::with_capacity(tasks.len());
    for task in tasks {
        if let Ok(outcome) = task.await {
            outcomes.push(outcome);
        }
    }
    outcomes
}
