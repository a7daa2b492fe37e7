use super::*;

pub(super) const BOUNDARY: &str = "----sdk7MA4YWxkTrZu0gW";

/// A form of `parts` (name, content) as an HTTP client writes it, with a preamble if given.
pub(super) fn form(preamble: &str, parts: &[(&str, &[u8])]) -> Vec<u8> {
    let mut body = preamble.as_bytes().to_vec();
    for (name, content) in parts {
        let filename = if *name == "file" { "; filename=\"talk.wav\"\r\nContent-Type: audio/wav" } else { "" };
        body.extend_from_slice(
            format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"{filename}\r\n\r\n").as_bytes(),
        );
        body.extend_from_slice(content);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
    body
}

/// Feeds `body` to a scan `chunk` bytes at a time, as Envoy delivers it; returns the answer
/// and the bytes the scan asked to read in all.
pub(super) fn feed(body: &[u8], chunk: usize) -> (FormRead, usize) {
    feed_scan(FormScan::new(BOUNDARY), body, chunk)
}

/// [`feed`] to a scan of one's own.
pub(super) fn feed_scan(mut scan: FormScan, body: &[u8], chunk: usize) -> (FormRead, usize) {
    let (mut arrived, mut read) = (0, 0);
    loop {
        arrived = (arrived + chunk).min(body.len());
        let bytes = &body[scan.resume_at()..arrived];
        read += bytes.len();
        match scan.scan(bytes, arrived == body.len()) {
            FormRead::More => assert!(arrived < body.len(), "the whole body read and still More"),
            answer => return (answer, read),
        }
    }
}

pub(super) fn audio(bytes: usize) -> Vec<u8> {
    // Bytes of every value, line breaks and dashes among them, as a recording has.
    (0..bytes).map(|i| (i * 7 % 256) as u8).collect()
}

/// The model an answer names (`None`: no model, or not yet).
fn named(read: &FormRead) -> Option<&str> {
    match read {
        FormRead::Model(model) => Some(&model.name),
        FormRead::More | FormRead::NoModel | FormRead::DispositionTooLong => None,
    }
}

#[test]
fn the_model_is_read_when_the_fields_come_first_as_the_sdks_send_them() {
    let file = audio(200_000);
    let body = form("", &[("model", b"whisper-large-v3"), ("language", b"en"), ("file", &file)]);
    for chunk in [1, 7, 64, 16_384, body.len()] {
        let mut scan = FormScan::new(BOUNDARY);
        let first = (chunk * 400).min(body.len());
        if chunk >= 64 {
            assert_eq!(named(&scan.scan(&body[..first], false)), Some("whisper-large-v3"), "{chunk}");
        }
        assert_eq!(named(&feed(&body, chunk).0), Some("whisper-large-v3"), "{chunk}");
    }
}

#[test]
fn a_file_sent_first_is_passed_over_once() {
    let file = audio(1_000_000);
    let body = form("", &[("file", &file), ("model", b"whisper-1"), ("response_format", b"json")]);
    for chunk in [13, 1_000, 16_384, 65_536] {
        let (answer, read) = feed(&body, chunk);
        assert_eq!(named(&answer), Some("whisper-1"), "{chunk}");
        let chunks = body.len().div_ceil(chunk);
        let overlap = chunks * (BOUNDARY.len() + 4);
        assert!(
            read <= body.len() + overlap,
            "{chunk}: read {read} of {} (once, plus a delimiter per chunk)",
            body.len()
        );
    }
}

#[test]
fn a_form_without_a_model_says_so_at_its_end() {
    let body = form("preamble text\r\n", &[("file", &audio(5_000)), ("language", b"en")]);
    assert_eq!(feed(&body, 100).0, FormRead::NoModel);
    let mut scan = FormScan::new(BOUNDARY);
    assert_eq!(scan.scan(&body[..4_000], false), FormRead::More, "the file is still arriving");
    // A body cut before its close delimiter, then ended.
    let cut = &body[..body.len() - BOUNDARY.len() - 6];
    assert_eq!(feed(cut, 50).0, FormRead::NoModel);
}

#[test]
fn only_a_part_named_model_is_read() {
    let read = |disposition: &str| {
        let mut body = format!("--{BOUNDARY}\r\nContent-Disposition: {disposition}\r\n\r\nqwen\r\n").into_bytes();
        body.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
        feed(&body, 9).0
    };
    assert_eq!(named(&read("form-data; name=model")), Some("qwen"));
    assert_eq!(named(&read("FORM-DATA; NAME=\"model\"")), Some("qwen"));
    assert_eq!(named(&read("form-data; name=\"model\"; filename=\"m.txt\"")), Some("qwen"));
    for other in ["form-data; name=\"models\"", "form-data; name=\"file\"; filename=\"model\""] {
        assert_eq!(read(other), FormRead::NoModel, "{other}");
    }
}

#[test]
fn a_part_is_named_as_python_multipart_names_it() {
    // What Starlette 1.10 with python-multipart 0.0.34 (vLLM's form reading) made of each.
    let read = |headers: &[u8]| {
        let mut body = format!("--{BOUNDARY}\r\n").into_bytes();
        body.extend_from_slice(headers);
        body.extend_from_slice(format!("\r\n\r\nqwen\r\n--{BOUNDARY}--\r\n").as_bytes());
        named(&feed(&body, 9).0).map(str::to_owned)
    };
    let model = Some("qwen".to_owned());
    for (headers, answer) in [
        // A `;` within quotes separates nothing.
        (&b"Content-Disposition: form-data; filename=\"a; name=model; x\"; name=\"file\""[..], None),
        (b"Content-Disposition: form-data; name=\"model;x\"", None),
        (b"Content-Disposition: form-data; filename=\"a\\\"; name=model\"; name=\"model\"", model.clone()),
        // The last name, of the last Content-Disposition, whatever its type.
        (b"Content-Disposition: form-data; name=\"model\"; name=\"file\"", None),
        (b"Content-Disposition: form-data; name=\"file\"; name=\"model\"", model.clone()),
        (
            b"Content-Disposition: form-data; name=\"file\"\r\nContent-Disposition: form-data; name=\"model\"",
            model.clone(),
        ),
        (b"Content-Disposition: attachment; name=\"model\"", model.clone()),
        (b"content-disposition:form-data;name = \"model\"", model.clone()),
        // Latin-1 beside the name (a file name), a type of its own: the field all the same.
        (b"Content-Disposition: form-data; name=\"model\"\r\nX-Note: caf\xe9", model.clone()),
        (b"Content-Disposition: form-data; name=\"model\"\r\nContent-Type: text/plain; charset=utf-8", model.clone()),
        // RFC 2231's extended names are not read (RFC 7578 forbids them).
        (b"Content-Disposition: form-data; name*=utf-8''model", None),
        (b"Content-Disposition: form-data; name=\"mo\\\"del\"", None),
    ] {
        assert_eq!(read(headers), answer, "{}", String::from_utf8_lossy(headers));
    }
}

#[test]
fn odd_values_read_as_no_model() {
    let long = vec![b'a'; 300];
    for value in [&b""[..], b"\xff\xfe", &long] {
        let body = form("", &[("model", value), ("file", &audio(100))]);
        assert_eq!(feed(&body, 64).0, FormRead::NoModel, "{value:?}");
    }
    // A header line that never ends (passed over as it arrives, python-multipart bounding
    // none), and a body with no delimiter at all.
    let mut endless = format!("--{BOUNDARY}\r\nX-Pad: ").into_bytes();
    endless.extend(std::iter::repeat_n(b'x', 10_000));
    assert_eq!(FormScan::new(BOUNDARY).scan(&endless, false), FormRead::More);
    assert_eq!(FormScan::new(BOUNDARY).scan(&endless, true), FormRead::NoModel);
    assert_eq!(feed(&audio(50_000), 1_000).0, FormRead::NoModel);
    // A part without headers is no field.
    let bare = format!("--{BOUNDARY}\r\n\r\nqwen\r\n--{BOUNDARY}--\r\n");
    assert_eq!(feed(bare.as_bytes(), 3).0, FormRead::NoModel);
}

#[test]
fn the_boundary_comes_from_a_form_content_type_only() {
    assert_eq!(form_boundary("multipart/form-data; boundary=abc").as_deref(), Some("abc"));
    assert_eq!(form_boundary("Multipart/Form-Data;charset=utf-8; Boundary=\"a b:c\"").as_deref(), Some("a b:c"));
    for refused in [
        "application/json",
        "multipart/mixed; boundary=abc",
        "multipart/form-data",
        "multipart/form-data; boundary=",
        "multipart/form-data; boundary=\"\"",
    ] {
        assert_eq!(form_boundary(refused), None, "{refused}");
    }
    assert_eq!(
        form_boundary(&format!("multipart/form-data; boundary={}", "b".repeat(71))),
        None,
        "RFC 2046: 70 at most"
    );
}

#[test]
fn content_that_only_looks_like_a_delimiter_is_content() {
    // `\r\n--boundary` followed by anything but padding and a line break is no delimiter:
    // python-multipart (vLLM's form parser) reads it as the file's bytes, and so must we.
    let mut file = b"RIFF".to_vec();
    file.extend_from_slice(
        format!("\r\n--{BOUNDARY}X\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nevil").as_bytes(),
    );
    file.extend_from_slice(
        format!("\r\n--{BOUNDARY}\nContent-Disposition: form-data; name=\"model\"\n\nevil").as_bytes(),
    );
    let body = form("", &[("file", &file), ("model", b"whisper-1")]);
    for chunk in [1, 5, 64, body.len()] {
        assert_eq!(named(&feed(&body, chunk).0), Some("whisper-1"), "{chunk}");
    }
}

#[test]
fn transport_padding_of_any_length_is_read_once() {
    // Spaces and tabs after a delimiter (RFC 2046's transport padding) open the part all the same.
    let plain = form("", &[("language", b"en"), ("model", b"whisper-1")]);
    let padded = with_delimiter_line(&plain, &format!("--{BOUNDARY}{}\t\r\n", " ".repeat(100_000)));
    for chunk in [1_000, 16_384] {
        let (answer, read) = feed(&padded, chunk);
        assert_eq!(named(&answer), Some("whisper-1"), "{chunk}");
        assert!(read <= padded.len() + padded.len().div_ceil(chunk) * (BOUNDARY.len() + 4), "{chunk}: read {read}");
    }
    // A client writing line feeds alone (which python-multipart refuses) has no delimiter after
    // the first: its upload is passed over once too, not read again at every chunk.
    let lf_only: Vec<u8> = form("", &[("file", &vec![b'a'; 1_000_000]), ("model", b"whisper-1")])
        .into_iter()
        .filter(|&b| b != b'\r')
        .collect();
    let (answer, read) = feed(&lf_only, 1_000);
    assert_eq!(answer, FormRead::NoModel);
    assert!(read <= lf_only.len() + lf_only.len().div_ceil(1_000) * (BOUNDARY.len() + 4), "read {read}");
}

/// `body` with its second delimiter line (the one after the first part) replaced by `line`.
fn with_delimiter_line(body: &[u8], line: &str) -> Vec<u8> {
    let plain = format!("\r\n--{BOUNDARY}\r\n");
    let at = memchr::memmem::find(body, plain.as_bytes()).expect("a second part");
    let mut replaced = body[..at + 2].to_vec();
    replaced.extend_from_slice(line.as_bytes());
    replaced.extend_from_slice(&body[at + plain.len()..]);
    replaced
}

#[test]
fn every_cut_of_the_body_reads_as_the_whole_body_does() {
    // Delimiters, padding, line breaks and near-delimiters at every place a chunk may end.
    let near = format!("x\r\n--{BOUNDARY}X\r\r\n-\r\n--{}\r\n", &BOUNDARY[..5]);
    let mut bodies = vec![
        form("", &[("model", b"m1"), ("file", near.as_bytes())]),
        form("pre\r\n", &[("file", near.as_bytes()), ("language", b"en"), ("model", b"m2")]),
        with_delimiter_line(&form("", &[("x", b"1"), ("model", b"m3")]), &format!("--{BOUNDARY} \t \r\n")),
        with_delimiter_line(&form("", &[("x", b"1"), ("model", b"m4")]), &format!("--{BOUNDARY} \r\r\n")),
        form("", &[("file", near.as_bytes())]),
    ];
    let cut = bodies[0].len() - 10;
    bodies.push(bodies[0][..cut].to_vec());
    let answers = [Some("m1"), Some("m2"), Some("m3"), None, None, Some("m1")];
    for (body, answer) in bodies.iter().zip(answers) {
        let whole = FormScan::new(BOUNDARY).scan(body, true);
        assert_eq!(named(&whole), answer, "{}", String::from_utf8_lossy(body));
        for chunk in 1..=body.len().min(64) {
            assert_eq!(feed(body, chunk).0, whole, "chunks of {chunk}: {}", String::from_utf8_lossy(body));
        }
    }
}

/// A form whose one part has these raw header `lines` and the content `qwen`.
fn one_part(lines: &[&[u8]]) -> Vec<u8> {
    let mut body = format!("--{BOUNDARY}\r\n").into_bytes();
    for line in lines {
        body.extend_from_slice(line);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("\r\nqwen\r\n--{BOUNDARY}--\r\n").as_bytes());
    body
}

#[test]
fn header_lines_of_any_length_beside_the_name_are_passed_over_once() {
    // python-multipart bounds no header line: vLLM reads the part's name whatever comes beside it.
    let mut pad = b"X-Pad: ".to_vec();
    pad.resize(300_000, b'p');
    let disposition = &b"Content-Disposition: form-data; name=\"model\""[..];
    for lines in [[&pad[..], disposition], [disposition, &pad[..]]] {
        let body = one_part(&lines);
        for chunk in [1_000, 16_384, body.len()] {
            let (answer, read) = feed(&body, chunk);
            assert_eq!(named(&answer), Some("qwen"), "{chunk}");
            // Once, and a line's opening once more.
            assert!(read <= body.len() + body.len().div_ceil(chunk) * (MAX_HEADER_LINE + 2), "{chunk}: read {read}");
        }
    }
    // A file's long header, the file sent before the model.
    let mut long_file = form("", &[("file", &audio(1_000)), ("model", b"whisper")]);
    let at = memchr::memmem::find(&long_file, b"Content-Type: audio/wav").expect("the file's type");
    let mut header = b"X-Signature: ".to_vec();
    header.resize(20_000, b's');
    header.extend_from_slice(b"\r\n");
    long_file.splice(at..at, header);
    for chunk in [7, 1_000, long_file.len()] {
        assert_eq!(named(&feed(&long_file, chunk).0), Some("whisper"), "{chunk}");
    }
    // A transfer encoding too long to read is taken for one that changes the value's bytes.
    let mut encoding = b"Content-Transfer-Encoding: ".to_vec();
    encoding.resize(5_000, b' ');
    encoding.extend_from_slice(b"binary");
    let FormRead::Model(model) = feed(&one_part(&[disposition, &encoding]), 64).0 else { panic!("no model") };
    assert_eq!(model.replaceable, Replaceable::No);
}

#[test]
fn a_content_disposition_longer_than_any_client_writes_is_told() {
    let mut disposition = b"Content-Disposition: form-data; filename=\"".to_vec();
    disposition.resize(MAX_HEADER_LINE + 1 - b"\"; name=\"model\"".len(), b'a');
    disposition.extend_from_slice(b"\"; name=\"model\"");
    let body = one_part(&[&disposition]);
    for chunk in [1, 64, 4_096, body.len()] {
        assert_eq!(feed(&body, chunk).0, FormRead::DispositionTooLong, "{chunk}");
    }
    // A byte shorter, it is read.
    disposition.remove(50);
    assert_eq!(named(&feed(&one_part(&[&disposition]), 64).0), Some("qwen"));
}
