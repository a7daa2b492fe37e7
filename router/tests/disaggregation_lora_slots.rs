//! Prefill/decode disaggregation and LoRA adapters by load: an adapter the decode pods list
//! and no prefill pod does is prefilled on a prefill pod with a free adapter slot under
//! `models.unknown_model: route_by_load` (loading it there evicts nothing), and stays with its
//! decode pod otherwise.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use common::{long_prompt, Bench, COMPLETIONS};
use picker::address::PodAddress;
use picker::keys;
use picker::pod_table::{encode_version, PodState, PodTable};
use picker::role::PodRole;
use wasm_epp_host::{Host, SharedStore};

const PREFILLER: &str = "x-prefiller-host-port";

fn body(model: &str, seed: usize) -> String {
    format!(r#"{{"model":"{model}","prompt":"{}","max_tokens":4}}"#, long_prompt(2000, seed))
}

/// A pod of base model `base` whose adapter lists say `adapters` (registered), `running`
/// (on its GPU), with `max_loras` slots.
struct LoraPod(&'static str, PodRole, &'static [&'static str], &'static [&'static str], u32);

fn publish_loras(bench: &Bench, pods: &[LoraPod]) {
    let based: Vec<_> = pods.iter().map(|pod| (&["base"][..], pod)).collect();
    publish_based(bench, &based);
}

/// A pod and the base models it serves.
type Based<'a> = (&'a [&'a str], &'a LoraPod);

/// As [`publish_loras`], each pod serving the base models given with it.
fn publish_based(bench: &Bench, pods: &[Based<'_>]) {
    let now = bench.host.now_ms();
    let mut table = PodTable { version: 1, published_at_ms: now, poll_interval_ms: 100, ..PodTable::default() };
    let names = |list: &[&str]| list.iter().map(|a| (*a).to_owned()).collect::<Vec<_>>();
    for (bases, LoraPod(address, role, adapters, running, slots)) in pods {
        let mut pod = PodState::unknown(&PodAddress::parse(address).unwrap());
        (pod.healthy, pod.kv_usage, pod.last_success_ms, pod.role) = (true, Some(0.1), now, *role);
        pod.models = names(bases);
        (pod.adapters, pod.running_loras, pod.max_loras) = (names(adapters), names(running), *slots);
        table.pods.push(pod);
    }
    bench.host.set(keys::POD_TABLE, &table.encode(), None).unwrap();
    bench.host.set(keys::POD_TABLE_VERSION, &encode_version(1), None).unwrap();
    bench.heartbeat();
}

const BY_LOAD: &str = r#"{"pd": {"threshold_tokens": 1024}, "models": {"unknown_model": "route_by_load"}}"#;

#[test]
fn by_load_an_adapter_no_prefill_pod_lists_is_prefilled_on_one_with_a_free_slot() {
    // Adapter x is the decode pods' alone; prefill pod 1's one slot is taken by y, pod 2 has a
    // slot free. By load, pod 2 may load x there (nothing is evicted), so x's prompts are
    // split too instead of always prefilled on their decode pod. The next x prompt goes to
    // the pod the first loaded it on, as to any pod holding it.
    let bench = Bench::new(BY_LOAD);
    publish_loras(
        &bench,
        &[
            LoraPod("10.0.0.1:8000", PodRole::Prefill, &["y"], &["y"], 1),
            LoraPod("10.0.0.2:8000", PodRole::Prefill, &[], &[], 1),
            LoraPod("10.0.0.3:8000", PodRole::Decode, &["x", "y", "z"], &["x"], 2),
        ],
    );
    let (mut first, _) = bench.request(&COMPLETIONS, &body("x", 1));
    assert_eq!(bench.host.header(PREFILLER).as_deref(), Some("10.0.0.2:8000"), "the free slot");
    let (mut second, _) = bench.request(&COMPLETIONS, &body("x", 2));
    assert_eq!(bench.host.header(PREFILLER).as_deref(), Some("10.0.0.2:8000"), "where x is loading");
    // Adapter z has no prefill pod with a slot left: its decode pod prefills it (no eviction).
    let answer = bench.complete(&COMPLETIONS, &body("z", 3));
    assert_eq!(answer.reply, None);
    assert_eq!(bench.host.header(PREFILLER), None, "every prefill slot is held: z is not loaded over x or y");
    assert_eq!((bench.stat("wasm_epp.pd_disaggregated"), bench.stat("wasm_epp.pd_decode_only")), (2, 1));
    bench.end(&mut first);
    bench.end(&mut second);
}

#[test]
fn an_adapter_no_prefill_pod_has_a_slot_for_stays_on_its_decode_pod() {
    // Session 47's rule stands when loading would evict (both prefill pods' slots held), and
    // without `route_by_load` (a pod is not presumed to load a name it does not list).
    let reject = r#"{"pd": {"threshold_tokens": 1024}}"#;
    let (held, free): (&[&str], &[&str]) = (&["w"], &[]);
    for (config, pod_2) in [(BY_LOAD, held), (reject, held), (reject, free)] {
        let bench = Bench::new(config);
        publish_loras(
            &bench,
            &[
                LoraPod("10.0.0.1:8000", PodRole::Prefill, &["y"], &["y"], 1),
                LoraPod("10.0.0.2:8000", PodRole::Prefill, pod_2, pod_2, 1),
                LoraPod("10.0.0.3:8000", PodRole::Decode, &["x", "y", "z"], &["x"], 2),
            ],
        );
        let answer = bench.complete(&COMPLETIONS, &body("x", 1));
        assert_eq!(answer.destination.as_deref().and_then(|d| d.split(',').next()), Some("10.0.0.3:8000"));
        assert_eq!(bench.host.header(PREFILLER), None, "{config}");
        assert_eq!(bench.stat("wasm_epp.pd_decode_only"), 1, "{config}");
    }
}

#[test]
fn an_adapter_whose_base_model_the_decode_pods_leave_ambiguous_stays_on_its_decode_pod() {
    // The prefill pod serves base-a with a slot free. Adapter x's base is not told: the pod
    // table keeps no adapter's parent, and the decode pods listing x serve two base models,
    // one pod both or two pods one each. Loaded on base-a while its base is base-b, its
    // prompt would fail: its decode pod prefills it. With one base model told, it is split.
    let prefill = LoraPod("10.0.0.1:8000", PodRole::Prefill, &[], &[], 1);
    let decode_1 = LoraPod("10.0.0.2:8000", PodRole::Decode, &["x"], &["x"], 2);
    let decode_2 = LoraPod("10.0.0.3:8000", PodRole::Decode, &["x"], &["x"], 2);
    let (a, b, both): (&[&str], &[&str], &[&str]) = (&["base-a"], &["base-b"], &["base-a", "base-b"]);
    let cases: [(&[Based<'_>], bool); 3] = [
        (&[(a, &prefill), (both, &decode_1)], false),
        (&[(a, &prefill), (a, &decode_1), (b, &decode_2)], false),
        (&[(a, &prefill), (a, &decode_1), (a, &decode_2)], true),
    ];
    for (pods, split) in cases {
        let bench = Bench::new(BY_LOAD);
        publish_based(&bench, pods);
        let answer = bench.complete(&COMPLETIONS, &body("x", 1));
        assert_eq!(answer.reply, None);
        let prefiller = bench.host.header(PREFILLER);
        assert_eq!(
            prefiller.as_deref(),
            split.then_some("10.0.0.1:8000"),
            "{:?}",
            pods.iter().map(|p| p.0).collect::<Vec<_>>()
        );
        assert_eq!(bench.stat("wasm_epp.pd_decode_only"), u64::from(!split));
    }
}
