use super::super::tests::{audio, form, BOUNDARY};
use super::*;

/// Reads `body`'s first model with a scan, then watches the rest `chunk` bytes at a time, the
/// first chunk starting after the model's value (as the router feeds it); the answer that ended
/// the watch, or `Fine` if none did, and the most bytes the watch kept between chunks.
fn watch(body: &[u8], chunk: usize, rewritten: bool) -> (Watched, usize) {
    let mut scan = FormScan::new(BOUNDARY);
    let FormRead::Model(model) = scan.scan(body, true) else { panic!("no first model") };
    let mut watch = ModelWatch::after(&scan, &model, rewritten);
    let rest = &body[model.value.end..];
    let mut most_kept = 0;
    let mut chunks = rest.chunks(chunk.max(1)).peekable();
    while let Some(bytes) = chunks.next() {
        let answer = watch.feed(bytes, chunks.peek().is_none());
        most_kept = most_kept.max(watch.kept.len());
        if answer != Watched::Fine {
            return (answer, most_kept);
        }
    }
    (Watched::Fine, most_kept)
}

const CHUNKS: [usize; 6] = [1, 2, 7, 64, 4096, usize::MAX];

#[test]
fn a_form_naming_its_model_once_ends_the_watch_quietly() {
    let file = audio(100_000);
    let body = form("", &[("model", b"whisper"), ("language", b"en"), ("file", &file), ("temperature", b"0")]);
    for chunk in CHUNKS {
        assert_eq!(watch(&body, chunk, false).0, Watched::Done, "chunk {chunk}");
        assert_eq!(watch(&body, chunk, true).0, Watched::Done, "chunk {chunk}, rewritten");
    }
}

#[test]
fn another_model_after_the_file_is_told_however_the_form_is_cut() {
    let file = audio(100_000);
    let body = form("", &[("model", b"whisper"), ("file", &file), ("model", b"whisper-large")]);
    for chunk in CHUNKS {
        assert_eq!(watch(&body, chunk, false).0, Watched::Conflict(Some("whisper-large".into())), "chunk {chunk}");
    }
}

#[test]
fn the_same_name_again_is_what_vllm_reads_unless_the_first_was_rewritten() {
    let body = form("", &[("model", b"whisper"), ("file", &audio(5_000)), ("model", b"whisper"), ("model", b"tts")]);
    for chunk in CHUNKS {
        // Watched past the repeat, to the third.
        assert_eq!(watch(&body, chunk, false).0, Watched::Conflict(Some("tts".into())), "chunk {chunk}");
        assert_eq!(watch(&body, chunk, true).0, Watched::Conflict(Some("whisper".into())), "chunk {chunk}");
    }
    let repeated = form("", &[("model", b"whisper"), ("file", &audio(5_000)), ("model", b"whisper")]);
    assert_eq!(watch(&repeated, 64, false).0, Watched::Done);
}

#[test]
fn another_model_that_cannot_be_read_is_a_conflict_too() {
    let long = vec![b'x'; 300];
    for value in [&long[..], &[0xff, 0xfe][..], &b""[..]] {
        let body = form("", &[("model", b"whisper"), ("file", &audio(1_000)), ("model", value)]);
        for chunk in CHUNKS {
            assert_eq!(watch(&body, chunk, false).0, Watched::Conflict(None), "chunk {chunk}, {value:?}");
        }
    }
}

#[test]
fn the_watch_keeps_no_more_than_a_cut_delimiter_or_part_between_chunks() {
    // A long file: between chunks, only what may start a delimiter is kept.
    let body = form("", &[("model", b"whisper"), ("file", &audio(2_000_000))]);
    let (answer, most_kept) = watch(&body, 65_536, false);
    assert_eq!(answer, Watched::Done);
    assert!(most_kept < 4096 + 256 + 2 * BOUNDARY.len() + 8, "kept {most_kept}");
    // A file whose chunks end in nothing a delimiter starts with: nothing kept, so no chunk is
    // copied to be joined to what was.
    let plain = form("", &[("model", b"whisper"), ("file", &vec![b'a'; 200_000])]);
    let mut scan = FormScan::new(BOUNDARY);
    let FormRead::Model(model) = scan.scan(&plain, true) else { panic!("no first model") };
    let file = memchr::memmem::find(&plain, b"aaaa").unwrap();
    for chunk in [1, 7, 4096, 65_536] {
        let mut watch = ModelWatch::after(&scan, &model, false);
        assert_eq!(watch.feed(&plain[model.value.end..file], false), Watched::Fine);
        for bytes in plain[file..file + 200_000].chunks(chunk) {
            assert_eq!((watch.feed(bytes, false), watch.kept_len()), (Watched::Fine, 0), "chunk {chunk}");
        }
    }
    // Any end of a delimiter cut is kept, and read with what follows.
    let near = format!("\r\n--{}", &BOUNDARY[..BOUNDARY.len() - 1]);
    let file = [near.as_bytes(), b"x", near.as_bytes()].concat();
    let cut = form("", &[("model", b"whisper"), ("file", &file), ("model", b"llama")]);
    for chunk in 1..=64 {
        assert_eq!(watch(&cut, chunk, false).0, Watched::Conflict(Some("llama".into())), "chunk {chunk}");
    }
}

/// `body` with a part of these raw `headers` (lines without their line breaks) and `content`
/// added before its close delimiter.
fn with_part(body: &[u8], headers: &[&[u8]], content: &[u8]) -> Vec<u8> {
    let close = format!("--{BOUNDARY}--\r\n");
    let mut added = body[..body.len() - close.len()].to_vec();
    added.extend_from_slice(format!("--{BOUNDARY}\r\n").as_bytes());
    for line in headers {
        added.extend_from_slice(line);
        added.extend_from_slice(b"\r\n");
    }
    added.extend_from_slice(b"\r\n");
    added.extend_from_slice(content);
    added.extend_from_slice(b"\r\n");
    added.extend_from_slice(close.as_bytes());
    added
}

/// A header line of `bytes` bytes that says nothing of its part.
fn padding_header(bytes: usize) -> Vec<u8> {
    let mut line = b"X-Pad: ".to_vec();
    line.resize(bytes, b'p');
    line
}

const MODEL_DISPOSITION: &[u8] = b"Content-Disposition: form-data; name=\"model\"";

#[test]
fn another_model_behind_long_part_headers_is_told() {
    // python-multipart bounds no header line: vLLM reads this part's model whatever comes beside it.
    let first = form("", &[("model", b"whisper"), ("file", &audio(20_000))]);
    let pad = padding_header(5 * 1024);
    let huge = padding_header(200_000);
    for headers in [
        [&pad[..], MODEL_DISPOSITION],
        [MODEL_DISPOSITION, &pad[..]],
        [&huge[..], MODEL_DISPOSITION],
        [b"Content-Disposition: form-data; name=\"language\"", &pad[..]],
    ] {
        let body = with_part(&first, &headers, b"llama");
        let named_model = headers.contains(&MODEL_DISPOSITION);
        let told = if named_model { Watched::Conflict(Some("llama".into())) } else { Watched::Done };
        for chunk in CHUNKS {
            let (answer, most_kept) = watch(&body, chunk, false);
            assert_eq!(answer, told, "chunk {chunk}");
            assert!(most_kept <= 4096 + 256 + 2 * BOUNDARY.len() + 8, "chunk {chunk}: kept {most_kept}");
        }
    }
}

#[test]
fn long_headers_in_the_file_part_are_passed_over() {
    // A client's own long header (a signature, a note) beside the file: the upload goes on.
    let first = form("", &[("model", b"whisper")]);
    let disposition = b"Content-Disposition: form-data; name=\"file\"; filename=\"talk.wav\"";
    let pad = padding_header(100_000);
    let body = with_part(&first, &[disposition, &pad, b"Content-Type: audio/wav"], &audio(50_000));
    for chunk in CHUNKS {
        let (answer, most_kept) = watch(&body, chunk, false);
        assert_eq!(answer, Watched::Done, "chunk {chunk}");
        assert!(most_kept <= 4096 + 256 + 2 * BOUNDARY.len() + 8, "chunk {chunk}: kept {most_kept}");
    }
}

#[test]
fn a_content_disposition_longer_than_any_client_writes_is_refused() {
    // It could name another model (its last `name`) past what the watch reads of it.
    let first = form("", &[("model", b"whisper"), ("file", &audio(5_000))]);
    let mut long_file_name = b"Content-Disposition: form-data; filename=\"".to_vec();
    long_file_name.resize(5_000, b'a');
    long_file_name.extend_from_slice(b"\"; name=\"model\"");
    let body = with_part(&first, &[&long_file_name], b"llama");
    for chunk in CHUNKS {
        assert_eq!(watch(&body, chunk, false).0, Watched::DispositionTooLong, "chunk {chunk}");
    }
    // As long as one may be (4 KiB), it is read.
    let mut longest = b"Content-Disposition: form-data; filename=\"".to_vec();
    longest.resize(4096 - b"\"; name=\"model\"".len(), b'a');
    longest.extend_from_slice(b"\"; name=\"model\"");
    assert_eq!(longest.len(), 4096);
    let body = with_part(&first, &[&longest], b"llama");
    for chunk in CHUNKS {
        assert_eq!(watch(&body, chunk, false).0, Watched::Conflict(Some("llama".into())), "chunk {chunk}");
    }
}
