//! `learn::UsageScanner` on arbitrary answer bytes, as a pod (honest or not) streams them:
//! never panics, and the usage found does not depend on where the chunks split (the whole
//! answer, the answer byte by byte, and the answer cut where the input says all agree), nor
//! is any found in bytes that never spell the key. Likewise `learn::OutputEventFinder` (a
//! Responses stream's first output event): found in the chunk where the first marker ends,
//! however the chunks split. And `stream_error`'s judgement of a stream's opening events.

#![no_main]

use libfuzzer_sys::fuzz_target;
use picker::learn::{FirstOutput, OutputEventFinder, Usage, UsageScanner};
use wasm_epp_router::stream_error::{read_opening, Reading};

fuzz_target!(|data: &[u8]| {
    // The first byte says how many cut points follow; the rest is the answer.
    let Some((&count, rest)) = data.split_first() else { return };
    let (cuts, answer) = rest.split_at((usize::from(count) % 8).min(rest.len()));
    let whole = scan(std::iter::once(answer));
    assert_eq!(scan(answer.chunks(1)), whole, "byte by byte");
    let mut points: Vec<usize> = cuts.iter().map(|&cut| usize::from(cut) * answer.len() / 256).collect();
    points.sort_unstable();
    let mut chunks = Vec::new();
    let mut start = 0;
    for point in points {
        chunks.push(&answer[start..point]);
        start = point;
    }
    chunks.push(&answer[start..]);
    assert_eq!(scan(chunks.iter().copied()), whole, "cut at the input's points");
    // Byte by byte, the finder stops at the byte that completes the first marker.
    let marker_end = first_output(answer.chunks(1)).map(|(_, end)| end);
    assert_eq!(first_output(std::iter::once(answer)).is_some(), marker_end.is_some(), "whole vs byte by byte");
    if let Some((chunk_start, chunk_end)) = first_output(chunks.iter().copied()) {
        let end = marker_end.unwrap_or(usize::MAX);
        assert!(chunk_start < end && end <= chunk_end, "found in the chunk {chunk_start}..{chunk_end}, ends at {end}");
    } else {
        assert_eq!(marker_end, None, "missed when cut at the input's points");
    }
    // Whose error a stream opens with: never a panic, and only when it opens with one.
    if wasm_epp_router::stream_error::opens_with_server_error(answer) {
        assert!(wasm_epp_router::stream_error::opens_with_error(answer));
    }
    // Its opening read event by event (a chat stream's role chunks first): never a panic, and
    // the events left only go down.
    let opening_events = 1 + u32::from(count % 9);
    let mut events = opening_events;
    let opening = read_opening(answer, &mut events);
    assert!(events <= opening_events);
    match opening {
        Reading::Judged(_) => {}
        Reading::Between => assert!(events > 0, "read on into the next chunk only for events left"),
        Reading::Within(at) => assert!(events > 0 && at < answer.len(), "within an event of the bytes"),
    }
    // Cut at the input's points, the event a chunk ends in carried on into the next (as the
    // router does, short of its bound): the verdict of the whole answer, however it is cut.
    let mut events = opening_events;
    let mut tail = Vec::new();
    let mut split = None;
    for chunk in chunks.iter().filter(|chunk| !chunk.is_empty()) {
        let bytes = [&tail[..], chunk].concat();
        match read_opening(&bytes, &mut events) {
            Reading::Judged(verdict) => {
                split = Some(verdict);
                break;
            }
            Reading::Between => tail.clear(),
            Reading::Within(at) => tail = bytes[at..].to_vec(),
        }
    }
    match opening {
        Reading::Judged(verdict) => assert_eq!(split, Some(verdict), "cut at the input's points"),
        Reading::Between | Reading::Within(_) => assert_eq!(split, None, "cut at the input's points"),
    }
    if !answer.windows(7).any(|window| window == b"\"usage\"") {
        assert_eq!(whole, None, "usage found without its key");
    }
});

fn scan<'a>(chunks: impl Iterator<Item = &'a [u8]>) -> Option<Usage> {
    let mut scanner = UsageScanner::default();
    chunks.for_each(|chunk| scanner.feed(chunk));
    scanner.usage()
}

/// The byte range of the chunk in which the finder saw the first output event.
fn first_output<'a>(chunks: impl Iterator<Item = &'a [u8]>) -> Option<(usize, usize)> {
    // Every cut must find what byte by byte finds: no giving up here.
    let mut finder = OutputEventFinder::with_limit(u32::MAX);
    let mut start = 0;
    for chunk in chunks {
        let end = start + chunk.len();
        if finder.feed(chunk) == FirstOutput::Found {
            return Some((start, end));
        }
        start = end;
    }
    None
}
