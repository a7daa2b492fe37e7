use super::*;
use crate::saturation::SaturationLimits;

fn pod(address: &str, waiting: f64, kv: f64, inflight: u32) -> Candidate<'_> {
    Candidate::with_load(address, true, waiting, Some(kv), inflight)
}

fn policy() -> Policy {
    Policy::default()
}

fn pick_address<'a>(pods: &[Candidate<'a>], seed: u64) -> (&'a str, bool) {
    let decision = pick(pods, &policy(), &mut TieBreaker::new(seed)).unwrap();
    (pods[decision.index].address, decision.fail_open)
}

#[test]
fn avoids_the_pod_with_a_long_queue() {
    let pods = [pod("a", 30.0, 0.2, 0), pod("b", 0.0, 0.2, 0), pod("c", 0.0, 0.2, 0)];
    for seed in 0..50 {
        assert_ne!(pick_address(&pods, seed).0, "a");
    }
}

#[test]
fn in_flight_requests_spread_a_burst() {
    let mut pods = vec![pod("a", 0.0, 0.1, 0), pod("b", 0.0, 0.1, 0), pod("c", 0.0, 0.1, 0), pod("d", 0.0, 0.1, 0)];
    for seed in 0..8 {
        let decision = pick(&pods, &policy(), &mut TieBreaker::new(seed)).unwrap();
        pods[decision.index].inflight += 1;
    }
    assert!(pods.iter().all(|p| p.inflight == 2), "{pods:?}");
}

#[test]
fn ties_break_at_random_not_by_order() {
    let mut pods = [pod("a", 1.0, 0.5, 0), pod("b", 1.0, 0.5, 0)];
    pods[0].prefix_match = 0.1; // warm, so the least-recently-picked rule is not in play
    pods[1].prefix_match = 0.1;
    let firsts = (0..200).filter(|&seed| pick_address(&pods, seed).0 == "a").count();
    assert!((60..140).contains(&firsts), "a chosen {firsts}/200");
}

#[test]
fn cold_requests_go_to_the_least_recently_picked() {
    let mut pods = [pod("a", 0.0, 0.1, 0), pod("b", 0.0, 0.1, 0), pod("c", 0.0, 0.1, 0)];
    pods[0].last_picked = 7;
    pods[1].last_picked = 3;
    pods[2].last_picked = 9;
    for seed in 0..20 {
        assert_eq!(pick_address(&pods, seed).0, "b");
    }
}

#[test]
fn a_kv_usage_one_block_apart_is_a_tie_and_a_real_gap_is_not() {
    // Idle pods, one scraped while a request held 1 of its 16,384 blocks: they take turns.
    let mut pods = vec![pod("a", 0.0, 1.0 / 16_384.0, 0), pod("b", 0.0, 0.0, 0), pod("c", 0.0, 0.0, 0)];
    for round in 1..=30 {
        let decision = pick(&pods, &policy(), &mut TieBreaker::new(round)).unwrap();
        pods[decision.index].last_picked = round;
    }
    assert!(pods.iter().all(|p| p.last_picked >= 28), "every pod picked in the last round: {pods:?}");
    // 5 % more of the cache in use is load, not noise.
    let pods = [pod("a", 0.0, 0.05, 0), pod("b", 0.0, 0.0, 0)];
    assert!((0..50).all(|seed| pick_address(&pods, seed).0 == "b"));
}

#[test]
fn unusable_pods_are_filtered_and_all_unusable_fails_open() {
    let mut pods = [pod("a", 0.0, 0.0, 0), pod("b", 50.0, 0.9, 9)];
    pods[0].usable = false;
    assert_eq!(pick_address(&pods, 1), ("b", false));
    pods[1].usable = false;
    assert_eq!(pick_address(&pods, 1), ("a", true), "fail open by in-flight only");
    assert!(pick(&[], &policy(), &mut TieBreaker::new(0)).is_none());
}

#[test]
fn fallbacks_are_the_next_best_usable_pods_in_order() {
    let mut pods = [pod("a", 0.0, 0.1, 0), pod("b", 4.0, 0.1, 0), pod("c", 2.0, 0.1, 0), pod("d", 0.0, 0.1, 0)];
    pods[3].usable = false;
    let decision = pick(&pods, &Policy { fallbacks: 3, ..policy() }, &mut TieBreaker::new(1)).unwrap();
    assert_eq!(decision.index, 0);
    assert_eq!(decision.fallbacks, vec![2, 1], "c before b; d is not usable");
}

#[test]
fn prefix_affinity_is_sticky_until_saturated() {
    // b holds the prefix but is busier: it still wins while under the saturation limits.
    let mut pods = [pod("a", 0.0, 0.1, 0), pod("b", 3.0, 0.5, 3), pod("c", 0.0, 0.1, 0)];
    pods[1].prefix_match = 0.9;
    for seed in 0..20 {
        assert_eq!(pick_address(&pods, seed).0, "b");
    }
    let decision = pick(&pods, &Policy { fallbacks: 2, ..policy() }, &mut TieBreaker::new(1)).unwrap();
    assert!(decision.affinity);
    assert_eq!(decision.fallbacks.len(), 2, "retries may leave the affinity set");
    // Saturated (queue at the limit): affinity is released and load decides.
    pods[1].waiting = SaturationLimits::default().queue_threshold;
    for seed in 0..20 {
        assert_ne!(pick_address(&pods, seed).0, "b");
    }
}

#[test]
fn a_session_beats_a_prefix_until_saturated() {
    let mut pods = [pod("a", 0.0, 0.1, 0), pod("b", 0.0, 0.1, 0)];
    pods[0].prefix_match = 1.0;
    pods[1].session_match = true;
    assert_eq!(pick_address(&pods, 3).0, "b");
    pods[1].kv_usage = Some(0.99);
    assert_eq!(pick_address(&pods, 3).0, "b", "a full KV cache alone does not break affinity");
    pods[1].waiting = SaturationLimits::default().queue_threshold;
    assert_eq!(pick_address(&pods, 3).0, "a", "a session pod with a full queue is left");
}

#[test]
fn a_stored_response_waits_on_its_pod_however_full_unless_the_pod_is_down() {
    let mut pods = [pod("a", 0.0, 0.1, 0), pod("b", 0.0, 0.1, 0)];
    pods[0].prefix_match = 1.0;
    (pods[1].session_match, pods[1].session_pinned) = (true, true);
    pods[1].waiting = 10.0 * SaturationLimits::default().queue_threshold;
    for seed in 0..20 {
        assert_eq!(pick_address(&pods, seed).0, "b", "another pod would answer 404");
    }
    pods[1].usable = false;
    assert_eq!(pick_address(&pods, 3).0, "b", "stale data (a silent pool service) does not move it");
    pods[0].usable = false;
    let decision = pick(&pods, &Policy { fallbacks: 2, ..policy() }, &mut TieBreaker::new(3)).unwrap();
    assert_eq!((decision.index, decision.fail_open), (1, true), "nor does every pod's (failing open)");
    assert!(decision.fallbacks.is_empty(), "no stand-in: another pod would answer 404");
    (pods[0].usable, pods[1].session_pinned) = (true, false);
    assert_eq!(pick_address(&pods, 3).0, "a", "a pod that is down (not pinned) answers nothing: routed as usual");
}

#[test]
fn when_every_queue_is_full_load_alone_decides() {
    let mut pods = [pod("a", 8.0, 0.5, 9), pod("b", 6.0, 0.5, 7)];
    pods[0].prefix_match = 1.0;
    let decision = pick(&pods, &policy(), &mut TieBreaker::new(2)).unwrap();
    assert_eq!((pods[decision.index].address, decision.affinity), ("b", false));
}

#[test]
fn one_pod_saying_its_queue_is_endless_does_not_hide_the_others_queues() {
    // Every queue full (learning off): load decides, the emptiest queue first. A pod whose page
    // says a billion (the parser's bound) set the scale: 6 and 40 waiting scored 1 and
    // 0.99999997, a tie, and half the requests went to the pod with 40 waiting.
    let pods = [pod("a", 6.0, 0.5, 0), pod("b", 40.0, 0.5, 0), pod("liar", 1e9, 0.5, 0)];
    for seed in 0..40 {
        assert_eq!(pick_address(&pods, seed).0, "a", "seed {seed}");
    }
    let refs: Vec<_> = pods.iter().collect();
    let scores = QueueScorer.score(&refs);
    assert_eq!(scores.first().copied(), Some(1.0));
    // The billion counts as 8 × 23 + 16 = 200: the 34 between the honest queues is a sixth of it.
    assert_eq!(scores, vec![1.0, (200.0 - 40.0) / (200.0 - 6.0), 0.0]);
}

#[test]
fn saturated_pods_are_left_out_but_remain_fallbacks() {
    let pods = [pod("a", 9.0, 0.1, 0), pod("b", 0.0, 0.1, 5), pod("c", 7.0, 0.1, 0)];
    let decision = pick(&pods, &Policy { fallbacks: 2, ..policy() }, &mut TieBreaker::new(4)).unwrap();
    assert_eq!(pods[decision.index].address, "b", "the only queue not full, despite its in-flight load");
    assert_eq!(decision.fallbacks.len(), 2);
    assert_eq!(decision.fallbacks_in_field, 0, "both full: fit to retry on, not to choose among");
    let open = [pod("a", 0.0, 0.1, 1), pod("b", 0.0, 0.1, 5), pod("c", 7.0, 0.1, 0)];
    let decision = pick(&open, &Policy { fallbacks: 2, ..policy() }, &mut TieBreaker::new(4)).unwrap();
    assert_eq!((decision.fallbacks.len(), decision.fallbacks_in_field), (2, 1), "b's queue is open, c's full");
}

#[test]
fn the_longest_match_wins_over_a_shorter_one_above_the_threshold() {
    let mut pods = [pod("a", 0.0, 0.1, 0), pod("b", 0.0, 0.1, 4), pod("c", 0.0, 0.1, 0)];
    pods[0].prefix_match = 0.6; // the system prompt only
    pods[1].prefix_match = 0.95; // the whole conversation, though busier
    pods[2].prefix_match = 0.6;
    for seed in 0..20 {
        assert_eq!(pick_address(&pods, seed).0, "b");
    }
}

#[test]
fn a_cold_prompt_lands_on_the_same_pod_from_any_replica() {
    let pods = [pod("10.0.0.1:80", 1.0, 0.2, 0), pod("10.0.0.2:80", 1.0, 0.2, 0), pod("10.0.0.3:80", 1.0, 0.2, 0)];
    for key in 0..50u64 {
        // Two replicas: different random streams and pick histories, the same polled load.
        let mut other = pods.clone();
        other[0].last_picked = 9;
        let a = pick_placed(&pods, &policy(), &mut TieBreaker::new(1), Some(Placement::reused(key))).unwrap();
        let b = pick_placed(&other, &policy(), &mut TieBreaker::new(77), Some(Placement::reused(key))).unwrap();
        assert_eq!(a.index, b.index, "key {key}");
    }
    let spread: std::collections::HashSet<usize> = (0..50u64)
        .map(|key| pick_placed(&pods, &policy(), &mut TieBreaker::new(1), Some(Placement::reused(key))).unwrap().index)
        .collect();
    assert_eq!(spread.len(), 3, "new prefixes spread over the pool");
}

#[test]
fn rendezvous_skips_a_pod_loaded_above_the_bound() {
    let mut pods = [pod("10.0.0.1:80", 0.0, 0.2, 0), pod("10.0.0.2:80", 0.0, 0.2, 0), pod("10.0.0.3:80", 0.0, 0.2, 0)];
    let placed = |pods: &[Candidate<'_>], key| {
        pick_placed(pods, &policy(), &mut TieBreaker::new(1), Some(Placement::reused(key))).unwrap().index
    };
    let key = (0..100u64).find(|&k| placed(&pods, k) == 0).unwrap();
    pods[0].running = 12.0; // mean 4: 12 > 2 × 4 + 1
    assert_ne!(placed(&pods, key), 0);
}

#[test]
fn one_pod_saying_it_runs_a_billion_does_not_lift_the_rendezvous_load_bound() {
    // Seven pods, one of them busy (30 running): rendezvous passes it over (mean 4.3, bound
    // 9.6). An eighth pod whose page says +Inf running (a billion) made the mean 125 million:
    // every pod was within the bound again, and new prefixes went to the busy one by hash.
    let addresses: Vec<String> = (1..=8).map(|i| format!("10.0.0.{i}:80")).collect();
    let mut pods: Vec<Candidate<'_>> = addresses.iter().map(|a| pod(a, 0.0, 0.2, 0)).collect();
    let placed = |pods: &[Candidate<'_>], key| {
        pick_placed(pods, &policy(), &mut TieBreaker::new(1), Some(Placement::reused(key))).unwrap().index
    };
    let honest = &pods[..7].to_vec();
    let key = (0..1000u64).find(|&k| placed(honest, k) == 0).unwrap();
    pods[0].running = 30.0;
    assert_ne!(placed(&pods[..7], key), 0, "the busy pod is passed over");
    pods[7].running = 1e9;
    assert_ne!(placed(&pods, key), 0, "and still is beside a pod claiming a billion");
}

#[test]
fn load_decides_for_unrelated_prompts() {
    // Prompts that never come back (reuse 0): a cold one goes to the least loaded pod
    // whatever its hash says.
    let pods = [pod("10.0.0.1:80", 3.0, 0.2, 0), pod("10.0.0.2:80", 0.0, 0.2, 0), pod("10.0.0.3:80", 3.0, 0.2, 0)];
    for key in 0..50u64 {
        let placement = Placement { key, reuse: 0.0, blocks: 0 };
        assert_eq!(pick_placed(&pods, &policy(), &mut TieBreaker::new(1), Some(placement)).unwrap().index, 1);
    }
}

#[test]
fn when_prompts_come_back_the_hash_may_overrule_a_small_load_difference() {
    // Shared prefixes (reuse 1): every replica puts a new one on its hash's pod even if it
    // is a little busier here, so the prefix is computed once, not once per replica.
    let pods = [pod("10.0.0.1:80", 2.0, 0.2, 0), pod("10.0.0.2:80", 0.0, 0.2, 0), pod("10.0.0.3:80", 2.0, 0.2, 0)];
    let chosen: std::collections::HashSet<usize> = (0..50u64)
        .map(|key| pick_placed(&pods, &policy(), &mut TieBreaker::new(1), Some(Placement::reused(key))).unwrap().index)
        .collect();
    assert_eq!(chosen.len(), 3, "busier pods still get their share of new prefixes: {chosen:?}");
}

#[test]
fn an_honest_pools_mean_load_is_the_plain_mean_and_only_an_absurd_one_is_bounded() {
    for honest in [&[0.0, 0.0, 0.0, 2.0][..], &[5.0, 5.0, 5.0, 30.0], &[10.0, 10.0, 10.0, 48.0], &[7.0], &[]] {
        let plain = honest.iter().sum::<f64>() / honest.len().max(1) as f64;
        assert_eq!(mean_load_past_one_outlier(honest.iter().copied()), plain, "{honest:?}");
    }
    // 30, six idle pods and a page saying a billion: the billion counts as 8 × 30/7 + 16.
    let lying = [30.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1e9];
    let expected = (30.0 + 8.0 * 30.0 / 7.0 + 16.0) / 8.0;
    assert!((mean_load_past_one_outlier(lying.iter().copied()) - expected).abs() < 1e-9);
}

#[test]
fn many_runners_up_are_ranked_by_a_sort_as_a_few_are_by_selection() {
    // Ties keep their order and a NaN goes last on both paths, so raising a policy's
    // fallbacks past the selection bound reorders nothing.
    let mut totals: Vec<f64> = (0..300).map(|i| f64::from((i * 37 % 11) as u32) / 10.0).collect();
    totals[17] = f64::NAN;
    for chosen in [0, 5, 299] {
        let sorted = top_k(&totals, chosen, 299);
        assert_eq!(sorted.len(), 299);
        let selected = top_k(&totals, chosen, SELECTION_MAX);
        let indices = |ranked: &[(f64, usize)]| ranked.iter().map(|&(_, i)| i).collect::<Vec<_>>();
        assert_eq!(indices(&sorted[..SELECTION_MAX]), indices(&selected), "chosen {chosen}");
        assert!(!indices(&sorted).contains(&chosen));
        assert_eq!(sorted.last().map(|&(_, i)| i), Some(17), "the NaN last");
        assert!(sorted.windows(2).all(|w| w[0].0 > w[1].0 || (w[0].0 == w[1].0 && w[0].1 < w[1].1)));
    }
}
