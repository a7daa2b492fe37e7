use std::collections::BTreeMap;

use super::*;
use crate::address::PodAddress;
use crate::pod_table::PodState;
use crate::prefix::PrefixIndex;
use crate::route::{choose_compared, Comparison, ModelQuery, PrefixQuery, RoutingView, TableOrder};

fn pod(address: &str, model: &str, waiting: f64) -> PodState {
    let mut pod = PodState::unknown(&PodAddress::parse(address).unwrap());
    pod.healthy = true;
    pod.waiting = waiting;
    if !model.is_empty() {
        pod.models = vec![model.to_string()];
    }
    pod
}

fn table(pods: Vec<PodState>) -> PodTable {
    PodTable { pods, ..PodTable::default() }
}

fn addresses(n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("10.0.0.{i}:8000")).collect()
}

/// Each pod's arm by its address, as `split` (of `table`) gives it by position.
fn arms_by_address(split: &PodSplit, table: &PodTable) -> BTreeMap<String, Arm> {
    table.pods.iter().enumerate().map(|(i, pod)| (pod.address.to_string(), split.arm_at(i))).collect()
}

/// The arm of the pod at `address` in `table`.
fn arm_of(split: &PodSplit, table: &PodTable, address: &PodAddress) -> Arm {
    arms_by_address(split, table).get(address.as_str()).copied().unwrap_or(Arm::Picker)
}

/// How many pods `split` gives the baseline.
fn baseline_count(split: &PodSplit) -> usize {
    split.arms.iter().filter(|arm| **arm == Arm::Baseline).count()
}

#[test]
fn splits_each_model_s_pods_in_the_share_and_alike_in_every_vm() {
    let mut pods: Vec<PodState> = addresses(8).iter().take(4).map(|a| pod(a, "llama", 0.0)).collect();
    pods.extend(addresses(8).iter().skip(4).map(|a| pod(a, "qwen", 0.0)));
    pods.push(pod("10.0.1.1:8000", "alone", 0.0));
    let whole = table(pods.clone());
    let split = PodSplit::of(&whole, 0.5);
    let baseline_of = |model: &str| {
        pods.iter().filter(|p| p.models[0] == model && arm_of(&split, &whole, &p.address) == Arm::Baseline).count()
    };
    assert_eq!((baseline_of("llama"), baseline_of("qwen"), baseline_of("alone")), (2, 2, 0));
    // The same pods in another order (another VM's table) split alike.
    let mut reversed = pods.clone();
    reversed.reverse();
    let reversed = table(reversed);
    assert_eq!(arms_by_address(&PodSplit::of(&reversed, 0.5), &reversed), arms_by_address(&split, &whole));
    // A small share still gives the baseline one pod of a group, never all of it.
    let four = table(addresses(4).iter().map(|a| pod(a, "", 0.0)).collect());
    assert_eq!(baseline_count(&PodSplit::of(&four, 0.05)), 1);
    assert_eq!(baseline_count(&PodSplit::of(&four, 0.95)), 3);
    assert_eq!(baseline_count(&PodSplit::of(&four, 0.3)), 1);
}

#[test]
fn arms_are_drawn_in_proportion_and_sessions_stay_in_theirs() {
    let mut random = TieBreaker::new(7);
    let baseline = (0..40_000).filter(|_| draw_arm(1, 3, None, &mut random) == Some(Arm::Baseline)).count();
    assert!((9_400..10_600).contains(&baseline), "a quarter of 40,000: {baseline}");
    let by_session =
        (0..40_000u64).filter(|&key| draw_arm(2, 2, Some(key), &mut random) == Some(Arm::Baseline)).count();
    assert!((19_200..20_800).contains(&by_session), "keys in a row spread: {by_session}");
    for _ in 0..10 {
        assert_eq!(draw_arm(2, 2, Some(42), &mut random), draw_arm(2, 2, Some(42), &mut random));
    }
    assert_eq!(draw_arm(0, 4, None, &mut random), None, "no baseline pod: not compared");
    assert_eq!(draw_arm(2, 0, Some(1), &mut random), None);
}

fn view<'a>(
    table: &'a PodTable,
    inflight: &'a dyn Fn(&str) -> u32,
    prefix: Option<PrefixQuery<'a>>,
    model: Option<&'a str>,
) -> RoutingView<'a> {
    RoutingView {
        table: Some(table),
        fallback_pool: &[],
        inflight,
        prefix,
        now_ms: 0,
        stale_after_ms: 1_000,
        ejected: &[],
        models: ModelQuery { model, ..ModelQuery::default() },
        learning: None,
    }
}

#[test]
fn each_arm_routes_to_its_own_pods_the_baseline_by_load_alone() {
    let pods: Vec<PodState> = addresses(4).iter().map(|a| pod(a, "m", 0.0)).collect();
    let table = table(pods);
    let split = PodSplit::of(&table, 0.5);
    let baseline_pods: Vec<&PodAddress> =
        table.pods.iter().map(|p| &p.address).filter(|a| arm_of(&split, &table, a) == Arm::Baseline).collect();
    let (held_by, idle) = (baseline_pods[0].as_str(), baseline_pods[1].as_str());
    // The prompt is cached on one baseline pod, which has more in flight than the other.
    let mut index = PrefixIndex::new(1024);
    let hashes = [11u64, 12, 13, 14];
    index.record(held_by, 0, &hashes, 1024);
    let inflight = |pod: &str| if pod == held_by { 3 } else { 0 };
    let last_picked = |_: &str| 0;
    let query = || PrefixQuery {
        index: &index,
        hashes: &hashes,
        session_pod: None,
        session_pinned: false,
        last_picked: &last_picked,
        reuse: 1.0,
    };
    let picker = Policy { fallbacks: 1, ..Policy::default() };
    let config = ComparisonConfig { baseline_share: 0.5, ..ComparisonConfig::default() };
    let baseline = baseline_policy(&config, 1);
    let comparison = Comparison { split: &split, baseline: &baseline, key: None };
    let order = TableOrder { inflight_at: &|_, pod| inflight(pod), index_ids: None };
    let mut random = TieBreaker::new(3);
    let mut seen = [0; 2];
    for _ in 0..200 {
        let (route, arm) = choose_compared(
            &view(&table, &inflight, Some(query()), Some("m")),
            &order,
            &picker,
            &comparison,
            &mut random,
        )
        .unwrap();
        let arm = arm.expect("both arms serve m");
        assert_eq!(arm_of(&split, &table, &route.address), arm, "{route:?}");
        assert!(route.fallbacks.iter().all(|f| arm_of(&split, &table, f) == arm), "retries stay in the arm: {route:?}");
        if arm == Arm::Baseline {
            // Blind to the prefix: the pod with fewer in flight.
            assert_eq!(route.address.as_str(), idle);
            assert_eq!((route.prefix_match, route.affinity), (0.0, false));
        }
        seen[usize::from(arm == Arm::Baseline)] += 1;
    }
    assert!(seen[0] > 60 && seen[1] > 60, "about half each: {seen:?}");
}

#[test]
fn a_model_served_in_one_arm_only_is_not_compared() {
    let table =
        table(vec![pod("10.0.0.1:8000", "m", 0.0), pod("10.0.0.2:8000", "m", 0.0), pod("10.0.0.3:8000", "solo", 0.0)]);
    let split = PodSplit::of(&table, 0.5);
    let config = ComparisonConfig { baseline_share: 0.5, ..ComparisonConfig::default() };
    let baseline = baseline_policy(&config, 0);
    let comparison = Comparison { split: &split, baseline: &baseline, key: None };
    let inflight = |_: &str| 0;
    let order = TableOrder { inflight_at: &|_, _| 0, index_ids: None };
    let (route, arm) = choose_compared(
        &view(&table, &inflight, None, Some("solo")),
        &order,
        &Policy::default(),
        &comparison,
        &mut TieBreaker::new(1),
    )
    .unwrap();
    assert_eq!((route.address.as_str(), arm), ("10.0.0.3:8000", None));
}

#[test]
fn the_baseline_never_counts_a_pod_saturated() {
    let config = ComparisonConfig { baseline_share: 0.5, baseline: BaselinePolicy::Random };
    let policy = baseline_policy(&config, 2);
    let full = crate::scheduler::Candidate::with_load("10.0.0.1:80", true, 1e9, Some(1.0), 50);
    assert!(!policy.saturation.is_saturated(&full) && !policy.saturation.queue_full(&full));
    assert_eq!((policy.weights.inflight, policy.weights.prefix, policy.fallbacks), (0.0, 0.0, 2));
}

#[test]
fn a_conversation_is_named_by_its_first_user_message() {
    use crate::request::{parse_request, Endpoint};
    let turn = |messages: &str| format!(r#"{{"model":"m","messages":{messages}}}"#);
    let first = turn(r#"[{"role":"system","content":"Be brief."},{"role":"user","content":"Plan a trip"}]"#);
    let third = turn(
        r#"[{"role":"system","content":"Be brief."},{"role":"user","content":"Plan a trip"},
            {"role":"assistant","content":"Where to?"},{"role":"user","content":"Rome"}]"#,
    );
    let other = turn(r#"[{"role":"system","content":"Be brief."},{"role":"user","content":"Fix my code"}]"#);
    let key = |body: &str| conversation_key(&parse_request(body.as_bytes(), Endpoint::ChatCompletions).unwrap());
    assert!(key(&first).is_some());
    assert_eq!(key(&first), key(&third), "every turn of one conversation");
    assert_ne!(key(&first), key(&other), "another conversation under the same system prompt");
    let only_system = turn(r#"[{"role":"system","content":"Be brief."}]"#);
    assert_eq!(key(&only_system), None);
    let text = r#"{"model":"m","prompt":"Plan a trip"}"#;
    assert_eq!(conversation_key(&parse_request(text.as_bytes(), Endpoint::Completions).unwrap()), None);
}

#[test]
fn a_role_is_read_from_the_first_key_or_else_the_whole_object() {
    assert_eq!(leading_role(r#"{"role":"user","content":"x"}"#), Some("user"));
    assert_eq!(leading_role(r#"{ "role" : "system" , "content":"x"}"#), Some("system"));
    assert_eq!(leading_role(r#"{"content":"x","role":"user"}"#), None, "not first");
    assert_eq!(leading_role(r#"{"role":"us\u0065r"}"#), None, "escaped");
    for (text, user) in [
        (r#"{"role":"user","content":"x"}"#, true),
        (r#"{"content":"a long prompt","role":"user"}"#, true),
        (r#"{"role":"us\u0065r"}"#, true),
        (r#"{"role":"assistant","content":"x"}"#, false),
        (r#"{"content":"x"}"#, false),
    ] {
        assert_eq!(is_user_message(text), user, "{text}");
    }
}
