//! What the workers share of their TTFT models (`learn::shared_models`, read from Envoy's
//! shared data under each worker's slot), on arbitrary bytes and on well-formed records of
//! arbitrary numbers, added to a worker's own observations. Never panics; a record decodes
//! whole or not at all (at most `MAX_PODS` pods); a worker's own record decodes while fresh
//! and not once stale; and whatever the other workers published, every pod's fitted model
//! (overhead, cost per token and per request ahead) is finite, which the prediction's clamp
//! does not make so, and every prediction for a plausible load is finite and not negative.

#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use picker::inflight::SLOT_STALE_MS;
use picker::learn::shared_models::{decode, Learned};
use picker::learn::ttft::{Load, Prior, TtftModels};
use picker::pod_table::MAX_PODS;
use picker_fuzz::CANONICAL_ADDRESSES;

/// Numbers in a model's sums (`ttft::SUMS_LEN`), as the wire form lists them.
const SUMS_LEN: usize = 12;
const NOW_MS: u64 = 1_000_000;

#[derive(Arbitrary, Debug)]
struct Record {
    age_ms: u16,
    pool: [f64; SUMS_LEN],
    durations: [f64; 2],
    pods: Vec<(u8, [f64; SUMS_LEN])>,
}

impl Record {
    /// The wire form (shared_models' module docs): version, publish time, the pool's sums,
    /// the durations, the pod count, then each pod's address and sums.
    fn encode(&self) -> Vec<u8> {
        let mut bytes = vec![1];
        bytes.extend_from_slice(&NOW_MS.saturating_sub(u64::from(self.age_ms)).to_le_bytes());
        self.pool.iter().chain(&self.durations).for_each(|n| bytes.extend_from_slice(&n.to_le_bytes()));
        bytes.extend_from_slice(&(self.pods.len() as u16).to_le_bytes());
        for (pod, sums) in &self.pods {
            let address = CANONICAL_ADDRESSES[usize::from(*pod) % CANONICAL_ADDRESSES.len()];
            bytes.push(address.len() as u8);
            bytes.extend_from_slice(address.as_bytes());
            sums.iter().for_each(|n| bytes.extend_from_slice(&n.to_le_bytes()));
        }
        bytes
    }
}

#[derive(Arbitrary, Debug)]
struct Input {
    /// Other workers' slots: raw bytes, and records of chosen numbers.
    raw: Vec<Vec<u8>>,
    records: Vec<Record>,
    /// This worker's own answers: pod, uncached tokens, requests ahead, TTFT ms.
    own: Vec<(u8, u16, u8, u16)>,
    /// Loads to predict: tokens, requests ahead.
    loads: Vec<(u32, u8)>,
}

fuzz_target!(|input: Input| {
    let mut models = TtftModels::new(Prior { overhead_ms: 40.0, ms_per_token: 0.06 });
    for &(pod, tokens, requests, ttft) in input.own.iter().take(200) {
        let address = CANONICAL_ADDRESSES[usize::from(pod) % CANONICAL_ADDRESSES.len()];
        models.observe(address, Load { tokens: f64::from(tokens), requests: f64::from(requests) }, f64::from(ttft), 0);
    }
    let own = models.encode_own(NOW_MS);
    assert!(decode(&own, NOW_MS).is_some(), "a worker's fresh record is refused");
    assert!(decode(&own, NOW_MS + SLOT_STALE_MS + 1).is_none(), "a stale record is read");

    let mut others = Learned::default();
    let encoded: Vec<Vec<u8>> = input.records.iter().map(Record::encode).collect();
    for bytes in input.raw.iter().chain(&encoded).take(32) {
        if let Some(learned) = decode(bytes, NOW_MS) {
            assert!(learned.pods() <= MAX_PODS);
            others.add(learned);
        }
    }
    models.set_others(others, NOW_MS);

    for &(tokens, requests) in input.loads.iter().take(16) {
        // Up to the longest prompts served (a few hundred thousand tokens) and full batches.
        let load = Load { tokens: f64::from(tokens % 1_000_000), requests: f64::from(requests) };
        for pod in CANONICAL_ADDRESSES {
            let fit = models.fit(pod);
            let parts = [fit.overhead_ms, fit.ms_per_token, fit.ms_per_request];
            assert!(parts.iter().all(|p| p.is_finite()), "{pod}: {fit:?}");
            let predicted = models.predict(pod, load);
            assert!(predicted.is_finite() && predicted >= 0.0, "{pod} predicted {predicted} ms for {load:?}");
        }
    }
});
