//! What each worker has learned of the pods' speeds, shared with the other workers of its
//! Envoy on the tick.
//!
//! Each worker observes only the answers it proxies, and which worker proxies a request is
//! Envoy's choice (by connection): at the start of workload f one worker had seen a 3 × slower
//! pod answer in 1.4 s twice while the other had seen it answer once, first in its queue, in
//! 0.4 s, and went on sending that pod 2,000–3,000-token prompts for two more seconds
//! (0.9–1.2 s each). The models are least-squares sums, and sums of two workers'
//! observations are the sums of both: each worker publishes its own under its in-flight slot
//! ([`crate::inflight`]) and adds up the others', so every model rests on every worker's
//! answers, a tick late. The cost is a tick's, never a request's: one write and one read per
//! other worker every [`share_every_ms`] (100 ms up to 64 pods, longer for larger pools).
//!
//! Wire form (little endian): version byte, publish time in ms (u64), the pool's sums and the
//! answers' durations (weight, sum), the pod count (u16), then per pod its address (length
//! byte, bytes) and its sums. Every number is an `f64`; a record that is stale, cut short or
//! holds a number no worker could have summed (not finite, past 1e30, a weight past what
//! [`FORGET`] allows) is ignored whole.

use hashbrown::HashMap;

use super::ttft::{Sums, FORGET, SUMS_LEN};
use crate::inflight::SLOT_STALE_MS;
use crate::pod_table::MAX_PODS;
use crate::wire::Reader;

/// How often a worker publishes what it learned and reads the others', for a pool of up to
/// [`SHARE_PODS_AT_ONCE`] pods. The models forget over ~50 answers, so a tenth of a second
/// late is as good as at once; at the start it is a few answers, not seconds, behind.
pub const SHARE_EVERY_MS: u64 = 100;

/// Past this many pods the period grows with the pool ([`share_every_ms`]): a record is ~120
/// bytes per pod, written once and read by every other worker, and a large pool's answers
/// come to each pod more sparsely anyway.
pub const SHARE_PODS_AT_ONCE: usize = 64;

/// The share period for a pool of `pods`: [`SHARE_EVERY_MS`], times `pods` ÷
/// [`SHARE_PODS_AT_ONCE`] past that (1.6 s for 1,024 pods), so the bytes shared a second stay
/// those of 64 pods every 100 ms (~77 KB per worker).
pub fn share_every_ms(pods: usize) -> u64 {
    let scale = pods.div_ceil(SHARE_PODS_AT_ONCE).max(1);
    SHARE_EVERY_MS.saturating_mul(u64::try_from(scale).unwrap_or(u64::MAX))
}

/// A worker that learned nothing new still publishes this often, so readers can tell it
/// alive (they ignore records older than [`SLOT_STALE_MS`]).
pub const REFRESH_EVERY_MS: u64 = 1_000;

const VERSION: u8 = 1;

/// Observations as sums: a worker's own, or several workers' added up.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Learned {
    pub(super) pool: Sums,
    pub(super) pods: HashMap<String, Sums>,
    /// Successful answers' durations: weight and sum.
    pub(super) durations: (f64, f64),
}

impl Learned {
    /// Adds another worker's observations to these.
    pub fn add(&mut self, other: Learned) {
        self.pool = self.pool.plus(other.pool);
        self.durations = (self.durations.0 + other.durations.0, self.durations.1 + other.durations.1);
        for (pod, sums) in other.pods {
            if let Some(mine) = self.pods.get_mut(&pod) {
                *mine = mine.plus(sums);
            } else if self.pods.len() < MAX_PODS {
                self.pods.insert(pod, sums);
            }
        }
    }

    /// Pods with observations.
    pub fn pods(&self) -> usize {
        self.pods.len()
    }
}

/// The record of `pool`, `pods` and `durations`, published at `now_ms`.
pub(super) fn encode<'a>(
    now_ms: u64,
    pool: &Sums,
    pods: impl Iterator<Item = (&'a str, Sums)> + Clone,
    durations: (f64, f64),
) -> Vec<u8> {
    let named = pods.filter(|(pod, _)| pod.len() <= usize::from(u8::MAX)).take(usize::from(u16::MAX));
    let count = named.clone().count();
    let mut bytes = Vec::with_capacity(1 + 8 + 8 * (SUMS_LEN + 2) + 2 + count * (24 + 8 * SUMS_LEN));
    bytes.push(VERSION);
    bytes.extend_from_slice(&now_ms.to_le_bytes());
    put_numbers(&mut bytes, &pool.to_array());
    put_numbers(&mut bytes, &[durations.0, durations.1]);
    bytes.extend_from_slice(&u16::try_from(count).unwrap_or(u16::MAX).to_le_bytes());
    for (pod, sums) in named {
        bytes.push(u8::try_from(pod.len()).unwrap_or(u8::MAX));
        bytes.extend_from_slice(pod.as_bytes());
        put_numbers(&mut bytes, &sums.to_array());
    }
    bytes
}

fn put_numbers(bytes: &mut Vec<u8>, numbers: &[f64]) {
    for number in numbers {
        bytes.extend_from_slice(&number.to_le_bytes());
    }
}

/// A record published within [`SLOT_STALE_MS`] of `now_ms`, before or after it (another
/// worker may read the clock after this one; further ahead, it was published before the wall
/// clock stepped back, by a worker that has not published since), whole and finite.
pub fn decode(bytes: &[u8], now_ms: u64) -> Option<Learned> {
    let mut reader = Reader::new(bytes);
    if reader.u8()? != VERSION {
        return None;
    }
    let published = reader.u64()?;
    if now_ms.abs_diff(published) > SLOT_STALE_MS {
        return None;
    }
    let pool = sums(&mut reader)?;
    let [weight, sum] = numbers::<2>(&mut reader)?;
    let count = reader.u16()?;
    let mut pods = HashMap::with_capacity(usize::from(count).min(MAX_PODS));
    for _ in 0..count {
        let length = usize::from(reader.u8()?);
        let pod = std::str::from_utf8(reader.take(length)?).ok()?;
        let pod_sums = sums(&mut reader)?;
        if pods.len() < MAX_PODS {
            pods.insert(pod.to_string(), pod_sums);
        }
    }
    reader.rest().is_empty().then_some(Learned { pool, pods, durations: (weight, sum) })
}

/// No sum a worker publishes comes near this: ~50 answers' tokens squared stay below 1e20
/// even at 100M tokens in flight. Past it a record is corrupt, and its products could
/// overflow in a fit.
const MAX_MAGNITUDE: f64 = 1e30;

/// A weight is a count of answers discounted by [`FORGET`] at each new one: one worker's
/// never reaches 1 / (1 - FORGET) = 50, and is 0 (nothing seen) or at least 1 (the newest
/// answer counts whole). A weight in between made means of a few ms solve to infinity.
const MAX_WEIGHT: f64 = 1.0 / (1.0 - FORGET) + 1.0;

/// `N` finite numbers within [`MAX_MAGNITUDE`], the first a weight (0, or `1..=MAX_WEIGHT`).
fn numbers<const N: usize>(reader: &mut Reader<'_>) -> Option<[f64; N]> {
    let mut numbers = [0.0; N];
    for number in &mut numbers {
        *number = reader.f64().filter(|n| n.abs() <= MAX_MAGNITUDE)?;
    }
    let weight_possible = |&weight: &f64| weight == 0.0 || (1.0..=MAX_WEIGHT).contains(&weight);
    numbers.first().is_none_or(weight_possible).then_some(numbers)
}

/// A model's sums; its free-slot weight is a discounted count too (below 1 once free slots
/// stop coming).
fn sums(reader: &mut Reader<'_>) -> Option<Sums> {
    let sums = numbers::<SUMS_LEN>(reader).map(Sums::from_array)?;
    (0.0..=MAX_WEIGHT).contains(&sums.free_weight()).then_some(sums)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::learn::{Load, Prior, TtftModels};

    const PRIOR: Prior = Prior { overhead_ms: 30.0, ms_per_token: 0.02 };
    const NOW: u64 = 1_700_000_000_000;

    fn load(tokens: f64) -> Load {
        Load { tokens, requests: 0.0 }
    }

    /// A worker that saw `pod` answer `answers` prompts of 1,000–3,000 tokens at `ms_per_token`.
    fn worker_that_saw(pods: &[(&str, f64)], answers: u32) -> TtftModels {
        let mut models = TtftModels::new(PRIOR);
        for i in 0..answers {
            for &(pod, ms_per_token) in pods {
                let tokens = 1_000.0 + f64::from(i % 5) * 500.0;
                models.observe(pod, load(tokens), 40.0 + ms_per_token * tokens, 0);
            }
        }
        models
    }

    #[test]
    fn a_pod_another_worker_saw_slow_is_predicted_slow_here() {
        let seen_there = worker_that_saw(&[("fast", 0.1), ("slow", 0.3)], 4);
        let mut here = worker_that_saw(&[("fast", 0.1)], 4);
        let before = here.predict("slow", load(2_000.0));
        assert!(before < 300.0, "never seen here: predicted like the pool, {before}");
        here.set_others(decode(&seen_there.encode_own(NOW), NOW).unwrap(), NOW);
        let (fast, slow) = (here.predict("fast", load(2_000.0)), here.predict("slow", load(2_000.0)));
        // 640 and 240 ms in truth; a dozen answers still lean on the prior's slope.
        assert!(slow > 1.5 * fast && slow > 2.0 * before, "slow {slow} ms vs fast {fast} ms");
        assert!(here.fitted("slow") && here.typical_ms().is_some());
        assert_eq!(here.observed(), 4, "only its own answers count as its own");
    }

    #[test]
    fn the_sums_of_two_workers_are_the_sums_of_both() {
        let (one, two) = (worker_that_saw(&[("a", 0.1)], 3), worker_that_saw(&[("a", 0.1), ("b", 0.2)], 2));
        let mut both = decode(&one.encode_own(NOW), NOW).unwrap();
        both.add(decode(&two.encode_own(NOW), NOW).unwrap());
        let weight = |learned: &Learned, pod: &str| learned.pods.get(pod).map_or(0.0, |s| s.to_array()[0]);
        assert!((weight(&both, "a") - one.weight("a") - two.weight("a")).abs() < 1e-9);
        assert!((weight(&both, "b") - two.weight("b")).abs() < 1e-9);
        assert_eq!(both.pods(), 2);
    }

    #[test]
    fn a_stale_cut_or_poisoned_record_is_ignored_whole() {
        let models = worker_that_saw(&[("a", 0.1), ("b", 0.2)], 3);
        let record = models.encode_own(NOW);
        assert!(decode(&record, NOW + SLOT_STALE_MS).is_some());
        assert!(decode(&record, NOW + SLOT_STALE_MS + 1).is_none(), "its worker stopped publishing");
        assert!(decode(&record, NOW - SLOT_STALE_MS).is_some(), "another thread read the clock later");
        let clock_back = NOW - 3_600_000;
        assert!(decode(&record, clock_back).is_none(), "published before the clock stepped back, not since");
        for cut in [0, 1, 9, record.len() / 2, record.len() - 1] {
            assert!(decode(&record[..cut], NOW).is_none(), "cut at {cut}");
        }
        let mut longer = record.clone();
        longer.push(0);
        assert!(decode(&longer, NOW).is_none(), "trailing bytes");
        let mut poisoned = record.clone();
        poisoned[9..17].copy_from_slice(&f64::NAN.to_le_bytes());
        assert!(decode(&poisoned, NOW).is_none(), "a weight that is not a number");
        let mut negative = record.clone();
        negative[9..17].copy_from_slice(&(-1.0f64).to_le_bytes());
        assert!(decode(&negative, NOW).is_none(), "a negative weight");
        let mut overweight = record.clone();
        overweight[9..17].copy_from_slice(&(MAX_WEIGHT + 1.0).to_le_bytes());
        assert!(decode(&overweight, NOW).is_none(), "more answers than one worker's sums can weigh");
        let mut huge = record.clone();
        huge[17..25].copy_from_slice(&1e31f64.to_le_bytes());
        assert!(decode(&huge, NOW).is_none(), "a sum past what a worker could add up");
        // Found by the fuzz target `learned_models`: a weight of 1.9e-320 under a TTFT sum
        // of 5e5 ms made a mean of infinity and every prediction infinite.
        let mut fraction = record;
        fraction[9..17].copy_from_slice(&1.9e-320f64.to_le_bytes());
        assert!(decode(&fraction, NOW).is_none(), "a weight between nothing seen and one answer");
        assert!(decode(&[2, 0, 0], NOW).is_none(), "another version");
    }

    #[test]
    fn a_large_pool_is_shared_less_often() {
        assert_eq!(share_every_ms(0), SHARE_EVERY_MS);
        assert_eq!(share_every_ms(64), SHARE_EVERY_MS);
        assert_eq!(share_every_ms(65), 2 * SHARE_EVERY_MS);
        assert_eq!(share_every_ms(1_024), 1_600);
    }

    #[test]
    fn a_pod_only_this_worker_saw_is_forgotten_once_the_others_answered_long_enough_without_it() {
        use crate::learn::ttft::STALE_AFTER_MS;
        // This worker saw "slow" and then got no more requests; the other one kept answering.
        let mut here = worker_that_saw(&[("fast", 0.1), ("slow", 0.3)], 4);
        let mut there = worker_that_saw(&[("fast", 0.1)], 4);
        let mut now = 0;
        while now <= STALE_AFTER_MS {
            now += 1_000;
            there.observe("fast", load(2_000.0), 240.0, now);
            here.set_others(decode(&there.encode_own(NOW + now), NOW + now).unwrap(), now);
            here.forget_stale();
        }
        assert!(!here.fitted("slow") && here.fitted("fast"), "the other worker's answers kept coming");
    }

    #[test]
    fn others_leave_with_their_pods() {
        let seen_there = worker_that_saw(&[("a", 0.1), ("gone", 0.3)], 4);
        let mut here = TtftModels::new(PRIOR);
        here.set_others(decode(&seen_there.encode_own(NOW), NOW).unwrap(), NOW);
        assert!(here.fitted("gone"));
        here.retain_pods(|pod| pod == "a");
        assert!(!here.fitted("gone") && here.fitted("a"));
    }
}
