//! How request bodies reach the filter through the real Envoy: bodies without a length,
//! read in large pieces, past `max_body_bytes`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use e2e::Cluster;

const MIB: usize = 1 << 20;

/// One HTTP/1.1 chunk of `data`.
fn chunk(data: &[u8]) -> Vec<u8> {
    let mut out = format!("{:x}\r\n", data.len()).into_bytes();
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    out
}

/// The status and headers (lower-case names) of the answer on `stream`.
fn read_head(stream: &mut TcpStream) -> (u16, Vec<(String, String)>) {
    stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => break,
        }
    }
    let text = String::from_utf8_lossy(&head).to_string();
    let mut lines = text.split("\r\n");
    let status = lines.next().and_then(|l| l.split(' ').nth(1)).and_then(|s| s.parse().ok()).unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_string()))
        .collect();
    (status, headers)
}

fn signal(pid: u32, name: &str) {
    let status = std::process::Command::new("kill").args([name, &pid.to_string()]).status().unwrap();
    assert!(status.success(), "kill {name} {pid}");
}

/// A body without a length (chunked) is buffered while the filter reads it; past
/// `max_body_bytes` the filter lets it go by load. Envoy hands the filter each read of the
/// socket whole (up to the listener's 16 MiB per read) and adds it to what is buffered
/// before the filter sees it: a large read on top of a buffered body outgrows a buffer of
/// the listener's size, and the client gets Envoy's 413 whatever the filter answers. The
/// pool route's `request_body_buffer_limit` makes room for one whole read (Envoy 1.37 and
/// later apply it; 1.36 does not). Envoy is paused while the second piece is written, so it
/// arrives as one read.
#[test]
fn a_chunked_body_past_max_body_bytes_read_in_one_piece_is_routed() {
    // The listener's 16 MiB left room for max_body_bytes up to 15 MiB.
    let cluster = Cluster::start_ready_with("chunked-large-read", 2, &["--time-scale", "0"], |options| {
        options.filter_config["max_body_bytes"] = (15 * MIB).into();
    });
    let mut stream = TcpStream::connect(("127.0.0.1", cluster.envoy.listen_port)).unwrap();
    let head = "POST /v1/completions HTTP/1.1\r\nhost: gateway\r\ncontent-type: application/json\r\n\
                transfer-encoding: chunked\r\n\r\n";
    let mut first = br#"{"model":"sim-model","max_tokens":1,"prompt":""#.to_vec();
    first.resize(first.len() + 14 * MIB + MIB / 2, b'a');
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(&chunk(&first)).unwrap();
    // Under max_body_bytes: buffered by the filter.
    std::thread::sleep(Duration::from_millis(500));

    let pid = cluster.envoy.pid();
    signal(pid, "-STOP");
    let mut writer = stream.try_clone().unwrap();
    let rest = std::thread::spawn(move || {
        let mut rest = chunk(&vec![b'b'; 4 * MIB]);
        rest.extend_from_slice(&chunk(b"\"}"));
        rest.extend_from_slice(b"0\r\n\r\n");
        writer.write_all(&rest)
    });
    std::thread::sleep(Duration::from_millis(500));
    signal(pid, "-CONT");
    let _ = rest.join();

    let (status, headers) = read_head(&mut stream);
    assert_ne!(status, 413, "Envoy refused a body the filter routes by load");
    let served = headers.iter().find(|(name, _)| name == "x-served-by").map(|(_, v)| v.as_str());
    assert!(served.is_some_and(|pod| cluster.pool().iter().any(|p| p == pod)), "{status} {headers:?}");
    assert!(cluster.envoy.stat("wasm_epp_body_over_limit").unwrap_or(0.0) >= 1.0);
    cluster.assert_plugin_healthy();
}

/// HTTP/2 without a length: a body in many DATA frames is read whole (the model named in
/// the first frame decides), with or without trailers, and one past `max_body_bytes` in
/// 16 KiB frames with trailers is routed by load.
#[test]
fn an_http2_body_in_many_frames_is_read_whole() {
    use bytes::Bytes;
    use e2e::h2::post_frames;
    let cluster = Cluster::start_ready("h2-frames", 2, &["--time-scale", "0"]);
    let port = cluster.envoy.listen_port;
    let frames =
        |body: &str, size: usize| -> Vec<Bytes> { body.as_bytes().chunks(size).map(Bytes::copy_from_slice).collect() };
    let prompt = "a shared system prompt, ".repeat(400);
    let known = format!(r#"{{"model":"sim-model","max_tokens":2,"prompt":"{prompt}"}}"#);
    let unknown = format!(r#"{{"model":"no-such-model","max_tokens":2,"prompt":"{prompt}"}}"#);
    let trailers: &[(&str, &str)] = &[("x-checksum", "0")];
    for with_trailers in [None, Some(trailers)] {
        let (status, served) = post_frames(port, "/v1/completions", &[], &frames(&known, 1024), with_trailers);
        assert_eq!(status, 200, "{with_trailers:?}");
        assert!(served.is_some_and(|pod| cluster.pool().contains(&pod)));
        // Only the first frame names the model: the gateway's own 404 shows it read that far.
        let (status, served) = post_frames(port, "/v1/completions", &[], &frames(&unknown, 1024), with_trailers);
        assert_eq!((status, served), (404, None), "{with_trailers:?}");
    }
    assert_eq!(cluster.envoy.stat("wasm_epp_body_invalid"), Some(0.0));
    let large = format!(r#"{{"model":"sim-model","max_tokens":2,"prompt":"{}"}}"#, "a".repeat(5 * MIB));
    let (status, served) = post_frames(port, "/v1/completions", &[], &frames(&large, 16 * 1024), Some(trailers));
    assert!(status < 500, "{status}");
    assert!(served.is_some_and(|pod| cluster.pool().contains(&pod)));
    assert_eq!(cluster.envoy.stat("wasm_epp_body_over_limit"), Some(1.0));
    cluster.assert_plugin_healthy();
}

/// Clients that send part of a body, stall and go away leave nothing taken: not the pod's
/// in-flight count of a request already routed (declared or grown past `max_body_bytes`),
/// not flow control's places, not the bytes of one still buffered.
#[test]
fn clients_that_go_away_mid_body_leave_no_request_in_flight() {
    // Three places per pod: the six requests routed unread take all of them (flow control
    // admits a body it cannot hold only while a place is free).
    let cluster = Cluster::start_ready_with("mid-body-aborts", 2, &["--time-scale", "0"], |options| {
        options.filter_config["flow_control"] = serde_json::json!({"enabled": true, "max_inflight_per_pod": 3});
    });
    let inflight = || -> f64 {
        let pool = cluster.pool();
        pool.iter()
            .map(|pod| cluster.envoy.stat(&format!("wasm_epp_pod_inflight{{pod=\"{pod}\"}}")).unwrap_or(-1.0))
            .sum()
    };
    let head = |framing: &str| {
        format!("POST /v1/completions HTTP/1.1\r\nhost: gateway\r\ncontent-type: application/json\r\n{framing}\r\n\r\n")
    };
    // Declared past max_body_bytes (routed at headers), chunked past it (routed mid-body),
    // declared under it (still buffered when the client goes).
    let cases = [(head("content-length: 10485760"), MIB, false), (head("transfer-encoding: chunked"), 5 * MIB, true)];
    let cases = cases.into_iter().chain([(head("content-length: 2097152"), MIB, false)]);
    let mut streams = Vec::new();
    for (head, size, chunked) in cases {
        let mut body = br#"{"model":"sim-model","max_tokens":1,"prompt":""#.to_vec();
        body.resize(size, b'a');
        for _ in 0..3 {
            let mut stream = TcpStream::connect(("127.0.0.1", cluster.envoy.listen_port)).unwrap();
            stream.write_all(head.as_bytes()).unwrap();
            stream.write_all(&if chunked { chunk(&body) } else { body.clone() }).unwrap();
            streams.push(stream);
        }
    }
    assert!(
        launcher::wait_until(Duration::from_secs(10), || inflight() == 6.0),
        "the six routed requests are in flight: {}",
        inflight()
    );
    // Every place of every pod is taken: whole requests now wait, and one waiting client goes too.
    let small = r#"{"model":"sim-model","max_tokens":1,"prompt":"waits"}"#;
    let mut gone = TcpStream::connect(("127.0.0.1", cluster.envoy.listen_port)).unwrap();
    let framing = format!("content-length: {}", small.len());
    gone.write_all(format!("{}{small}", head(&framing)).as_bytes()).unwrap();
    let url = cluster.envoy.url("/v1/completions");
    let waiting = std::thread::spawn(move || launcher::http::post(&url, &[], small, e2e::REQUEST_TIMEOUT));
    assert!(launcher::wait_until(Duration::from_secs(10), || cluster.envoy.stat("wasm_epp_flow_queued") == Some(2.0)));
    drop(gone);
    drop(streams);
    assert!(launcher::wait_until(Duration::from_secs(10), || inflight() == 0.0), "left in flight: {}", inflight());
    assert_eq!(waiting.join().unwrap().unwrap().status, 200, "released once the aborted requests ended");
    assert_eq!(cluster.envoy.stat("wasm_epp_flow_dropped{reason=\"client_gone\"}"), Some(1.0));
    // Each pod's places are free again: requests go on at once, none waits.
    for i in 0..4 {
        assert_eq!(cluster.complete(&format!("after the aborts {i}")).status, 200);
    }
    assert_eq!(cluster.envoy.stat("wasm_epp_flow_queued"), Some(2.0), "only the two that waited above");
    cluster.assert_plugin_healthy();
}
