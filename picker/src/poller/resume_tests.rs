//! A pool service taking over a published table under another `max_names_per_pod` (a new
//! leader in no-singleton mode, whose filter configuration changed).

use super::*;

fn addr(text: &str) -> PodAddress {
    PodAddress::parse(text).unwrap()
}

fn names(prefix: &str, count: usize) -> Vec<String> {
    (0..count).map(|i| format!("{prefix}{i}")).collect()
}

#[test]
fn a_table_resumed_under_a_smaller_bound_keeps_that_many_names_and_marks_the_pods_cut() {
    let (a, b) = (addr("10.0.0.1:80"), addr("10.0.0.2:80"));
    let wide = PollerConfig { max_names_per_pod: 300, ..PollerConfig::default() };
    let mut before = PoolPoller::new(wide, vec![a.clone(), b.clone()]);
    let mut published = before.take_table(5).unwrap();
    // Pod a named 200 adapters under the old bound (its last scrape and model list); pod b a few.
    let pod = &mut published.pods[0];
    (pod.models, pod.adapters, pod.running_loras) = (vec!["base".into()], names("t-", 200), names("t-", 100));
    published.pods[1].adapters = names("s-", 3);
    let mut after = PoolPoller::new(PollerConfig::default(), vec![a.clone(), b.clone()]);
    after.resume_from(&published);
    // Pod a stays down (no scrape replaces its names), and its model list answers meanwhile.
    let listed = crate::models::catalog::Catalog { adapters: names("new-", 1), ..Default::default() };
    after.set_catalog(&a, listed);
    let table = after.take_table(10).unwrap();
    let bound = crate::models::DEFAULT_NAMES_PER_POD;
    let kept = (table.pods[0].adapters.len(), table.pods[0].running_loras.len(), table.pods[0].names_cut);
    assert_eq!(kept, (bound, bound, true), "cut at the bound now configured, and marked");
    assert_eq!(table.pods[0].adapters.first().map(String::as_str), Some("t-0"), "the first ones kept");
    assert_eq!((table.pods[1].adapters.len(), table.pods[1].names_cut), (3, false), "within it: whole");
}
