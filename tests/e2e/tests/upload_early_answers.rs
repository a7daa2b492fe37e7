//! A pod that answers an upload before it read the whole form (a 401 for a missing key, a
//! 413): its answer's headers reach the client while the form still streams through the
//! plugin. A second `model` part after them is no longer the gateway's to refuse with a 400
//! (Envoy would reset the stream): the pod's refusal reaches the client whole, and the
//! conflict is counted. A 2xx begun that early may be the second model's, so it is reset.

use std::io::{BufRead, Read, Write};
use std::time::Duration;

use launcher::envoy::{Envoy, EnvoyOptions};

const REFUSAL: &str = r#"{"error":{"message":"Unauthorized","type":"invalid_request_error","code":401}}"#;

/// The fake pod: an upload is answered as soon as its headers are read, its status taken from
/// the path's `answer=` query; the body then follows once the pod drained the whole form.
fn start_pod() -> String {
    e2e::fake_pod::start(|request, connection| {
        let status = if request.line.contains("answer=200") { "200 OK" } else { "401 Unauthorized" };
        let head = format!("HTTP/1.1 {status}\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n");
        connection.writer.write_all(head.as_bytes()).ok()?;
        connection.writer.flush().ok()?;
        // The request is chunked (its client's, as Envoy forwards it): read to its last chunk.
        let mut line = String::new();
        loop {
            line.clear();
            if connection.reader.read_line(&mut line).ok()? == 0 {
                return None;
            }
            let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or_default(), 16).ok()?;
            let mut chunk = vec![0; size + 2];
            connection.reader.read_exact(&mut chunk).ok()?;
            if size == 0 {
                break;
            }
        }
        let tail = format!("{:x}\r\n{REFUSAL}\r\n0\r\n\r\n", REFUSAL.len());
        connection.writer.write_all(tail.as_bytes()).ok()?;
        None
    })
}

const BOUNDARY: &str = "early-answer";

/// Uploads a form naming `sim-model`, a file, then `other` as its model again, over HTTP/1.1
/// chunked, with `answer` in the path for the pod: the form's rest (the second model) is sent
/// only once the answer's headers reached the client. The status, and the answer's body if it
/// ended whole (its last chunk came; `None`: the stream was reset).
fn upload(envoy: &Envoy, answer: &str) -> (String, Option<String>) {
    let mut client = std::net::TcpStream::connect(("127.0.0.1", envoy.listen_port)).unwrap_or_else(|e| panic!("{e}"));
    client.set_read_timeout(Some(Duration::from_secs(10))).unwrap_or_else(|e| panic!("{e}"));
    let head = format!(
        "POST /v1/audio/transcriptions?answer={answer} HTTP/1.1\r\nhost: gateway\r\nconnection: close\r\n\
         content-type: multipart/form-data; boundary={BOUNDARY}\r\ntransfer-encoding: chunked\r\n\r\n"
    );
    let first = format!(
        "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nsim-model\r\n--{BOUNDARY}\r\n\
         Content-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n\r\n{}",
        "-".repeat(20_000)
    );
    let rest = format!(
        "{}\r\n--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nother\r\n--{BOUNDARY}--\r\n",
        "-".repeat(20_000)
    );
    let chunk = |data: &str| format!("{:x}\r\n{data}\r\n", data.len());
    client.write_all(format!("{head}{}", chunk(&first)).as_bytes()).unwrap_or_else(|e| panic!("{e}"));
    let mut reader = std::io::BufReader::new(client.try_clone().unwrap_or_else(|e| panic!("{e}")));
    let mut status = String::new();
    reader.read_line(&mut status).unwrap_or_else(|e| panic!("no answer's headers: {e}"));
    let mut line = String::new();
    while reader.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
        line.clear();
    }
    // The answer's headers reached the client: now the second model.
    client.write_all(format!("{}0\r\n\r\n", chunk(&rest)).as_bytes()).unwrap_or_else(|e| panic!("{e}"));
    let mut body = Vec::new();
    let _ = reader.read_to_end(&mut body); // to its close (a reset may end it in an error)
    let body = String::from_utf8_lossy(&body).into_owned();
    let status = status.split(' ').nth(1).unwrap_or_default().to_owned();
    let whole = body.ends_with("0\r\n\r\n").then(|| body.lines().nth(1).unwrap_or_default().to_owned());
    (status, whole)
}

#[test]
fn a_pods_early_refusal_reaches_the_client_whole_past_a_second_model() {
    let pod = start_pod();
    let dir = launcher::paths::run_dir("upload-early-answers").unwrap_or_else(|e| panic!("{e}"));
    let (listen, admin) = (launcher::free_port().unwrap(), launcher::free_port().unwrap());
    let mut options = EnvoyOptions::for_pool(std::slice::from_ref(&pod), listen, admin);
    options.concurrency = 1;
    let envoy = Envoy::start(&options, &dir).unwrap_or_else(|e| panic!("{e}"));
    assert!(envoy.wait_for_healthy_pods(1, Duration::from_secs(15)), "{}", envoy.log_tail(20));
    std::thread::sleep(e2e::TABLE_REACHES_WORKERS);
    let (status, body) = upload(&envoy, "401");
    assert_eq!((status.as_str(), body.as_deref()), ("401", Some(REFUSAL)), "{}", envoy.log_tail(20));
    let (status, body) = upload(&envoy, "200");
    assert_eq!((status.as_str(), body), ("200", None), "a 2xx begun before the second model is reset");
    assert_eq!(envoy.stat("wasm_epp_upload_model_conflict"), Some(2.0), "both counted");
    assert_eq!(e2e::hostile::wasm_failures(&envoy), Vec::<String>::new(), "no Wasm VM failed");
}
