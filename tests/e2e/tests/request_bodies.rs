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
/// before the filter sees it: a large read on top of a buffered body outgrew the stream's
/// buffer and the client got Envoy's 413, whatever the filter answered. Envoy is paused
/// while the second piece is written, so it arrives as one read.
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
