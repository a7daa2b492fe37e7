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
}
