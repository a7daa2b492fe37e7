//! Watches every pod's queue while a replay runs: how often did a pod sit idle (nothing
//! running, nothing waiting) while another pod had requests waiting? A good router keeps that
//! near zero; it is the "no pod idle while another queues" goal of the burst workload.
//!
//! Scrapes go straight to the pods, not through the target, every [`SAMPLE_INTERVAL`].

use std::time::Duration;

use tokio::sync::watch;

use crate::client::StreamingClient;
use crate::prometheus::{sum_of, RUNNING, WAITING};

/// Often enough to see a queue that lasts a few decode steps, rare enough to cost nothing.
pub const SAMPLE_INTERVAL: Duration = Duration::from_millis(100);

/// Counts over the sampling rounds in which every pod answered.
#[derive(Debug, Clone, Copy, Default)]
pub struct Balance {
    pub rounds: u64,
    pub idle_while_queued: u64,
}

impl Balance {
    /// Share of rounds in which some pod was idle while another queued.
    pub fn idle_while_queued_share(&self) -> Option<f64> {
        (self.rounds > 0).then(|| self.idle_while_queued as f64 / self.rounds as f64)
    }
}

/// Samples `metrics_urls` until `stop` changes.
pub async fn sample_until(
    client: StreamingClient,
    metrics_urls: Vec<String>,
    mut stop: watch::Receiver<bool>,
) -> Balance {
    let mut balance = Balance::default();
    let mut ticker = tokio::time::interval(SAMPLE_INTERVAL);
    loop {
        tokio::select! {
            _ = stop.changed() => return balance,
            _ = ticker.tick() => {}
        }
        let mut pods = Vec::with_capacity(metrics_urls.len());
        for url in &metrics_urls {
            let Ok(text) = client.get_text(url).await else { break };
            pods.push((sum_of(&text, WAITING).unwrap_or(0.0), sum_of(&text, RUNNING).unwrap_or(0.0)));
        }
        if pods.len() != metrics_urls.len() {
            continue;
        }
        balance.rounds += 1;
        let someone_idle = pods.iter().any(|(waiting, running)| *waiting == 0.0 && *running == 0.0);
        let someone_queued = pods.iter().any(|(waiting, _)| *waiting > 0.0);
        if someone_idle && someone_queued {
            balance.idle_while_queued += 1;
        }
    }
}
