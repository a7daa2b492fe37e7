//! Header fuzz end to end through Envoy: seeded hostile headers over raw TCP. Every request
//! must get a well-formed HTTP answer, and afterwards the plugin must be intact: ordinary
//! requests route and no Wasm VM has failed (Envoy's reload counters read 0).
//!
//! Short form in `make test` (HEADER_FUZZ_COUNT, default 300 requests); long form
//! `make fuzz-headers` (HEADER_FUZZ_COUNT / HEADER_FUZZ_SECONDS / HEADER_FUZZ_SEED).

use std::time::Instant;

use e2e::header_fuzz::fuzz;
use e2e::hostile::assert_vm_never_failed;
use e2e::Cluster;

const DEFAULT_COUNT: usize = 300;
const DEFAULT_SEED: u64 = 0x5eed_cafe;

fn env_number(name: &str) -> Option<u64> {
    std::env::var(name).ok()?.parse().ok()
}

#[test]
fn hostile_headers_get_answers_and_no_vm_fails() {
    let seed = env_number("HEADER_FUZZ_SEED").unwrap_or(DEFAULT_SEED);
    let count = env_number("HEADER_FUZZ_COUNT").map_or(DEFAULT_COUNT, |n| n as usize);
    let seconds = env_number("HEADER_FUZZ_SECONDS").filter(|s| *s > 0);
    let cluster = Cluster::start_ready("header-fuzz", 2, &["--time-scale", "0"]);
    let started = Instant::now();
    let statuses = fuzz(&cluster, seed, count, seconds);
    let sent: usize = statuses.values().sum();
    println!(
        "header fuzz: {sent} requests (seed {seed:#x}) in {:?}; answers by status: {statuses:?}",
        started.elapsed()
    );
    assert_vm_never_failed(&cluster);
}
