//! More Envoy worker threads than in-flight slots (`picker::inflight::MAX_SLOTS`), as a plain
//! Envoy on a large machine without `--concurrency` runs: every request is still served,
//! and each worker past the bound warns once that the others do not see its requests.

use e2e::Cluster;
use picker::inflight::MAX_SLOTS;

const WORKERS: u32 = MAX_SLOTS as u32 + 8;

#[test]
fn workers_past_the_slots_serve_and_say_why_their_counts_are_unseen() {
    let cluster = Cluster::start_ready_with("many-workers", 2, &["--time-scale", "0"], |options| {
        options.concurrency = WORKERS;
    });
    // Many connections at once, so that most of the workers serve some of them.
    let statuses: Vec<u16> = std::thread::scope(|scope| {
        let sent: Vec<_> = (0..160)
            .map(|i| {
                let cluster = &cluster;
                scope.spawn(move || cluster.complete(&format!("one of many, {i}")).status)
            })
            .collect();
        sent.into_iter().map(|request| request.join().unwrap_or(0)).collect()
    });
    assert!(statuses.iter().all(|&status| status == 200), "{statuses:?}");

    let warning = format!("Envoy runs more than {MAX_SLOTS} worker threads");
    let warned = || cluster.envoy.log().matches(warning.as_str()).count();
    assert!(
        launcher::wait_until(std::time::Duration::from_secs(5), || warned() >= 1),
        "{}",
        cluster.envoy.log_tail(20)
    );
    assert!(warned() <= (WORKERS as usize - MAX_SLOTS), "once per worker past the bound: {}", warned());
    assert!(cluster.envoy.stat("wasm_epp_inflight_update_failed").unwrap_or(0.0) >= 1.0);
    cluster.assert_plugin_healthy();
}
