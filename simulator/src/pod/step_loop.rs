//! The pod's engine loop: one tokio task that sleeps until the step in flight ends, completes
//! it and starts the next, and parks while the engine is idle.
//!
//! It never busy-waits: each pass either sleeps on a timer, waits for a request to reach an
//! idle engine, or completes a step. With `--time-scale 0` steps take no time, so it yields
//! after each one to let the HTTP tasks run.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::watch;

use super::Pod;

/// Runs `pod`'s steps until `stop` turns true (or its sender is dropped).
pub async fn run_step_loop(pod: Arc<Pod>, mut stop: watch::Receiver<bool>) {
    // Each pass sleeps, parks or completes a step; it ends only on the stop signal.
    loop {
        if *stop.borrow() {
            return;
        }
        match pod.step_end() {
            None => {
                tokio::select! {
                    () = pod.step_started.notified() => {}
                    changed = stop.changed() => if changed.is_err() { return },
                }
            }
            Some(ends_at) if ends_at > Instant::now() => {
                // A restart may drop this step and a new request start an earlier one: wake for it.
                tokio::select! {
                    () = tokio::time::sleep_until(ends_at.into()) => {}
                    () = pod.step_started.notified() => {}
                    changed = stop.changed() => if changed.is_err() { return },
                }
            }
            Some(_) => {
                pod.complete_step();
                tokio::task::yield_now().await;
            }
        }
    }
}
