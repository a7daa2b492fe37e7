use super::*;

/// A table as JSON whose first pod's address is replaced by `address` (any text).
fn table_with_address(address: &str) -> Vec<u8> {
    let good = PodState::unknown(&PodAddress::parse("10.0.0.1:8000").unwrap());
    let table = PodTable { version: 3, published_at_ms: 5, poll_interval_ms: 100, pods: vec![good.clone(), good] };
    let text = String::from_utf8(table.encode()).unwrap();
    text.replacen("\"10.0.0.1:8000\"", &serde_json::to_string(address).unwrap(), 1).into_bytes()
}

#[test]
fn round_trips_and_drops_hostile_addresses() {
    let good = PodState::unknown(&PodAddress::parse("10.0.0.1:8000").unwrap());
    let decoded = PodTable::decode(&table_with_address("evil.example.com:80")).unwrap();
    assert_eq!(decoded.pods, vec![good], "the bad entry is dropped, the good one kept");
    assert_eq!(decoded.version, 3);
}

#[test]
fn addresses_are_canonical_and_listed_once() {
    let decoded = PodTable::decode(&table_with_address(" 10.0.0.1:8000\r\n")).unwrap();
    assert_eq!(decoded.pods.len(), 1, "a padded copy of an address is the same pod");
    assert_eq!(decoded.pods[0].address.as_str(), "10.0.0.1:8000");
}

#[test]
fn garbage_is_an_error_not_a_table() {
    assert!(PodTable::decode(b"{\"pods\": 7}").is_err());
    assert!(PodTable::decode(&[0xff, 0x00]).is_err());
    assert_eq!(decode_version(&encode_version(42)), Some(42));
    assert_eq!(decode_version(b"abc"), None);
}

/// The decode before entries were parsed from their raw text, serde's untagged enum: the
/// oracle the decode must agree with on every input.
fn decode_untagged(bytes: &[u8]) -> Option<PodTable> {
    #[derive(Deserialize)]
    struct Wire {
        version: u64,
        published_at_ms: u64,
        poll_interval_ms: u64,
        pods: Vec<Maybe>,
    }
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Maybe {
        Valid(Box<PodState>),
        Invalid(serde::de::IgnoredAny),
    }
    let wire: Wire = serde_json::from_slice(bytes).ok()?;
    let mut seen = hashbrown::HashSet::new();
    let mut pods: Vec<PodState> = wire
        .pods
        .into_iter()
        .filter_map(|pod| match pod {
            Maybe::Valid(pod) => seen.insert(pod.address.clone()).then_some(*pod),
            Maybe::Invalid(_) => None,
        })
        .take(MAX_PODS)
        .collect();
    pods.iter_mut().for_each(PodState::bound_name_lists);
    Some(PodTable {
        version: wire.version,
        published_at_ms: wire.published_at_ms,
        poll_interval_ms: wire.poll_interval_ms,
        pods,
    })
}

fn pod(address: &str) -> PodState {
    let mut pod = PodState::unknown(&PodAddress::parse(address).unwrap());
    pod.healthy = true;
    pod.waiting = 2.0;
    pod.kv_usage = Some(0.25);
    pod.models = vec!["base".into()];
    pod.adapters = vec!["a1".into(), "a2".into()];
    pod
}

fn table() -> PodTable {
    PodTable {
        version: 7,
        published_at_ms: 1_000,
        poll_interval_ms: 100,
        pods: vec![pod("10.0.0.1:8000"), pod("10.0.0.2:8000"), pod("[fd00::3]:8000")],
    }
}

#[test]
fn a_bad_entry_costs_that_entry_and_a_repeated_address_its_repeat() {
    let entry = |address: &str| serde_json::to_value(pod(address)).unwrap();
    let mut host_name = entry("10.0.0.4:8000");
    host_name["address"] = "pod-a:8000".into();
    let mut wrong_type = entry("10.0.0.5:8000");
    wrong_type["waiting"] = "many".into();
    let mut padded = entry("10.0.0.6:8000");
    padded["address"] = " 10.0.0.1:8000".into();
    let wire = serde_json::json!({
        "version": 3, "published_at_ms": 5, "poll_interval_ms": 100,
        "pods": [entry("10.0.0.1:8000"), host_name, 17, wrong_type, null, padded, entry("10.0.0.2:8000")],
    });
    let bytes = serde_json::to_vec(&wire).unwrap();
    let decoded = PodTable::decode(&bytes).unwrap();
    let addresses: Vec<&str> = decoded.pods.iter().map(|p| p.address.as_str()).collect();
    assert_eq!(addresses, ["10.0.0.1:8000", "10.0.0.2:8000"]);
    assert_eq!(Some(decoded), decode_untagged(&bytes));
}

#[test]
fn a_table_decodes_as_encoded_and_as_the_untagged_decode_did() {
    let bytes = table().encode();
    assert_eq!(PodTable::decode(&bytes).unwrap(), table());
    assert_eq!(decode_untagged(&bytes), Some(table()));
}

#[test]
fn every_one_byte_mutant_decodes_as_the_untagged_decode_did() {
    let bytes = table().encode();
    let replacements = [b'"', b'0', b'9', b'-', b'.', b'e', b'{', b'}', b'[', b']', b',', b':', b' ', b'x', b'n', 0xff];
    for at in 0..bytes.len() {
        for &byte in &replacements {
            let mut mutant = bytes.clone();
            mutant[at] = byte;
            assert_eq!(PodTable::decode(&mutant).ok(), decode_untagged(&mutant), "byte {at} set to {byte:#x}");
        }
    }
}

#[test]
fn past_the_bound_the_rest_is_not_kept() {
    let mut big = table();
    big.pods = (0..MAX_PODS + 5).map(|i| pod(&format!("10.1.{}.{}:8000", i / 250, i % 250))).collect();
    let decoded = PodTable::decode(&big.encode()).unwrap();
    assert_eq!(decoded.pods.len(), MAX_PODS);
    assert_eq!(decoded.pods.last().map(|p| &p.address), big.pods.get(MAX_PODS - 1).map(|p| &p.address));
}

#[test]
fn a_pods_cut_lists_say_so_through_the_table_and_a_list_cut_on_the_way_in_too() {
    let mut cut = table();
    cut.pods[0].names_cut = true;
    assert!(PodTable::decode(&cut.encode()).unwrap().pods[0].names_cut);
    assert!(!String::from_utf8(table().encode()).unwrap().contains("names_cut"), "written only when set");
    // A worker keeps what the pool service kept (at its configured bound, up to the hard
    // maximum) and cuts only past the hard maximum.
    let mut flood = table();
    let max = crate::models::MAX_NAMES_PER_POD;
    flood.pods[0].adapters = (0..max).map(|i| format!("a{i}")).collect();
    flood.pods[1].adapters = (0..max + 1).map(|i| format!("a{i}")).collect();
    let decoded = PodTable::decode(&flood.encode()).unwrap();
    assert_eq!((decoded.pods[0].adapters.len(), decoded.pods[0].names_cut), (max, false));
    assert_eq!((decoded.pods[1].adapters.len(), decoded.pods[1].names_cut), (max, true));
}

#[test]
fn a_scrape_or_model_list_naming_more_than_is_kept_marks_the_pod_cut_until_one_does_not() {
    use crate::models::catalog::Catalog;
    use crate::models::residency::ScrapedModels;
    let mut state = pod("10.0.0.1:8000");
    let scraped = || ScrapedModels { base: vec!["base".into()], ..ScrapedModels::default() };
    let listed = Catalog { base: vec!["base".into()], adapters: vec!["a1".into()], cut: true };
    let names = crate::models::DEFAULT_NAMES_PER_POD;
    state.set_names(None, scraped(), Some(&listed), names);
    assert!(state.names_cut, "/v1/models listed more than it kept");
    state.set_names(None, scraped(), Some(&Catalog { cut: false, ..listed.clone() }), names);
    assert!(!state.names_cut, "each scrape says anew");
    let lora = crate::metrics_text::LoraState { cut: true, ..Default::default() };
    state.set_names(Some(lora), scraped(), None, names);
    assert!(state.names_cut, "adapter requests named past the bound");
    // The scrape's names and the catalog's together past the bound.
    let many = |prefix: &str, count: usize| (0..count).map(|i| format!("{prefix}{i}")).collect::<Vec<String>>();
    let scraped = ScrapedModels { adapters: many("s", 40), ..scraped() };
    state.set_names(None, scraped, Some(&Catalog { adapters: many("c", 40), ..Catalog::default() }), names);
    assert_eq!(state.adapters.len(), names);
    assert!(state.names_cut);
    // Within a configured bound of 300, the same 80 names and more are whole; past it, cut.
    let scraped = || ScrapedModels { base: vec!["base".into()], adapters: many("s", 150), ..ScrapedModels::default() };
    state.set_names(None, scraped(), Some(&Catalog { adapters: many("c", 150), ..Catalog::default() }), 300);
    assert_eq!((state.adapters.len(), state.names_cut), (300, false));
    state.set_names(None, scraped(), Some(&Catalog { adapters: many("c", 151), ..Catalog::default() }), 300);
    assert_eq!((state.adapters.len(), state.names_cut), (300, true));
}

/// A table of healthy pods reporting `sizes` (`None`: no `vllm:cache_config_info`), and one
/// unhealthy pod of `sick` tokens.
fn reporting(sizes: &[Option<u32>], sick: Option<u32>) -> PodTable {
    let mut pods: Vec<PodState> = sizes
        .iter()
        .enumerate()
        .map(|(i, &size)| PodState { block_size: size, ..pod(&format!("10.0.0.{}:8000", i + 1)) })
        .collect();
    pods.push(PodState { healthy: false, block_size: sick, ..pod("10.0.1.1:8000") });
    PodTable { pods, ..table() }
}

#[test]
fn one_pod_claiming_another_block_size_changes_no_ones_hashing() {
    // A lying or misconfigured pod among agreeing ones: the pool's size stands (it used to
    // send every pod back to the configured size, and every remembered prefix with it).
    assert_eq!(reporting(&[Some(32), Some(32), Some(64)], None).common_block_size(), Some(32));
    assert_eq!(reporting(&[Some(64), Some(32), Some(32), Some(32), Some(1)], Some(8)).common_block_size(), Some(32));
    // A true pool: every reporting pod's size, as before; an unhealthy pod has no vote.
    assert_eq!(reporting(&[Some(64), Some(64)], Some(16)).common_block_size(), Some(64));
    assert_eq!(reporting(&[Some(64), None, None], None).common_block_size(), Some(64), "silent pods have no vote");
    // No majority, or no report: the configured size.
    assert_eq!(reporting(&[Some(32), Some(64)], None).common_block_size(), None, "one against one");
    assert_eq!(reporting(&[Some(16), Some(32), Some(64)], None).common_block_size(), None);
    assert_eq!(reporting(&[Some(16), Some(16), Some(32), Some(32)], None).common_block_size(), None);
    assert_eq!(reporting(&[None, None], Some(16)).common_block_size(), None);
    assert_eq!(reporting(&[], None).common_block_size(), None);
}
