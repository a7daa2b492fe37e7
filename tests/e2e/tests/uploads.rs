//! Audio uploads (`multipart/form-data`, vLLM's Whisper endpoints) through a real Envoy reach
//! a pod serving their form's `model`, in a pool where the least loaded pod serves another
//! model: sent by the official OpenAI Python SDK (fields before the file) and by curl with the
//! file first (as OpenAI's documentation writes the command), a megabyte long, so the plugin
//! reads it across many body chunks. A public name with a rewrite rule reaches the pod as the
//! rule's target, in the form Envoy forwards (a form declaring an ASCII-compatible charset too).

use std::process::Command;
use std::time::Duration;

use e2e::Cluster;
use launcher::paths::workspace_root;

/// Pod 0 serves `llama`, pod 1 `whisper`.
fn audio_pool() -> Cluster {
    audio_pool_of("uploads", "whisper", |_| {})
}

/// Pod 0 serves `llama`, pod 1 `whisper_model` only.
fn audio_pool_of(name: &str, whisper_model: &str, adjust: impl FnOnce(&mut launcher::envoy::EnvoyOptions)) -> Cluster {
    let fast = ["--time-scale", "0"];
    let llama = [&fast[..], &["--model", "llama"]].concat();
    let whisper = [&fast[..], &["--model", whisper_model]].concat();
    let cluster = Cluster::start_mixed(name, &[llama, whisper], adjust);
    let listed = || {
        let reply = launcher::http::get(&cluster.envoy.url("/v1/models"), Duration::from_secs(10)).ok();
        reply.is_some_and(|r| r.body.contains("\"llama\"") && r.body.contains(&format!("\"{whisper_model}\"")))
    };
    assert!(launcher::wait_until(Duration::from_secs(15), listed), "the gateway never listed both models");
    std::thread::sleep(e2e::TABLE_REACHES_WORKERS); // the other worker's table too
    cluster
}

/// The OpenAI Python SDK's transcription of a short file; returns the pod and the text.
fn sdk_transcription(cluster: &Cluster, model: &str) -> (String, String) {
    let script = r#"
import json, sys
from openai import OpenAI
client = OpenAI(base_url=sys.argv[1], api_key="unused", max_retries=0)
raw = client.audio.transcriptions.with_raw_response.create(model=sys.argv[2], file=("talk.wav", b"RIFF" + bytes(4000)))
print(json.dumps({"pod": raw.headers.get("x-served-by"), "text": raw.parse().text}))
"#;
    let output = Command::new(workspace_root().join(".venv/bin/python"))
        .args(["-c", script, &cluster.envoy.url("/v1"), model])
        .output()
        .unwrap_or_else(|e| panic!("cannot run the OpenAI SDK (make e2e installs it): {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{}\n{stdout}", String::from_utf8_lossy(&output.stderr));
    let report: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    (report["pod"].as_str().unwrap_or_default().to_owned(), report["text"].as_str().unwrap_or_default().to_owned())
}

/// curl's upload of `file` before the model field, with `options` (HTTP/2, `Expect`); returns
/// the final status and the pod.
fn curl_transcription(cluster: &Cluster, file: &std::path::Path, model: &str, options: &[&str]) -> (u16, String) {
    let (status, pod, _) = curl_upload(cluster, file, model, options);
    (status, pod)
}

/// [`curl_transcription`], and the answer's body.
fn curl_upload(cluster: &Cluster, file: &std::path::Path, model: &str, options: &[&str]) -> (u16, String, String) {
    let output = Command::new("curl")
        .args(["-sS", "-D", "-", "--max-time", "30"])
        .args(options)
        .arg("-F")
        .arg(format!("file=@{};type=audio/wav", file.display()))
        .args(["-F", &format!("model={model}")])
        .arg(cluster.envoy.url("/v1/audio/transcriptions"))
        .output()
        .unwrap_or_else(|e| panic!("cannot run curl: {e}"));
    let head = String::from_utf8_lossy(&output.stdout);
    // (The last status line: `Expect: 100-continue` brings a `100 Continue` first.)
    let status = head
        .lines()
        .filter_map(|line| line.strip_prefix("HTTP/1.1 ").or_else(|| line.strip_prefix("HTTP/2 ")))
        .next_back()
        .and_then(|rest| rest.get(..3));
    let pod = head.lines().find_map(|line| line.strip_prefix("x-served-by: "));
    // (The body follows the last response's headers.)
    let body = head.rsplit("\r\n\r\n").next().unwrap_or_default().to_owned();
    (status.and_then(|s| s.parse().ok()).unwrap_or(0), pod.unwrap_or_default().trim().to_owned(), body)
}

#[test]
fn uploads_reach_a_pod_serving_their_forms_model() {
    let cluster = audio_pool();
    let pods = cluster.pool();
    for _ in 0..5 {
        let (pod, text) = sdk_transcription(&cluster, "whisper");
        assert_eq!(pod, pods[1], "the SDK's upload reached the whisper pod");
        assert!(text.contains("4004 bytes"), "{text}");
    }
    let recording = cluster.dir.join("talk.wav");
    let audio: Vec<u8> = (0..1_000_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    std::fs::write(&recording, audio).unwrap_or_else(|e| panic!("{e}"));
    for _ in 0..3 {
        assert_eq!(curl_transcription(&cluster, &recording, "whisper", &[]), (200, pods[1].clone()), "by curl");
        assert_eq!(curl_transcription(&cluster, &recording, "llama", &[]), (200, pods[0].clone()));
    }
    // Envoy answers `Expect: 100-continue` itself (the body then comes, read as it arrives), and
    // an HTTP/2 upload's DATA frames are read as HTTP/1's chunks are.
    let expect = ["-H", "Expect: 100-continue"];
    assert_eq!(curl_transcription(&cluster, &recording, "whisper", &expect), (200, pods[1].clone()), "Expect");
    let http2 = ["--http2-prior-knowledge"];
    assert_eq!(curl_transcription(&cluster, &recording, "whisper", &http2), (200, pods[1].clone()), "HTTP/2");
    assert_eq!(cluster.stat("wasm_epp_upload_routed_by_model"), 13.0);
    assert_eq!(cluster.pods_stat("model_not_found"), 0, "no upload reached a pod without its model");
    assert_eq!(e2e::hostile::wasm_failures(&cluster.envoy), Vec::<String>::new(), "no Wasm VM failed");
}

#[test]
fn an_uploads_public_model_reaches_the_pod_as_its_rewrite_target() {
    // The pod serves the target only: an upload still naming the public name is its 404.
    let cluster = audio_pool_of("upload-rewrites", "whisper-v3", |options| {
        options.filter_config["models"] = serde_json::json!({"rewrites": [{"model": "whisper", "targets": [
            {"model": "whisper-v3", "weight": 1}]}]});
    });
    let pods = cluster.pool();
    for _ in 0..3 {
        let (pod, text) = sdk_transcription(&cluster, "whisper");
        assert_eq!(pod, pods[1], "the SDK's upload reached the target's pod");
        assert!(text.contains("4004 bytes"), "the file whole: {text}");
    }
    // The file first, a megabyte: the model's value is rewritten deep in the buffered form.
    let recording = cluster.dir.join("talk.wav");
    std::fs::write(&recording, vec![b'-'; 1_000_000]).unwrap_or_else(|e| panic!("{e}"));
    let chunked = ["-H", "Transfer-Encoding: chunked"];
    for options in [&[][..], &["--http2-prior-knowledge"], &chunked] {
        let (status, pod, body) = curl_upload(&cluster, &recording, "whisper", options);
        assert_eq!((status, pod.as_str()), (200, pods[1].as_str()), "{options:?}: {body}");
        assert!(body.contains("1000000 bytes"), "{options:?}: the file whole: {body}");
    }
    // A form declaring a charset that keeps ASCII as ASCII (curl adds its boundary to the type
    // given): the ASCII target's bytes mean the same in it, so it is rewritten too.
    let latin1 = ["-H", "Content-Type: multipart/form-data; charset=iso-8859-1"];
    let (status, pod, body) = curl_upload(&cluster, &recording, "whisper", &latin1);
    assert_eq!((status, pod.as_str()), (200, pods[1].as_str()), "charset=iso-8859-1: {body}");
    cluster.wait_for_stat("wasm_epp_model_rewritten", 7.0);
    assert_eq!(cluster.stat("wasm_epp_model_rewritten"), 7.0);
    assert_eq!(cluster.stat("wasm_epp_upload_not_rewritten"), 0.0);
    assert_eq!(cluster.pods_stat("model_not_found"), 0, "no upload reached the pod as the public name");
    assert_eq!(e2e::hostile::wasm_failures(&cluster.envoy), Vec::<String>::new(), "no Wasm VM failed");
}

#[test]
fn a_form_naming_another_model_after_its_file_is_refused_and_no_pod_serves_it() {
    // vLLM serves a form's last `model`; the upload is routed by its first as soon as it is
    // read. Naming another one after the file: refused as it streams past, by HTTP/1.1 and
    // HTTP/2, before the pod has the form (so before it answers); the pod's count is given back.
    // The plugin names the pod that answered too: a refusal is the gateway's answer, no pod's.
    let cluster = audio_pool_of("upload-conflicts", "whisper", |options| {
        options.filter_config["models"]["served_endpoint_header"] = serde_json::json!("x-plugin-served");
    });
    let pods = cluster.pool();
    let recording = cluster.dir.join("talk.wav");
    std::fs::write(&recording, vec![b'-'; 1_000_000]).unwrap_or_else(|e| panic!("{e}"));
    let upload = |second: &str, options: &[&str]| {
        let output = Command::new("curl")
            .args(["-sS", "-o", "/dev/null", "-D", "-", "--max-time", "30"])
            .args(options)
            .args(["-F", "model=whisper", "-F"])
            .arg(format!("file=@{};type=audio/wav", recording.display()))
            .args(["-F", &format!("model={second}")])
            .arg(cluster.envoy.url("/v1/audio/transcriptions"))
            .output()
            .unwrap_or_else(|e| panic!("cannot run curl: {e}"));
        let head = String::from_utf8_lossy(&output.stdout).to_ascii_lowercase();
        // (The last status line: `Expect: 100-continue` brings a `100 Continue` first.)
        let status =
            head.lines().filter_map(|line| line.strip_prefix("http/").and_then(|l| l.split(' ').nth(1))).next_back();
        let status = status.unwrap_or_default().to_owned();
        let named = head.lines().any(|line| line.starts_with("x-plugin-served:"));
        assert_eq!(named, status == "200", "{status}: the served pod named on the pod's answers only\n{head}");
        status
    };
    // (Chunked and after a 100-continue too: once the filter went on, Envoy hands it each
    // chunk alone however the body is framed.)
    let chunked = ["-H", "Transfer-Encoding: chunked"];
    let expect = ["-H", "Expect: 100-continue"];
    for options in [&[][..], &["--http2-prior-knowledge"], &chunked, &expect] {
        assert_eq!(upload("llama", options), "400", "{options:?}");
        assert_eq!(upload("whisper", options), "200", "{options:?}: the same name again is what vLLM reads");
    }
    // Behind part headers past 4 KiB, which vLLM's parser reads past: refused all the same.
    // (curl writes the header file's lines after the part's Content-Disposition, each cut
    // to ~1 KiB.)
    let padding = cluster.dir.join("padding-headers");
    let lines: Vec<String> = (0..6).map(|i| format!("X-Pad-{i}: {}", "p".repeat(900))).collect();
    std::fs::write(&padding, lines.join("\n")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(upload(&format!("llama;headers=@{}", padding.display()), &[]), "400", "behind a long header");
    // Over HTTP/2 a form may end in trailers: a second model its body's end cuts is told at them.
    let boundary = "e2e-trailers";
    let fields = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper\r\n--{boundary}\r\n\
         Content-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n\r\n{}\r\n",
        "-".repeat(100_000)
    );
    let cut = format!("--{boundary}\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nllama");
    let content_type = format!("multipart/form-data; boundary={boundary}");
    let (status, served) = e2e::h2::post_frames(
        cluster.envoy.listen_port,
        "/v1/audio/transcriptions",
        &[("content-type", &content_type)],
        &[fields.into(), cut.into()],
        Some(&[("x-checksum", "0")]),
    );
    assert_eq!((status, served), (400, None), "refused at the trailers, by the gateway");
    cluster.wait_for_stat("wasm_epp_upload_model_conflict", 6.0);
    let served = cluster.pods[1].stats().unwrap_or_else(|e| panic!("{e}"));
    // (The refused ones reached it, and were cut off before their form ended.)
    let transcriptions = &served["endpoints"]["/v1/audio/transcriptions"];
    assert_eq!(transcriptions["served"], 4, "the pod answered only the uploads naming one model: {served}");
    assert_eq!(cluster.pods_stat("model_not_found"), 0);
    let released = launcher::wait_until(Duration::from_secs(5), || {
        pods.iter().all(|pod| cluster.envoy.stat(&format!("wasm_epp_pod_inflight{{pod=\"{pod}\"}}")) == Some(0.0))
    });
    assert!(released, "a refused upload's count was kept");
    assert_eq!(e2e::hostile::wasm_failures(&cluster.envoy), Vec::<String>::new(), "no Wasm VM failed");
}

#[test]
fn a_transcription_stream_opening_with_a_server_error_counts_against_its_pod() {
    // vLLM streams a transcription asked with the form's `stream=true` as a completion: its
    // `200` first, so an error while it transcribes is the stream's first event. The plugin
    // does not read the form's `stream`; an upload answered `text/event-stream` is read so.
    let cluster = audio_pool_of("upload-stream-errors", "whisper", |_| {});
    let pods = cluster.pool();
    let recording = cluster.dir.join("talk.wav");
    std::fs::write(&recording, vec![b'-'; 10_000]).unwrap_or_else(|e| panic!("{e}"));
    let stream = ["-F", "stream=true"];
    let (status, pod, body) = curl_upload(&cluster, &recording, "whisper", &stream);
    assert_eq!((status, pod.as_str()), (200, pods[1].as_str()), "{body}");
    assert!(body.starts_with("data: {") && body.contains("transcription.chunk"), "a stream that went well: {body}");
    let faults = serde_json::json!({"fail_fraction": 1.0, "fail_status": 500, "fail_in_stream": true});
    cluster.pods[1].set_faults(&faults).unwrap_or_else(|e| panic!("{e}"));
    for i in 0..3 {
        let (status, pod, body) = curl_upload(&cluster, &recording, "whisper", &stream);
        assert_eq!((status, pod.as_str()), (200, pods[1].as_str()), "{i}: {body}");
        assert!(body.starts_with("data: {\"error\""), "{i}: the error is the stream's first event: {body}");
    }
    // Each failed stream once, against the pod that answered it (the only one it went to).
    cluster.wait_for_stat("wasm_epp_streams_failed", 3.0);
    assert_eq!(cluster.stat("wasm_epp_streams_failed"), 3.0);
    assert_eq!(cluster.stat("wasm_epp_pod_attempts_failed"), 3.0, "the whisper pod's three failures, no other");
    assert_eq!(e2e::hostile::wasm_failures(&cluster.envoy), Vec::<String>::new(), "no Wasm VM failed");
}
