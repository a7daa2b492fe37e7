//! A closed-loop replay whose client slots start one after another, `stagger` apart.
//!
//! Released at once, a long-prompt workload's first wave is a burst of prefills that no
//! steady pool sees (every slot's first prompt arrives in the same instant); staggered by
//! about one service time over the slots, arrivals settle at the rate the pool drains, which
//! is the "rate that keeps the pool busy" the P/D comparison is about.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::client::StreamingClient;
use crate::driver::{join_slots, Outcome, Replay};
use crate::workload::{Job, MODEL};

/// Runs completion `jobs` with `concurrency` slots, slot `i` starting `i × stagger` late.
pub async fn replay_staggered(
    client: &StreamingClient,
    base_url: &str,
    jobs: Vec<Job>,
    concurrency: usize,
    stagger: Duration,
) -> Replay {
    let queue = Arc::new(Mutex::new(jobs.into_iter().collect::<VecDeque<Job>>()));
    let started = Instant::now();
    let mut slots = Vec::with_capacity(concurrency);
    for slot in 0..concurrency.max(1) {
        let queue = Arc::clone(&queue);
        let client = client.clone();
        let url = format!("{base_url}/v1/completions");
        let delay = stagger.saturating_mul(u32::try_from(slot).unwrap_or(u32::MAX));
        slots.push(tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let mut outcomes: Vec<Outcome> = Vec::new();
            // Each pass takes one job off a finite queue.
            loop {
                let next = queue.lock().unwrap_or_else(PoisonError::into_inner).pop_front();
                match next {
                    None => break,
                    Some(Job::Completion { prompt, max_tokens }) => {
                        let body = json!({"model": MODEL, "prompt": prompt, "max_tokens": max_tokens,
                                          "stream": true, "stream_options": {"include_usage": true}});
                        outcomes.push(client.post_streaming(&url, body.to_string()).await);
                    }
                    Some(Job::Chat { .. } | Job::ForModel { .. } | Job::Scheduled { .. } | Job::Agent { .. }) => {
                        outcomes.push(Err("only completions of the pool's model are part of P/D workloads".into()))
                    }
                }
            }
            outcomes
        }));
    }
    join_slots(slots, started).await
}
