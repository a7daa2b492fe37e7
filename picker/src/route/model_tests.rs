//! Model-aware candidates, LoRA tiers and the subset hint, through `choose`.

use super::*;
use crate::pod_table::PodState;

fn pod(address: &str, base: &str, adapters: &[&str], resident: &[&str], waiting: f64) -> PodState {
    let mut pod = PodState::unknown(&PodAddress::parse(address).unwrap());
    pod.healthy = true;
    pod.last_success_ms = 1_000;
    pod.waiting = waiting;
    pod.max_loras = 2;
    pod.models = vec![base.to_owned()];
    pod.adapters = adapters.iter().map(|a| a.to_string()).collect();
    pod.resident_loras = resident.iter().map(|a| a.to_string()).collect();
    pod
}

fn choose_for(table: &PodTable, query: ModelQuery<'_>) -> Result<Route, NoRoute> {
    let none = |_: &str| 0;
    let view = RoutingView {
        table: Some(table),
        fallback_pool: &[],
        inflight: &none,
        prefix: None,
        now_ms: 1_000,
        stale_after_ms: 1_000,
        ejected: &[],
        models: query,
        learning: None,
    };
    choose(&view, &Policy::default(), &mut TieBreaker::new(7))
}

fn table(pods: Vec<PodState>) -> PodTable {
    PodTable { version: 1, published_at_ms: 1_000, poll_interval_ms: 100, pods }
}

fn ask(model: &str) -> ModelQuery<'_> {
    ModelQuery { model: Some(model), ..ModelQuery::default() }
}

#[test]
fn only_pods_serving_the_model_are_candidates() {
    let pool = table(vec![pod("10.0.0.1:80", "llama", &[], &[], 0.0), pod("10.0.0.2:80", "qwen", &["sql"], &[], 9.0)]);
    for _ in 0..50 {
        assert_eq!(choose_for(&pool, ask("qwen")).unwrap().address.as_str(), "10.0.0.2:80", "busier, but serves it");
        assert_eq!(choose_for(&pool, ask("sql")).unwrap().address.as_str(), "10.0.0.2:80");
        assert_eq!(choose_for(&pool, ask("llama")).unwrap().address.as_str(), "10.0.0.1:80");
    }
    assert_eq!(choose_for(&pool, ask("gpt-5")).unwrap_err(), NoRoute::UnknownModel);
    let by_load = ModelQuery { unknown_model: UnknownModelPolicy::RouteByLoad, ..ask("gpt-5") };
    assert_eq!(choose_for(&pool, by_load).unwrap().address.as_str(), "10.0.0.1:80", "least loaded of all");
    assert!(choose_for(&pool, ModelQuery::default()).is_ok(), "no model: any pod");
}

#[test]
fn pods_that_do_not_tell_their_models_still_serve_when_no_pod_claims_the_model() {
    let mut silent = pod("10.0.0.3:80", "", &[], &[], 0.0);
    silent.models.clear();
    let pool = table(vec![pod("10.0.0.1:80", "llama", &[], &[], 0.0), silent]);
    assert_eq!(choose_for(&pool, ask("mystery")).unwrap().address.as_str(), "10.0.0.3:80");
}

#[test]
fn a_name_no_pod_lists_goes_to_a_pod_whose_lists_were_cut_not_to_a_404() {
    // The second pod registers more adapters than its lists keep: the adapter asked for may
    // be one of those it lacks, so it gets the request (and answers for itself).
    let mut many = pod("10.0.0.2:80", "base", &["a0", "a1"], &[], 5.0);
    many.names_cut = true;
    let pool = table(vec![pod("10.0.0.1:80", "other", &[], &[], 0.0), many.clone()]);
    for _ in 0..20 {
        assert_eq!(choose_for(&pool, ask("a99")).unwrap().address.as_str(), "10.0.0.2:80");
        assert_eq!(choose_for(&pool, ask("other")).unwrap().address.as_str(), "10.0.0.1:80", "a listed name as before");
    }
    many.names_cut = false;
    let pool = table(vec![pod("10.0.0.1:80", "other", &[], &[], 0.0), many]);
    assert_eq!(choose_for(&pool, ask("a99")).unwrap_err(), NoRoute::UnknownModel, "lists whole: the gateway's 404");
}

#[test]
fn a_subset_hint_leaving_out_the_cut_pods_is_no_pod_for_an_unlisted_name_not_a_404() {
    // The pod that may serve the name is outside the gateway's hint: as for a listed name
    // whose pods are all outside it, no pod (503), not "the model does not exist".
    let mut many = pod("10.0.0.2:80", "base", &["a0"], &[], 0.0);
    many.names_cut = true;
    let pool = table(vec![pod("10.0.0.1:80", "other", &[], &[], 0.0), many]);
    let subset = [PodAddress::parse("10.0.0.1:80").unwrap()];
    let query = ModelQuery { subset: Some(&subset), ..ask("a99") };
    assert_eq!(choose_for(&pool, query).unwrap_err(), NoRoute::SubsetEmpty);
}

#[test]
fn with_unknown_names_routed_by_load_a_cut_pod_does_not_take_them_all() {
    // `route_by_load` sends a name no pod lists to any pod (an adapter loaded since the last
    // fetch may be on any), by load: a pod whose lists were cut is one of them, not the only one.
    let mut many = pod("10.0.0.2:80", "base", &["a0", "a1"], &[], 5.0);
    many.names_cut = true;
    let pool = table(vec![pod("10.0.0.1:80", "other", &[], &[], 0.0), many]);
    let by_load = ModelQuery { unknown_model: UnknownModelPolicy::RouteByLoad, ..ask("a99") };
    assert_eq!(choose_for(&pool, by_load).unwrap().address.as_str(), "10.0.0.1:80", "least loaded of all");
}

#[test]
fn a_name_another_table_lists_goes_to_no_cut_pod_here_but_to_one_naming_no_model() {
    // Under P/D the prefill pick routes on the prefill pods alone: a name a decode pod lists
    // is known, so neither a cut prefill pod nor load is a reason to send it to one.
    let mut many = pod("10.0.0.2:80", "base", &["a0"], &[], 0.0);
    many.names_cut = true;
    let pool = table(vec![pod("10.0.0.1:80", "other", &[], &[], 0.0), many]);
    for unknown_model in [UnknownModelPolicy::Reject, UnknownModelPolicy::RouteByLoad] {
        let query = ModelQuery { named_elsewhere: true, unknown_model, ..ask("b") };
        assert_eq!(choose_for(&pool, query).unwrap_err(), NoRoute::UnknownModel, "{unknown_model:?}");
    }
    let listed = ModelQuery { named_elsewhere: true, ..ask("a0") };
    assert_eq!(choose_for(&pool, listed).unwrap().address.as_str(), "10.0.0.2:80", "a name it lists as before");
    let mut silent = pod("10.0.0.3:80", "", &[], &[], 0.0);
    silent.models.clear();
    let pool = table(vec![pod("10.0.0.1:80", "other", &[], &[], 0.0), silent]);
    let query = ModelQuery { named_elsewhere: true, ..ask("b") };
    assert_eq!(choose_for(&pool, query).unwrap().address.as_str(), "10.0.0.3:80", "it may serve anything");
}

#[test]
fn resident_adapters_win_then_free_slots_then_swaps() {
    let pool = table(vec![
        pod("10.0.0.1:80", "base", &["a", "b", "c"], &["b", "c"], 0.0),
        pod("10.0.0.2:80", "base", &["a", "b", "c"], &["b"], 0.0),
        pod("10.0.0.3:80", "base", &["a", "b", "c"], &["a"], 3.0),
    ]);
    assert_eq!(choose_for(&pool, ask("a")).unwrap().address.as_str(), "10.0.0.3:80", "resident, though busier");
    assert_eq!(choose_for(&pool, ask("c")).unwrap().address.as_str(), "10.0.0.1:80");
    let mut saturated = pool.clone();
    saturated.pods[2].waiting = 1_000.0;
    assert_eq!(
        choose_for(&saturated, ask("a")).unwrap().address.as_str(),
        "10.0.0.2:80",
        "a saturated holder spills to a free slot, not to a pod that must evict"
    );
}

#[test]
fn the_subset_hint_limits_the_pick_and_an_empty_one_is_an_error() {
    let pool = table(vec![pod("10.0.0.1:80", "m", &[], &[], 0.0), pod("10.0.0.2:80", "m", &[], &[], 5.0)]);
    let subset = [PodAddress::parse("10.0.0.2:80").unwrap()];
    let query = ModelQuery { subset: Some(&subset), ..ask("m") };
    assert_eq!(choose_for(&pool, query).unwrap().address.as_str(), "10.0.0.2:80");
    let outside = [PodAddress::parse("10.9.9.9:80").unwrap()];
    let query = ModelQuery { subset: Some(&outside), ..ModelQuery::default() };
    assert_eq!(choose_for(&pool, query).unwrap_err(), NoRoute::SubsetEmpty);
}

#[test]
fn a_saturated_holder_keeps_its_adapter_rather_than_making_another_pod_evict_one() {
    let pool = table(vec![
        pod("10.0.0.1:80", "base", &["a", "b", "c"], &["a", "b"], 1_000.0),
        pod("10.0.0.2:80", "base", &["a", "b", "c"], &["b", "c"], 0.0),
    ]);
    for _ in 0..20 {
        assert_eq!(choose_for(&pool, ask("a")).unwrap().address.as_str(), "10.0.0.1:80", "queue, do not swap");
    }
}

#[test]
fn with_every_queue_full_an_adapter_still_queues_on_its_holder_rather_than_make_a_pod_evict() {
    // Both queues past the saturation threshold (5): load alone decides, but not a swap.
    let mut pods = vec![
        pod("10.0.0.1:80", "base", &["a", "b", "c"], &["a", "b"], 9.0),
        pod("10.0.0.2:80", "base", &["a", "b", "c"], &["b", "c"], 6.0),
    ];
    for _ in 0..20 {
        assert_eq!(choose_for(&table(pods.clone()), ask("a")).unwrap().address.as_str(), "10.0.0.1:80", "queue");
        assert_eq!(choose_for(&table(pods.clone()), ask("b")).unwrap().address.as_str(), "10.0.0.2:80", "by load");
    }
    // A full pod with a free slot needs no swap: load decides between it and the holder.
    pods.push(pod("10.0.0.3:80", "base", &["a", "b", "c"], &[], 7.0));
    assert_eq!(choose_for(&table(pods), ask("a")).unwrap().address.as_str(), "10.0.0.3:80");
}

#[test]
fn in_a_tight_pool_a_saturated_holder_keeps_its_adapter_and_leaves_the_free_slot_to_another() {
    // One free slot in the pool, and `b` (in demand: every adapter is, without history) on no pod.
    let mut holder = pod("10.0.0.1:80", "base", &["a", "b"], &["a"], 1_000.0);
    holder.max_loras = 1;
    let mut free = pod("10.0.0.2:80", "base", &["a", "b"], &[], 0.0);
    free.max_loras = 1;
    let pool = table(vec![holder, free]);
    for _ in 0..20 {
        assert_eq!(choose_for(&pool, ask("a")).unwrap().address.as_str(), "10.0.0.1:80", "the slot is b's");
        assert_eq!(choose_for(&pool, ask("b")).unwrap().address.as_str(), "10.0.0.2:80");
    }
}

#[test]
fn a_cold_adapter_goes_to_the_same_free_slot_whatever_the_load() {
    let placed = |waiting: [f64; 3]| {
        let pool = table(vec![
            pod("10.0.0.1:80", "base", &["a", "x"], &["x"], waiting[0]),
            pod("10.0.0.2:80", "base", &["a", "y"], &["y"], waiting[1]),
            pod("10.0.0.3:80", "base", &["a", "z"], &["z"], waiting[2]),
        ]);
        choose_for(&pool, ask("a")).unwrap().address
    };
    // Every worker and replica places it alike (as long as that pod's queue is not full).
    let first = placed([0.0, 0.0, 0.0]);
    for waiting in [[3.0, 0.0, 0.0], [0.0, 3.0, 0.0], [0.0, 0.0, 3.0]] {
        assert_eq!(placed(waiting), first, "{waiting:?}");
    }
}

#[test]
fn a_route_counts_the_pods_that_may_serve_its_request() {
    // What decides whether Envoy's retries may go past the list (`Route::may_serve`).
    let pool = table(vec![
        pod("10.0.0.1:80", "llama", &[], &[], 0.0),
        pod("10.0.0.2:80", "qwen", &[], &[], 0.0),
        pod("10.0.0.3:80", "qwen", &[], &[], 0.0),
    ]);
    assert_eq!(choose_for(&pool, ask("llama")).unwrap().may_serve, 1, "a model on one pod of three");
    assert_eq!(choose_for(&pool, ask("qwen")).unwrap().may_serve, 2);
    assert_eq!(choose_for(&pool, ModelQuery::default()).unwrap().may_serve, 3, "no model: every pod");
    let subset = [PodAddress::parse("10.0.0.3:80").unwrap()];
    let hinted = ModelQuery { subset: Some(&subset), ..ask("qwen") };
    assert_eq!(choose_for(&pool, hinted).unwrap().may_serve, 1, "its subset hint");
    // A pod passed over for failing still may serve it: a last try there is no misroute.
    let none = |_: &str| 0;
    let ejected = [PodAddress::parse("10.0.0.2:80").unwrap()];
    let view = RoutingView {
        table: Some(&pool),
        fallback_pool: &[],
        inflight: &none,
        prefix: None,
        now_ms: 1_000,
        stale_after_ms: 1_000,
        ejected: &ejected,
        models: ask("qwen"),
        learning: None,
    };
    let route = choose(&view, &Policy { fallbacks: 2, ..Policy::default() }, &mut TieBreaker::new(7)).unwrap();
    assert_eq!((route.address.as_str(), route.fallbacks.len(), route.may_serve), ("10.0.0.3:80", 0, 2));
}

#[test]
fn pods_that_disowned_the_model_are_left_out_while_another_names_it() {
    let liar = PodAddress::parse("10.0.0.1:80").unwrap();
    let pool = table(vec![
        pod("10.0.0.1:80", "base", &["x"], &["x"], 0.0),
        pod("10.0.0.2:80", "base", &["x"], &[], 9.0),
        pod("10.0.0.3:80", "base", &[], &[], 5.0),
    ]);
    assert_eq!(choose_for(&pool, ask("x")).unwrap().address.as_str(), "10.0.0.1:80", "resident and idle");
    let disowned = [liar.clone()];
    let query = ModelQuery { disowned: &disowned, ..ask("x") };
    let route = choose_for(&pool, query).unwrap();
    assert_eq!(route.address.as_str(), "10.0.0.2:80", "busier, but the one that serves it");
    assert!(route.fallbacks.is_empty(), "nor a fallback");
    let both = [liar, PodAddress::parse("10.0.0.2:80").unwrap()];
    let query = ModelQuery { disowned: &both, ..ask("x") };
    assert_eq!(choose_for(&pool, query).unwrap().address.as_str(), "10.0.0.1:80", "none other: their 404 stands");
}
