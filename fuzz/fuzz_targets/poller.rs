//! The singleton's poller (`poller::PoolPoller::on_scrape`) fed arbitrary scrape bodies.
//!
//! The input is a sequence of steps separated by `---` lines (see `split_steps`), each a
//! scrape answer for the next pod in turn: a body (status 200), or `status NNN` on its first
//! line then the body, or `no answer`; a step `pool` followed by address lines replaces the
//! pool. After every step the published table must survive the JSON codec unchanged (the
//! filter decodes it), name only canonical addresses, and agree with what the scrape said.

#![no_main]

use libfuzzer_sys::fuzz_target;
use picker::address::PodAddress;
use picker::config::PollerConfig;
use picker::pod_table::PodTable;
use picker::poller::{PoolPoller, ScrapeOutcome, ScrapeResult, PLAIN_METRICS_PATH};
use picker_fuzz::{assert_canonical_address, assert_same_table, split_steps, CANONICAL_ADDRESSES};

const UNHEALTHY_AFTER_FAILURES: u32 = 2;

/// Steps per input at most: enough for health flips and restarts, bounded per execution.
const MAX_STEPS: usize = 64;

fuzz_target!(|data: &[u8]| {
    let config = PollerConfig {
        unhealthy_after_failures: UNHEALTHY_AFTER_FAILURES,
        max_metrics_bytes: 1 << 20,
        ..PollerConfig::default()
    };
    let pool: Vec<PodAddress> = CANONICAL_ADDRESSES.iter().take(3).filter_map(|a| PodAddress::parse(a).ok()).collect();
    let mut poller = PoolPoller::new(config, pool);
    let mut now: u64 = 1_000;
    for (step, (token, text)) in (1u32..).zip(split_steps(data)).enumerate().take(MAX_STEPS) {
        now += 100;
        if let Some(addresses) = text.strip_prefix(b"pool\n") {
            let pool = String::from_utf8_lossy(addresses).lines().filter_map(|l| PodAddress::parse(l).ok()).collect();
            poller.set_pool(pool, now);
            check_table(&mut poller, now);
            continue;
        }
        let due = poller.due(now);
        let Some(address) = due.get(step % due.len().max(1)).cloned() else { continue };
        poller.scrape_started(&address, token, now);
        let (status, body) = status_and_body(text);
        let result = match status {
            None => ScrapeResult::NoAnswer,
            Some(status) => ScrapeResult::Answered { status, body },
        };
        let outcome = poller.on_scrape(token, result, now);
        assert_ne!(outcome, ScrapeOutcome::Unknown, "the scrape just started is known");
        if let ScrapeOutcome::PlainPathNext(pod) = &outcome {
            // A page with no load metric from the default filtered path: neither a success nor
            // a failure, so nothing new to publish; the pod is scraped at the plain path next.
            assert_eq!((pod, poller.metrics_path(pod)), (&address, PLAIN_METRICS_PATH));
            continue;
        }
        let table = check_table(&mut poller, now).expect("a scrape changes the table");
        let pod = table.pods.iter().find(|p| p.address == address).expect("the scraped pod is in the table");
        if outcome == ScrapeOutcome::Success {
            assert!(pod.healthy && pod.last_success_ms == now && pod.consecutive_failures == 0, "{pod:?}");
        } else {
            assert!(pod.consecutive_failures >= 1, "{pod:?}");
        }
    }
});

/// `status NNN` on the first line, `no answer`, or a plain 200 body.
fn status_and_body(text: &[u8]) -> (Option<u16>, &[u8]) {
    if text == b"no answer" {
        return (None, &[]);
    }
    if let Some(rest) = text.strip_prefix(b"status ") {
        let (line, body) = match rest.iter().position(|&b| b == b'\n') {
            Some(at) => (&rest[..at], &rest[at + 1..]),
            None => (rest, &[][..]),
        };
        if let Some(status) = std::str::from_utf8(line).ok().and_then(|s| s.trim().parse().ok()) {
            return (Some(status), body);
        }
    }
    (Some(200), text)
}

/// Takes the table the poller would publish and checks it against the codec and the rules.
fn check_table(poller: &mut PoolPoller, now: u64) -> Option<PodTable> {
    let table = poller.take_table(now)?;
    for pod in &table.pods {
        assert_canonical_address(pod.address.as_str());
        if pod.healthy {
            assert!(pod.consecutive_failures < UNHEALTHY_AFTER_FAILURES, "{pod:?}");
        }
    }
    let encoded = table.encode();
    match PodTable::decode(&encoded) {
        Ok(decoded) => assert_same_table(&decoded, &table),
        Err(reason) => panic!("the published table does not decode ({reason}): {}", String::from_utf8_lossy(&encoded)),
    }
    Some(table)
}
