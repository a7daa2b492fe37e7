//! The access log (the template's `access_log` section, on in `make run`, compose and the
//! Kubernetes manifests): one JSON line per request naming the filter's pick, the pod that
//! answered, the time to its first byte and the whole duration, and with
//! `debug_decision_header` why that pod. A client's forged destination never shows as the pick.

use std::time::Duration;

use e2e::Cluster;

const FORGED: &str = "10.9.9.9:1";
/// Plain completions, some with a forged destination, then one long stream.
const PLAIN: usize = 6;

/// Envoy 1.36 leaves `%COMMON_DURATION(DS_RX_BEG:US_RX_BODY_BEG:ms)%` empty (null): it does
/// not record the answer body's first byte; 1.37 and newer do.
fn times_the_first_body_byte(cluster: &Cluster) -> bool {
    let info = launcher::http::get(&cluster.envoy.admin_url("/server_info"), Duration::from_secs(5)).unwrap();
    let version: serde_json::Value = serde_json::from_str(&info.body).unwrap();
    let release = version["version"].as_str().unwrap_or_default().split('/').nth(1).unwrap_or_default().to_string();
    let minor = release.split('.').nth(1).and_then(|m| m.parse::<u32>().ok()).unwrap_or(u32::MAX);
    minor >= 37
}

fn lines(path: &std::path::Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines().map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"))).collect()
}

#[test]
fn each_request_is_logged_with_its_pick_the_pod_that_answered_and_its_timings() {
    let log = launcher::paths::run_dir("access-log").unwrap().join("access.log");
    let _ = std::fs::remove_file(&log);
    let path = log.clone();
    let cluster = Cluster::start_ready_with("access-log", 2, &[], move |options| {
        options.access_log = Some(path);
        if let Some(filter) = options.filter_config.as_object_mut() {
            filter.insert("debug_decision_header".into(), serde_json::json!(true));
        }
    });
    for i in 0..PLAIN {
        let forged = [("x-gateway-destination-endpoint", FORGED)];
        let headers: &[(&str, &str)] = if i % 2 == 0 { &forged } else { &[] };
        let body = format!(r#"{{"model":"sim-model","prompt":"logged request {i}","max_tokens":4}}"#);
        assert_eq!(cluster.post("/v1/completions", headers, &body).status, 200);
    }
    let stream = r#"{"model":"sim-model","prompt":"a logged stream","max_tokens":60,"stream":true}"#;
    assert_eq!(cluster.post("/v1/completions", &[], stream).status, 200);

    let logged = launcher::wait_until(Duration::from_secs(15), || lines(&log).len() > PLAIN);
    let entries = lines(&log);
    assert!(logged, "{} of {} requests logged in {}", entries.len(), PLAIN + 1, log.display());
    let pool = cluster.pool();
    let first_byte_timed = times_the_first_body_byte(&cluster);
    for entry in &entries {
        assert_eq!(entry["status"], 200, "{entry}");
        let picked: Vec<&str> = entry["picked"].as_str().unwrap_or_default().split(',').collect();
        assert!(picked.iter().all(|pod| pool.iter().any(|p| p == pod)), "a pick outside the pool: {entry}");
        assert!(!entry.to_string().contains(FORGED), "the client's forged destination was logged: {entry}");
        assert_eq!(Some(entry["upstream"].as_str().unwrap_or_default()), picked.first().copied(), "{entry}");
        assert_eq!(entry["attempts"], 1, "{entry}");
        let decision = entry["decision"].as_str().unwrap_or_default();
        assert!(decision.starts_with(&format!("pod={}; reason=", picked[0])), "{entry}");
        let whole = entry["duration_ms"].as_u64().unwrap();
        match entry["first_byte_ms"].as_u64() {
            Some(first_byte) => assert!(first_byte <= whole, "{entry}"),
            None => assert!(!first_byte_timed && entry["first_byte_ms"].is_null(), "{entry}"),
        }
        assert!(entry["request_id"].as_str().is_some_and(|id| !id.is_empty()), "{entry}");
    }
    if !first_byte_timed {
        println!("this Envoy does not time the answer body's first byte: first_byte_ms is null");
        return;
    }
    // The stream: its first byte (the first token) came long before its end.
    let streamed = entries.last().unwrap();
    let (first_byte, whole) = (streamed["first_byte_ms"].as_u64().unwrap(), streamed["duration_ms"].as_u64().unwrap());
    println!("stream: first byte {first_byte} ms, whole {whole} ms");
    assert!(whole >= first_byte + 300, "60 tokens stream for more than 300 ms after the first: {streamed}");
    // The simulator's first token takes its API overhead and a step (~43 ms); the response
    // headers leave at once, so this is the first token, not the headers.
    assert!(first_byte >= 20, "the time to the body's first byte, not to the headers: {streamed}");
}
