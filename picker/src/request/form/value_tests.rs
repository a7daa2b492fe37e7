//! Where the scan says the model's value lies: the bytes a rewrite replaces.

use super::tests::{audio, feed, feed_scan, form, BOUNDARY};
use super::*;

/// The model's answer, with its value's bytes checked against its name.
fn model(body: &[u8], read: FormRead) -> FormModel {
    let FormRead::Model(model) = read else { panic!("no model in {}", String::from_utf8_lossy(body)) };
    assert_eq!(&body[model.value.clone()], model.name.as_bytes(), "the range holds the name");
    model
}

/// Every cut of `body` into chunks (1 to 64 bytes, then larger) reads the same model at the
/// same place; returns it.
fn read_in_every_cut(body: &[u8]) -> FormModel {
    let whole = model(body, FormScan::new(BOUNDARY).scan(body, true));
    for chunk in (1..=64).chain([100, 1_000, 16_384]) {
        assert_eq!(model(body, feed(body, chunk).0), whole, "chunks of {chunk}");
    }
    whole
}

#[test]
fn the_value_lies_between_its_headers_and_the_next_delimiter_however_the_body_is_cut() {
    // As the OpenAI SDKs send it (fields first), as curl's documented command does (the file
    // first), and after a preamble: every chunk size cuts the value somewhere, or a delimiter.
    let first = form("", &[("model", b"whisper-large-v3"), ("language", b"en"), ("file", &audio(3_000))]);
    let opening = format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\n");
    assert_eq!(read_in_every_cut(&first).value, opening.len()..opening.len() + 16);
    let last = form("preamble\r\n", &[("file", &audio(30_000)), ("language", b"en"), ("model", b"whisper-1")]);
    let end = last.len() - format!("\r\n--{BOUNDARY}--\r\n").len();
    assert_eq!(read_in_every_cut(&last).value, end - 9..end);
    assert_eq!(read_in_every_cut(&last).replaceable, Replaceable::ByAnyName);
}

#[test]
fn quoted_names_and_padded_delimiters_leave_the_value_where_it_is() {
    for headers in [
        "Content-Disposition: form-data; name=model",
        "Content-Disposition: form-data; filename=\"a\\\"; name=x\"; name=\"model\"",
        "content-disposition:form-data;name = \"model\"\r\nContent-Type: text/plain; charset=utf-8",
        "Content-Disposition: form-data; name=\"model\"\r\nContent-Transfer-Encoding: 8BIT",
    ] {
        let body = format!("--{BOUNDARY} \t\r\n{headers}\r\n\r\nqwen-7b\r\n--{BOUNDARY}--\r\n");
        let read = read_in_every_cut(body.as_bytes());
        let start = body.find("qwen").unwrap_or_default();
        assert_eq!((read.value, read.replaceable), (start..start + 7, Replaceable::ByAnyName), "{headers}");
    }
}

#[test]
fn a_value_whose_bytes_may_be_read_otherwise_is_not_replaceable() {
    // A transfer encoding other than identity: python-multipart's form parser decodes it.
    for encoding in ["base64", "quoted-printable", "x-unknown"] {
        let body = format!(
            "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"model\"\r\nContent-Transfer-Encoding: {encoding}\r\n\r\nd2hpc3Blcg==\r\n--{BOUNDARY}--\r\n"
        );
        let read = read_in_every_cut(body.as_bytes());
        assert_eq!(
            (read.name.as_str(), read.replaceable),
            ("d2hpc3Blcg==", Replaceable::No),
            "{encoding}: routed as read, not rewritten"
        );
    }
    // A form of another charset: its values are decoded with it.
    let body = form("", &[("model", b"whisper-1")]);
    for (content_type, replaceable) in [
        (format!("multipart/form-data; boundary={BOUNDARY}"), Replaceable::ByAnyName),
        (format!("multipart/form-data; charset=UTF-8; boundary={BOUNDARY}"), Replaceable::ByAnyName),
        (format!("multipart/form-data; boundary=\"{BOUNDARY}\"; charset=\"utf8\""), Replaceable::ByAnyName),
        (format!("multipart/form-data; boundary={BOUNDARY}; charset=utf-16"), Replaceable::No),
        (format!("multipart/form-data; boundary={BOUNDARY}; charset=iso-8859-1"), Replaceable::ByAsciiName),
        (format!("multipart/form-data; boundary={BOUNDARY}; charset=US-ASCII"), Replaceable::ByAsciiName),
    ] {
        let scan = FormScan::for_content_type(&content_type).unwrap_or_else(|| panic!("{content_type}"));
        let read = model(&body, feed_scan(scan, &body, 10).0);
        assert_eq!(read.replaceable, replaceable, "{content_type}");
    }
}

#[test]
fn an_ascii_compatible_charset_takes_an_ascii_name_over_an_ascii_value() {
    let read = |content_type: &str, name: &str| {
        let body = form("", &[("model", name.as_bytes()), ("file", &audio(500))]);
        let scan = FormScan::for_content_type(content_type).unwrap_or_else(|| panic!("{content_type}"));
        model(&body, feed_scan(scan, &body, 7).0)
    };
    for charset in ["us-ascii", "iso-8859-1", "latin1", "windows-1252", "ISO-8859-15"] {
        let content_type = format!("multipart/form-data; boundary={BOUNDARY}; charset={charset}");
        let ascii = read(&content_type, "whisper-public");
        assert!(ascii.replaceable_by("whisper-large-v3"), "{charset}: the same bytes in that charset");
        assert!(!ascii.replaceable_by("whisper-\u{e9}"), "{charset}: é is two bytes read as two characters");
        // Bytes past ASCII: the name the server read is not the one the rule matched.
        let accented = read(&content_type, "whisper-\u{e9}");
        assert_eq!((accented.name.as_str(), accented.replaceable), ("whisper-\u{e9}", Replaceable::No), "{charset}");
        assert!(!accented.replaceable_by("whisper-large-v3"), "{charset}");
    }
    // UTF-8 takes any name; another charset none.
    let utf8 = read(&format!("multipart/form-data; boundary={BOUNDARY}"), "whisper-public");
    assert!(utf8.replaceable_by("whisper-\u{e9}"));
    let utf16 = read(&format!("multipart/form-data; boundary={BOUNDARY}; charset=utf-16"), "whisper-public");
    assert!(!utf16.replaceable_by("whisper-large-v3"));
}

#[test]
fn a_form_of_bare_line_feeds_has_no_value_to_replace() {
    // vLLM's parser refuses it: routed by load, nothing rewritten.
    let lf_only: Vec<u8> =
        form("", &[("model", b"whisper-1"), ("file", &audio(2_000))]).into_iter().filter(|&b| b != b'\r').collect();
    for chunk in [1, 9, 64, lf_only.len()] {
        assert_eq!(feed(&lf_only, chunk).0, FormRead::NoModel, "{chunk}");
    }
}

#[test]
fn a_name_written_over_the_range_is_read_back_in_its_place() {
    let body = form("", &[("language", b"en"), ("model", b"public"), ("file", &audio(5_000))]);
    let read = read_in_every_cut(&body);
    let mut rewritten = body[..read.value.start].to_vec();
    rewritten.extend_from_slice(b"sql-lora-canary");
    rewritten.extend_from_slice(&body[read.value.end..]);
    let again = read_in_every_cut(&rewritten);
    assert_eq!((again.name.as_str(), again.value.start), ("sql-lora-canary", read.value.start));
    assert_eq!(rewritten.len(), body.len() + "sql-lora-canary".len() - "public".len());
}
