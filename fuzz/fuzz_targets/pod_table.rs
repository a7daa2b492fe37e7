//! The pod table codec. Two properties on one input:
//! - `PodTable::decode` of arbitrary bytes never panics, keeps only pods whose address parses,
//!   at most `MAX_PODS`, and re-encoding what it decoded decodes to the same table;
//! - a table built from the input (finite floats, address texts good and bad written into
//!   its JSON) decodes equal to itself after the decoder's filtering (bad addresses dropped,
//!   addresses made canonical and kept once, then cut to `MAX_PODS`; adapter lists bounded).
//!
//! Also `decode_version`: a value for exactly 8 bytes, none otherwise.

#![no_main]

use arbitrary::{Arbitrary, Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use picker::address::PodAddress;
use picker::pod_table::{decode_version, encode_version, PodState, PodTable, MAX_PODS};
use picker_fuzz::{assert_decoded_table_is_safe, assert_same_table, ADDRESSES};

fuzz_target!(|data: &[u8]| {
    assert_eq!(decode_version(data).is_some(), data.len() == 8);
    if let Some(version) = decode_version(data) {
        assert_eq!(encode_version(version).as_slice(), data);
    }
    if let Ok(table) = PodTable::decode(data) {
        assert_decoded_table_is_safe(&table);
        let again = PodTable::decode(&table.encode()).expect("a decoded table re-encodes to something decodable");
        assert_same_table(&again, &table);
    }
    if let Ok((table, raw_addresses)) = built_table(&mut Unstructured::new(data)) {
        // On the wire each pod carries an arbitrary address text (a writer's bug or a lie).
        let mut wire: serde_json::Value = serde_json::from_slice(&table.encode()).expect("a table encodes to JSON");
        if let Some(pods) = wire.get_mut("pods").and_then(|p| p.as_array_mut()) {
            for (pod, raw) in pods.iter_mut().zip(&raw_addresses) {
                pod["address"] = raw.as_str().into();
            }
        }
        // The decoder keeps each canonical address once (the first), then cuts to MAX_PODS.
        let mut seen = std::collections::HashSet::new();
        let mut expected = table.clone();
        expected.pods = table
            .pods
            .iter()
            .zip(&raw_addresses)
            .filter_map(|(pod, raw)| {
                let address = PodAddress::parse(raw).ok()?;
                seen.insert(address.clone()).then(|| PodState { address, ..pod.clone() })
            })
            .take(MAX_PODS)
            .map(|mut pod| {
                // Adapter lists are bounded on the way in, as a pod's own report is.
                pod.bound_name_lists();
                pod
            })
            .collect();
        let bytes = serde_json::to_vec(&wire).expect("JSON re-encodes");
        let decoded = PodTable::decode(&bytes).expect("an encoded table decodes");
        assert_same_table(&decoded, &expected);
    }
});

/// A finite float: the codec is JSON, which has no NaN or infinity.
fn finite(u: &mut Unstructured<'_>) -> Result<f64> {
    let value = f64::arbitrary(u)?;
    Ok(if value.is_finite() { value } else { 0.0 })
}

fn address(u: &mut Unstructured<'_>) -> Result<String> {
    Ok(match u8::arbitrary(u)? {
        pick @ 0..=239 => ADDRESSES.get(usize::from(pick) % ADDRESSES.len()).copied().unwrap_or_default().to_string(),
        _ => String::arbitrary(u)?,
    })
}

/// A pod with a placeholder address, and the address text it will carry on the wire.
fn pod(u: &mut Unstructured<'_>) -> Result<(PodState, String)> {
    let raw = address(u)?;
    let placeholder = PodAddress::parse("10.255.255.255:1").map_err(|_| arbitrary::Error::IncorrectFormat)?;
    Ok((
        PodState {
            address: placeholder,
            role: Default::default(),
            healthy: u.arbitrary()?,
            waiting: finite(u)?,
            running: finite(u)?,
            kv_usage: if u.arbitrary()? { Some(finite(u)?) } else { None },
            block_size: u.arbitrary()?,
            num_gpu_blocks: u.arbitrary()?,
            last_success_ms: u.arbitrary()?,
            consecutive_failures: u.arbitrary()?,
            epoch: u.arbitrary()?,
            max_loras: u.arbitrary()?,
            running_loras: u.arbitrary()?,
            waiting_loras: u.arbitrary()?,
            models: u.arbitrary()?,
            adapters: u.arbitrary()?,
            resident_loras: u.arbitrary()?,
            names_cut: u.arbitrary()?,
        },
        raw,
    ))
}

fn built_table(u: &mut Unstructured<'_>) -> Result<(PodTable, Vec<String>)> {
    let mut table = PodTable {
        version: u.arbitrary()?,
        published_at_ms: u.arbitrary()?,
        poll_interval_ms: u.arbitrary()?,
        pods: Vec::new(),
    };
    // Small tables, and on a magic number one over the bound, to check the cut. (Big tables
    // cost milliseconds per run: a plain 0xff byte must not ask for one.)
    let count = match u16::arbitrary(u)? {
        0xB16 => MAX_PODS + usize::from(u8::arbitrary(u)?),
        small => usize::from(small % 16),
    };
    let mut raw_addresses = Vec::with_capacity(count);
    for _ in 0..count {
        // Once the input is used up, repeat the last pod (cheap, and still a pod to filter).
        let (pod, raw) = match (table.pods.last(), raw_addresses.last()) {
            (Some(last), Some(raw)) if u.is_empty() => (last.clone(), String::clone(raw)),
            _ => pod(u)?,
        };
        table.pods.push(pod);
        raw_addresses.push(raw);
    }
    Ok((table, raw_addresses))
}
