//! Days of operation in a few seconds: pods replaced all day with new addresses, through the
//! worker's table refresh and tick. Whatever a worker keeps per pod must forget the pods that
//! left, so its tables stay the size of the pool, not of its history.

mod common;

use common::Bench;

/// Pods in the pool at any time; each round replaces all of them with pods on new addresses.
const POOL: usize = 4;
/// Rounds of replacement: 10,000 pods come and go.
const ROUNDS: usize = 2_500;

fn address(i: usize) -> String {
    format!("10.{}.{}.{}:8000", i / 65_536, (i / 256) % 256, i % 256)
}

/// Publishes round `round`'s pool (pods waiting, so learning notes their queues) and ticks.
fn replace_pool(bench: &Bench, round: usize) {
    let addresses: Vec<String> = (0..POOL).map(|i| address(round * POOL + i)).collect();
    let pods: Vec<(&str, f64)> = addresses.iter().map(|a| (a.as_str(), 2.0)).collect();
    bench.publish(round as u64 + 1, &pods);
    bench.tick();
}

#[test]
fn learning_without_prefix_routing_forgets_departed_pods() {
    // Learning on, prefix routing off: a valid configuration (TTFT scoring by load alone).
    let bench = Bench::new(r#"{"prefix": {"enabled": false}, "learning": {"enabled": true}}"#);
    for round in 0..ROUNDS {
        replace_pool(&bench, round);
        let remembered = bench.worker.learning.borrow().pods_remembered();
        // The departed pods' epochs and queues were kept until 1,024 filled the tables; pods
        // after that were never noted, so a restart of theirs went unnoticed.
        assert!(remembered <= POOL, "round {round}: the learner remembers {remembered} pods");
    }
}
