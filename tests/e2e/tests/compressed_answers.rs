//! Answers a pod sent compressed, through a real Envoy: a pod behind a compressing proxy
//! answers `content-encoding: gzip`. The plugin inflates its answers for its watchers as they
//! pass (learning reads their `usage`, outlier detection a stream's opening error event), the
//! client gets the bytes the pod sent, and an answer in an encoding it does not read (`br`) is
//! counted, not misread.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use e2e::Cluster;
use serde_json::json;

const WHOLE: &str = r#"{"id":"cmpl-1","object":"text_completion","model":"sim-model","choices":[{"index":0,"text":" a b c","finish_reason":"length"}],"usage":{"prompt_tokens":12,"total_tokens":15,"completion_tokens":3}}"#;
const SERVER_ERROR: &str = "data: {\"error\": {\"message\": \"Internal server error\", \"type\": \"InternalServerError\", \"param\": null, \"code\": 500}}\n\ndata: [DONE]\n\n";
/// Not brotli, but bytes that would read as a `usage` if taken as plain text.
const NOT_READ: &str = WHOLE;

fn gzip(plain: &[u8]) -> Vec<u8> {
    let mut bytes = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];
    bytes.extend(miniz_oxide::deflate::compress_to_vec(plain, 6));
    let mut crc = !0_u32;
    for &byte in plain {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0xedb8_8320 } else { crc >> 1 };
        }
    }
    bytes.extend((!crc).to_le_bytes());
    bytes.extend((plain.len() as u32).to_le_bytes());
    bytes
}

/// What the fake pod answers a prompt: its content type, encoding and body.
fn answer_to(prompt: &str) -> (&'static str, &'static str, Vec<u8>) {
    if prompt.starts_with("fails") {
        ("text/event-stream", "gzip", gzip(SERVER_ERROR.as_bytes()))
    } else if prompt.starts_with("brotli") {
        ("application/json", "br", NOT_READ.as_bytes().to_vec())
    } else {
        ("application/json", "gzip", gzip(WHOLE.as_bytes()))
    }
}

/// POSTs `body` over a plain socket (the answer's bytes as they come, not decoded) and
/// returns the answer's status line and body bytes.
fn post(port: u16, body: &str) -> (String, Vec<u8>) {
    let mut socket = TcpStream::connect(("127.0.0.1", port)).unwrap();
    socket.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let head = format!(
        "POST /v1/completions HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n\
         accept-encoding: gzip, br\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    socket.write_all(head.as_bytes()).unwrap();
    socket.write_all(body.as_bytes()).unwrap();
    let mut answer = Vec::new();
    let _ = socket.read_to_end(&mut answer);
    let end = answer.windows(4).position(|w| w == b"\r\n\r\n").map_or(answer.len(), |at| at + 4);
    let status = String::from_utf8_lossy(&answer[..end]).lines().next().unwrap_or_default().to_owned();
    (status, answer[end..].to_vec())
}

#[test]
fn compressed_answers_are_read_as_they_pass_and_reach_the_client_as_sent() {
    let fake = e2e::fake_pod::start(|request, connection| {
        let body: serde_json::Value = serde_json::from_slice(&request.body).unwrap_or_default();
        let (content_type, encoding, answer) = answer_to(body["prompt"].as_str().unwrap_or_default());
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ncontent-encoding: {encoding}\r\n\
             content-length: {}\r\nconnection: close\r\n\r\n",
            answer.len()
        );
        let _ = connection.writer.write_all(head.as_bytes());
        let _ = connection.writer.write_all(&answer);
        None
    });
    let cluster = Cluster::start("compressed-answers", 0, &[], |options| {
        e2e::add_to_pool(options, &fake);
        options.filter_config["fallback_destinations"] = json!(0);
        options.filter_config["learning"] = json!({"enabled": true});
        options.filter_config["outlier_detection"] = json!({"consecutive_failures": 3});
    });
    assert!(cluster.envoy.wait_for_healthy_pods(1, Duration::from_secs(15)), "{}", cluster.envoy.log_tail(20));
    let port = cluster.envoy.listen_port;
    for i in 0..4 {
        let prompt = format!("whole {i}");
        let (status, body) = post(port, &json!({"model": "sim-model", "prompt": prompt, "max_tokens": 3}).to_string());
        assert!(status.contains(" 200 "), "{status}");
        assert_eq!(body, answer_to(&prompt).2, "the client gets the pod's gzip bytes");
    }
    cluster.wait_for_stat("wasm_epp_learning_usage_reports", 4.0);
    for i in 0..2 {
        let (status, body) = post(port, &json!({"model": "sim-model", "prompt": format!("brotli {i}")}).to_string());
        assert!(status.contains(" 200 ") && body == NOT_READ.as_bytes(), "{status}");
    }
    cluster.wait_for_stat("wasm_epp_answers_encoded_unread", 2.0);
    for i in 0..3 {
        let request = json!({"model": "sim-model", "prompt": format!("fails {i}"), "stream": true});
        let (status, _) = post(port, &request.to_string());
        assert!(status.contains(" 200 "), "{status}");
    }
    cluster.wait_for_stat("wasm_epp_streams_failed", 3.0);
    let stat = |name: &str| cluster.stat(name);
    println!(
        "inflated {}, unread {}, usage reports {}, streams failed {}",
        stat("wasm_epp_answers_inflated"),
        stat("wasm_epp_answers_encoded_unread"),
        stat("wasm_epp_learning_usage_reports"),
        stat("wasm_epp_streams_failed")
    );
    assert_eq!(stat("wasm_epp_answers_inflated"), 7.0, "four whole answers, three streams");
    assert_eq!(stat("wasm_epp_answers_encoded_unread"), 2.0, "the br answers alone");
    assert_eq!(stat("wasm_epp_learning_usage_reports"), 4.0, "no usage read from the br answers");
    // (`assert_plugin_healthy`'s request needs the simulator's `x-served-by`: the log alone.)
    let log = cluster.envoy.log();
    for fatal in ["panicked", "wasm trap", "Function: proxy_on"] {
        assert!(!log.contains(fatal), "a Wasm failure ({fatal}):\n{}", cluster.envoy.log_tail(40));
    }
    let (status, body) = post(port, &json!({"model": "sim-model", "prompt": "after"}).to_string());
    assert!(status.contains(" 200 ") && body == answer_to("after").2, "{status}");
}
