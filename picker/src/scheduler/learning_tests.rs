//! The scheduler with learning on: predicted TTFT scores pods, releases affinity only when
//! moving buys time, and a TTFT objective narrows the field.

use super::*;
use crate::saturation::SaturationLimits;

/// A pod whose model has learned from its answers.
fn pod(address: &str, waiting: f64, ttft: f64) -> Candidate<'_> {
    Candidate {
        predicted_ttft_ms: Some(ttft),
        ttft_fitted: true,
        ..Candidate::with_load(address, true, waiting, Some(0.3), 0)
    }
}

fn learning(penalty: f64) -> Policy {
    Policy {
        learning: Some(LearningPolicy {
            ttft_weight: 4.0,
            release_penalty_ms: penalty,
            balance_homes: true,
            tail_guard: 0.0,
        }),
        ..Policy::default()
    }
}

fn chosen<'a>(pods: &[Candidate<'a>], policy: &Policy) -> (&'a str, bool) {
    let decision = pick(pods, policy, &mut TieBreaker::new(3)).unwrap();
    (pods[decision.index].address, decision.affinity)
}

#[test]
fn affinity_holds_while_moving_buys_less_than_the_penalty() {
    let mut pods = [pod("warm", 2.0, 400.0), pod("cold", 0.0, 300.0)];
    pods[0].prefix_match = 0.9;
    assert_eq!(chosen(&pods, &learning(200.0)), ("warm", true));
    pods[0].predicted_ttft_ms = Some(900.0);
    assert_eq!(chosen(&pods, &learning(200.0)), ("cold", false), "staying costs 600 ms more");
}

#[test]
fn a_move_must_also_buy_back_the_prefill_work_it_adds() {
    // Workload g: the home holds 6,000 of 7,200 tokens; elsewhere all 7,200 are computed.
    let mut pods = [pod("home", 8.0, 1_900.0), pod("other", 4.0, 800.0)];
    pods[0].prefix_match = 1.0;
    pods[0].predicted_prefill_ms = Some(120.0);
    pods[1].predicted_prefill_ms = Some(720.0);
    assert_eq!(chosen(&pods, &learning(1000.0)), ("home", true), "1.1 s saved, but 0.6 s of work added");
    pods[0].predicted_ttft_ms = Some(2_500.0);
    assert_eq!(chosen(&pods, &learning(1000.0)), ("other", false), "1.7 s saved: worth the work");
}

#[test]
fn a_full_pool_keeps_affinity_unless_the_prediction_says_move() {
    let full = SaturationLimits::default().queue_threshold;
    let mut pods = [pod("warm", full + 2.0, 500.0), pod("cold", full, 450.0)];
    pods[0].prefix_match = 1.0;
    assert_eq!(chosen(&pods, &Policy::default()), ("cold", false), "without learning, load alone decides");
    assert_eq!(chosen(&pods, &learning(200.0)), ("warm", true), "the cache is worth more than 50 ms");
    pods[1].predicted_ttft_ms = Some(100.0);
    assert_eq!(chosen(&pods, &learning(200.0)), ("cold", false));
}

#[test]
fn before_any_answer_full_queues_are_handled_as_without_learning() {
    let full = SaturationLimits::default().queue_threshold;
    // The prior's predictions: a few hundred ms apart, blind to the queue behind them.
    let mut pods = [pod("warm", full + 6.0, 500.0), pod("cold", full, 300.0)];
    pods[0].prefix_match = 1.0;
    for pod in &mut pods {
        pod.ttft_fitted = false;
    }
    assert_eq!(chosen(&pods, &learning(1000.0)), ("cold", false), "a burst before any answer: load decides");
    let mut room = [pod("warm", full + 6.0, 500.0), pod("cold", 0.0, 300.0)];
    room[0].prefix_match = 1.0;
    room[0].ttft_fitted = false;
    room[1].ttft_fitted = false;
    assert_eq!(chosen(&room, &learning(1000.0)), ("cold", false), "a full queue is left for one with room");
    room[1].ttft_fitted = true;
    assert_eq!(chosen(&room, &learning(1000.0)), ("warm", true), "once a model has answers, it decides");
}

#[test]
fn the_lower_predicted_ttft_wins_among_equals_and_objectives_narrow_the_field() {
    let mut pods = [pod("slow", 0.0, 900.0), pod("fast", 0.0, 100.0), pod("mid", 0.0, 500.0)];
    assert_eq!(chosen(&pods, &learning(200.0)).0, "fast");
    pods[1].meets_slo = false;
    pods[1].predicted_ttft_ms = Some(100.0);
    pods[1].waiting = 0.0;
    pods[2].meets_slo = true;
    pods[0].meets_slo = false;
    assert_eq!(chosen(&pods, &learning(200.0)).0, "mid", "the only pod predicted to meet the objective");
    for pod in &mut pods {
        pod.meets_slo = false;
    }
    assert_eq!(chosen(&pods, &learning(200.0)).0, "fast", "none meets it: the best effort");
}

#[test]
fn without_predictions_learning_changes_nothing() {
    let pods = [Candidate::with_load("a", true, 3.0, Some(0.2), 1), Candidate::with_load("b", true, 0.0, Some(0.2), 0)];
    let off = pick(&pods, &Policy::default(), &mut TieBreaker::new(1)).unwrap();
    let on = pick(&pods, &learning(200.0), &mut TieBreaker::new(1)).unwrap();
    assert_eq!((off.index, off.score), (on.index, on.score));
}

/// Workload c's tail (TTFT p99 1.6 s vs 158 ms without learning): pod "full" has four
/// requests decoding (every slot of a 4-sequence pod taken, no prompt tokens in flight),
/// pod "free" three, one of them still prefilling. The model, linear in requests, predicts
/// "full" 15 ms faster; scored min-max, that difference outvoted the request counts and the
/// request waited for a slot behind a long decode.
#[test]
fn a_small_predicted_gain_does_not_outvote_a_full_batch() {
    let mut pods = [pod("full", 0.0, 62.0), pod("free", 0.0, 77.0)];
    pods[0].inflight = 4;
    pods[1].inflight = 3;
    assert_eq!(chosen(&pods, &learning(1_000.0)).0, "free");
    // A pod predicted several times slower still loses, whatever its request count.
    pods[1].predicted_ttft_ms = Some(300.0);
    assert_eq!(chosen(&pods, &learning(1_000.0)).0, "full");
}

/// Workload g's top stage: the pod holding a 6k-token system prompt has a full queue, the
/// others do not. Without learning the full queue drops it (and the affinity) and the prompt
/// is prefilled again elsewhere; with learning the prediction decides, and staying is
/// predicted faster than a cold prefill on an emptier pod.
#[test]
fn a_full_queue_alone_does_not_drop_the_pod_holding_the_prefix() {
    let full = SaturationLimits::default().queue_threshold;
    let mut pods = [pod("warm", full + 1.0, 900.0), pod("cold", 0.0, 800.0), pod("other", 1.0, 850.0)];
    pods[0].prefix_match = 1.0;
    assert_eq!(chosen(&pods, &Policy::default()).0, "cold", "without learning the full queue decides");
    assert_eq!(chosen(&pods, &learning(1_000.0)), ("warm", true), "100 ms is less than the penalty");
    pods[0].predicted_ttft_ms = Some(2_500.0);
    assert_ne!(chosen(&pods, &learning(1_000.0)).0, "warm", "staying costs 1.7 s more: move");
}

/// Workload g's placement: 48 shared 6k-token prompts over 4 pods. By rendezvous hashing
/// alone one run homed 10 / 11 / 12 / 15 of them, and the pod with 15 got 30 % of the top
/// stage's traffic (138 of its 148 requests above 436 ms, and its own prompts evicted). With
/// learning's home balance a new prompt goes to a pod home to the fewest indexed blocks.
#[test]
fn new_prompts_go_to_the_pods_with_the_fewest_homes() {
    const BLOCKS: usize = 256;
    let pods: Vec<String> = (0..4).map(|i| format!("10.0.0.{i}:8000")).collect();
    let place = |policy: &Policy, homes: &[usize], key: u64| {
        let candidates: Vec<Candidate<'_>> = pods
            .iter()
            .zip(homes)
            .map(|(address, &n)| Candidate { indexed_blocks: n * BLOCKS, ..pod(address, 0.0, 800.0) })
            .collect();
        let placement = Placement { key, reuse: 1.0, blocks: BLOCKS };
        pick_placed(&candidates, policy, &mut TieBreaker::new(5), Some(placement)).unwrap().index
    };
    let mut homes = [0usize; 4];
    for key in 0..48u64 {
        let chosen = place(&learning(1_000.0), &homes, key.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        homes[chosen] += 1;
    }
    assert_eq!(homes, [12; 4], "homes spread evenly");
    // Among pods with as many homes, rendezvous decides: every worker and replica agrees.
    let key = 77;
    let tied = place(&learning(1_000.0), &[3, 3, 3, 3], key);
    assert_eq!(place(&learning(1_000.0), &[3, 3, 3, 3], key), tied);
    let mut fewer = [4, 4, 4, 4];
    fewer[tied] = 3;
    assert_eq!(place(&learning(1_000.0), &fewer, key), tied, "the hash's pod, home to the fewest");
    let mut more = [3, 3, 3, 3];
    more[tied] = 4;
    assert_ne!(place(&learning(1_000.0), &more, key), tied, "one home more than the fewest is too many");
    // Off (or learning off), the hash alone decides, as before.
    let off = Policy {
        learning: Some(LearningPolicy { balance_homes: false, ..learning(1_000.0).learning.unwrap() }),
        ..learning(1_000.0)
    };
    assert_eq!(place(&off, &more, key), tied);
    assert_eq!(place(&Policy::default(), &more, key), tied);
}

/// Learning with the tail guard at `factor`, the pool's typical TTFT at `typical` ms.
fn guarded<'a>(pods: &mut [Candidate<'a>], factor: f64, typical: f64) -> Policy {
    for pod in pods.iter_mut() {
        pod.typical_ttft_ms = typical;
    }
    Policy {
        learning: Some(LearningPolicy { tail_guard: factor, ..learning(1_000.0).learning.unwrap() }),
        ..Policy::default()
    }
}

#[test]
fn a_pick_by_load_leaves_out_pods_predicted_far_past_the_typical_ttft() {
    // Workload f: a 3 × slower pod with one request in flight against fast ones with five.
    let mut pods = [pod("slow", 0.0, 590.0), pod("fast", 0.0, 400.0)];
    pods[0].inflight = 1;
    pods[1].inflight = 5;
    let off = guarded(&mut pods, 0.0, 400.0);
    assert_eq!(chosen(&pods, &off).0, "slow", "the counts outweigh a 190 ms lead");
    let on = guarded(&mut pods, 1.3, 400.0);
    assert_eq!(chosen(&pods, &on).0, "fast", "590 ms is past 1.3 × 400");
    let short = guarded(&mut pods, 1.3, 500.0);
    assert_eq!(chosen(&pods, &short).0, "slow", "within 1.3 × 500 the scores decide");
    let unknown = guarded(&mut pods, 1.3, 0.0);
    assert_eq!(chosen(&pods, &unknown).0, "slow", "no typical TTFT yet: no bound");
}

#[test]
fn the_tail_guard_neither_empties_the_field_nor_moves_a_prompt_off_its_home() {
    let mut pods = [pod("a", 0.0, 900.0), pod("b", 0.0, 800.0)];
    pods[0].inflight = 3;
    let policy = guarded(&mut pods, 1.3, 400.0);
    assert_eq!(chosen(&pods, &policy).0, "b", "every pod past the bound: the scores decide among all");
    let mut homed = [pod("home", 1.0, 700.0), pod("other", 0.0, 300.0)];
    homed[0].prefix_match = 1.0;
    let policy = guarded(&mut homed, 1.3, 400.0);
    assert_eq!(chosen(&homed, &policy), ("home", true), "affinity is released by its own rule only");
}

#[test]
fn the_tail_guard_leaves_pods_predicted_alike_to_the_scores() {
    // Workload c: 70 ms answers; one pod 20 ms behind the best by its token load.
    let mut pods = [pod("more_tokens", 0.0, 100.0), pod("full_batch", 0.0, 80.0)];
    pods[1].inflight = 4;
    let policy = guarded(&mut pods, 1.3, 70.0);
    assert_eq!(chosen(&pods, &policy).0, "more_tokens", "past 1.3 × 70 ms but within 0.3 × 70 of the best");
}

/// Idle picks of four pods by their models, with learning's defaults (tail guard 1.45,
/// `lead` scoring): how many went to each.
fn idle_picks(models: &crate::learn::TtftModels, pods: &[&str; 4]) -> [usize; 4] {
    let load = crate::learn::Load { tokens: 500.0, requests: 0.0 };
    let typical = models.typical_ms().unwrap_or(0.0);
    let policy = Policy {
        learning: Some(LearningPolicy { tail_guard: 1.45, ..learning(1_000.0).learning.unwrap() }),
        ..Policy::default()
    };
    let mut picks = [0; 4];
    for seed in 0..400u64 {
        let candidates: Vec<Candidate<'_>> = pods
            .iter()
            .map(|&address| Candidate {
                predicted_ttft_ms: Some(models.predict(address, load)),
                ttft_fitted: models.fitted(address),
                ttft_scale_ms: typical,
                ttft_margin_ms: typical * 0.1,
                typical_ttft_ms: typical,
                ..Candidate::with_load(address, true, 0.0, Some(0.1), 0)
            })
            .collect();
        let placement = Placement::reused(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let decision = pick_placed(&candidates, &policy, &mut TieBreaker::new(seed), Some(placement)).unwrap();
        picks[decision.index] += 1;
    }
    picks
}

#[test]
fn a_pod_priced_slow_by_a_hiccup_is_tried_again_once_the_pool_has_answered_long_enough_without_it() {
    use crate::learn::ttft::STALE_AFTER_MS;
    use crate::learn::{Load, Prior, TtftModels};
    let pods = ["a", "b", "c", "d"];
    let mut models = TtftModels::new(Prior { overhead_ms: 30.0, ms_per_token: 0.02 });
    let mut now = 0;
    let answer = |models: &mut TtftModels, pods: &[&str], now: &mut u64| {
        *now += 10;
        for (i, pod) in pods.iter().enumerate() {
            let tokens = 300.0 + (*now / 10 + i as u64) as f64 % 5.0 * 100.0;
            models.observe(pod, Load { tokens, requests: 0.0 }, 30.0 + 0.02 * tokens, *now);
        }
        // The share tick, every 100 ms.
        if now.is_multiple_of(100) {
            models.forget_stale();
        }
    };
    for _ in 0..40 {
        answer(&mut models, &pods, &mut now);
    }
    // A 2 s hiccup on d (a noisy neighbour): six answers at a free slot take 300 ms.
    for _ in 0..6 {
        now += 10;
        models.observe("d", Load { tokens: 500.0, requests: 0.0 }, 300.0, now);
    }
    let hiccup_ms = now;
    // The pool goes on answering without d, which gets no request to show it recovered.
    let answer_until = |models: &mut TtftModels, now: &mut u64, until: u64| {
        while *now < until {
            answer(models, &pods[..3], now);
        }
    };
    answer_until(&mut models, &mut now, hiccup_ms + 5_000);
    let d = |models: &TtftModels| models.predict("d", Load { tokens: 500.0, requests: 0.0 });
    assert!(d(&models) > 80.0, "priced ~2 x its peers: {}", d(&models));
    assert_eq!(idle_picks(&models, &pods)[3], 0, "past the tail guard: {:?}", idle_picks(&models, &pods));
    answer_until(&mut models, &mut now, hiccup_ms + STALE_AFTER_MS - 100);
    assert_eq!(idle_picks(&models, &pods)[3], 0, "{} answers later, still", 3 * (now - hiccup_ms) / 10);
    answer_until(&mut models, &mut now, hiccup_ms + STALE_AFTER_MS + 100);
    let picks = idle_picks(&models, &pods);
    assert!(picks[3] >= 60, "d's stale model is forgotten: it is the pool's again, {picks:?}");
}

#[test]
fn a_pause_in_the_traffic_is_no_time_without_a_pod() {
    use crate::learn::{Load, Prior, TtftModels};
    let mut models = TtftModels::new(Prior { overhead_ms: 30.0, ms_per_token: 0.02 });
    let mut answer = |pod: &str, now: u64| models.observe(pod, Load { tokens: 500.0, requests: 0.0 }, 40.0, now);
    for i in 0..5 {
        answer("a", i * 10);
        answer("b", i * 10);
    }
    // An idle hour, then a burst whose first 10 s of answers all come from a.
    for i in 0..100 {
        answer("a", 3_600_000 + i * 100);
    }
    models.forget_stale();
    assert!(models.fitted("b"), "b was not passed over: nobody was asking");
}

#[test]
fn a_pod_saying_its_queue_is_endless_stays_a_candidate_but_does_not_flatten_the_queue_scores() {
    // Learning on, a full queue does not drop a pod, so the liar's billion was the queue
    // scorer's scale: 0 and 3 waiting tied, and the busier pod got half the requests.
    let pods = [pod("a", 0.0, 300.0), pod("b", 3.0, 300.0), pod("liar", 1e9, 300.0)];
    for seed in 0..40 {
        let decision = pick(&pods, &learning(200.0), &mut TieBreaker::new(seed)).unwrap();
        assert_eq!(pods[decision.index].address, "a", "seed {seed}");
    }
}
