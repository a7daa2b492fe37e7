//! The pool's model list, as the gateway answers `GET /v1/models` itself (`models.list_path`).
//!
//! Routed to one pod, that request lists only the pod's own models: in a pool whose pods serve
//! different models or LoRA adapters, a client that checks its model before using it
//! (inference-perf refuses to start without it) or a UI that offers the list sees a different
//! answer on each call. The pod table already holds each pod's base models and adapters (from
//! its metrics and its own `/v1/models`), so the gateway can give the pool's list at no pod's
//! expense: each name once, base models before adapters, as vLLM shapes its own answer.
//!
//! The list holds the names the gateway does not answer 404 (see `route`; with
//! `unknown_model: route_by_load` it answers none): every name a pod of the table serves,
//! healthy or not (a request for a model whose pods are all down is still sent to one of them,
//! never refused as unknown), except a name a model rewrite sends elsewhere, which is listed
//! when one of the targets the rule can draw is served. When the table cannot say (a pod that
//! names no model may serve anything: an engine without model labels, or while no pod names
//! any; see [`crate::pod_table::PodState::may_serve_any_model`]; or a pod that named more
//! names than its lists keep, [`crate::pod_table::PodState::names_cut`]), there is no list and
//! the request goes to a pod as before.
//!
//! A client expects every name, so the list is bounded by its bytes, [`MAX_LIST_BYTES`], not
//! by a count of names (short names fit more): tens of thousands of names, past what pools
//! of many pods with hundreds of distinct adapters each name. Names past it are left out,
//! adapters before bases (the list stops at the first name that does not fit, so it is the
//! whole list's start), and counted in [`ModelList::left_out`], which the router tells
//! the operator of (a counter and a warning): a client checking its model may miss it.

use std::collections::BTreeMap;

use serde::Serialize;

use super::rewrite::ModelRewrite;
use crate::pod_table::PodTable;

/// The most bytes of a list's body: about 27,000 adapters of 40-byte names (an entry is some
/// 80 bytes and its names). Each worker keeps its table's list, and builds it anew for each
/// table a request asks about (measured natively: ~3 ms for 4,097 names, ~28 ms for 32,769
/// names cut at this bound); a pool of 1,024 pods each naming hundreds of distinct adapters
/// would otherwise make a reply of tens of megabytes, in each worker.
pub const MAX_LIST_BYTES: usize = 4 << 20;

/// Who answers for the list's entries: the gateway, from what the pods reported.
const OWNED_BY: &str = "wasm-epp";

/// The list's opening and closing, around its entries.
const OPENING: &[u8] = br#"{"object":"list","data":["#;
const CLOSING: &[u8] = b"]}";

/// The pool's list as answered, and how many names it lacks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelList {
    /// The JSON body.
    pub body: Vec<u8>,
    /// Names past [`MAX_LIST_BYTES`], left out of [`Self::body`]; 0 when it names them all.
    pub left_out: usize,
}

/// One entry: OpenAI's fields (`id`, `object`, `created`, `owned_by`) and vLLM's `parent`
/// (the base model of an adapter, `null` for a base model), in vLLM's order.
#[derive(Serialize)]
struct Entry<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    owned_by: &'static str,
    parent: Option<&'a str>,
}

/// `{"object": "list", "data": [...]}` for `table`'s pods and `rewrites`, base models before
/// adapters, within [`MAX_LIST_BYTES`]. `None` when the table cannot list the pool.
pub fn pool_model_list(table: &PodTable, rewrites: &[ModelRewrite], created_s: u64) -> Option<ModelList> {
    pool_model_list_within(table, rewrites, created_s, MAX_LIST_BYTES)
}

/// [`pool_model_list`] within `max_bytes` (at least the empty list's).
fn pool_model_list_within(
    table: &PodTable,
    rewrites: &[ModelRewrite],
    created_s: u64,
    max_bytes: usize,
) -> Option<ModelList> {
    let pods = &table.pods;
    let table_names_models = pods.iter().any(|pod| !pod.names_no_model());
    let unlisted = |pod: &crate::pod_table::PodState| pod.may_serve_any_model(table_names_models) || pod.names_cut;
    if !table_names_models || pods.iter().any(unlisted) {
        return None;
    }
    // Name → parent. Base models first, so a name one pod serves as its base and another as an
    // adapter is listed as a base model.
    let mut parents: BTreeMap<&str, Option<&str>> = BTreeMap::new();
    for pod in pods {
        for model in &pod.models {
            parents.entry(model.as_str()).or_insert(None);
        }
    }
    for pod in pods {
        let base = pod.models.first().map(String::as_str);
        for adapter in pod.adapter_lists().into_iter().flatten() {
            parents.entry(adapter.as_str()).or_insert(base);
        }
    }
    // A name with a rule is sent as one of its targets: listed when a target it can draw
    // (weight above 0) is served, whether or not pods also serve the name itself.
    let served_by_rule: Vec<(&str, bool)> = rewrites
        .iter()
        .map(|rule| {
            let mut drawn = rule.targets.iter().filter(|target| target.weight > 0);
            (rule.model.as_str(), drawn.any(|target| parents.contains_key(target.model.as_str())))
        })
        .collect();
    for (name, served) in served_by_rule {
        if served {
            parents.insert(name, None);
        } else {
            parents.remove(name);
        }
    }
    let (bases, adapters): (Vec<_>, Vec<_>) = parents.into_iter().partition(|(_, parent)| parent.is_none());
    let names = bases.len() + adapters.len();
    let mut body = OPENING.to_vec();
    let mut listed = 0;
    let mut entry = Vec::new();
    for (id, parent) in bases.into_iter().chain(adapters) {
        entry.clear();
        if listed > 0 {
            entry.push(b',');
        }
        let fields = Entry { id, object: "model", created: created_s, owned_by: OWNED_BY, parent };
        // The list stops at the first entry that does not fit, though a later, shorter one
        // might: so what it lists is always the start of the whole list, and an adapter is
        // listed only when every base model is (its `parent` among them; skipping a long base
        // would list adapters of a base the list lacks). Filling on would win little: names
        // are at most 256 bytes, so the room left is under one entry (a few KiB of 4 MiB,
        // some dozens of names of tens of thousands), found by writing out every name left,
        // in the pools largest past the bound.
        // Writing into a Vec fails only for a map with non-string keys, which an entry is not.
        if serde_json::to_writer(&mut entry, &fields).is_err() || body.len() + entry.len() + CLOSING.len() > max_bytes {
            break;
        }
        body.extend_from_slice(&entry);
        listed += 1;
    }
    body.extend_from_slice(CLOSING);
    Some(ModelList { body, left_out: names - listed })
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;
    use crate::address::PodAddress;
    use crate::pod_table::PodState;

    fn pod(address: &str, models: &[&str], adapters: &[&str]) -> PodState {
        let mut pod = PodState::unknown(&PodAddress::parse(address).unwrap());
        pod.healthy = true;
        pod.models = models.iter().map(|m| m.to_string()).collect();
        pod.adapters = adapters.iter().map(|a| a.to_string()).collect();
        pod
    }

    fn table(pods: Vec<PodState>) -> PodTable {
        PodTable { pods, ..PodTable::default() }
    }

    fn ids_and_parents(list: &ModelList) -> Vec<(String, Option<String>)> {
        assert_eq!(list.left_out, 0, "every name listed");
        let list = parsed(list);
        list["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|entry| (entry["id"].as_str().unwrap().to_owned(), entry["parent"].as_str().map(str::to_owned)))
            .collect()
    }

    fn parsed(list: &ModelList) -> Value {
        serde_json::from_slice(&list.body).unwrap()
    }

    fn rewrite(public: &str, targets: &[&str]) -> ModelRewrite {
        let targets = targets.iter().map(|t| json!({"model": t, "weight": 1})).collect::<Vec<_>>();
        serde_json::from_value(json!({"model": public, "targets": targets})).unwrap()
    }

    #[test]
    fn every_name_of_the_pool_once_bases_first_adapters_with_their_parent() {
        let table = table(vec![
            pod("10.0.0.1:8000", &["llama"], &[]),
            pod("10.0.0.2:8000", &["qwen"], &["sql-lora", "chat-lora"]),
            pod("10.0.0.3:8000", &["qwen"], &["sql-lora", "chat-lora", "legal-lora"]),
        ]);
        let list = pool_model_list(&table, &[], 1_700_000_000).unwrap();
        assert_eq!(parsed(&list)["object"], "list");
        let expected = [
            ("llama", None),
            ("qwen", None),
            ("chat-lora", Some("qwen")),
            ("legal-lora", Some("qwen")),
            ("sql-lora", Some("qwen")),
        ];
        let expected: Vec<_> = expected.iter().map(|(id, p)| (id.to_string(), p.map(str::to_owned))).collect();
        assert_eq!(ids_and_parents(&list), expected);
        let first = &parsed(&list)["data"][0];
        assert_eq!((first["object"].as_str(), first["created"].as_u64()), (Some("model"), Some(1_700_000_000)));
        assert_eq!(first["owned_by"], OWNED_BY);
    }

    #[test]
    fn pods_down_are_listed_as_routing_still_tries_them_and_a_silent_pod_means_no_list() {
        let mut down = pod("10.0.0.2:8000", &["qwen"], &["sql-lora"]);
        down.healthy = false;
        let list = pool_model_list(&table(vec![pod("10.0.0.1:8000", &["llama"], &[]), down.clone()]), &[], 0).unwrap();
        let qwen = Some("qwen".to_owned());
        assert_eq!(
            ids_and_parents(&list),
            vec![("llama".to_owned(), None), ("qwen".to_owned(), None), ("sql-lora".to_owned(), qwen)]
        );
        // A pod that names nothing may serve any model: the gateway cannot list the pool.
        let silent = pod("10.0.0.3:8000", &[], &[]);
        assert!(pool_model_list(&table(vec![pod("10.0.0.1:8000", &["llama"], &[]), silent]), &[], 0).is_none());
        assert!(pool_model_list(&table(vec![]), &[], 0).is_none(), "no pod");
        // One down since before its first scrape names nothing yet, and serves nothing: the
        // others' list stands. While no pod names any model, there is none.
        let never_answered = PodState::unknown(&PodAddress::parse("10.0.0.4:8000").unwrap());
        let list = pool_model_list(&table(vec![pod("10.0.0.1:8000", &["llama"], &[]), never_answered.clone()]), &[], 0);
        assert_eq!(ids_and_parents(&list.unwrap()), vec![("llama".to_owned(), None)]);
        assert!(pool_model_list(&table(vec![never_answered]), &[], 0).is_none(), "a pool starting up");
        // A pod registering more adapters than its lists keep serves names none lists.
        let cut = PodState { names_cut: true, ..pod("10.0.0.5:8000", &["qwen"], &["a0"]) };
        assert!(pool_model_list(&table(vec![pod("10.0.0.1:8000", &["llama"], &[]), cut]), &[], 0).is_none());
    }

    #[test]
    fn an_adapter_the_pod_only_reports_running_is_listed_as_routing_finds_it() {
        let mut running = pod("10.0.0.1:8000", &["qwen"], &[]);
        running.running_loras = vec!["hot-lora".to_owned()];
        let list = pool_model_list(&table(vec![running]), &[], 0).unwrap();
        assert_eq!(
            ids_and_parents(&list),
            vec![("qwen".to_owned(), None), ("hot-lora".to_owned(), Some("qwen".to_owned()))]
        );
    }

    #[test]
    fn a_rewrite_is_listed_when_a_target_is() {
        let table = table(vec![pod("10.0.0.1:8000", &["qwen"], &["sql-lora"])]);
        let rewrites = [rewrite("assistant", &["sql-lora", "gone-lora"]), rewrite("ghost", &["gone-lora"])];
        let ids: Vec<String> =
            ids_and_parents(&pool_model_list(&table, &rewrites, 0).unwrap()).into_iter().map(|(id, _)| id).collect();
        assert_eq!(ids, ["assistant", "qwen", "sql-lora"]);
    }

    #[test]
    fn a_served_name_whose_rule_sends_it_to_unserved_targets_is_not_listed() {
        let table = table(vec![pod("10.0.0.1:8000", &["qwen"], &["sql-lora"])]);
        let mut weightless = rewrite("sql", &["sql-lora"]);
        weightless.targets.iter_mut().for_each(|t| t.weight = 0);
        weightless.targets.push(serde_json::from_value(json!({"model": "gone", "weight": 1})).unwrap());
        // qwen goes to a version not deployed yet; sql can only draw the target no pod serves.
        let rewrites = [rewrite("qwen", &["qwen-v2"]), weightless];
        let ids: Vec<String> =
            ids_and_parents(&pool_model_list(&table, &rewrites, 0).unwrap()).into_iter().map(|(id, _)| id).collect();
        assert_eq!(ids, ["sql-lora"]);
    }

    #[test]
    fn a_name_that_is_a_base_anywhere_is_listed_as_a_base() {
        let table = table(vec![pod("10.0.0.1:8000", &["qwen"], &["tuned"]), pod("10.0.0.2:8000", &["tuned"], &[])]);
        assert_eq!(
            ids_and_parents(&pool_model_list(&table, &[], 0).unwrap()),
            vec![("qwen".to_owned(), None), ("tuned".to_owned(), None)]
        );
    }

    /// `pods` pods, each with the base model `base` and `adapters` adapters of its own.
    fn many_adapters(pods: usize, adapters: usize) -> PodTable {
        let pods: Vec<PodState> = (0..pods)
            .map(|p| {
                let adapters: Vec<String> = (0..adapters).map(|n| format!("adapter-{n:03}-{p}")).collect();
                let adapters: Vec<&str> = adapters.iter().map(String::as_str).collect();
                pod(&format!("10.0.{}.{}:8000", p / 200, p % 200 + 1), &["base"], &adapters)
            })
            .collect();
        table(pods)
    }

    #[test]
    fn a_pool_of_thousands_of_adapters_is_listed_whole() {
        // 5,121 names: past the 4,096 a count once bounded the list at, well within its bytes.
        let list = pool_model_list(&many_adapters(80, 64), &[], 0).unwrap();
        assert_eq!((ids_and_parents(&list).len(), list.left_out), (1 + 80 * 64, 0));
        assert!(list.body.len() < MAX_LIST_BYTES / 8, "{} bytes", list.body.len());
    }

    #[test]
    fn the_list_is_bounded_by_its_bytes_and_tells_what_it_left_out() {
        let table = many_adapters(4, 8);
        let whole = pool_model_list(&table, &[], 1_700_000_000).unwrap();
        let ids = ids_and_parents(&whole);
        // Every bound from the empty list's to the whole list's.
        let empty = OPENING.len() + CLOSING.len();
        for max_bytes in empty..=whole.body.len() {
            let cut = pool_model_list_within(&table, &[], 1_700_000_000, max_bytes).unwrap();
            assert!(cut.body.len() <= max_bytes, "{max_bytes}: {} bytes", cut.body.len());
            let data = parsed(&cut)["data"].as_array().unwrap().clone();
            let listed: Vec<&str> = data.iter().map(|entry| entry["id"].as_str().unwrap()).collect();
            assert_eq!(listed.len() + cut.left_out, ids.len(), "{max_bytes}: each name listed or counted");
            let first: Vec<&str> = ids.iter().take(listed.len()).map(|(id, _)| id.as_str()).collect();
            assert_eq!(listed, first, "{max_bytes}: the first names, bases first");
            // As many as fit: the next entry, and its comma, would not.
            if let Some((id, parent)) = ids.get(listed.len()) {
                let next = Entry {
                    id,
                    object: "model",
                    created: 1_700_000_000,
                    owned_by: OWNED_BY,
                    parent: parent.as_deref(),
                };
                let next_len = serde_json::to_vec(&next).unwrap().len() + usize::from(!listed.is_empty());
                assert!(cut.body.len() + next_len > max_bytes, "{max_bytes}: room left for {id}");
            }
        }
        let small = pool_model_list_within(&table, &[], 0, 150).unwrap();
        assert_eq!(parsed(&small)["data"][0]["id"], "base", "bases come first, so they survive the bound");
        assert_eq!(small.left_out, ids.len() - 1);
        let none = pool_model_list_within(&table, &[], 0, empty).unwrap();
        assert_eq!((parsed(&none)["data"].as_array().map(Vec::len), none.left_out), (Some(0), ids.len()));
    }

    #[test]
    fn the_list_stops_at_the_first_name_that_does_not_fit_so_no_adapter_outlives_a_base() {
        let long_base = "a".repeat(200);
        let table = table(vec![pod("10.0.0.1:8000", &["qwen"], &["z"]), pod("10.0.0.2:8000", &[&long_base], &[])]);
        let whole = pool_model_list(&table, &[], 0).unwrap();
        let ids: Vec<String> = ids_and_parents(&whole).into_iter().map(|(id, _)| id).collect();
        assert_eq!(ids, [long_base.as_str(), "qwen", "z"]);
        // Room for "qwen" and the adapter "z" after it, not for the long base before them.
        let one_entry = |id: &str, parent: Option<&str>| {
            serde_json::to_vec(&Entry { id, object: "model", created: 0, owned_by: OWNED_BY, parent }).unwrap().len()
        };
        let room = OPENING.len() + CLOSING.len() + one_entry("qwen", None) + 1 + one_entry("z", Some("qwen"));
        assert!(room < OPENING.len() + CLOSING.len() + one_entry(&long_base, None));
        let cut = pool_model_list_within(&table, &[], 0, room).unwrap();
        assert_eq!((parsed(&cut)["data"].as_array().map(Vec::len), cut.left_out), (Some(0), 3));
    }
}
