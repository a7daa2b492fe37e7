//! The scheduler with learning on: predicted TTFT scores pods, releases affinity only when
//! moving buys time, and a TTFT objective narrows the field.

use super::*;
use crate::saturation::SaturationLimits;

fn pod(address: &str, waiting: f64, ttft: f64) -> Candidate<'_> {
    Candidate { predicted_ttft_ms: Some(ttft), ..Candidate::with_load(address, true, waiting, Some(0.3), 0) }
}

fn learning(penalty: f64) -> Policy {
    Policy { learning: Some(LearningPolicy { ttft_weight: 4.0, release_penalty_ms: penalty }), ..Policy::default() }
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
